--
-- fresh: fence_begin_fresh(reason), the sanctioned path for writers that
-- are not jobs (a web application, an admin fix, a cron script, a
-- migration).
--  (a) It issues a token above every token issued before it (a claim made
--      before it is lower, a claim made after it is higher), creates no
--      registry row, and binds the token to the transaction as fence_begin
--      does: UPDATE, INSERT and DELETE on strict, repeat and shared tables
--      go through and are stamped with it. Calling it again binds the new
--      token.
--  (b) The token is good in its own transaction only: any other
--      transaction that presents it gets 5F001, in the statement's epoch
--      column; in fence_begin and fence_renew, naming a job, 5G001 (the
--      token is not that job's); fence_release
--      (false).
--  (c) The fresh writer is the newest writer: in strict and repeat mode a
--      job handler that claimed before it, and is still its job's current
--      claim, is refused (5F002) when it writes a row after the fresh
--      writer; on the unprotected twin its stale write lands and the
--      repair is lost. In shared mode rows are not compared: the handler's
--      current token still writes after the fresh writer.
--  (d) With a reason, one fence_audit_log row (action 'begin_fresh',
--      detail 'token N', the reason, the role, the transaction), written
--      in the transaction (a rollback leaves none). No reason or NULL: no
--      row. An empty reason: 22023. A plain role may call it.
--  (e) Outside a transaction block: WARNING 25P01, and the next write has
--      no token (5F003); in a function called in autocommit the binding
--      covers the function's statement. In an implicit transaction of
--      several statements: no warning.
--  (f) Savepoints: ROLLBACK TO undoes the binding (5F003 next) and its
--      audit row; a job binding made before the savepoint is in force
--      again; RELEASE keeps the binding. PREPARE TRANSACTION: 0A000.
--  (g) From a trigger: 5F006.
--  (h) The messages about a fresh token name no job (VERBOSITY default;
--      token numbers replaced by N as in hardening.sql).
--
-- Tokens are kept in the temp table tok(name, t); the views show a row's
-- epoch as the name of the token it holds, never as a raw number.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_fresh_app;
CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);
GRANT SELECT ON tok TO fence_regress_fresh_app;

CREATE TABLE fs (id int PRIMARY KEY, v text, writer_epoch bigint);   -- strict
CREATE TABLE fr (LIKE fs INCLUDING ALL);                             -- repeat
CREATE TABLE fh (LIKE fs INCLUDING ALL);                             -- shared
CREATE TABLE fp (LIKE fs INCLUDING ALL);                             -- unprotected twin
INSERT INTO fs VALUES (1, 'init', NULL), (2, 'init', NULL), (3, 'init', NULL);
INSERT INTO fr SELECT * FROM fs;
INSERT INTO fh SELECT * FROM fs;
INSERT INTO fp SELECT * FROM fs;
SELECT fence_protect('fs');
SELECT fence_protect('fr', 'writer_epoch', 'repeat');
SELECT fence_protect('fh', 'writer_epoch', 'shared');
GRANT SELECT, INSERT, UPDATE, DELETE ON fs, fr, fh, fp TO fence_regress_fresh_app;

CREATE TEMP VIEW rows_now AS
  SELECT x.tbl, x.id, x.v,
         CASE WHEN x.writer_epoch IS NOT NULL THEN coalesce(tok.name, '(not a token)') END AS epoch
    FROM (SELECT 'fs' AS tbl, * FROM fs UNION ALL SELECT 'fr', * FROM fr
          UNION ALL SELECT 'fh', * FROM fh UNION ALL SELECT 'fp', * FROM fp) x
    LEFT JOIN tok ON tok.t = x.writer_epoch
   ORDER BY x.tbl, x.id;

-- fence_begin_fresh's audit rows: the detail with its number replaced,
-- the name of the token it quotes, the superuser shown as such.
CREATE TEMP VIEW audit_rows AS
  SELECT CASE WHEN a.role = current_user THEN '(superuser)' ELSE a.role::text END AS role,
         a.action, a.relation,
         regexp_replace(a.detail, '[0-9]+', 'N', 'g') AS detail,
         tok.name AS token_of, a.reason
    FROM fence_audit_log a LEFT JOIN tok ON a.detail = 'token ' || tok.t
   WHERE a.action = 'begin_fresh'
   ORDER BY a.id;

