--
-- ddl_declared: the only ways to run refused DDL on a protected table are
-- declared, and each is recorded in fence_audit_log.
--   1. fence_allow_ddl(tbl, reason), by the table's owner (or a member of
--      the owning role, or a superuser), lets that table's refused DDL
--      through for the rest of the transaction, and records an allow_ddl
--      row (role = current_user, action, relation, reason, this xid).
--      Not after the transaction, not for another table, not after ROLLBACK
--      TO SAVEPOINT (RELEASE keeps it); in autocommit it warns 25P01 and
--      covers its own statement only.
--   2. Its argument errors: NULL (22004), empty reason (22023), a table that
--      is not protected (42704), not the owner (42501).
--   3. The setting fence.allow_ddl (superuser only: a plain role's SET,
--      SET LOCAL or set_config fails with 42501; in a fresh session, before
--      fence's library is loaded, the value is discarded with a 42501
--      warning when it loads, and the DDL stays refused) lets refused DDL
--      through for the session; each table is recorded once
--      (allow_ddl_setting), and a DDL rolled back leaves the table to be
--      recorded by the next one. Also as a connection option, as a restore
--      run with PGOPTIONS would set it; a new session records again.
--   4. A pg_restore --disable-triggers flow, declared either way: DISABLE
--      TRIGGER ALL, COPY and INSERT without a token, ENABLE TRIGGER ALL.
--      Afterwards fence's triggers are ENABLE ALWAYS again and a write
--      without a token is refused (5F003).
--   5. The audit log and the registry cannot be written by the owner.
-- Timestamps are not shown. The superuser's name depends on the
-- installation, so audit rows show "(superuser)" for the session user.
--
-- Token values vary from run to run: they are kept in psql variables and
-- compared, never printed.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_decl_owner;
CREATE ROLE fence_regress_decl_member IN ROLE fence_regress_decl_owner;
CREATE ROLE fence_regress_decl_other;
-- the worker API is granted to no role until fence_grant_worker
SELECT fence_grant_worker('fence_regress_decl_owner');
SELECT fence_grant_worker('fence_regress_decl_member');
SELECT fence_grant_worker('fence_regress_decl_other');
GRANT CREATE ON SCHEMA public TO fence_regress_decl_owner;

-- The audit rows written since the last call.
CREATE TABLE audit_mark (id bigint NOT NULL);
INSERT INTO audit_mark VALUES (0);
GRANT SELECT, UPDATE ON audit_mark TO PUBLIC;
CREATE FUNCTION audit_new()
RETURNS TABLE (role text, action text, relation text, reason text)
LANGUAGE sql AS $$
  WITH seen AS (SELECT m.id FROM audit_mark m),
       moved AS (UPDATE audit_mark SET id = coalesce((SELECT max(l.id) FROM fence_audit_log l), 0))
  SELECT CASE WHEN l.role = session_user THEN '(superuser)' ELSE l.role::text END,
         l.action, l.relation, l.reason
    FROM fence_audit_log l, seen
   WHERE l.id > seen.id
   ORDER BY l.id
$$;
-- fence's triggers on a table, and whether it is in the registry.
CREATE FUNCTION fence_state(tbl regclass)
RETURNS TABLE (tgname name, fn text, tgenabled "char", registry text)
LANGUAGE sql STABLE AS $$
  SELECT t.tgname, t.tgfoid::regproc::text, t.tgenabled,
         (SELECT p.epoch_column::text || ' ' || p.mode FROM fence_protected p WHERE p.relation = tbl)
    FROM pg_trigger t
   WHERE t.tgrelid = tbl AND NOT t.tgisinternal
   ORDER BY t.tgname
$$;
CREATE FUNCTION noop_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE FUNCTION noop_stmt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;

SET ROLE fence_regress_decl_owner;
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, note text,
                   writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO acct VALUES (1, 100, 'one'), (2, 200, 'two');
