--
-- audit_intact: fence_audit() and the end of every DDL command share one
-- definition of "protected" (intact.c).
--   1. Each property of the definition that sql/audit.sql does not reach,
--      broken by a declared DDL command (fence.allow_ddl, as a superuser),
--      is one fence_audit row on that table, and its twin (the same table
--      left as fence_protect made it) has none; the fix the row gives is
--      run, and the row is gone:
--      unlogged; the epoch column with a default other than 0, as an
--      identity column, generated; fence's UPDATE check with transition
--      tables; a guard depending on an extension; in the after form, a
--      foreign key whose action updates rows (its twin: ON DELETE
--      CASCADE); a child registered with another mode than its tree.
--   2. fence's event triggers: while one is disabled, ENABLE REPLICA or
--      missing, a DDL command that touches a protected table is refused
--      with 5F006 (ALTER EVENT TRIGGER itself fires no event trigger);
--      its twin on an unprotected table lands; declared, it lands;
--      fence_protect, fence_unprotect and DROP TABLE still work; repaired,
--      the same command lands.  fence_audit reports the event triggers.
--   3. fence_audit runs as its caller and runs no function of a table's
--      owner: an epoch column's default that calls one is reported, not
--      evaluated (a superuser's audit would run it as the superuser); its
--      twin, evaluated by the owner, says whom it runs as.
--
CREATE EXTENSION fence;
\set VERBOSITY default

-- fence_audit's rows in a fixed order, relations by name.
CREATE FUNCTION audit_rows()
RETURNS TABLE (severity text, relation text, problem text, fix text)
LANGUAGE sql AS $$
	SELECT a.severity, a.relation::text, a.problem, a.fix
	  FROM fence_audit() a
	 ORDER BY a.severity COLLATE "C", a.relation::text COLLATE "C" NULLS FIRST,
	          a.problem COLLATE "C"
$$;

-- Each table has a twin, protected alike, that stays as fence_protect made it.
CREATE TABLE u_bad (id int, writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE u_twin (LIKE u_bad INCLUDING ALL);
CREATE TABLE d_bad (LIKE u_bad INCLUDING ALL);
CREATE TABLE d_twin (LIKE u_bad INCLUDING ALL);
CREATE TABLE i_bad (LIKE u_bad INCLUDING ALL);
CREATE TABLE i_twin (LIKE u_bad INCLUDING ALL);
CREATE TABLE g_bad (LIKE u_bad INCLUDING ALL);
CREATE TABLE g_twin (LIKE u_bad INCLUDING ALL);
CREATE TABLE x_bad (LIKE u_bad INCLUDING ALL);
CREATE TABLE x_twin (LIKE u_bad INCLUDING ALL);
CREATE TABLE t_bad (LIKE u_bad INCLUDING ALL);
CREATE TABLE t_twin (LIKE u_bad INCLUDING ALL);
CREATE TABLE fk_parent (pid int PRIMARY KEY);
CREATE TABLE f_bad (id int, pid int, writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE f_twin (LIKE f_bad INCLUDING ALL);
CREATE TABLE lp (id int, writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE lp_bad () INHERITS (lp);
CREATE TABLE lp_twin () INHERITS (lp);
SELECT fence_protect(t) FROM unnest(ARRAY['u_bad', 'u_twin', 'd_bad', 'd_twin',
	'i_bad', 'i_twin', 'g_bad', 'g_twin', 'x_bad', 'x_twin', 'lp']::regclass[]) t;
SELECT fence_protect(t, form => 'after')
  FROM unnest(ARRAY['t_bad', 't_twin', 'f_bad', 'f_twin']::regclass[]) t;
ALTER TABLE f_twin ADD FOREIGN KEY (pid) REFERENCES fk_parent ON DELETE CASCADE;
SELECT * FROM audit_rows();

--
-- 1. Broken by declared DDL, one at a time: one row each, none on the twins.
--
SET fence.allow_ddl = on;
ALTER TABLE u_bad SET UNLOGGED;
ALTER TABLE d_bad ALTER COLUMN writer_epoch SET DEFAULT 7;
ALTER TABLE i_bad ALTER COLUMN writer_epoch DROP DEFAULT;
ALTER TABLE i_bad ALTER COLUMN writer_epoch ADD GENERATED ALWAYS AS IDENTITY;
ALTER TABLE g_bad DROP COLUMN writer_epoch;
ALTER TABLE g_bad ADD COLUMN writer_epoch bigint GENERATED ALWAYS AS (0) STORED;
ALTER TRIGGER zz_fence_guard ON x_bad DEPENDS ON EXTENSION plpgsql;
DROP TRIGGER zz_fence_guard_update ON t_bad;
CREATE TRIGGER zz_fence_guard_update AFTER UPDATE ON t_bad
	REFERENCING NEW TABLE AS nt FOR EACH ROW
	WHEN (NOT fence_update_allowed(NEW.writer_epoch, OLD.writer_epoch, NEW.tableoid, 'writer_epoch', 'strict'))
	EXECUTE FUNCTION fence_guard_after('writer_epoch', 'strict');
ALTER TABLE t_bad ENABLE ALWAYS TRIGGER zz_fence_guard_update;
ALTER TABLE f_bad ADD CONSTRAINT f_bad_pid FOREIGN KEY (pid) REFERENCES fk_parent ON UPDATE CASCADE;
-- a child with its own guard and registry row in another mode than its tree's
DROP TRIGGER zz_fence_guard ON lp_bad;
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON lp_bad
	FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'shared');
ALTER TABLE lp_bad ENABLE ALWAYS TRIGGER zz_fence_guard;
RESET fence.allow_ddl;
UPDATE fence_protected SET mode = 'shared' WHERE relation = 'lp_bad'::regclass;
SELECT * FROM audit_rows();

-- Each fix, as the row gives it.
ALTER TABLE public.u_bad SET LOGGED;
ALTER TABLE public.d_bad ALTER COLUMN writer_epoch SET DEFAULT 0;
ALTER TABLE public.i_bad ALTER COLUMN writer_epoch DROP IDENTITY;
ALTER TABLE public.g_bad ALTER COLUMN writer_epoch DROP EXPRESSION;
ALTER TRIGGER zz_fence_guard ON public.x_bad NO DEPENDS ON EXTENSION plpgsql;
SELECT fence_protect('public.t_bad', 'writer_epoch', 'strict', form => 'after');
ALTER TABLE f_bad DROP CONSTRAINT f_bad_pid;
SELECT fence_protect('public.lp', 'writer_epoch', 'strict');
SELECT * FROM audit_rows();
SELECT relation::text, mode FROM fence_protected
 WHERE relation IN ('lp'::regclass, 'lp_bad'::regclass, 'lp_twin'::regclass)
 ORDER BY relation::text COLLATE "C";

--
-- 2. fence's event triggers.
--
CREATE TABLE plain (id int);
-- disabled: DDL on a protected table is refused, on a plain one it lands
ALTER EVENT TRIGGER fence_sql_drop DISABLE;
ALTER TABLE u_twin ADD COLUMN note text;
\echo :SQLSTATE
ALTER TABLE plain ADD COLUMN note text;
-- ENABLE REPLICA: refused too, naming the first one found
ALTER EVENT TRIGGER fence_table_rewrite ENABLE REPLICA;
ALTER TABLE u_twin ADD COLUMN note text;
ALTER EVENT TRIGGER fence_sql_drop ENABLE ALWAYS;
ALTER TABLE u_twin ADD COLUMN note text;
ALTER EVENT TRIGGER fence_table_rewrite ENABLE ALWAYS;
-- missing
ALTER EXTENSION fence DROP EVENT TRIGGER fence_table_rewrite;
DROP EVENT TRIGGER fence_table_rewrite;
ALTER TABLE u_twin ADD COLUMN note text;
SELECT * FROM audit_rows();
-- declared, it lands, and the declaration is recorded
BEGIN;
SELECT fence_allow_ddl('u_twin', 'test: event trigger missing');
ALTER TABLE u_twin ADD COLUMN note text;
COMMIT;
SELECT action, relation, reason FROM fence_audit_log
 WHERE action = 'allow_ddl' ORDER BY id DESC LIMIT 1;
-- fence_protect, fence_unprotect and DROP TABLE still work
SELECT fence_protect('d_twin');
SELECT fence_unprotect('d_twin', 'test');
DROP TABLE d_twin;
-- repaired as the audit says: the same command lands
CREATE EVENT TRIGGER fence_table_rewrite ON table_rewrite EXECUTE FUNCTION public.fence_table_rewrite(); ALTER EVENT TRIGGER fence_table_rewrite ENABLE ALWAYS; ALTER EXTENSION fence ADD EVENT TRIGGER fence_table_rewrite;
ALTER TABLE u_twin ADD COLUMN note2 text;
SELECT * FROM audit_rows();

--
-- 3. A default that calls the owner's function is not run by the audit.
--
CREATE ROLE fence_regress_ai_owner;
GRANT CREATE ON SCHEMA public TO fence_regress_ai_owner;
SET ROLE fence_regress_ai_owner;
CREATE FUNCTION ai_trojan() RETURNS bigint IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
	RAISE NOTICE 'ai_trojan ran as %', current_user;
	RETURN 0;
END $$;
CREATE TABLE tr (id int, writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('tr');
BEGIN;
SELECT fence_allow_ddl('tr', 'test: a default calling a function');
ALTER TABLE tr ALTER COLUMN writer_epoch SET DEFAULT ai_trojan();
COMMIT;
-- twin: the function runs when it is called, as whoever calls it
SELECT ai_trojan();
RESET ROLE;
SELECT * FROM audit_rows();
SET ROLE fence_regress_ai_owner;
DROP TABLE tr;
DROP FUNCTION ai_trojan();
RESET ROLE;
REVOKE CREATE ON SCHEMA public FROM fence_regress_ai_owner;
DROP ROLE fence_regress_ai_owner;

--
-- Clean up.
--
DROP TABLE u_bad, u_twin, d_bad, i_bad, i_twin, g_bad, g_twin, x_bad, x_twin,
	t_bad, t_twin, f_bad, f_twin, fk_parent, lp, lp_bad, lp_twin, plain;
DROP FUNCTION audit_rows();
DROP EXTENSION fence;
