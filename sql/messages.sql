--
-- messages: one example of every error fence raises, with its full text:
-- primary message, DETAIL and HINT, followed by its SQLSTATE.
-- The other files show SQLSTATEs only.
--
-- The counter is set to a known value so that the tokens quoted in DETAIL
-- lines are the same on every run.
--
CREATE EXTENSION fence;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- The counter's first claim begins its history without moving it: it was
-- made here and never used.  (A setval() before it would be a restore's as
-- far as fence can tell, and the first claim would move the counter past
-- the clock's floor: token.c, "Histories".)
SELECT fence_claim('history-begins', '1 second') = 1 AS first_token_is_1;
DELETE FROM fence_claims WHERE job = 'history-begins';
SELECT setval('fence_token_seq', 100) AS counter;
SELECT fence_claim('job-old', '1 millisecond', 'A') AS told \gset
SELECT pg_sleep(0.02);
SELECT fence_claim('job-old', '1 hour', 'B') AS tnew \gset
SELECT fence_claim('job-other', '1 hour', 'C') AS tother \gset
SELECT :told = 101 AND :tnew = 102 AND :tother = 103 AS known_tokens;

CREATE TABLE m (id int PRIMARY KEY, v text, writer_epoch bigint);
INSERT INTO m VALUES (1, 'init', NULL), (2, 'init', NULL);
SELECT fence_protect('m');
CREATE TABLE mr (id int PRIMARY KEY, writer_epoch bigint);
INSERT INTO mr VALUES (1, NULL);
SELECT fence_protect('mr', 'writer_epoch', 'repeat');
UPDATE m SET v = 'other', writer_epoch = :tother WHERE id = 1;
UPDATE mr SET writer_epoch = :tother WHERE id = 1;

-- 5F001 superseded: in the guard, in fence_begin, in fence_renew
UPDATE m SET v = 'stale', writer_epoch = :told WHERE id = 2;
\echo :SQLSTATE
SELECT fence_begin('job-old', :told);
\echo :SQLSTATE
SELECT fence_renew('job-old', :told);
\echo :SQLSTATE
-- 5F002 row is newer: strict, repeat
UPDATE m SET v = 'older', writer_epoch = :tnew WHERE id = 1;
\echo :SQLSTATE
UPDATE mr SET writer_epoch = :tnew WHERE id = 1;
\echo :SQLSTATE
-- 5F003 no token
UPDATE m SET v = 'adhoc' WHERE id = 2;
\echo :SQLSTATE
DELETE FROM m WHERE id = 2;
\echo :SQLSTATE
-- 5G002 never issued (the caller's bug); 5F004 invalid token: negative,
-- two tokens
UPDATE m SET writer_epoch = 5000 WHERE id = 2;
\echo :SQLSTATE
INSERT INTO m VALUES (3, 'negative', -1);
\echo :SQLSTATE
BEGIN;
SELECT fence_begin('job-old', :tnew);
UPDATE m SET writer_epoch = :tother WHERE id = 2;
\echo :SQLSTATE
ROLLBACK;
-- 5F005 TRUNCATE
TRUNCATE m;
\echo :SQLSTATE
-- 5F006 DDL that would disarm a protected table
ALTER TABLE m DISABLE TRIGGER ALL;
\echo :SQLSTATE
CREATE TRIGGER after_guard AFTER UPDATE ON mr FOR EACH ROW EXECUTE FUNCTION fence_guard();
\echo :SQLSTATE
-- 39P01 fired the wrong way (the triggers below need a declared session)
SELECT fence_guard();
\echo :SQLSTATE
SET fence.allow_ddl = on;
CREATE TRIGGER after_guard AFTER UPDATE ON mr FOR EACH ROW EXECUTE FUNCTION fence_guard();
UPDATE mr SET writer_epoch = :tother WHERE id = 1;
\echo :SQLSTATE
DROP TRIGGER after_guard ON mr;
CREATE TRIGGER stmt_guard BEFORE UPDATE ON mr FOR EACH STATEMENT EXECUTE FUNCTION fence_guard();
UPDATE mr SET writer_epoch = :tother WHERE id = 1;
\echo :SQLSTATE
DROP TRIGGER stmt_guard ON mr;
RESET fence.allow_ddl;
-- 39P01 a BEFORE ROW trigger sorts after the guard
CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER zzz_late BEFORE UPDATE ON mr FOR EACH ROW EXECUTE FUNCTION noop();
UPDATE mr SET writer_epoch = :tother WHERE id = 1;
\echo :SQLSTATE
DROP TRIGGER zzz_late ON mr;
-- 22004 NULL job, NULL token
SELECT fence_claim(NULL);
\echo :SQLSTATE
SELECT fence_begin('job-old', NULL);
\echo :SQLSTATE
-- 22023 empty job, long job, bad lease, bad token, unknown mode
SELECT fence_claim('');
\echo :SQLSTATE
SELECT fence_claim(repeat('x', 1025));
\echo :SQLSTATE
SELECT fence_claim('job-x', '0');
\echo :SQLSTATE
SELECT fence_claim('job-x', NULL);
\echo :SQLSTATE
SELECT fence_release('job-old', 0);
\echo :SQLSTATE
SELECT fence_protect('m', 'writer_epoch', 'bogus');
\echo :SQLSTATE
-- 42P01 unknown table, 42703 missing column, 42804 not bigint
SELECT fence_protect('no_such_table');
\echo :SQLSTATE
SELECT fence_protect('m', 'no_such_column');
\echo :SQLSTATE
SELECT fence_protect('m', 'v');
\echo :SQLSTATE
-- 42704 not protected
SELECT fence_unprotect('m');
SELECT fence_unprotect('m');
\echo :SQLSTATE
-- 42501 not the owner
CREATE ROLE fence_regress_msg;
SET ROLE fence_regress_msg;
SELECT fence_unprotect('mr');
\echo :SQLSTATE
RESET ROLE;
DROP ROLE fence_regress_msg;
-- 0A000 PREPARE TRANSACTION after using a token
BEGIN;
SELECT fence_begin('job-old', :tnew);
PREPARE TRANSACTION 'fence_regress_msg';
\echo :SQLSTATE
SELECT format('ROLLBACK PREPARED %L', gid) FROM pg_prepared_xacts
 WHERE gid = 'fence_regress_msg' \gexec

DROP TABLE m, mr;
DROP FUNCTION noop();
DROP EXTENSION fence;