SELECT fence_protect('acct');
CREATE TABLE acct2 (LIKE acct INCLUDING ALL);
SELECT fence_protect('acct2');
CREATE TABLE acct3 (LIKE acct INCLUDING ALL);
SELECT fence_protect('acct3');
CREATE TABLE acct4 (LIKE acct INCLUDING ALL);
SELECT fence_protect('acct4');
CREATE TABLE acct_plain (LIKE acct INCLUDING ALL);
CREATE TABLE ev (region text NOT NULL, id int NOT NULL, v text, writer_epoch bigint)
  PARTITION BY LIST (region);
CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu');
SELECT fence_protect('ev');
CREATE TABLE ev_fill (LIKE ev);
INSERT INTO ev_fill VALUES ('fill', 1, 'unchecked', NULL);
CREATE TABLE lp (id int, v text, writer_epoch bigint);
SELECT fence_protect('lp');
CREATE TABLE lk (LIKE lp);
INSERT INTO lk VALUES (1, 'unchecked', NULL);
SELECT fence_claim('ddl-declared', '1 hour') AS tk \gset
UPDATE acct SET writer_epoch = :tk;
RESET ROLE;
-- fence_protect records each table it protects
SELECT * FROM audit_new();

--
-- 1. fence_allow_ddl lets each refused DDL through, for the rest of the
-- transaction.
--
SET ROLE fence_regress_decl_owner;
-- the triggers (rolled back afterwards)
BEGIN;
SELECT fence_allow_ddl('acct', 'fixture load');
SELECT * FROM audit_new();
SELECT xid = pg_current_xact_id() AS this_transaction
  FROM fence_audit_log ORDER BY id DESC LIMIT 1;
ALTER TABLE acct DISABLE TRIGGER zz_fence_guard;
ALTER TABLE acct DISABLE TRIGGER zz_fence_truncate;
ALTER TABLE acct DISABLE TRIGGER ALL;
ALTER TABLE acct DISABLE TRIGGER USER;
ALTER TABLE acct ENABLE TRIGGER zz_fence_guard;
ALTER TABLE acct ENABLE REPLICA TRIGGER zz_fence_truncate;
SELECT * FROM fence_state('acct');
ALTER TRIGGER zz_fence_guard ON acct RENAME TO zz_fence_guard_old;
CREATE OR REPLACE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON acct
  FOR EACH STATEMENT EXECUTE FUNCTION noop_stmt();
CREATE TRIGGER aa_guard AFTER UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION fence_guard();
SELECT * FROM fence_state('acct');
DROP TRIGGER zz_fence_guard_old ON acct;
DROP TRIGGER zz_fence_truncate ON acct;
DROP TRIGGER aa_guard ON acct;
CREATE RULE acct_nothing AS ON DELETE TO acct DO INSTEAD NOTHING;
SELECT * FROM fence_state('acct');
SELECT count(*) AS rules FROM pg_rewrite WHERE ev_class = 'acct'::regclass;
-- with the guard gone, a write without a token lands (in this transaction)
UPDATE acct SET balance = 0 WHERE id = 1;
SELECT id, balance FROM acct ORDER BY id;
-- what else was recorded in the transaction
SELECT * FROM audit_new();
ROLLBACK;
SELECT * FROM fence_state('acct');
-- the columns and persistence (rolled back afterwards)
BEGIN;
SELECT fence_allow_ddl('acct', 'migration 0007');
ALTER TABLE acct ALTER COLUMN balance TYPE bigint USING balance * 10;
ALTER TABLE acct ALTER COLUMN note TYPE text USING upper(note);
ALTER TABLE acct ALTER COLUMN writer_epoch SET DEFAULT 42;
ALTER TABLE acct ALTER COLUMN writer_epoch TYPE bigint USING 0;
ALTER TABLE acct SET UNLOGGED;
SELECT id, balance, note, writer_epoch FROM acct ORDER BY id;
SELECT relpersistence FROM pg_class WHERE oid = 'acct'::regclass;
ALTER TABLE acct RENAME COLUMN writer_epoch TO old_epoch;
ALTER TABLE acct DROP COLUMN old_epoch;
SELECT attname FROM pg_attribute WHERE attrelid = 'acct'::regclass AND attnum > 0 AND NOT attisdropped
 ORDER BY attnum;
