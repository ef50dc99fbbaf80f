--
-- drop_owned: DROP OWNED BY the role that owns fence (or the schema fence
-- lives in) drops the extension, and with it every guard, the registry, the
-- counter and fence's own event triggers, which therefore never see the end
-- of the command.  It is refused at its start (5F006) while tables are
-- protected, as DROP EXTENSION fence and DROP SCHEMA ... CASCADE are.  The
-- twins: DROP OWNED BY a role that owns only a protected table drops the
-- table (recorded); once nothing is protected, DROP OWNED BY fence's owner
-- drops fence, as it did before with protected tables, taking their guards.
--
CREATE ROLE fence_regress_do_owner SUPERUSER;
CREATE ROLE fence_regress_do_nsp SUPERUSER;
CREATE ROLE fence_regress_do_app;
GRANT CREATE ON SCHEMA public TO fence_regress_do_app;
SET ROLE fence_regress_do_owner;
CREATE EXTENSION fence;
RESET ROLE;
\set VERBOSITY sqlstate
CREATE TABLE acct (id int, v int, writer_epoch bigint);
SELECT fence_protect('acct');

-- refused, with or without CASCADE, and naming the role among others
\set VERBOSITY default
DROP OWNED BY fence_regress_do_owner CASCADE;
\set VERBOSITY sqlstate
DROP OWNED BY fence_regress_do_owner;
\echo :SQLSTATE
DROP OWNED BY fence_regress_do_app, fence_regress_do_owner CASCADE;
\echo :SQLSTATE
BEGIN;
SET LOCAL ROLE fence_regress_do_owner;
DROP OWNED BY CURRENT_USER CASCADE;
\echo :SQLSTATE
ROLLBACK;
-- no declaration helps
BEGIN;
SELECT fence_allow_ddl('acct', 'drop fence');
DROP OWNED BY fence_regress_do_owner CASCADE;
\echo :SQLSTATE
ROLLBACK;
SELECT count(*) AS fence_installed FROM pg_extension WHERE extname = 'fence';
SELECT tgname FROM pg_trigger WHERE tgrelid = 'acct'::regclass ORDER BY 1;
INSERT INTO acct VALUES (1, 1, 0);
\echo :SQLSTATE

-- twin: a role that owns only a protected table: DROP OWNED drops it
SET ROLE fence_regress_do_app;
CREATE TABLE app_t (id int, writer_epoch bigint);
SELECT fence_protect('app_t');
RESET ROLE;
DROP OWNED BY fence_regress_do_app CASCADE;
SELECT action, relation FROM fence_audit_log WHERE action = 'drop' ORDER BY id;

-- the owner of fence's schema: the same refusal
DROP EXTENSION fence;
\echo :SQLSTATE
SELECT fence_unprotect('acct');
DROP EXTENSION fence;
CREATE SCHEMA fs AUTHORIZATION fence_regress_do_nsp;
CREATE EXTENSION fence SCHEMA fs;
SELECT fs.fence_protect('acct');
DROP OWNED BY fence_regress_do_nsp CASCADE;
\echo :SQLSTATE
SELECT count(*) AS fence_installed FROM pg_extension WHERE extname = 'fence';
-- REASSIGN OWNED gives fence's schema to another role: then the role's own
-- objects may go
REASSIGN OWNED BY fence_regress_do_nsp TO fence_regress_do_owner;
DROP OWNED BY fence_regress_do_nsp CASCADE;
SELECT count(*) AS fence_installed FROM pg_extension WHERE extname = 'fence';

-- twin: nothing protected, DROP OWNED BY fence's owner drops fence (and
-- would have dropped the guards with it)
SELECT fs.fence_unprotect('acct');
DROP OWNED BY fence_regress_do_owner CASCADE;
SELECT count(*) AS fence_installed FROM pg_extension WHERE extname = 'fence';
SELECT count(*) AS acct_triggers FROM pg_trigger WHERE tgrelid = 'acct'::regclass;

DROP TABLE acct;
REVOKE CREATE ON SCHEMA public FROM fence_regress_do_app;
DROP ROLE fence_regress_do_owner, fence_regress_do_nsp, fence_regress_do_app;
