--
-- hardening: fence's answers do not depend on grants a DBA may change, a
-- binding that cannot outlive its statement says so, and every 5F error
-- names the job where fence knows it.
--  (a) With SELECT on fence_token_seq and on fence_claims revoked from
--      PUBLIC, a plain role still gets the usual answers: 5F001 for a
--      superseded token from fence_begin, fence_renew and the guard, 5G002
--      for a token never issued, and the whole worker loop with a current
--      token. (1.0 answered 42501 wherever it read the counter to tell
--      superseded from never issued.)
--  (b) fence_begin outside a transaction block warns (25P01): its binding
--      ends with its own statement, so the next write has no token (5F003,
--      whose hint says why). Inside BEGIN, and in an implicit transaction
--      of several statements, no warning. In a function called in
--      autocommit it still warns, and the binding covers the function's
--      statement: the function's write lands.
--  (c) The primary message of a 5F001 names the job: from the guard for a
--      bound token, from fence_begin, from fence_renew, and from the guard
--      for a token in the statement whose claim was released. (A token in
--      the statement that a newer claim replaced is no longer in the
--      registry, so no job can be named.) Token numbers vary, so a helper
--      catches the error and prints its SQLSTATE and its message with every
--      number replaced by N.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_hardening;
-- the worker API is granted to no role until fence_grant_worker
SELECT fence_grant_worker('fence_regress_hardening');
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, writer_epoch bigint);
INSERT INTO acct VALUES (1, 100, NULL), (2, 200, NULL);
SELECT fence_protect('acct', 'writer_epoch', 'repeat');
GRANT SELECT, INSERT, UPDATE, DELETE ON acct TO fence_regress_hardening;

--
-- (a) A DBA hides the counter and the registry from PUBLIC.
--
REVOKE SELECT ON SEQUENCE fence_token_seq FROM PUBLIC;
REVOKE SELECT ON fence_claims FROM PUBLIC;
SELECT has_sequence_privilege('fence_regress_hardening', 'fence_token_seq', 'SELECT') AS counter_readable,
       has_table_privilege('fence_regress_hardening', 'fence_claims', 'SELECT') AS claims_readable;

SET ROLE fence_regress_hardening;
-- the role really cannot read them
SELECT last_value FROM fence_token_seq;
SELECT count(*) FROM fence_claims;
-- told: superseded by tnew after its lease expired
SELECT fence_claim('h-job', '1 millisecond', 'old') AS told \gset
SELECT pg_sleep(0.01);
SELECT fence_claim('h-job', '1 hour', 'new') AS tnew \gset
SELECT :tnew > :told AS taken_over;
SELECT fence_is_current('h-job', :told) AS told_current,
       fence_is_current('h-job', :tnew) AS tnew_current,
       fence_current('h-job') = :tnew AS current_is_tnew;
-- the superseded token: 5F001 everywhere (1.0: 42501)
BEGIN;
SELECT fence_begin('h-job', :told);
ROLLBACK;
SELECT fence_renew('h-job', :told);
UPDATE acct SET balance = balance - 1, writer_epoch = :told WHERE id = 1;
SELECT fence_release('h-job', :told) AS told_released;
-- a token never issued: 5G002 (1.0: 42501)
UPDATE acct SET balance = balance - 1, writer_epoch = :tnew + 1000 WHERE id = 1;
-- the current token works as usual: bound, in the statement, renewed
BEGIN;
SELECT fence_begin('h-job', :tnew);
UPDATE acct SET balance = balance - 1 WHERE id = 1;
COMMIT;
UPDATE acct SET balance = balance - 2, writer_epoch = :tnew WHERE id = 2;
SELECT fence_renew('h-job', :tnew, '2 hours') > now() + interval '1 hour' AS renewed;
SELECT id, balance, writer_epoch = :tnew AS stamped_tnew FROM acct ORDER BY id;
-- released: 5F001 for it too
SELECT fence_release('h-job', :tnew) AS tnew_released;
BEGIN;
SELECT fence_begin('h-job', :tnew);
ROLLBACK;
SELECT fence_renew('h-job', :tnew);
UPDATE acct SET balance = balance - 1, writer_epoch = :tnew WHERE id = 1;
SELECT fence_current('h-job') IS NULL AS no_current_claim;
RESET ROLE;

-- The grants as fence creates them.
GRANT SELECT ON fence_claims TO PUBLIC;
GRANT SELECT ON SEQUENCE fence_token_seq TO PUBLIC;
SELECT has_sequence_privilege('fence_regress_hardening', 'fence_token_seq', 'SELECT') AS counter_readable,
       has_table_privilege('fence_regress_hardening', 'fence_claims', 'SELECT') AS claims_readable;

