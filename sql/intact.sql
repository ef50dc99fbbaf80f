--
-- intact: protection is an invariant.  At the end of every DDL command,
-- each protected relation the command touched (and every relation above
-- and below it in its tree) must still be what fence_protect makes it
-- (intact.c), or the whole command is rolled back with 5F006.  Declared
-- (fence_allow_ddl), the command lands and the declaration is in
-- fence_audit_log.  Each refusal is followed by a write that shows the
-- table still guarded, and each has a twin: the same command on a table
-- fence does not protect lands, and a write with no token lands after it.
--
-- The commands here are those a prediction at ddl_command_start did not
-- see: CREATE SCHEMA elements, a parent's ALTER recursing into a protected
-- partition, ALTER TRIGGER ... DEPENDS ON EXTENSION and the DROP EXTENSION
-- it arms, re-creating fence's UPDATE check weaker, a generated epoch
-- column, a table joining a tree protected differently, foreign keys whose
-- cascades the after form cannot check.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint);
INSERT INTO tok SELECT 'a', fence_claim('intact-a', '1 hour');
CREATE FUNCTION audit_since(after bigint)
RETURNS TABLE (action text, relation text, reason text) LANGUAGE sql AS $$
	SELECT l.action, l.relation, l.reason FROM fence_audit_log l
	 WHERE l.id > after ORDER BY l.id
$$;
SELECT coalesce(max(id), 0) AS audit0 FROM fence_audit_log \gset

--
-- 1. CREATE SCHEMA with elements: a child of a protected table carrying a
--    fake guard (BEFORE INSERT only, WHEN (false)).
--
CREATE TABLE lp (id int, v text, writer_epoch bigint);
SELECT fence_protect('lp');
CREATE SCHEMA s1
	CREATE TABLE c () INHERITS (public.lp)
	CREATE TRIGGER zz_fence_guard BEFORE INSERT ON c FOR EACH ROW WHEN (false)
		EXECUTE FUNCTION public.fence_guard();
\echo :SQLSTATE
SELECT count(*) AS schema_s1 FROM pg_namespace WHERE nspname = 's1';
INSERT INTO lp VALUES (1, 'no token', 0);
\echo :SQLSTATE
-- twin: under an unprotected parent the same schema lands, and so does a
-- tokenless write through it
CREATE TABLE lp_plain (id int, v text, writer_epoch bigint);
CREATE SCHEMA s1
	CREATE TABLE c () INHERITS (public.lp_plain)
	CREATE TRIGGER zz_fence_guard BEFORE INSERT ON c FOR EACH ROW WHEN (false)
		EXECUTE FUNCTION public.fence_guard();
INSERT INTO s1.c VALUES (1, 'no token', 0);
SELECT count(*) AS landed FROM lp_plain;
DROP SCHEMA s1 CASCADE;

--
-- 2. ALTER TABLE on an unprotected parent recursing into a protected
--    partition: a default on the epoch column would stamp every tokenless
--    INSERT with a live token.
--
CREATE TABLE up (id int, v text, writer_epoch bigint) PARTITION BY LIST (id);
CREATE TABLE upc PARTITION OF up FOR VALUES IN (1);
SELECT fence_protect('upc');
ALTER TABLE up ALTER COLUMN writer_epoch SET DEFAULT 1;
\echo :SQLSTATE
SELECT pg_get_expr(adbin, adrelid) AS upc_default FROM pg_attrdef
 WHERE adrelid = 'upc'::regclass;
INSERT INTO up (id, v) VALUES (1, 'no token');
\echo :SQLSTATE
-- the same through a legacy inheritance parent
CREATE TABLE ip (id int, v text, writer_epoch bigint);
CREATE TABLE ipc () INHERITS (ip);
SELECT fence_protect('ipc');
ALTER TABLE ip ALTER COLUMN writer_epoch SET DEFAULT 1;
\echo :SQLSTATE
-- a default of 0 changes nothing: allowed
ALTER TABLE up ALTER COLUMN writer_epoch SET DEFAULT 0;
ALTER TABLE up ALTER COLUMN writer_epoch DROP DEFAULT;
-- twin: the unprotected partition takes the default, and the tokenless
-- INSERT lands stamped with it
CREATE TABLE upd PARTITION OF up FOR VALUES IN (2);
ALTER TABLE ONLY upd ALTER COLUMN writer_epoch SET DEFAULT 1;
INSERT INTO upd (id, v) VALUES (2, 'no token');
SELECT id, writer_epoch FROM up ORDER BY id;

