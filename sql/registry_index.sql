--
-- registry_index: an expression index that a DBA adds to fence_claims stays
-- correct through every write fence makes, the takeover of a released or
-- expired claim included, and amcheck finds it consistent. 1.0 wrote the
-- takeover with the catalog path, which cannot evaluate an index
-- expression: the backend crashed (SIGSEGV). This case has a file of its
-- own so that such a crash cannot hide the other registry cases
-- (registry_dba.sql).
--
-- Token values vary from run to run: they are kept in psql variables and
-- compared, never printed.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE INDEX dba_holder_lower_idx ON fence_claims (lower(holder));

-- idx-rel: claimed by Worker-A, released, claimed by Worker-B
SELECT fence_claim('idx-rel', '1 hour', 'Worker-A') AS a1 \gset
SELECT fence_release('idx-rel', :a1) AS released;
SELECT fence_claim('idx-rel', '1 hour', 'Worker-B') AS a2 \gset
SELECT :a2 > :a1 AS rel_taken_over;
-- idx-exp: claimed by Worker-A with a lease that expires, taken by Worker-C
SELECT fence_claim('idx-exp', '1 millisecond', 'Worker-A') AS e1 \gset
SELECT pg_sleep(0.01);
SELECT fence_claim('idx-exp', '1 hour', 'Worker-C') AS e2 \gset
SELECT :e2 > :e1 AS exp_taken_over;
-- idx-new: a first claim, renewed
SELECT fence_claim('idx-new', '1 hour', 'Worker-A') AS n1 \gset
SELECT fence_renew('idx-new', :n1, '2 hours') > now() + interval '1 hour' AS renewed;

--
-- Each holder's claims, looked up through the expression index and through
-- a sequential scan: the same answer, the claims each holds now (Worker-A
-- lost idx-rel and idx-exp, and holds idx-new).
--
CREATE TEMP TABLE holders (h text);
INSERT INTO holders VALUES ('worker-a'), ('worker-b'), ('worker-c');
SET enable_seqscan = off;
-- Does the plan read the DBA's index?  A yes/no question, not a plan shape:
-- the shape differs between majors (17 sorts inside the aggregate).
CREATE FUNCTION pg_temp.plan_uses_index(query text, index_name text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    plan json;
BEGIN
    EXECUTE 'EXPLAIN (COSTS OFF, FORMAT JSON) ' || query INTO plan;
    RETURN plan::text LIKE '%"Index Name": "' || index_name || '"%';
END $$;
SELECT pg_temp.plan_uses_index($q$
SELECT h AS holder,
       (SELECT array_agg(c.job ORDER BY c.job) FROM fence_claims c
         WHERE lower(c.holder) = holders.h) AS jobs
  FROM holders ORDER BY h$q$, 'dba_holder_lower_idx') AS reads_dba_holder_lower_idx;
SELECT h AS holder,
       (SELECT array_agg(c.job ORDER BY c.job) FROM fence_claims c
         WHERE lower(c.holder) = holders.h) AS jobs
  FROM holders ORDER BY h;
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT h AS holder,
       (SELECT array_agg(c.job ORDER BY c.job) FROM fence_claims c
         WHERE lower(c.holder) = holders.h) AS jobs
  FROM holders ORDER BY h;
RESET enable_indexscan;
RESET enable_bitmapscan;

-- amcheck: every index of the registry agrees with the heap.
CREATE EXTENSION amcheck;
SELECT i.indexrelid::regclass AS index
  FROM pg_index i, LATERAL bt_index_check(i.indexrelid, true)
 WHERE i.indrelid = 'fence_claims'::regclass
 ORDER BY i.indexrelid::regclass::text;

DROP EXTENSION amcheck;
DROP INDEX dba_holder_lower_idx;
DROP TABLE holders;
DROP EXTENSION fence;
