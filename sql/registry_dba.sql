--
-- registry_dba: fence_claims is an ordinary table, and a DBA may treat it
-- as one. A partial index, an audit trigger, a CHECK constraint and a
-- foreign key that a superuser adds to it see every write fence makes to
-- it: the first claim of a job, the renewal, the release, and the takeover
-- of a released or expired claim. 1.0 wrote the takeover with the catalog
-- path, bypassing the executor: the partial index got an entry for a row
-- outside its predicate, so an index scan returned a claim that is not
-- released; the trigger never saw the takeover; neither the CHECK
-- constraint nor the foreign key was enforced on it.
-- Afterwards amcheck finds every index of the registry consistent.
-- (An expression index, which made 1.0's takeover crash, has a file of its
-- own: registry_index.sql.)
--
-- Token values vary from run to run: they are kept in psql variables and
-- compared, never printed.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

--
-- The DBA's objects: a partial index of released claims, an audit trigger
-- that records every row fence_claims gets, a CHECK constraint, and a
-- foreign key from holder to a table of known workers (its checks are
-- AFTER triggers, like the audit's).
--
CREATE INDEX dba_released_idx ON fence_claims (job) WHERE released;
CREATE TABLE dba_audit (n serial PRIMARY KEY, op text, job text, holder text,
                        released bool, new_token bool);
CREATE FUNCTION dba_audit_claims() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.dba_audit (op, job, holder, released, new_token)
	VALUES (TG_OP, NEW.job, NEW.holder, NEW.released,
	        TG_OP = 'UPDATE' AND NEW.token <> OLD.token);
	RETURN NULL;
END
$$;
CREATE TRIGGER dba_audit AFTER INSERT OR UPDATE ON fence_claims
	FOR EACH ROW EXECUTE FUNCTION dba_audit_claims();
ALTER TABLE fence_claims ADD CONSTRAINT dba_holder_check CHECK (holder <> 'forbidden');
CREATE TABLE dba_workers (name text PRIMARY KEY);
INSERT INTO dba_workers VALUES ('worker-1'), ('worker-2'), ('forbidden');
ALTER TABLE fence_claims ADD CONSTRAINT dba_holder_fk
	FOREIGN KEY (holder) REFERENCES dba_workers (name);

--
-- Three jobs.
--   dba-rel:  claimed, renewed, released, then claimed again (a takeover of
--             a released claim)
--   dba-exp:  claimed with a lease that expires, then taken over
--   dba-done: claimed and released; it stays released
--
SELECT fence_claim('dba-rel', '1 hour', 'worker-1') AS r1 \gset
SELECT fence_renew('dba-rel', :r1, '2 hours') > now() + interval '1 hour' AS renewed;
SELECT fence_release('dba-rel', :r1) AS released;
SELECT fence_claim('dba-rel', '1 hour', 'worker-2') AS r2 \gset
SELECT :r2 > :r1 AS rel_taken_over;

SELECT fence_claim('dba-exp', '1 millisecond', 'worker-1') AS e1 \gset
SELECT pg_sleep(0.01);
SELECT fence_claim('dba-exp', '1 hour', 'worker-2') AS e2 \gset
SELECT :e2 > :e1 AS exp_taken_over;

SELECT fence_claim('dba-done', '1 hour', 'worker-1') AS d1 \gset
SELECT fence_release('dba-done', :d1) AS released;

SELECT job, holder, released,
       token = CASE job WHEN 'dba-rel' THEN :r2 WHEN 'dba-exp' THEN :e2 ELSE :d1 END AS token_is_latest
  FROM fence_claims ORDER BY job;

--
-- The audit trigger saw every write, the two takeovers included (new_token:
-- the row's token was replaced).
--
SELECT op, job, holder, released, new_token FROM dba_audit ORDER BY n;

--
-- The partial index lists released claims only. Read through it, and
-- through a sequential scan: both answer dba-done alone. (In 1.0 the index
-- also returned the two taken-over claims, released = f.)
--
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT job, released FROM fence_claims WHERE released;
SELECT job, released FROM fence_claims WHERE released;
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT job, released FROM fence_claims WHERE released;
SELECT job, released FROM fence_claims WHERE released;
RESET enable_indexscan;
RESET enable_bitmapscan;

--
-- The CHECK constraint (23514) holds on every path: the first claim of a
-- job (an INSERT) ...
--
SELECT fence_claim('dba-chk', '1 hour', 'forbidden');
SELECT count(*) AS chk_rows FROM fence_claims WHERE job = 'dba-chk';
-- ... the takeover of a released claim ...
SELECT fence_claim('dba-chk', '1 hour', 'worker-1') AS c1 \gset
SELECT fence_release('dba-chk', :c1) AS released;
SELECT fence_claim('dba-chk', '1 hour', 'forbidden');
-- ... and the takeover of an expired one.
SELECT fence_claim('dba-chk-exp', '1 millisecond', 'worker-1') AS x1 \gset
SELECT pg_sleep(0.01);
SELECT fence_claim('dba-chk-exp', '1 hour', 'forbidden');
-- Both claims are as they were, and an allowed holder can still take them.
SELECT job, holder, released,
       token = CASE job WHEN 'dba-chk' THEN :c1 ELSE :x1 END AS token_unchanged
  FROM fence_claims WHERE job LIKE 'dba-chk%' ORDER BY job;
SELECT fence_claim('dba-chk', '1 hour', 'worker-2') > :c1 AS chk_taken_over;
SELECT fence_claim('dba-chk-exp', '1 hour', 'worker-2') > :x1 AS chk_exp_taken_over;
SELECT count(*) AS forbidden_rows FROM fence_claims WHERE NOT (holder <> 'forbidden');

--
-- So does the foreign key (23503): a holder that is not a known worker
-- can neither make a first claim nor take a released claim over.
--
SELECT fence_claim('dba-fk', '1 hour', 'stranger');
SELECT fence_claim('dba-fk', '1 hour', 'worker-1') AS f1 \gset
SELECT fence_release('dba-fk', :f1) AS released;
SELECT fence_claim('dba-fk', '1 hour', 'stranger');
SELECT holder, released, token = :f1 AS token_unchanged FROM fence_claims WHERE job = 'dba-fk';
SELECT count(*) AS unknown_holders FROM fence_claims c
 WHERE NOT EXISTS (SELECT FROM dba_workers w WHERE w.name = c.holder);

-- The audit lists the claims that were made; the refused ones left no row.
SELECT op, job, holder, released, new_token FROM dba_audit
 WHERE job LIKE 'dba-chk%' OR job = 'dba-fk' ORDER BY n;

--
-- A DBA's BEFORE ROW UPDATE trigger: the takeover locks the row first then,
-- as the trigger needs (claims.c, claims_update_once), and the trigger
-- sees the takeover and may change what it writes; without it, the
-- takeover writes unlocked and the AFTER trigger above saw it all the same.
--
CREATE FUNCTION dba_before_claims() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	RAISE NOTICE 'before update of %: token rises %', NEW.job, NEW.token > OLD.token;
	NEW.holder := 'worker-1';
	RETURN NEW;
END
$$;
CREATE TRIGGER dba_before BEFORE UPDATE ON fence_claims
	FOR EACH ROW EXECUTE FUNCTION dba_before_claims();
SELECT fence_claim('dba-bt', '1 millisecond', 'worker-2') AS b1 \gset
SELECT pg_sleep(0.01);
SELECT fence_claim('dba-bt', '1 hour', 'worker-2') AS b2 \gset
SELECT :b2 > :b1 AS bt_taken_over, holder AS holder_set_by_trigger
  FROM fence_claims WHERE job = 'dba-bt';
DROP TRIGGER dba_before ON fence_claims;
DROP FUNCTION dba_before_claims();

--
-- amcheck: every index of the registry, the DBA's included, agrees with the
-- heap (heapallindexed).
--
CREATE EXTENSION amcheck;
SELECT i.indexrelid::regclass AS index
  FROM pg_index i, LATERAL bt_index_check(i.indexrelid, true)
 WHERE i.indrelid = 'fence_claims'::regclass
 ORDER BY i.indexrelid::regclass::text;

-- Clean up the DBA's objects.
DROP EXTENSION amcheck;
ALTER TABLE fence_claims DROP CONSTRAINT dba_holder_check;
ALTER TABLE fence_claims DROP CONSTRAINT dba_holder_fk;
DROP TABLE dba_workers;
DROP TRIGGER dba_audit ON fence_claims;
DROP INDEX dba_released_idx;
DROP FUNCTION dba_audit_claims();
DROP TABLE dba_audit;
DROP EXTENSION fence;