--
-- (b) fence_begin in autocommit: a warning, and the binding is gone by the
-- next statement.
--
SELECT fence_claim('ac-job', '1 hour') AS tac \gset
SELECT fence_begin('ac-job', :tac);
UPDATE acct SET balance = balance + 1 WHERE id = 1;
-- inside a transaction block: no warning, and the binding holds
BEGIN;
SELECT fence_begin('ac-job', :tac);
UPDATE acct SET balance = balance + 1 WHERE id = 1;
COMMIT;
-- several statements in one query string run in one implicit transaction:
-- no warning, and the binding covers the write
SELECT fence_begin('ac-job', :tac) \; UPDATE acct SET balance = balance + 1 WHERE id = 1;
-- a function called in autocommit: the warning, and its write lands
CREATE FUNCTION pay(job text, token bigint, amount int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	b int;
BEGIN
	PERFORM fence_begin(job, token);
	UPDATE acct SET balance = balance + amount WHERE id = 2 RETURNING balance INTO b;
	RETURN b;
END
$$;
SELECT pay('ac-job', :tac, 10);
-- and inside BEGIN no warning
BEGIN;
SELECT pay('ac-job', :tac, 10);
COMMIT;
SELECT id, balance, writer_epoch = :tac AS stamped_tac FROM acct ORDER BY id;

-- The texts, once: the warning's primary message (its detail quotes the
-- token), and the 5F003 in full, whose hint says why the binding is gone.
\set VERBOSITY terse
SELECT fence_begin('ac-job', :tac);
\set VERBOSITY default
\set SHOW_CONTEXT never
UPDATE acct SET balance = balance + 1 WHERE id = 1;
\set VERBOSITY sqlstate
\set SHOW_CONTEXT errors

--
-- (c) Which job: the 5F001 messages.
--
CREATE FUNCTION pg_temp.fenced(stmt text) RETURNS TABLE (sqlstate text, message text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN QUERY SELECT 'no error'::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
	RETURN QUERY SELECT SQLSTATE::text, regexp_replace(SQLERRM, '[0-9]+', 'N', 'g');
END
$$;

-- m1: superseded by m2 after its lease expired
SELECT fence_claim('msg-job', '1 millisecond') AS m1 \gset
SELECT pg_sleep(0.01);
SELECT fence_claim('msg-job', '1 hour') AS m2 \gset
-- fence_begin and fence_renew of the superseded token
BEGIN;
SELECT * FROM pg_temp.fenced(format('SELECT fence_begin(%L, %s)', 'msg-job', :m1));
SELECT * FROM pg_temp.fenced(format('SELECT fence_renew(%L, %s)', 'msg-job', :m1));
COMMIT;
-- the guard, for a bound token that this transaction's own takeover superseded
SELECT fence_claim('msg-bound', '1 millisecond') AS b1 \gset
SELECT pg_sleep(0.01);
BEGIN;
SELECT fence_begin('msg-bound', :b1);
SELECT fence_claim('msg-bound', '1 hour') > :b1 AS taken_over;
SELECT * FROM pg_temp.fenced('UPDATE acct SET balance = 0 WHERE id = 1');
ROLLBACK;
-- the guard, for a bound token whose claim this transaction released
BEGIN;
SELECT fence_begin('msg-job', :m2);
SELECT fence_release('msg-job', :m2) AS released;
SELECT * FROM pg_temp.fenced('UPDATE acct SET balance = 0 WHERE id = 1');
ROLLBACK;
-- the guard, for a token in the statement whose claim was released: the
-- registry still names its job
SELECT fence_claim('msg-rel', '1 hour') AS r1 \gset
SELECT fence_release('msg-rel', :r1) AS released;
SELECT * FROM pg_temp.fenced(format('UPDATE acct SET balance = 0, writer_epoch = %s WHERE id = 1', :r1));
-- the guard, for a token in the statement that a newer claim replaced: the
-- registry no longer holds it, so no job can be named
SELECT * FROM pg_temp.fenced(format('UPDATE acct SET balance = 0, writer_epoch = %s WHERE id = 1', :m1));
SELECT balance FROM acct WHERE id = 1;

DROP FUNCTION pay(text, bigint, int);
DROP TABLE acct;
DROP EXTENSION fence;
DROP ROLE fence_regress_hardening;