--
-- (a) A token above every token issued, and a binding.
--
-- The documented pattern, nothing in between: BEGIN, fence_begin_fresh,
-- the writes, COMMIT. (The token was issued by an earlier statement of the
-- transaction, so it vouches for the writes.)
BEGIN;
SELECT fence_begin_fresh() AS tplain \gset
UPDATE fh SET v = 'plain pattern' WHERE id = 3;
DELETE FROM fr WHERE id = 3;
COMMIT;
INSERT INTO tok VALUES ('plain', :tplain);
SELECT * FROM rows_now WHERE id = 3 AND tbl IN ('fh', 'fr');
-- the same, with a reason
BEGIN;
SELECT fence_begin_fresh('the pattern, with a reason') AS tplain2 \gset
UPDATE fh SET v = 'plain pattern, with a reason' WHERE id = 3;
COMMIT;
INSERT INTO tok VALUES ('plain2', :tplain2);
SELECT * FROM rows_now WHERE id = 3 AND tbl = 'fh';

SELECT fence_claim('before-job', '1 hour') AS tbefore \gset
INSERT INTO tok VALUES ('before', :tbefore);
SELECT last_value AS counter_before FROM fence_token_seq \gset
BEGIN;
SELECT fence_begin_fresh() AS tf \gset
INSERT INTO tok VALUES ('fresh1', :tf);
SELECT :tf > :tbefore AS above_earlier_claim, :tf > :counter_before AS above_counter,
       (SELECT last_value FROM fence_token_seq) = :tf AS counter_moved_to_it;
-- no job, no registry row
SELECT count(*) AS registry_rows_with_it FROM fence_claims WHERE token = :tf;
-- strict: each row once
UPDATE fs SET v = 'fresh1' WHERE id = 1;
INSERT INTO fs (id, v) VALUES (4, 'fresh1');
DELETE FROM fs WHERE id = 3;
-- the same token in the statement agrees with the binding
UPDATE fs SET v = 'fresh1', writer_epoch = :tf WHERE id = 2;
-- repeat: a row twice
UPDATE fr SET v = 'fresh1 first' WHERE id = 1;
UPDATE fr SET v = 'fresh1 again' WHERE id = 1;
INSERT INTO fr (id, v) VALUES (4, 'fresh1');
UPDATE fr SET v = 'fresh1' WHERE id = 4;
-- shared
UPDATE fh SET v = 'fresh1' WHERE id = 1;
UPDATE fh SET v = 'fresh1 again' WHERE id = 1;
INSERT INTO fh (id, v) VALUES (4, 'fresh1');
DELETE FROM fh WHERE id = 3;
COMMIT;
SELECT fence_claim('after-job', '1 hour') AS tafter \gset
INSERT INTO tok VALUES ('after', :tafter);
SELECT :tafter > :tf AS later_claim_is_above;
SELECT * FROM rows_now WHERE tbl <> 'fp';
-- Calling it again in one transaction binds the new, higher token.
BEGIN;
SELECT fence_begin_fresh() AS tf2 \gset
SELECT fence_begin_fresh() AS tf3 \gset
INSERT INTO tok VALUES ('fresh2', :tf2), ('fresh3', :tf3);
SELECT :tf3 > :tf2 AS second_is_higher;
UPDATE fh SET v = 'fresh3' WHERE id = 2;
COMMIT;
SELECT * FROM rows_now WHERE tbl = 'fh' AND id = 2;

--
-- (b) Nobody else can present it: 5F001 (the token is below the counter
-- and no claim holds it).
--
UPDATE fh SET v = 'replay', writer_epoch = :tf WHERE id = 2;
INSERT INTO fh VALUES (5, 'replay', :tf);
UPDATE fs SET v = 'replay', writer_epoch = :tf WHERE id = 2;
BEGIN;
UPDATE fr SET v = 'replay', writer_epoch = :tf WHERE id = 1;
ROLLBACK;
-- not even by a later fresh writer: its own token is bound, the statement
-- carries another one (5F004, two tokens)
BEGIN;
SELECT fence_begin_fresh() IS NOT NULL AS issued;
UPDATE fh SET v = 'replay', writer_epoch = :tf WHERE id = 2;
ROLLBACK;
-- nor through the claim functions
SELECT fence_begin('before-job', :tf);
SELECT fence_renew('before-job', :tf);
SELECT fence_release('before-job', :tf) AS released;
SELECT fence_is_current('before-job', :tf) AS is_current;
SELECT * FROM rows_now WHERE tbl <> 'fp' AND v = 'replay';

