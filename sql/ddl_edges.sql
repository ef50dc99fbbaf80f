--
-- ddl_edges: the corners of the DDL checks that a first review found open.
--  * DROP SCHEMA ... CASCADE of fence's schema would drop the extension:
--    refused while a table is protected (a database owner can run it).
--  * A role without USAGE on fence's schema runs DDL on its own tables as
--    before: fence's event triggers find their functions by the schema's
--    OID, not through a privilege check.
--  * A hand-written canonical guard (what pg_dump writes) protects the
--    table as fence_protect does: TRUNCATE refused, a legacy child guarded.
--  * ATTACH checks emptiness past row-level security, and refuses an
--    unlogged table even when empty; CREATE UNLOGGED TABLE ... INHERITS
--    checks every parent.
--  * A stray fence trigger on an unprotected table is its owner's to drop.
-- Each with its twin.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

--
-- DROP SCHEMA of fence's schema.
--
CREATE TABLE guarded (id int PRIMARY KEY, writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('guarded');
BEGIN;
DROP SCHEMA public CASCADE;
\echo :SQLSTATE
ROLLBACK;
SELECT extname FROM pg_extension WHERE extname = 'fence';
-- twin: another schema drops as usual
CREATE SCHEMA fx;
CREATE TABLE fx.t (id int);
DROP SCHEMA fx CASCADE;

--
-- A role without USAGE on fence's schema.
--
CREATE ROLE fence_regress_nousage;
CREATE SCHEMA own AUTHORIZATION fence_regress_nousage;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
SET ROLE fence_regress_nousage;
CREATE TABLE own.t (id int);
ALTER TABLE own.t ADD COLUMN v text;
CREATE TABLE own.p (id int) PARTITION BY RANGE (id);
CREATE TABLE own.p1 PARTITION OF own.p FOR VALUES FROM (0) TO (10);
DROP TABLE own.t, own.p;
RESET ROLE;
GRANT CREATE, USAGE ON SCHEMA public TO PUBLIC;
DROP SCHEMA own;
DROP ROLE fence_regress_nousage;

--
-- The canonical guard written by hand protects the whole tree.
--
CREATE TABLE hand (id int PRIMARY KEY, writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE hand_child () INHERITS (hand);
INSERT INTO hand_child VALUES (1, 0);
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON hand
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'strict');
SELECT c.relname, t.tgname, t.tgenabled
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relname IN ('hand', 'hand_child') ORDER BY 1, 2;
SELECT relation::text, epoch_column, mode FROM fence_protected
 WHERE relation::text LIKE 'hand%' ORDER BY 1;
TRUNCATE hand;
\echo :SQLSTATE
UPDATE hand SET id = 2;
\echo :SQLSTATE
-- ... and the dump's own CREATE TRIGGER of the refusals that followed
-- takes the place of fence's: no 42710
CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON hand
  FOR EACH STATEMENT EXECUTE FUNCTION fence_refuse_truncate();
ALTER TABLE hand ENABLE ALWAYS TRIGGER zz_fence_truncate;
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON hand_child
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'strict');
SELECT count(*) AS fence_triggers FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relname IN ('hand', 'hand_child');
-- twin: an ordinary trigger of the same shape protects nothing
CREATE TABLE hand_plain (id int PRIMARY KEY, writer_epoch bigint NOT NULL DEFAULT 0);
CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON hand_plain
  FOR EACH ROW EXECUTE FUNCTION noop();
TRUNCATE hand_plain;
SELECT count(*) AS registered FROM fence_protected WHERE relation = 'hand_plain'::regclass;

--
-- ATTACH: emptiness past row-level security; unlogged tables.
--
-- (as a plain owner: row-level security does not apply to superusers)
CREATE ROLE fence_regress_edges_owner;
GRANT CREATE ON SCHEMA public TO fence_regress_edges_owner;
SET ROLE fence_regress_edges_owner;
CREATE TABLE ev (id int NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0) PARTITION BY RANGE (id);
CREATE TABLE ev_0 PARTITION OF ev FOR VALUES FROM (0) TO (10);
SELECT fence_protect('ev');
CREATE TABLE hidden (LIKE ev);
INSERT INTO hidden VALUES (15, 0);
ALTER TABLE hidden ENABLE ROW LEVEL SECURITY;
ALTER TABLE hidden FORCE ROW LEVEL SECURITY;
CREATE POLICY nothing ON hidden USING (false);
SELECT count(*) AS visible_rows FROM hidden;
ALTER TABLE ev ATTACH PARTITION hidden FOR VALUES FROM (10) TO (20);
\echo :SQLSTATE
RESET ROLE;
CREATE UNLOGGED TABLE ul_empty (LIKE ev);
ALTER TABLE ev ATTACH PARTITION ul_empty FOR VALUES FROM (20) TO (30);
\echo :SQLSTATE
CREATE TABLE other_parent (x int);
CREATE UNLOGGED TABLE ul_child (id int, writer_epoch bigint) INHERITS (other_parent, hand);
\echo :SQLSTATE
SELECT count(*) AS joined FROM pg_inherits
 WHERE inhrelid IN (SELECT oid FROM pg_class WHERE relname IN ('hidden', 'ul_empty', 'ul_child'));
-- twin: an unprotected partitioned table takes both
CREATE TABLE ev_plain (LIKE ev) PARTITION BY RANGE (id);
ALTER TABLE ev_plain ATTACH PARTITION hidden FOR VALUES FROM (10) TO (20);
ALTER TABLE ev_plain ATTACH PARTITION ul_empty FOR VALUES FROM (20) TO (30);
SELECT count(*) AS joined_plain FROM pg_inherits
 WHERE inhrelid IN (SELECT oid FROM pg_class WHERE relname IN ('hidden', 'ul_empty'));

--
-- A stray fence trigger on an unprotected table.
--
CREATE TABLE stray (id int);
CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON stray
  FOR EACH STATEMENT EXECUTE FUNCTION fence_refuse_truncate();
DROP TRIGGER zz_fence_truncate ON stray;
\echo :SQLSTATE
-- twin: on a protected table the same DROP is refused
DROP TRIGGER zz_fence_truncate ON guarded;
\echo :SQLSTATE

--
-- fence_unprotect records its reason; an empty one is refused.
--
SELECT fence_unprotect('guarded', '');
\echo :SQLSTATE
SELECT fence_unprotect('guarded', 'decommissioned with ticket 42');
SELECT action, relation, reason FROM fence_audit_log
 WHERE action = 'unprotect' AND relation = 'public.guarded';
SELECT count(*) AS still_registered FROM fence_protected WHERE relation = 'guarded'::regclass;

DROP TABLE stray, ev, ev_plain, other_parent, hand_plain, hand, hand_child, guarded;
DROP FUNCTION noop();
DROP OWNED BY fence_regress_edges_owner;
REVOKE CREATE ON SCHEMA public FROM fence_regress_edges_owner;
DROP ROLE fence_regress_edges_owner;
DROP EXTENSION fence;
