--
-- extension_recreate: what a transaction learned about a token does not
-- outlive the extension that issued it, and the partition helpers work for
-- a table owner who is not a superuser.
--  * In one transaction: claim a job, bind its token t and write with it
--    (the token is validated and remembered), then unprotect the table,
--    DROP EXTENSION fence, CREATE EXTENSION fence and protect it again. The new
--    counter starts below t: t was never issued by it, so a write with t in
--    the same transaction is refused (5G002, never issued), whether t rides in the
--    statement or comes from the old binding. (1.0 let both writes through
--    from its per-transaction cache.)
--  * fence_cover_truncate() is no longer an SQL function (42883).
--  * A non-superuser owner protects a partitioned table; CREATE TABLE ...
--    PARTITION OF and ATTACH PARTITION each give the new partition
--    zz_fence_truncate, ENABLE ALWAYS; TRUNCATE of the parent and of every
--    partition is refused (5F005). The twin, unprotected, truncates.
--
-- Token values vary from run to run: they are kept in psql variables and
-- compared, never printed.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE TABLE ledger (id int PRIMARY KEY, amount int NOT NULL, writer_epoch bigint);
INSERT INTO ledger VALUES (1, 10, NULL), (2, 20, NULL), (3, 30, NULL);
SELECT fence_protect('ledger');
-- a few claims first, so that the token below is well above 1
SELECT count(fence_claim('warmup-' || g, '1 hour')) AS warmup_claims
  FROM generate_series(1, 3) g;

BEGIN;
SELECT fence_claim('recreate-job', '1 hour') AS t \gset
SELECT :t > 3 AS t_above_3;
SELECT fence_begin('recreate-job', :t);
UPDATE ledger SET amount = 11 WHERE id = 1;
SET LOCAL client_min_messages = warning;
-- (since 1.1, DROP EXTENSION is refused while a table is protected)
SELECT fence_unprotect('ledger');
DROP EXTENSION fence CASCADE;
CREATE EXTENSION fence;
SELECT fence_protect('ledger');
SELECT last_value < :t AS counter_below_t FROM fence_token_seq;
SAVEPOINT before_writes;
-- t in the statement
UPDATE ledger SET amount = 22, writer_epoch = :t WHERE id = 2;
ROLLBACK TO before_writes;
-- t from the binding made before the extension was dropped
UPDATE ledger SET amount = 33 WHERE id = 3;
ROLLBACK TO before_writes;
-- a fresh table protected by the new extension refuses t as well
CREATE TABLE ledger_new (id int PRIMARY KEY, writer_epoch bigint);
SELECT fence_protect('ledger_new');
INSERT INTO ledger_new VALUES (1, :t);
ROLLBACK TO before_writes;
COMMIT;
-- only the write made under the first extension landed
SELECT id, amount, writer_epoch IS NOT DISTINCT FROM :t AS stamped_t FROM ledger ORDER BY id;
SELECT count(*) AS new_tables FROM pg_class WHERE relname = 'ledger_new';
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'ledger'::regclass ORDER BY tgname;

-- the truncate helper is not callable from SQL
SELECT fence_cover_truncate('ledger');

DROP TABLE ledger;

--
-- A partitioned table protected by an owner who is not a superuser.
--
CREATE ROLE fence_regress_partowner;
GRANT CREATE ON SCHEMA public TO fence_regress_partowner;
SET ROLE fence_regress_partowner;
CREATE TABLE ev (region text NOT NULL, id int NOT NULL, writer_epoch bigint)
  PARTITION BY LIST (region);
CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu');
SELECT fence_protect('ev');
CREATE TABLE ev_us PARTITION OF ev FOR VALUES IN ('us');
CREATE TABLE ev_asia (LIKE ev);
ALTER TABLE ev ATTACH PARTITION ev_asia FOR VALUES IN ('asia');
CREATE TABLE ev_am PARTITION OF ev FOR VALUES IN ('ca') PARTITION BY LIST (region);
CREATE TABLE ev_am_ca PARTITION OF ev_am FOR VALUES IN ('ca');
SELECT pt.relid::text AS rel, t.tgname, t.tgenabled
  FROM pg_partition_tree('ev') pt
  LEFT JOIN pg_trigger t ON t.tgrelid = pt.relid
 ORDER BY 1, 2;
TRUNCATE ev;
TRUNCATE ev_eu;
TRUNCATE ev_us;
TRUNCATE ev_asia;
TRUNCATE ev_am;
TRUNCATE ev_am_ca;
-- twin: the same tree, unprotected
CREATE TABLE ev_plain (LIKE ev) PARTITION BY LIST (region);
CREATE TABLE ev_plain_eu PARTITION OF ev_plain FOR VALUES IN ('eu');
CREATE TABLE ev_plain_us (LIKE ev);
ALTER TABLE ev_plain ATTACH PARTITION ev_plain_us FOR VALUES IN ('us');
TRUNCATE ev_plain;
TRUNCATE ev_plain_us;
SELECT count(*) AS plain_triggers FROM pg_trigger
 WHERE tgrelid IN (SELECT relid FROM pg_partition_tree('ev_plain'));
DROP TABLE ev, ev_plain;
RESET ROLE;

REVOKE CREATE ON SCHEMA public FROM fence_regress_partowner;
DROP ROLE fence_regress_partowner;
DROP EXTENSION fence;