--
-- (c) The fresh writer is the newest writer.
-- A job handler claims, reads row 2 of each table, and stalls; it stays
-- its job's current claim. A fresh writer repairs row 2 everywhere; then
-- the handler writes.
--
SELECT fence_claim('handler-job', '1 hour', 'handler') AS th \gset
INSERT INTO tok VALUES ('handler', :th);
BEGIN;
SELECT fence_begin_fresh('repair row 2 by hand') AS tfix \gset
INSERT INTO tok VALUES ('fix', :tfix);
UPDATE fs SET v = 'repaired' WHERE id = 2;
UPDATE fr SET v = 'repaired' WHERE id = 2;
UPDATE fh SET v = 'repaired' WHERE id = 2;
UPDATE fp SET v = 'repaired', writer_epoch = :tfix WHERE id = 2;
COMMIT;
SELECT :th < :tfix AS handler_token_is_older,
       fence_is_current('handler-job', :th) AS handler_still_current;
-- strict: refused (5F002), bound or in the statement
BEGIN;
SELECT fence_begin('handler-job', :th);
UPDATE fs SET v = 'handler' WHERE id = 2;
ROLLBACK;
UPDATE fs SET v = 'handler', writer_epoch = :th WHERE id = 2;
-- repeat: refused (5F002)
UPDATE fr SET v = 'handler', writer_epoch = :th WHERE id = 2;
-- the unprotected twin: the stale write lands, the repair is lost
UPDATE fp SET v = 'handler', writer_epoch = :th WHERE id = 2;
-- shared: rows are not compared; the handler's current token writes
BEGIN;
SELECT fence_begin('handler-job', :th);
UPDATE fh SET v = 'handler' WHERE id = 2;
COMMIT;
SELECT * FROM rows_now WHERE tbl = 'fh' AND id = 2;
-- ... and the fresh writer writes after the handler, in shared mode too
BEGIN;
SELECT fence_begin_fresh() AS tfix2 \gset
INSERT INTO tok VALUES ('fix2', :tfix2);
UPDATE fh SET v = 'repaired again' WHERE id = 2;
COMMIT;
-- a superseded handler is still refused in shared mode (5F001)
SELECT fence_claim('gone-job', '1 millisecond') AS tgone \gset
SELECT pg_sleep(0.02);
SELECT fence_claim('gone-job', '1 hour') IS NOT NULL AS taken_over;
UPDATE fh SET v = 'superseded', writer_epoch = :tgone WHERE id = 2;
SELECT * FROM rows_now WHERE id = 2;

--
-- (d) The audit log.
--
-- with a reason: one row, in this transaction
SELECT coalesce(max(id), 0) AS audit_mark FROM fence_audit_log \gset
BEGIN;
SELECT fence_begin_fresh('fix order 42: quantity typed by hand') AS ta \gset
SELECT pg_current_xact_id() AS xa \gset
INSERT INTO tok VALUES ('audited', :ta);
UPDATE fh SET v = 'audited' WHERE id = 1;
COMMIT;
SELECT role = current_user AS role_is_caller, action, relation,
       detail = 'token ' || :ta AS detail_is_token, reason,
       xid = :'xa'::xid8 AS same_transaction,
       at BETWEEN now() - interval '1 minute' AND clock_timestamp() AS at_recent
  FROM fence_audit_log WHERE id > :audit_mark ORDER BY id;
