--
-- reprotect: the guard fails closed when it has lost ENABLE ALWAYS, and
-- fence_protect() heals it; ENABLE TRIGGER ALL leaves fence's triggers
-- ENABLE ALWAYS; PREPARE TRANSACTION after any fence lock; the 5F001 detail
-- for a released claim.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE TABLE ledger (id int PRIMARY KEY, amount int NOT NULL,
                     writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO ledger VALUES (1, 10);
SELECT fence_protect('ledger');
SELECT fence_claim('reprotect-1', '1 hour') AS t1 \gset

-- DISABLE TRIGGER ALL then ENABLE TRIGGER ALL, as pg_restore
-- --disable-triggers does: since 1.1 DISABLE must be declared, and ENABLE
-- TRIGGER ALL puts fence's triggers back to ENABLE ALWAYS ('A').
ALTER TABLE ledger DISABLE TRIGGER ALL;
\echo :SQLSTATE
BEGIN;
SELECT fence_allow_ddl('ledger', 'restore with --disable-triggers');
ALTER TABLE ledger DISABLE TRIGGER ALL;
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'ledger'::regclass ORDER BY tgname;
ALTER TABLE ledger ENABLE TRIGGER ALL;
COMMIT;
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'ledger'::regclass ORDER BY tgname;

-- A declared ENABLE TRIGGER of the guard itself leaves it merely ENABLE'd
-- ('O'), firing on origin only.
BEGIN;
SELECT fence_allow_ddl('ledger', 'make the guard origin-only, for the test');
ALTER TABLE ledger ENABLE TRIGGER zz_fence_guard;
COMMIT;
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'ledger'::regclass ORDER BY tgname;

-- Twin, the reason for failing closed: under replica role a trigger that is
-- merely ENABLE'd does not fire, so a write without any token lands.
SET session_replication_role = replica;
UPDATE ledger SET amount = 999 WHERE id = 1;
RESET session_replication_role;
SELECT amount, writer_epoch = 0 AS no_token_stamped FROM ledger;

-- In an origin session the guard refuses every write until re-protected,
-- with a valid token too.
UPDATE ledger SET amount = 11, writer_epoch = :t1 WHERE id = 1;
\echo :SQLSTATE
INSERT INTO ledger VALUES (2, 20, :t1);
\echo :SQLSTATE
\set VERBOSITY default
DELETE FROM ledger WHERE id = 1;
\set VERBOSITY sqlstate

-- fence_protect() makes both triggers ALWAYS again, and the guard is back:
-- replica role no longer skips it.
SELECT fence_protect('ledger');
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'ledger'::regclass ORDER BY tgname;
SET session_replication_role = replica;
UPDATE ledger SET amount = 998 WHERE id = 1;
\echo :SQLSTATE
RESET session_replication_role;
UPDATE ledger SET amount = 11, writer_epoch = :t1 WHERE id = 1;
SELECT amount, writer_epoch = :t1 AS stamped FROM ledger;

-- PREPARE TRANSACTION is refused after any fence lock, fence_claim alone
-- included (it holds the job's lock, and a prepared transaction would keep
-- it with no session to end it).
BEGIN;
SELECT fence_claim('reprotect-2', '1 hour') IS NOT NULL AS claimed;
PREPARE TRANSACTION 'fence_reprotect';
\echo :SQLSTATE
BEGIN;
SELECT fence_release('reprotect-none', 1);
PREPARE TRANSACTION 'fence_reprotect';
\echo :SQLSTATE
-- nothing was prepared, and the rolled-back claim left no row
SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'fence_reprotect';
SELECT count(*) FROM fence_claims WHERE job = 'reprotect-2';

-- A released claim's token, written in the statement: 5F001 naming the job.
SELECT fence_release('reprotect-1', :t1);
\set VERBOSITY default
UPDATE ledger SET amount = 12, writer_epoch = :t1 WHERE id = 1;
\set VERBOSITY sqlstate
SELECT amount FROM ledger;

DROP TABLE ledger;
DROP EXTENSION fence;
