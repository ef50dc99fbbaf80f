--
-- audit: fence_audit() reports what fence's event triggers cannot refuse.
--   1. A healthy database has no row: protected plain, partitioned
--      (two levels, a partition created after fence_protect, one attached,
--      one detached) and legacy inheritance tables (a child from before
--      fence_protect and one from after), in three modes and two epoch
--      columns; a BEFORE ROW trigger of a known-harmless built-in function
--      before the guard; a disabled BEFORE ROW trigger and an AFTER
--      trigger after it; TRIGGER held by a member of the owning role and
--      by a superuser; claims; scan_rows too.
--   2. Each error, provoked as a superuser through the declared path
--      (fence.allow_ddl for fence's triggers; ALTER EVENT TRIGGER, setval
--      and direct writes of fence's tables need no declaration), then
--      repaired as its fix says:
--      fence's triggers disabled, ENABLE, ENABLE REPLICA; missing; a
--      trigger with fence's name calling another function; not canonical
--      (WHEN clause, events, name, arguments, a registry row edited, the
--      epoch column dropped, a TRUNCATE refusal with arguments); a BEFORE
--      ROW trigger sorting after the guard (also ENABLE REPLICA, and on a
--      partitioned table, reported once); fence's event triggers disabled,
--      ENABLE, ENABLE REPLICA, missing, filtered by tag, on the wrong event,
--      and a partition created while fence_ddl_command_end was missing;
--      claims above the counter, the counter set back, setval(.., false);
--      a registry row of a relation that does not exist (a recorded DROP
--      leaves none).
--   3. Each warning: a BEFORE ROW trigger before the guard (renamed from
--      after it); TRIGGER held by another role and by PUBLIC.
--   4. scan_rows => true: stored epochs above the counter, written with
--      the guard disabled in a declared session; a role that may not read
--      a table is told it was not scanned.
-- The counter is set to a known value first, so the numbers in the
-- messages are the same on every run.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_audit_owner;
CREATE ROLE fence_regress_audit_member IN ROLE fence_regress_audit_owner;
CREATE ROLE fence_regress_audit_other;
CREATE ROLE fence_regress_audit_super SUPERUSER;
-- the worker API is granted to no role until fence_grant_worker
SELECT fence_grant_worker('fence_regress_audit_owner');
SELECT fence_grant_worker('fence_regress_audit_member');
SELECT fence_grant_worker('fence_regress_audit_other');
GRANT CREATE ON SCHEMA public TO fence_regress_audit_owner;

-- fence_audit's rows in a fixed order, relations by name.
CREATE FUNCTION audit_rows(scan boolean DEFAULT false)
RETURNS TABLE (severity text, relation text, problem text, fix text)
LANGUAGE sql AS $$
	SELECT a.severity, a.relation::text, a.problem, a.fix
	  FROM fence_audit(scan_rows => scan) a
	 ORDER BY a.severity COLLATE "C", a.relation::text COLLATE "C" NULLS FIRST,
	          a.problem COLLATE "C"
$$;
CREATE FUNCTION audit_noop_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;

-- The counter's first claim begins its history without moving it: it was
-- made here and never used.  (A setval() before it would be a restore's as
-- far as fence can tell, and the first claim would move the counter past
-- the clock's floor: token.c, "Histories".)
SELECT fence_claim('history-begins', '1 second') = 1 AS first_token_is_1;
DELETE FROM fence_claims WHERE job = 'history-begins';
SELECT setval('fence_token_seq', 100);

--
-- 1. A healthy database.
--
SET ROLE fence_regress_audit_owner;
-- a plain table, strict
CREATE TABLE inv (id int PRIMARY KEY, qty int NOT NULL, note text,
                  writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO inv VALUES (1, 10, 'one'), (2, 20, 'two');
SELECT fence_protect('inv');
CREATE TRIGGER a_suppress BEFORE UPDATE ON inv
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER zzz_disabled BEFORE UPDATE ON inv
	FOR EACH ROW EXECUTE FUNCTION audit_noop_row();
ALTER TABLE inv DISABLE TRIGGER zzz_disabled;
CREATE TRIGGER zzz_after AFTER UPDATE ON inv
	FOR EACH ROW EXECUTE FUNCTION audit_noop_row();
GRANT TRIGGER ON inv TO fence_regress_audit_member, fence_regress_audit_super;
-- a partitioned table, repeat, epoch column "epoch"
CREATE TABLE ev (region text NOT NULL, id int NOT NULL, v text, epoch bigint)
	PARTITION BY LIST (region);
CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu') PARTITION BY LIST (id);
CREATE TABLE ev_eu_1 PARTITION OF ev_eu FOR VALUES IN (1);
CREATE TABLE ev_gone PARTITION OF ev FOR VALUES IN ('gone');
SELECT fence_protect('ev', 'epoch', 'repeat');
CREATE TABLE ev_us PARTITION OF ev FOR VALUES IN ('us');
CREATE TABLE ev_old (LIKE ev);
ALTER TABLE ev ATTACH PARTITION ev_old FOR VALUES IN ('old');
ALTER TABLE ev DETACH PARTITION ev_gone;
-- legacy inheritance, shared
CREATE TABLE lp (id int, v text, writer_epoch bigint);
CREATE TABLE lp_c1 (extra int, v_tsv tsvector) INHERITS (lp);
CREATE TRIGGER a_tsv BEFORE INSERT OR UPDATE ON lp_c1
	FOR EACH ROW EXECUTE FUNCTION tsvector_update_trigger(v_tsv, 'pg_catalog.simple', v);
SELECT fence_protect('lp', mode => 'shared');
CREATE TABLE lp_c2 () INHERITS (lp);
-- a table whose epoch column will be dropped
CREATE TABLE scratch (id int, writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('scratch');
-- claims, and guarded writes
SELECT fence_claim('audit-a', '1 hour') AS ta \gset
SELECT fence_claim('audit-b', '1 hour') AS tb \gset
BEGIN;
SELECT fence_begin('audit-a', :ta);
UPDATE inv SET qty = qty + 1;
INSERT INTO ev VALUES ('eu', 1, 'x'), ('us', 2, 'y'), ('old', 3, 'z');
INSERT INTO ev_gone VALUES ('gone', 4, 'w');
INSERT INTO lp VALUES (1, 'p');
INSERT INTO lp_c1 (id, v, extra) VALUES (2, 'c1', 7);
INSERT INTO lp_c2 VALUES (3, 'c2');
COMMIT;
RESET ROLE;
SELECT relation::text, epoch_column, mode FROM fence_protected ORDER BY relation::text COLLATE "C";
SELECT last_value FROM fence_token_seq;
SELECT * FROM audit_rows();
SELECT * FROM audit_rows(scan => true);

--
-- 2. Errors, each provoked as a superuser and repaired as the fix says.
--
-- Fence's triggers disabled, ENABLE (not ALWAYS) and ENABLE REPLICA.
SET fence.allow_ddl = on;
ALTER TABLE inv DISABLE TRIGGER zz_fence_guard;
ALTER TABLE inv ENABLE TRIGGER zz_fence_truncate;
ALTER TABLE ev_eu_1 DISABLE TRIGGER zz_fence_truncate;
ALTER TABLE lp_c2 ENABLE REPLICA TRIGGER zz_fence_guard;
SELECT * FROM audit_rows();
ALTER TABLE inv ENABLE TRIGGER zz_fence_guard;
ALTER TABLE inv ENABLE REPLICA TRIGGER zz_fence_truncate;
ALTER TABLE ev_eu_1 ENABLE REPLICA TRIGGER zz_fence_truncate;
SELECT * FROM audit_rows();
RESET fence.allow_ddl;
SELECT fence_protect('public.inv', 'writer_epoch', 'strict');
SELECT fence_protect('public.ev', 'epoch', 'repeat');
SELECT fence_protect('public.lp', 'writer_epoch', 'shared');
SELECT * FROM audit_rows();

-- Missing, and a trigger with fence's name that calls another function.
SET fence.allow_ddl = on;
DROP TRIGGER zz_fence_guard ON inv;
DROP TRIGGER zz_fence_truncate ON lp_c1;
DROP TRIGGER zz_fence_guard ON lp_c2;
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON lp_c2
	FOR EACH ROW EXECUTE FUNCTION audit_noop_row();
RESET fence.allow_ddl;
SELECT * FROM audit_rows();
SELECT fence_protect('public.inv', 'writer_epoch', 'strict');
BEGIN;
SELECT fence_allow_ddl('public.lp_c2', 'why');
DROP TRIGGER zz_fence_guard ON lp_c2;
COMMIT;
SELECT fence_protect('public.lp', 'writer_epoch', 'shared');
SELECT * FROM audit_rows();

-- Not canonical: a WHEN clause; events; a guard of another name (which
-- then fires before zz_fence_guard); a TRUNCATE refusal with arguments.
SET fence.allow_ddl = on;
DROP TRIGGER zz_fence_guard ON inv;
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON inv
	FOR EACH ROW WHEN (true) EXECUTE FUNCTION fence_guard('writer_epoch', 'strict');
DROP TRIGGER zz_fence_guard ON lp_c1;
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE ON lp_c1
	FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'shared');
CREATE TRIGGER aa_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON lp_c2
	FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'shared');
DROP TRIGGER zz_fence_truncate ON ev_us;
CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON ev_us
	FOR EACH STATEMENT EXECUTE FUNCTION fence_refuse_truncate('x');
RESET fence.allow_ddl;
SELECT * FROM audit_rows();
SELECT fence_protect('public.inv', 'writer_epoch', 'strict');
BEGIN;
SELECT fence_allow_ddl('public.lp_c2', 'why');
DROP TRIGGER aa_fence_guard ON lp_c2;
COMMIT;
SELECT fence_protect('public.lp', 'writer_epoch', 'shared');
BEGIN;
SELECT fence_allow_ddl('public.ev_us', 'why');
DROP TRIGGER zz_fence_truncate ON ev_us;
COMMIT;
SELECT fence_protect('public.ev', 'epoch', 'repeat');
SELECT * FROM audit_rows();

-- Not canonical: fence_protected edited (a mode and a column that differ
-- from the guard's), and the epoch column dropped by a declared DDL.
UPDATE fence_protected SET mode = 'shared' WHERE relation = 'inv'::regclass;
UPDATE fence_protected SET epoch_column = 'v' WHERE relation = 'ev_us'::regclass;
BEGIN;
SELECT fence_allow_ddl('scratch', 'why');
ALTER TABLE scratch DROP COLUMN writer_epoch;
COMMIT;
SELECT * FROM audit_rows(scan => true);
SELECT fence_protect('public.inv', 'writer_epoch', 'shared');
SELECT fence_protect('public.ev', 'epoch', 'repeat');
ALTER TABLE scratch ADD COLUMN writer_epoch bigint NOT NULL DEFAULT 0;
SELECT * FROM audit_rows();
SELECT mode FROM fence_protected WHERE relation = 'inv'::regclass;
SELECT fence_protect('inv');
SELECT * FROM audit_rows();

-- A BEFORE ROW trigger that sorts after the guard, and may fire: enabled,
-- or ENABLE REPLICA (it fires in replica sessions). On a partitioned
-- table it is reported there, not on each partition's clone.
CREATE TRIGGER zzz_stamp BEFORE UPDATE ON inv
	FOR EACH ROW EXECUTE FUNCTION audit_noop_row();
CREATE TRIGGER zzz_replica BEFORE INSERT ON lp
	FOR EACH ROW EXECUTE FUNCTION audit_noop_row();
ALTER TABLE lp ENABLE REPLICA TRIGGER zzz_replica;
CREATE TRIGGER "~tilde" BEFORE DELETE ON ev
	FOR EACH ROW EXECUTE FUNCTION audit_noop_row();
SELECT * FROM audit_rows();
-- The guard itself refuses the write.
UPDATE inv SET qty = qty + 1;

--
-- 3. Warnings. Renamed so that they sort before the guard, the triggers
-- fire before its check: warnings.
--
ALTER TRIGGER zzz_stamp ON inv RENAME TO a_stamp;
ALTER TRIGGER zzz_replica ON lp RENAME TO a_replica;
ALTER TRIGGER "~tilde" ON ev RENAME TO a_tilde;
SELECT * FROM audit_rows();
DROP TRIGGER a_stamp ON inv;
DROP TRIGGER a_replica ON lp;
DROP TRIGGER a_tilde ON ev;
SELECT * FROM audit_rows();

-- TRIGGER held by a role that does not own the table, and by PUBLIC (the
-- member of the owning role and the superuser that hold it on inv are not
-- reported).
SET ROLE fence_regress_audit_owner;
GRANT TRIGGER ON inv TO fence_regress_audit_other;
GRANT ALL ON lp_c1 TO PUBLIC;
RESET ROLE;
SELECT * FROM audit_rows();
REVOKE TRIGGER ON public.inv FROM fence_regress_audit_other;
REVOKE TRIGGER ON public.lp_c1 FROM PUBLIC;
SELECT * FROM audit_rows();
SET ROLE fence_regress_audit_owner;
REVOKE ALL ON lp_c1 FROM PUBLIC;
RESET ROLE;

--
-- 2, continued: fence's event triggers, found by their function.
--
ALTER EVENT TRIGGER fence_ddl_command_start DISABLE;
ALTER EVENT TRIGGER fence_sql_drop ENABLE;
ALTER EVENT TRIGGER fence_table_rewrite ENABLE REPLICA;
SELECT * FROM audit_rows();
ALTER EVENT TRIGGER fence_ddl_command_start ENABLE ALWAYS;
ALTER EVENT TRIGGER fence_sql_drop ENABLE ALWAYS;
ALTER EVENT TRIGGER fence_table_rewrite ENABLE ALWAYS;
SELECT * FROM audit_rows();

-- Missing: then a partition created meanwhile is not protected.
ALTER EXTENSION fence DROP EVENT TRIGGER fence_ddl_command_end;
DROP EVENT TRIGGER fence_ddl_command_end;
SET ROLE fence_regress_audit_owner;
CREATE TABLE ev_late PARTITION OF ev FOR VALUES IN ('late');
RESET ROLE;
SELECT * FROM audit_rows();
-- Filtered by tag; then on the wrong event, under another name. The
-- second is repaired as its fix says: the event trigger is found by its
-- function, whatever its name.
CREATE EVENT TRIGGER fence_ddl_command_end ON ddl_command_end
	WHEN TAG IN ('CREATE TABLE') EXECUTE FUNCTION fence_ddl_command_end();
ALTER EVENT TRIGGER fence_ddl_command_end ENABLE ALWAYS;
SELECT * FROM audit_rows() WHERE relation IS NULL;
DROP EVENT TRIGGER fence_ddl_command_end;
CREATE EVENT TRIGGER fence_end_elsewhere ON ddl_command_start
	EXECUTE FUNCTION fence_ddl_command_end();
ALTER EVENT TRIGGER fence_end_elsewhere ENABLE ALWAYS;
SELECT * FROM audit_rows() WHERE relation IS NULL;
DROP EVENT TRIGGER fence_end_elsewhere; CREATE EVENT TRIGGER fence_end_elsewhere ON ddl_command_end EXECUTE FUNCTION public.fence_ddl_command_end(); ALTER EVENT TRIGGER fence_end_elsewhere ENABLE ALWAYS; ALTER EXTENSION fence ADD EVENT TRIGGER fence_end_elsewhere;
SELECT * FROM audit_rows();
SELECT fence_protect('public.ev', 'epoch', 'repeat');
SELECT * FROM audit_rows();
SELECT count(*) AS event_triggers_in_fence
  FROM pg_depend d JOIN pg_event_trigger e ON e.oid = d.objid
 WHERE d.classid = 'pg_event_trigger'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'fence')
   AND d.deptype = 'e';

--
-- 2, continued: the counter and the claims.
--
UPDATE fence_claims SET token = 500 WHERE job = 'audit-b';
SELECT * FROM audit_rows();
SELECT setval('public.fence_token_seq', 500);
SELECT * FROM audit_rows();
-- the counter set back below the claims
SELECT setval('fence_token_seq', 200);
SELECT * FROM audit_rows();
-- setval(.., false): the next token is 500, so 499 is the last issued
SELECT setval('fence_token_seq', 500, false);
SELECT * FROM audit_rows();
SELECT setval('public.fence_token_seq', 500);
SELECT * FROM audit_rows();

--
-- 2, continued: a registry row of a relation that does not exist. A
-- dropped protected table leaves none: its DROP is recorded and its row
-- removed.
--
SET ROLE fence_regress_audit_owner;
DROP TABLE ev_gone;
RESET ROLE;
SELECT action, relation, detail FROM fence_audit_log WHERE action = 'drop';
SELECT * FROM audit_rows();
INSERT INTO fence_protected VALUES ('4000000000', 'writer_epoch', 'strict');
SELECT * FROM audit_rows();
DELETE FROM public.fence_protected WHERE relation = '4000000000';
SELECT * FROM audit_rows();

--
-- 4. scan_rows => true: epochs above the counter, written with the guard
-- disabled in a declared session. Without scan_rows they are not seen.
--
SET fence.allow_ddl = on;
BEGIN;
ALTER TABLE inv DISABLE TRIGGER zz_fence_guard;
UPDATE inv SET writer_epoch = 9000 WHERE id = 1;
ALTER TABLE inv ENABLE ALWAYS TRIGGER zz_fence_guard;
ALTER TABLE ev_us DISABLE TRIGGER zz_fence_guard;
UPDATE ev_us SET epoch = 800;
ALTER TABLE ev_us ENABLE ALWAYS TRIGGER zz_fence_guard;
COMMIT;
RESET fence.allow_ddl;
SELECT * FROM audit_rows();
SELECT * FROM audit_rows(scan => true);
-- A role may run it; a table it may not read is not scanned.
SET ROLE fence_regress_audit_owner;
GRANT SELECT ON inv, ev, ev_eu, ev_eu_1, ev_us, ev_old, ev_late, lp, lp_c1, scratch
	TO fence_regress_audit_other;
RESET ROLE;
SET ROLE fence_regress_audit_other;
SELECT * FROM audit_rows(scan => true);
RESET ROLE;
SELECT setval('public.fence_token_seq', 9000);
SELECT * FROM audit_rows(scan => true);

--
-- Clean up.
--
SET ROLE fence_regress_audit_owner;
DROP TABLE inv, ev, lp, lp_c1, lp_c2, scratch;
RESET ROLE;
SELECT count(*) AS registry_rows FROM fence_protected;
DROP FUNCTION audit_rows(boolean), audit_noop_row();
DROP EXTENSION fence;
DROP OWNED BY fence_regress_audit_owner;
REVOKE CREATE ON SCHEMA public FROM fence_regress_audit_owner;
DROP ROLE fence_regress_audit_member;
DROP ROLE fence_regress_audit_other;
DROP ROLE fence_regress_audit_super;
DROP ROLE fence_regress_audit_owner;