-- without a reason, or with NULL: nothing recorded
BEGIN;
SELECT fence_begin_fresh() IS NOT NULL AS issued;
SELECT fence_begin_fresh(NULL) IS NOT NULL AS issued;
SELECT fence_begin_fresh(reason => NULL) IS NOT NULL AS issued;
COMMIT;
SELECT count(*) AS audit_rows FROM fence_audit_log WHERE id > :audit_mark;
-- an empty reason: 22023
BEGIN;
SELECT fence_begin_fresh('');
ROLLBACK;
-- a rolled-back transaction leaves no row
BEGIN;
SELECT fence_begin_fresh('rolled back') IS NOT NULL AS issued;
ROLLBACK;
SELECT count(*) AS audit_rows FROM fence_audit_log WHERE id > :audit_mark;
-- a plain role with nothing but table privileges: the admin tool's path
SET ROLE fence_regress_fresh_app;
BEGIN;
SELECT fence_begin_fresh('admin tool: reset row 3') AS tapp \gset
UPDATE fs SET v = 'admin' WHERE id = 1;
INSERT INTO fs (id, v) VALUES (3, 'admin');
DELETE FROM fs WHERE id = 4;
COMMIT;
RESET ROLE;
INSERT INTO tok VALUES ('app', :tapp);
SELECT * FROM rows_now WHERE tbl = 'fs';
SELECT * FROM audit_rows;

--
-- (e) Outside a transaction block: a warning, and no binding for the next
-- statement.
--
SELECT fence_begin_fresh() IS NOT NULL AS issued;
UPDATE fh SET v = 'autocommit' WHERE id = 1;
-- a reason is recorded all the same
SELECT fence_begin_fresh('autocommit with a reason') IS NOT NULL AS issued;
SELECT count(*) AS autocommit_rows FROM fence_audit_log
 WHERE action = 'begin_fresh' AND reason = 'autocommit with a reason';