ROLLBACK;
SELECT id, balance, note, writer_epoch = :tk AS epoch_is_tk FROM acct ORDER BY id;
-- ATTACH / INHERIT of a non-empty table, an unlogged partition (rolled back)
BEGIN;
SELECT fence_allow_ddl('ev', 'adopt legacy rows');
ALTER TABLE ev ATTACH PARTITION ev_fill FOR VALUES IN ('fill');
CREATE UNLOGGED TABLE ev_tmp PARTITION OF ev FOR VALUES IN ('tmp');
SELECT tableoid::regclass AS part, region, id, v FROM ev ORDER BY region, id;
SELECT fence_allow_ddl('lp', 'adopt legacy child');
ALTER TABLE lk INHERIT lp;
SELECT tableoid::regclass AS child, id, v FROM lp;
SELECT * FROM audit_new();
ROLLBACK;

-- committed: a migration's type change, recorded
BEGIN;
SELECT fence_allow_ddl('acct', 'migration 0008: balance to bigint');
ALTER TABLE acct ALTER COLUMN balance TYPE bigint USING balance::bigint;
COMMIT;
SELECT * FROM audit_new();
SELECT format_type(atttypid, atttypmod) AS balance_type FROM pg_attribute
 WHERE attrelid = 'acct'::regclass AND attname = 'balance';
-- the table is as protected as before
SELECT * FROM fence_state('acct');
UPDATE acct SET balance = 0;

-- not after the transaction
ALTER TABLE acct ALTER COLUMN balance TYPE int USING balance::int;
ALTER TABLE acct DISABLE TRIGGER ALL;
-- not for another table
BEGIN;
SELECT fence_allow_ddl('acct', 'only acct');
ALTER TABLE acct2 DISABLE TRIGGER ALL;
ROLLBACK;
BEGIN;
SELECT fence_allow_ddl('acct', 'only acct');
ALTER TABLE acct3 ALTER COLUMN note TYPE text USING 'x';
ROLLBACK;
-- not after ROLLBACK TO SAVEPOINT: the declaration, and its row, are undone
BEGIN;
SAVEPOINT s1;
SELECT fence_allow_ddl('acct', 'undone');
ROLLBACK TO SAVEPOINT s1;
SELECT * FROM audit_new();
ALTER TABLE acct DISABLE TRIGGER ALL;
ROLLBACK;
-- ... nor when the declaration's subtransaction failed
BEGIN;
SAVEPOINT s1;
SELECT fence_allow_ddl('acct', 'undone by an error');
SELECT 1 / 0;
ROLLBACK TO SAVEPOINT s1;
ALTER TABLE acct DISABLE TRIGGER ALL;
ROLLBACK;
-- RELEASE SAVEPOINT keeps it (the twin)
BEGIN;
SAVEPOINT s1;
SELECT fence_allow_ddl('acct', 'kept');
RELEASE SAVEPOINT s1;
ALTER TABLE acct DISABLE TRIGGER ALL;
SELECT * FROM fence_state('acct');
ROLLBACK;
-- a declaration made before a savepoint survives the savepoint's rollback
BEGIN;
SELECT fence_allow_ddl('acct', 'outer');
SAVEPOINT s1;
ALTER TABLE acct DISABLE TRIGGER ALL;
ROLLBACK TO SAVEPOINT s1;
ALTER TABLE acct DISABLE TRIGGER zz_fence_guard;
SELECT * FROM fence_state('acct');
ROLLBACK;
-- in autocommit: a warning (25P01), and the next statement is refused
SELECT fence_allow_ddl('acct', 'autocommit');
ALTER TABLE acct DISABLE TRIGGER ALL;
SELECT * FROM audit_new();
RESET ROLE;
SELECT * FROM fence_state('acct');