--
-- 3. ALTER TRIGGER ... DEPENDS ON EXTENSION: DROP EXTENSION would then drop
--    the guard.  Refused; declared, it lands, and the DROP EXTENSION that
--    would take the guard with it is refused in turn.
--
CREATE EXTENSION tcn;
ALTER TRIGGER zz_fence_guard ON lp DEPENDS ON EXTENSION tcn;
\echo :SQLSTATE
SELECT count(*) AS guard_depends_on_extension FROM pg_depend
 WHERE classid = 'pg_trigger'::regclass AND refclassid = 'pg_extension'::regclass
   AND objid = (SELECT oid FROM pg_trigger WHERE tgrelid = 'lp'::regclass AND tgname = 'zz_fence_guard');
BEGIN;
SELECT fence_allow_ddl('lp', 'a test of DEPENDS ON EXTENSION');
ALTER TRIGGER zz_fence_guard ON lp DEPENDS ON EXTENSION tcn;
COMMIT;
DROP EXTENSION tcn;
\echo :SQLSTATE
SELECT count(*) AS lp_guard FROM pg_trigger WHERE tgrelid = 'lp'::regclass AND tgname = 'zz_fence_guard';
INSERT INTO lp VALUES (2, 'no token', 0);
\echo :SQLSTATE
-- twin: on an unprotected table DROP EXTENSION takes the trigger with it
CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER t_noop BEFORE INSERT ON lp_plain FOR EACH ROW EXECUTE FUNCTION noop();
ALTER TRIGGER t_noop ON lp_plain DEPENDS ON EXTENSION tcn;
-- (lp's guard depends on tcn too: repair lp first, then drop)
SELECT fence_protect('lp');
SELECT count(*) AS guard_depends_on_extension FROM pg_depend
 WHERE classid = 'pg_trigger'::regclass AND refclassid = 'pg_extension'::regclass
   AND objid = (SELECT oid FROM pg_trigger WHERE tgrelid = 'lp'::regclass AND tgname = 'zz_fence_guard');
DROP EXTENSION tcn;
SELECT count(*) AS lp_plain_triggers FROM pg_trigger WHERE tgrelid = 'lp_plain'::regclass;

--
-- 4. Re-creating the after form's UPDATE check weaker: mode shared in both
--    the WHEN clause and the arguments, on a strict table.
--
CREATE TABLE af (id int PRIMARY KEY, v text, writer_epoch bigint);
INSERT INTO af VALUES (1, 'init', NULL);
SELECT fence_protect('af', 'writer_epoch', 'strict', 'after');
CREATE TRIGGER zz_fence_guard_update AFTER UPDATE ON af FOR EACH ROW
	WHEN (NOT fence_update_allowed(NEW.writer_epoch, OLD.writer_epoch, NEW.tableoid, 'writer_epoch', 'shared'))
	EXECUTE FUNCTION fence_guard_after('writer_epoch', 'shared');
\echo :SQLSTATE
SELECT tgname, encode(tgargs, 'escape') AS args FROM pg_trigger
 WHERE tgrelid = 'af'::regclass ORDER BY tgname;
-- twin: the canonical trigger, as a restore creates it, takes the place of
-- fence's own
CREATE TRIGGER zz_fence_guard_update AFTER UPDATE ON af FOR EACH ROW
	WHEN (NOT fence_update_allowed(NEW.writer_epoch, OLD.writer_epoch, NEW.tableoid, 'writer_epoch', 'strict'))
	EXECUTE FUNCTION fence_guard_after('writer_epoch', 'strict');
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'af'::regclass ORDER BY tgname;

--
-- 5. A generated epoch column: fence_protect refuses it, and so does the
--    end of an ATTACH that would bring one into a protected tree.
--
CREATE TABLE g (id int, writer_epoch bigint GENERATED ALWAYS AS (0) STORED);
SELECT fence_protect('g');
\echo :SQLSTATE
CREATE TABLE gp (id int, writer_epoch bigint) PARTITION BY LIST (id);
SELECT fence_protect('gp');
CREATE TABLE gc (id int, writer_epoch bigint GENERATED ALWAYS AS (0) STORED);
-- refused: by fence at the end of the command (5F006) where PostgreSQL lets
-- a generated column into a partition whose parent's is not (15 and 16),
-- by PostgreSQL itself (42804) from 17 on
CREATE FUNCTION pg_temp.sqlstate_of(command text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE command;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE;
END $$;
SELECT pg_temp.sqlstate_of($$ALTER TABLE gp ATTACH PARTITION gc FOR VALUES IN (1)$$)
       = CASE WHEN current_setting('server_version_num')::int >= 170000
              THEN '42804' ELSE '5F006' END AS attach_refused;
SELECT count(*) AS gp_partitions FROM pg_inherits WHERE inhparent = 'gp'::regclass;
-- twin: a plain epoch column joins
CREATE TABLE gc2 (id int, writer_epoch bigint);
ALTER TABLE gp ATTACH PARTITION gc2 FOR VALUES IN (2);
SELECT count(*) AS gp_partitions FROM pg_inherits WHERE inhparent = 'gp'::regclass;

--
-- 6. A table protected another way joining a tree.  With rows: refused
--    (another mode's guard checked them); empty: it joins, and is
--    protected as the tree is, through INHERIT and ATTACH alike.
--
CREATE TABLE it (id int, writer_epoch bigint);
SELECT fence_protect('it');
CREATE TABLE ix (id int, writer_epoch bigint);
SELECT fence_protect('ix', 'writer_epoch', 'shared');
INSERT INTO ix VALUES (1, (SELECT t FROM tok WHERE name = 'a'));
ALTER TABLE ix INHERIT it;
\echo :SQLSTATE
SELECT count(*) AS ix_inherits FROM pg_inherits WHERE inhrelid = 'ix'::regclass;
-- twin: empty, it joins and takes the tree's mode
BEGIN;
SELECT fence_begin('intact-a', (SELECT t FROM tok WHERE name = 'a'));
DELETE FROM ix;
COMMIT;
ALTER TABLE ix INHERIT it;
SELECT p.mode, encode(t.tgargs, 'escape') AS guard_args
  FROM fence_protected p, pg_trigger t
 WHERE p.relation = 'ix'::regclass AND t.tgrelid = 'ix'::regclass AND t.tgname = 'zz_fence_guard';
CREATE TABLE pp (id int, writer_epoch bigint) PARTITION BY LIST (id);
SELECT fence_protect('pp');
CREATE TABLE ppc (id int, writer_epoch bigint);
SELECT fence_protect('ppc', 'writer_epoch', 'repeat');
ALTER TABLE pp ATTACH PARTITION ppc FOR VALUES IN (1);
SELECT relation, mode FROM fence_protected WHERE relation IN ('pp'::regclass, 'ppc'::regclass) ORDER BY 1;

--
-- 7. Foreign keys into the after form: an action that updates the table's
--    rows (ON UPDATE CASCADE, ON DELETE SET NULL) cannot write a token into
--    the epoch column, so the after form cannot check it.  fence_protect
--    refuses such a table (55000), and the end of the command refuses the
--    DDL that adds one (5F006).  ON DELETE CASCADE deletes through the
--    BEFORE guard, which fence_begin covers: allowed.  The before form
--    stamps a cascade's UPDATE under fence_begin: allowed.
--
CREATE TABLE parent (id int PRIMARY KEY);
CREATE TABLE kid (id int PRIMARY KEY, pid int REFERENCES parent ON UPDATE CASCADE, writer_epoch bigint);
SELECT fence_protect('kid', 'writer_epoch', 'strict', 'after');
\echo :SQLSTATE
SELECT fence_protect('kid');
CREATE TABLE kid2 (id int PRIMARY KEY, pid int REFERENCES parent ON DELETE CASCADE, writer_epoch bigint);
SELECT fence_protect('kid2', 'writer_epoch', 'strict', 'after');
ALTER TABLE kid2 ADD FOREIGN KEY (pid) REFERENCES parent ON DELETE SET NULL;
\echo :SQLSTATE
SELECT count(*) AS kid2_foreign_keys FROM pg_constraint WHERE conrelid = 'kid2'::regclass AND contype = 'f';

--
-- 8. Declared, the recursing default lands (declared on the partition it
--    reaches), and a tokenless INSERT is stamped with it: what the
--    declaration is for.  Rolled back here.
--
BEGIN;
SELECT fence_allow_ddl('upc', 'backfill with a known epoch');
ALTER TABLE up ALTER COLUMN writer_epoch SET DEFAULT 1;
INSERT INTO up (id, v) VALUES (1, 'declared default');
SELECT id, writer_epoch FROM up WHERE id = 1;
ROLLBACK;

--
-- 9. A tree broken before the command (a child that 1.0 never
--    registered, made here by deleting its registry row as a superuser):
--    any DDL on it is refused, the hint names the repair, and the repair
--    works; DROP does too.
--
CREATE TABLE lpc () INHERITS (lp);
DELETE FROM fence_protected WHERE relation = 'lpc'::regclass;
ALTER TABLE lpc ADD COLUMN note text;
\echo :SQLSTATE
SELECT fence_protect('lp');
ALTER TABLE lpc ADD COLUMN note text;
SELECT count(*) AS lpc_registered FROM fence_protected WHERE relation = 'lpc'::regclass;
DELETE FROM fence_protected WHERE relation = 'lpc'::regclass;
DROP TABLE lpc;

--
-- The text of one refusal.
--
\set VERBOSITY default
ALTER TABLE up ALTER COLUMN writer_epoch SET DEFAULT 1;
\set VERBOSITY sqlstate

--
-- What the declared command left in the audit log.
--
SELECT * FROM audit_since(:audit0) WHERE action = 'allow_ddl';

DROP TABLE lp, lp_plain, up, ip, ipc, af, g, gp, gc, it, ix, pp, kid, kid2, parent;
DROP FUNCTION noop();
DROP FUNCTION audit_since(bigint);
DROP EXTENSION fence;