-- several statements in one query string: one implicit transaction, no
-- warning, and the binding covers the write
SELECT fence_begin_fresh() IS NOT NULL AS issued \; UPDATE fh SET v = 'implicit' WHERE id = 1;
SELECT v FROM fh WHERE id = 1;
-- a function called in autocommit: the warning, and its write lands
CREATE FUNCTION fix_row(newv text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	t bigint;
BEGIN
	t := fence_begin_fresh('fix_row');
	UPDATE fh SET v = newv WHERE id = 1;
	RETURN t;
END
$$;
SELECT fix_row('by function') AS tfn \gset
INSERT INTO tok VALUES ('function', :tfn);
SELECT * FROM rows_now WHERE tbl = 'fh' AND id = 1;

--
-- (f) Savepoints.
--
-- ROLLBACK TO undoes the binding (and the audit row)
BEGIN;
SAVEPOINT s;
SELECT fence_begin_fresh('undone by a savepoint') IS NOT NULL AS issued;
ROLLBACK TO SAVEPOINT s;
UPDATE fh SET v = 'after rollback to' WHERE id = 1;
ROLLBACK;
SELECT count(*) AS undone_rows FROM fence_audit_log WHERE reason = 'undone by a savepoint';
-- ... also when the transaction then commits
BEGIN;
SAVEPOINT s;
SELECT fence_begin_fresh('undone by a savepoint') IS NOT NULL AS issued;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT count(*) AS undone_rows FROM fence_audit_log WHERE reason = 'undone by a savepoint';
-- a job's binding made before the savepoint is in force again
SELECT fence_claim('sp-job', '1 hour') AS tsp \gset
INSERT INTO tok VALUES ('sp-job', :tsp);
BEGIN;
SELECT fence_begin('sp-job', :tsp);
SAVEPOINT s;
SELECT fence_begin_fresh() IS NOT NULL AS issued;
ROLLBACK TO SAVEPOINT s;
UPDATE fh SET v = 'job binding again' WHERE id = 1;
COMMIT;
-- RELEASE SAVEPOINT keeps the binding
BEGIN;
SAVEPOINT s;
SELECT fence_begin_fresh() AS trel \gset
RELEASE SAVEPOINT s;
UPDATE fh SET v = 'kept by release' WHERE id = 4;
COMMIT;
INSERT INTO tok VALUES ('released-sp', :trel);
SELECT * FROM rows_now WHERE tbl = 'fh' AND id IN (1, 4);
-- PREPARE TRANSACTION: refused, like every transaction that took a fence lock
BEGIN;
SELECT fence_begin_fresh() IS NOT NULL AS issued;
PREPARE TRANSACTION 'fence_fresh';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'fence_fresh';
-- (should it ever be prepared, end it: a prepared transaction that used the
-- counter would block DROP EXTENSION below for good)
SELECT count(*) > 0 AS fresh_prepared FROM pg_prepared_xacts WHERE gid = 'fence_fresh' \gset
\if :fresh_prepared
ROLLBACK PREPARED 'fence_fresh';
\endif

--
-- (g) From a trigger: 5F006.
--
CREATE TABLE fresh_src (id int);
CREATE FUNCTION fresh_in_trigger() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fence_begin_fresh('from a trigger');
	RETURN NEW;
END
$$;
CREATE TRIGGER fresh_src_bi BEFORE INSERT ON fresh_src
	FOR EACH ROW EXECUTE FUNCTION fresh_in_trigger();
INSERT INTO fresh_src VALUES (1);
BEGIN;
INSERT INTO fresh_src VALUES (1);
ROLLBACK;
SELECT count(*) AS rows_inserted FROM fresh_src;
SELECT count(*) AS trigger_rows FROM fence_audit_log WHERE reason = 'from a trigger';

--
-- (h) The messages: they name no job. A helper catches the error and
-- prints its SQLSTATE, message, detail and hint with every number replaced
-- by N; names_a_job says whether any of them quotes a job name.
--
CREATE FUNCTION pg_temp.fenced(stmt text)
RETURNS TABLE (sqlstate text, message text, detail text, hint text, names_a_job boolean)
LANGUAGE plpgsql AS $$
DECLARE
	m text;
	d text;
	h text;
BEGIN
	EXECUTE stmt;
	RETURN QUERY SELECT 'no error'::text, NULL::text, NULL::text, NULL::text, NULL::boolean;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
	RETURN QUERY SELECT SQLSTATE::text,
		regexp_replace(m, '[0-9]+', 'N', 'g'),
		regexp_replace(d, '[0-9]+', 'N', 'g'),
		regexp_replace(h, '[0-9]+', 'N', 'g'),
		concat_ws(' ', m, d, h) ~ 'job "';
END
$$;
\x on
-- 5F001: another transaction presents the fresh token
SELECT * FROM pg_temp.fenced(format('UPDATE fh SET v = %L, writer_epoch = %s WHERE id = 2', 'replay', :tf));
-- 5G003: the fresh writer writes a strict row a second time (the caller's bug)
BEGIN;
SELECT fence_begin_fresh() IS NOT NULL AS issued;
SELECT * FROM pg_temp.fenced('UPDATE fs SET v = ''first'' WHERE id = 2');
SELECT * FROM pg_temp.fenced('UPDATE fs SET v = ''second'' WHERE id = 2');
-- 5F004: the fresh token is bound, the statement carries a job's token
-- (the message may name that job, the statement's: not the fresh token's)
SELECT * FROM pg_temp.fenced(format('UPDATE fh SET v = %L, writer_epoch = %s WHERE id = 2', 'two', :th));
ROLLBACK;
-- 5F002: the handler after the fresh writer (the handler's own job is named)
SELECT * FROM pg_temp.fenced(format('UPDATE fr SET v = %L, writer_epoch = %s WHERE id = 2', 'handler', :th));
-- 5F006: from a trigger
SELECT * FROM pg_temp.fenced('INSERT INTO fresh_src VALUES (2)');
-- 22023: an empty reason
SELECT * FROM pg_temp.fenced('SELECT fence_begin_fresh('''')');
-- 5F003: a write after fence_begin_fresh in autocommit
SELECT fence_begin_fresh() IS NOT NULL AS issued;
SELECT * FROM pg_temp.fenced('UPDATE fs SET v = ''adhoc'' WHERE id = 2');
\x off
-- The warning in full. The counter is set to a known value first (as
-- messages.sql does), so that the token shown is always 100001.
SELECT setval('fence_token_seq', 100000) AS counter;
\set VERBOSITY default
SELECT fence_begin_fresh() AS fresh_token;
\set VERBOSITY sqlstate

SELECT * FROM rows_now WHERE tbl = 'fs';

DROP FUNCTION fix_row(text);
DROP TABLE fresh_src;
DROP FUNCTION fresh_in_trigger();
SELECT fence_unprotect('fs');
SELECT fence_unprotect('fr');
SELECT fence_unprotect('fh');
DROP VIEW rows_now, audit_rows;
DROP TABLE fs, fr, fh, fp, tok;
DROP EXTENSION fence;
DROP ROLE fence_regress_fresh_app;