-- a member of the owning role may declare
SET ROLE fence_regress_decl_member;
BEGIN;
SELECT fence_allow_ddl('acct', 'by a member');
ALTER TABLE acct DISABLE TRIGGER zz_fence_guard;
SELECT * FROM audit_new();
ROLLBACK;
-- and so may a superuser
RESET ROLE;
BEGIN;
SELECT fence_allow_ddl('acct', 'by a superuser');
ALTER TABLE acct DISABLE TRIGGER zz_fence_guard;
SELECT * FROM audit_new();
ROLLBACK;

--
-- 2. fence_allow_ddl's argument errors.
--
SET ROLE fence_regress_decl_owner;
BEGIN;
SELECT fence_allow_ddl(NULL, 'reason');
ROLLBACK;
BEGIN;
SELECT fence_allow_ddl('acct', NULL);
ROLLBACK;
BEGIN;
SELECT fence_allow_ddl('acct', '');
ROLLBACK;
BEGIN;
SELECT fence_allow_ddl('acct_plain', 'not protected');
ROLLBACK;
BEGIN;
SELECT fence_allow_ddl('no_such_table', 'no table');
ROLLBACK;
-- a role that neither owns the table nor is a member of its owner
GRANT ALL ON acct TO fence_regress_decl_other;
SET ROLE fence_regress_decl_other;
BEGIN;
SELECT fence_allow_ddl('acct', 'not mine');
ROLLBACK;
RESET ROLE;
-- nothing was recorded by the failed calls
SELECT * FROM audit_new();
SELECT * FROM fence_state('acct');

--
-- 3. The setting fence.allow_ddl.
--
-- not for a role that is not a superuser: SET, SET LOCAL, set_config
SET ROLE fence_regress_decl_owner;
SET fence.allow_ddl = on;
BEGIN;
SET LOCAL fence.allow_ddl = on;
ROLLBACK;
SELECT set_config('fence.allow_ddl', 'on', false);
SHOW fence.allow_ddl;
ALTER TABLE acct DISABLE TRIGGER ALL;
RESET ROLE;
SHOW fence.allow_ddl;
-- a superuser's session: each table is recorded once
SET fence.allow_ddl = on;
ALTER TABLE acct DISABLE TRIGGER ALL;
ALTER TABLE acct ENABLE TRIGGER ALL;
ALTER TABLE acct ALTER COLUMN note TYPE text USING note;
ALTER TABLE acct2 ALTER COLUMN balance TYPE bigint USING balance::bigint;
ALTER TABLE acct2 ALTER COLUMN balance TYPE int USING balance::int;
SELECT * FROM audit_new();
-- a DDL that is rolled back leaves no row, and the next one is recorded
BEGIN;
ALTER TABLE acct3 ALTER COLUMN note TYPE text USING note;
ROLLBACK;
ALTER TABLE acct3 ALTER COLUMN note TYPE text USING note;
SELECT * FROM audit_new();
RESET fence.allow_ddl;
ALTER TABLE acct DISABLE TRIGGER ALL;
SELECT * FROM fence_state('acct');
SELECT * FROM fence_state('acct2');
-- as SET LOCAL, only for the transaction
BEGIN;
SET LOCAL fence.allow_ddl = on;
ALTER TABLE acct DISABLE TRIGGER zz_fence_guard;
ROLLBACK;
ALTER TABLE acct DISABLE TRIGGER zz_fence_guard;

-- a fresh session, before fence's library is loaded: a plain role's SET
-- is taken as a placeholder, discarded (42501 warning) when the library
-- loads, and the DDL stays refused
\c
SET ROLE fence_regress_decl_owner;
SET fence.allow_ddl = on;
ALTER TABLE acct DISABLE TRIGGER ALL;
SHOW fence.allow_ddl;
RESET ROLE;
SELECT * FROM fence_state('acct');

