--
-- bad_input: hostile input through every SQL entry point of fence.
-- NULL, empty, huge (1 MB job name), negative and zero tokens, tokens never
-- issued, wrong types, and SQL-injection-shaped job names, column names and
-- modes.  Each must give a clear error (a real SQLSTATE and a short message)
-- or, where the input is merely odd, work correctly; never crash, never
-- succeed silently.
--
-- Most calls go through try(), which runs a statement and prints its
-- SQLSTATE, the first 100 characters of the message, and the lengths of
-- message and detail, so a 1 MB input cannot flood the output and an error
-- that echoes it whole shows up as a long message.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE FUNCTION pg_temp.try(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	st text;
	msg text;
	det text;
	res text;
BEGIN
	IF stmt ~* '^\s*SELECT|RETURNING' THEN
		EXECUTE stmt INTO res;
	ELSE
		EXECUTE stmt;
		res := 'done';
	END IF;
	RETURN 'ok: ' || coalesce(left(res, 60), '<null>');
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		det = PG_EXCEPTION_DETAIL;
	RETURN st || ': ' || left(msg, 100)
		|| CASE WHEN length(msg) > 100 THEN ' ... [message ' || length(msg) || ' chars]' ELSE '' END
		|| CASE WHEN length(det) > 200 THEN ' [detail ' || length(det) || ' chars]' ELSE '' END;
END $$;

CREATE TABLE bad (id int PRIMARY KEY, v text, writer_epoch bigint);
INSERT INTO bad VALUES (1, 'one', NULL);
SELECT fence_protect('bad');
SELECT fence_claim('bad-job', '1 hour') AS tok \gset

--
-- Job names: NULL, empty, 1024 / 1025 bytes, multibyte, 1 MB, injection.
--
SELECT pg_temp.try($$SELECT fence_claim(NULL)$$);
SELECT pg_temp.try($$SELECT fence_claim('')$$);
SELECT pg_temp.try($$SELECT fence_claim(repeat('j', 1024))::text IS NOT NULL$$);
SELECT pg_temp.try($$SELECT fence_claim(repeat('j', 1025))$$);
-- 512 two-byte characters = 1024 bytes: fits; one more character does not
SELECT pg_temp.try($$SELECT fence_claim(repeat('é', 512))::text IS NOT NULL$$);
SELECT pg_temp.try($$SELECT fence_claim(repeat('é', 513))$$);
SELECT pg_temp.try($$SELECT fence_claim(repeat('x', 1048576))$$);
SELECT pg_temp.try($$SELECT fence_renew(repeat('x', 1048576), 1)$$);
SELECT pg_temp.try($$SELECT fence_release(repeat('x', 1048576), 1)::text$$);
SELECT pg_temp.try($$SELECT fence_current(repeat('x', 1048576))$$);
SELECT pg_temp.try($$SELECT fence_is_current(repeat('x', 1048576), 1)::text$$);
SELECT pg_temp.try($$SELECT fence_begin(repeat('x', 1048576), 1)$$);
SELECT pg_temp.try($$SELECT fence_current('')$$);
SELECT pg_temp.try($$SELECT fence_current(NULL)$$);
SELECT pg_temp.try($$SELECT fence_is_current('', 1)::text$$);
SELECT pg_temp.try($$SELECT fence_is_current(NULL, 1)::text$$);
SELECT pg_temp.try($$SELECT fence_release('', 1)::text$$);
SELECT pg_temp.try($$SELECT fence_release(NULL, 1)::text$$);
SELECT pg_temp.try($$SELECT fence_renew('', 1)$$);
SELECT pg_temp.try($$SELECT fence_renew(NULL, 1)$$);
SELECT pg_temp.try($$SELECT fence_begin('', 1)$$);
SELECT pg_temp.try($$SELECT fence_begin(NULL, 1)$$);

-- Injection-shaped job names are just names: claimed, stored and found as is.
SELECT fence_claim($j$x'); DROP TABLE bad; --$j$, '1 hour') IS NOT NULL AS claimed;
SELECT fence_claim($j$%s%n%x%d$j$, '1 hour') IS NOT NULL AS claimed;
SELECT fence_claim($j$"; DELETE FROM fence_claims; --$j$, '1 hour') IS NOT NULL AS claimed;
SELECT fence_claim(E'tab\tnewline\nbackslash\\quote''', '1 hour') IS NOT NULL AS claimed;
SELECT job FROM fence_claims WHERE job <> 'bad-job' AND length(job) < 100 ORDER BY job COLLATE "C";
SELECT count(*) AS bad_still_there FROM bad;
SELECT fence_current($j$x'); DROP TABLE bad; --$j$) IS NOT NULL AS found;
-- a held injection-shaped job is held like any other
SELECT fence_claim($j$x'); DROP TABLE bad; --$j$) IS NULL AS held;
-- the error for a stale token names the job without breaking
SELECT pg_temp.try($$SELECT fence_begin($j$%s%n%x%d$j$, 1)$$);

--
-- Holders: NULL is allowed; a 1 MB holder is refused (22023, at most 1024 bytes since 1.1).
--
SELECT pg_temp.try($$SELECT fence_claim('holder-null', '1 hour', NULL) IS NOT NULL$$);
SELECT pg_temp.try($$SELECT fence_claim('holder-big', '1 hour', repeat('h', 1048576)) IS NOT NULL$$);

--
-- Leases: NULL, zero, negative, mixed-sign, tiny, and absurdly large.
--
SELECT pg_temp.try($$SELECT fence_claim('lease-null', NULL)$$);
SELECT pg_temp.try($$SELECT fence_claim('lease-zero', '0')$$);
SELECT pg_temp.try($$SELECT fence_claim('lease-neg', '-1 second')$$);
SELECT pg_temp.try($$SELECT fence_claim('lease-mixed', '1 month -40 days')$$);
SELECT pg_temp.try($$SELECT fence_claim('lease-tiny', '1 microsecond') IS NOT NULL$$);
SELECT pg_temp.try($$SELECT fence_claim('lease-huge', '100000000 years')$$);
SELECT pg_temp.try($$SELECT fence_claim('lease-max', '2147483647 days 2562047788 hours')$$);
SELECT pg_temp.try($$SELECT fence_claim('lease-bad', 'soon')$$);
SELECT pg_temp.try($$SELECT fence_renew('bad-job', $$ || :tok || $$, NULL)$$);
SELECT pg_temp.try($$SELECT fence_renew('bad-job', $$ || :tok || $$, '0')$$);
SELECT pg_temp.try($$SELECT fence_renew('bad-job', $$ || :tok || $$, '-5 minutes')$$);
SELECT pg_temp.try($$SELECT fence_renew('bad-job', $$ || :tok || $$, '100000000 years')$$);
-- after all that, bad-job is still held with its one-hour lease
SELECT fence_current('bad-job') = :tok AS still_current;

--
-- Tokens: NULL, zero, negative, the extremes, never issued, wrong types.
--
SELECT pg_temp.try($$SELECT fence_begin('bad-job', NULL)$$);
SELECT pg_temp.try($$SELECT fence_begin('bad-job', 0)$$);
SELECT pg_temp.try($$SELECT fence_begin('bad-job', -1)$$);
SELECT pg_temp.try($$SELECT fence_begin('bad-job', -9223372036854775808)$$);
SELECT pg_temp.try($$SELECT fence_begin('bad-job', 9223372036854775807)$$);
SELECT pg_temp.try($$SELECT fence_renew('bad-job', 0)$$);
SELECT pg_temp.try($$SELECT fence_renew('bad-job', -1)$$);
SELECT pg_temp.try($$SELECT fence_renew('bad-job', NULL)$$);
SELECT pg_temp.try($$SELECT fence_renew('bad-job', 9223372036854775807)$$);
SELECT pg_temp.try($$SELECT fence_release('bad-job', 0)::text$$);
SELECT pg_temp.try($$SELECT fence_release('bad-job', -1)::text$$);
SELECT pg_temp.try($$SELECT fence_release('bad-job', NULL)::text$$);
SELECT pg_temp.try($$SELECT fence_release('bad-job', 9223372036854775807)::text$$);
SELECT pg_temp.try($$SELECT fence_is_current('bad-job', 0)::text$$);
SELECT pg_temp.try($$SELECT fence_is_current('bad-job', -1)::text$$);
SELECT pg_temp.try($$SELECT fence_is_current('bad-job', NULL)::text$$);
SELECT pg_temp.try($$SELECT fence_is_current('bad-job', 9223372036854775807)::text$$);
-- wrong types are refused by the parser before fence sees them
SELECT pg_temp.try($$SELECT fence_begin('bad-job', 'abc')$$);
SELECT pg_temp.try($$SELECT fence_begin('bad-job', 1.5)$$);
SELECT pg_temp.try($$SELECT fence_begin('bad-job', '99999999999999999999')$$);
SELECT pg_temp.try($$SELECT fence_claim(42)$$);
SELECT pg_temp.try($$SELECT fence_claim('bad-job', 42)$$);
SELECT pg_temp.try($$SELECT fence_claim('bad-job', '1 hour', 42)$$);
SELECT pg_temp.try($$SELECT fence_renew('bad-job', 'abc')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 42)$$);
SELECT pg_temp.try($$SELECT fence_protect(42.5)$$);
SELECT pg_temp.try($$SELECT fence_unprotect('bad', 'writer_epoch', 'strict')$$);
-- and bad-job's claim is untouched by all of it
SELECT fence_current('bad-job') = :tok AS still_current;

--
-- The epoch carried by a write: out of range, negative, NULL, wrong type.
--
SELECT pg_temp.try($$UPDATE bad SET v = 'x', writer_epoch = -1 WHERE id = 1 RETURNING 'written'$$);
SELECT pg_temp.try($$UPDATE bad SET v = 'x', writer_epoch = 9223372036854775807 WHERE id = 1 RETURNING 'written'$$);
SELECT pg_temp.try($$UPDATE bad SET v = 'x', writer_epoch = NULL WHERE id = 1 RETURNING 'written'$$);
SELECT pg_temp.try($$UPDATE bad SET v = 'x', writer_epoch = 'abc' WHERE id = 1 RETURNING 'written'$$);
SELECT pg_temp.try($$INSERT INTO bad VALUES (2, 'two', -5) RETURNING 'written'$$);
SELECT pg_temp.try($$INSERT INTO bad VALUES (2, 'two', 9223372036854775807) RETURNING 'written'$$);
SELECT pg_temp.try($$INSERT INTO bad VALUES (2, 'two', NULL) RETURNING 'written'$$);
SELECT pg_temp.try($$DELETE FROM bad WHERE id = 1 RETURNING 'deleted'$$);
SELECT id, v, writer_epoch IS NULL AS epoch_null FROM bad ORDER BY id;

--
-- fence_protect / fence_unprotect: bad tables, columns and modes.
--
SELECT pg_temp.try($$SELECT fence_protect(NULL)$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', NULL)$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'writer_epoch', NULL)$$);
SELECT pg_temp.try($$SELECT fence_protect(0)$$);
SELECT pg_temp.try($$SELECT fence_protect(4294967295)$$);
SELECT pg_temp.try($$SELECT fence_protect('no_such_table')$$);
SELECT pg_temp.try($$SELECT fence_protect($t$bad; DROP TABLE bad; --$t$)$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', '')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'no_such_column')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', $c$writer_epoch"; DROP TABLE bad; --$c$)$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', $c$writer_epoch', 'shared$c$)$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'v')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'id')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'xmin')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'ctid')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', repeat('c', 200))$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'writer_epoch', '')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'writer_epoch', 'STRICT')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'writer_epoch', $m$strict'); DROP TABLE bad; --$m$)$$);
SELECT pg_temp.try($$SELECT fence_protect('bad', 'writer_epoch', repeat('m', 1048576))$$);
SELECT pg_temp.try($$SELECT fence_unprotect(NULL)$$);
SELECT pg_temp.try($$SELECT fence_unprotect(0)$$);
SELECT pg_temp.try($$SELECT fence_unprotect('no_such_table')$$);
-- not tables
CREATE VIEW bad_view AS SELECT * FROM bad;
CREATE SEQUENCE bad_seq;
SELECT pg_temp.try($$SELECT fence_protect('bad_view')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad_seq')$$);
SELECT pg_temp.try($$SELECT fence_protect('bad_pkey')$$);
SELECT pg_temp.try($$SELECT fence_protect('pg_class', 'oid')$$);
-- fence's own registry is not a table to guard: a guard there would fence
-- the claims themselves (tried in a transaction that is rolled back)
BEGIN;
SELECT pg_temp.try($$SELECT fence_protect('fence_claims', 'token')$$);
SELECT left(pg_temp.try($$SELECT fence_claim('after-protecting-fence-claims') IS NOT NULL$$), 5) AS claim_after;
ROLLBACK;
-- after all that, bad is still protected exactly once, in strict mode
SELECT tgname, tgenabled, pg_get_triggerdef(oid) LIKE '%fence_guard(''writer_epoch'', ''strict'')' AS strict_guard
  FROM pg_trigger WHERE tgrelid = 'bad'::regclass ORDER BY tgname;

--
-- An injection-shaped table and column name that really exist: fence must
-- quote them, protect the table, and stamp the right column.
--
CREATE TABLE "we""ird; DROP TABLE bad; --" (id int PRIMARY KEY, "ep""och; --" bigint, "%s" text);
INSERT INTO "we""ird; DROP TABLE bad; --" VALUES (1, NULL, 'a');
SELECT fence_protect('"we""ird; DROP TABLE bad; --"', 'ep"och; --', 'repeat');
SELECT pg_temp.try($$UPDATE "we""ird; DROP TABLE bad; --" SET "%s" = 'b' RETURNING 'written'$$);
BEGIN;
SELECT fence_begin('bad-job', :tok);
UPDATE "we""ird; DROP TABLE bad; --" SET "%s" = 'b';
COMMIT;
SELECT id, "ep""och; --" = :tok AS stamped, "%s" FROM "we""ird; DROP TABLE bad; --";
-- TRUNCATE is refused with 5F005 (SQLSTATE only: the contract fixes it)
SELECT left(pg_temp.try($$TRUNCATE "we""ird; DROP TABLE bad; --"$$), 5) AS truncate_refused;
SELECT fence_unprotect('"we""ird; DROP TABLE bad; --"');
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgrelid = '"we""ird; DROP TABLE bad; --"'::regclass;
SELECT count(*) AS bad_still_there FROM bad;

--
-- The trigger functions called the wrong way.
--
SELECT pg_temp.try($$SELECT fence_guard()$$);
SELECT pg_temp.try($$SELECT fence_refuse_truncate()$$);
CREATE TABLE bad_trig (id int, writer_epoch bigint, small int);
INSERT INTO bad_trig VALUES (1, 0, 0);
-- hand-made guards with bad arguments: refused when they fire.  Since 1.1
-- CREATE TRIGGER itself refuses them (5F006, ddl_refused.sql), unless a
-- superuser's session declares its DDL: the guard's own checks still hold.
SELECT pg_temp.try($$CREATE TRIGGER zz_fence_guard BEFORE UPDATE ON bad_trig
  FOR EACH ROW EXECUTE FUNCTION fence_guard('no_such_column')$$);
SET fence.allow_ddl = on;
CREATE TRIGGER zz_fence_guard BEFORE UPDATE ON bad_trig
  FOR EACH ROW EXECUTE FUNCTION fence_guard('no_such_column');
SELECT pg_temp.try($$UPDATE bad_trig SET id = 2 RETURNING 'written'$$);
DROP TRIGGER zz_fence_guard ON bad_trig;
CREATE TRIGGER zz_fence_guard BEFORE UPDATE ON bad_trig
  FOR EACH ROW EXECUTE FUNCTION fence_guard('small');
SELECT pg_temp.try($$UPDATE bad_trig SET id = 2 RETURNING 'written'$$);
DROP TRIGGER zz_fence_guard ON bad_trig;
CREATE TRIGGER zz_fence_guard BEFORE UPDATE ON bad_trig
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'bogus');
SELECT pg_temp.try($$UPDATE bad_trig SET id = 2 RETURNING 'written'$$);
DROP TRIGGER zz_fence_guard ON bad_trig;
CREATE TRIGGER zz_fence_guard BEFORE UPDATE ON bad_trig
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'strict', 'extra');
SELECT pg_temp.try($$UPDATE bad_trig SET id = 2 RETURNING 'written'$$);
DROP TRIGGER zz_fence_guard ON bad_trig;
CREATE TRIGGER zz_fence_guard BEFORE UPDATE ON bad_trig
  FOR EACH ROW EXECUTE FUNCTION fence_guard('ctid');
SELECT pg_temp.try($$UPDATE bad_trig SET id = 2 RETURNING 'written'$$);
DROP TRIGGER zz_fence_guard ON bad_trig;
CREATE TRIGGER zz_fence_guard AFTER UPDATE ON bad_trig
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
SELECT pg_temp.try($$UPDATE bad_trig SET id = 2 RETURNING 'written'$$);
DROP TRIGGER zz_fence_guard ON bad_trig;
CREATE TRIGGER zz_fence_guard BEFORE UPDATE ON bad_trig
  FOR EACH STATEMENT EXECUTE FUNCTION fence_guard();
SELECT pg_temp.try($$UPDATE bad_trig SET id = 2 RETURNING 'written'$$);
DROP TRIGGER zz_fence_guard ON bad_trig;
RESET fence.allow_ddl;
SELECT * FROM bad_trig;

-- and TRUNCATE of the plain protected table, last: it is refused too
SELECT left(pg_temp.try($$TRUNCATE bad$$), 5) AS truncate_refused;

DROP VIEW bad_view;
DROP TABLE bad, bad_trig, "we""ird; DROP TABLE bad; --";
DROP SEQUENCE bad_seq;
DROP EXTENSION fence;