--
-- 4. pg_restore --disable-triggers, declared.
--
-- in one transaction, with fence_allow_ddl, as the owner
SET ROLE fence_regress_decl_owner;
BEGIN;
SELECT fence_allow_ddl('acct', 'reload from backup');
ALTER TABLE acct DISABLE TRIGGER ALL;
COPY acct (id, balance, note) FROM stdin;
10	1000	copied
11	1100	copied
\.
INSERT INTO acct (id, balance, note) VALUES (12, 1200, 'inserted');
ALTER TABLE acct ENABLE TRIGGER ALL;
COMMIT;
SELECT * FROM audit_new();
SELECT id, balance, note, writer_epoch FROM acct WHERE id >= 10 ORDER BY id;
-- fence's triggers are ENABLE ALWAYS again, and they guard
SELECT * FROM fence_state('acct');
INSERT INTO acct (id, balance, note) VALUES (13, 1300, 'no token');
UPDATE acct SET balance = 0 WHERE id = 10;
COPY acct (id, balance, note) FROM stdin;
14	1400	no token
\.
TRUNCATE acct;
-- a token still works
UPDATE acct SET balance = 1001, writer_epoch = :tk WHERE id = 10;
SELECT id, balance, writer_epoch = :tk AS epoch_is_tk FROM acct WHERE id >= 10 ORDER BY id;
RESET ROLE;
SET session_replication_role = replica;
INSERT INTO acct (id, balance, note) VALUES (13, 1300, 'no token');
RESET session_replication_role;

-- statement by statement in autocommit, with the setting, as a superuser
SET fence.allow_ddl = on;
ALTER TABLE acct4 DISABLE TRIGGER ALL;
COPY acct4 (id, balance, note) FROM stdin;
40	4000	copied
\.
ALTER TABLE acct4 ENABLE TRIGGER ALL;
RESET fence.allow_ddl;
SELECT * FROM audit_new();
SELECT * FROM fence_state('acct4');
INSERT INTO acct4 (id, balance, note) VALUES (41, 4100, 'no token');
TRUNCATE acct4;
SELECT id, balance, note FROM acct4 ORDER BY id;

-- the setting as a connection option (PGOPTIONS='-c fence.allow_ddl=on'):
-- a new session, so acct3 is recorded again
\c -reuse-previous=on "options='-c fence.allow_ddl=on'"
ALTER TABLE acct3 DISABLE TRIGGER ALL;
COPY acct3 (id, balance, note) FROM stdin;
30	3000	copied
\.
ALTER TABLE acct3 ENABLE TRIGGER ALL;
SHOW fence.allow_ddl;
SELECT * FROM audit_new();
SELECT * FROM fence_state('acct3');
-- a new session without the option: refused again
\c -reuse-previous=on "options=''"
INSERT INTO acct3 (id, balance, note) VALUES (31, 3100, 'no token');
SHOW fence.allow_ddl;
ALTER TABLE acct3 DISABLE TRIGGER ALL;
SELECT id, balance, note FROM acct3 ORDER BY id;

--
-- 5. The owner cannot write the audit log or the registry; anyone may
-- read them.
--
SET ROLE fence_regress_decl_owner;
INSERT INTO fence_audit_log (action, relation, reason) VALUES ('allow_ddl', 'public.acct', 'forged');
UPDATE fence_audit_log SET reason = 'rewritten';
DELETE FROM fence_audit_log;
TRUNCATE fence_audit_log;
INSERT INTO fence_protected VALUES ('acct_plain', 'writer_epoch', 'strict');
UPDATE fence_protected SET mode = 'shared';
DELETE FROM fence_protected;
SELECT count(*) > 0 AS audit_readable FROM fence_audit_log;
SELECT relation::text, epoch_column, mode FROM fence_protected ORDER BY 1;
RESET ROLE;

--
-- Clean up.
--
SET ROLE fence_regress_decl_owner;
DROP TABLE acct, acct2, acct3, acct4, acct_plain, ev, ev_fill, lp, lk;
RESET ROLE;
DROP TABLE audit_mark;
DROP FUNCTION audit_new(), fence_state(regclass), noop_row(), noop_stmt();
DROP EXTENSION fence;
DROP OWNED BY fence_regress_decl_owner;
REVOKE CREATE ON SCHEMA public FROM fence_regress_decl_owner;
DROP ROLE fence_regress_decl_member;
DROP ROLE fence_regress_decl_other;
DROP ROLE fence_regress_decl_owner;
