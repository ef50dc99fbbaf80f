--
-- cloned_triggers: CREATE TRIGGER on a partitioned table clones the trigger
-- onto every partition.  A role that holds TRIGGER on an unprotected parent
-- and its partitions (GRANT ALL, say), but owns none of them, put a BEFORE
-- ROW trigger on a protected partition this way, where it rewrote a current
-- worker's write; naming the partition itself was refused (5F006).  The end
-- of the command now looks at the triggers the command left on protected
-- tables, clones included, and refuses (5F006) one the role could not have
-- created naming the table.  The twins: on a tree with no protected
-- partition the stranger's trigger lands and rewrites the worker's write;
-- the tables' owner may still create it through the parent; fence_audit
-- reports, as an error, a trigger cloned onto a protected partition from a
-- table outside its tree whose owner does not own the partition.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE ROLE fence_regress_ct_owner;
CREATE ROLE fence_regress_ct_stranger;
CREATE ROLE fence_regress_ct_parent;
GRANT CREATE ON SCHEMA public TO fence_regress_ct_owner, fence_regress_ct_stranger;
CREATE TEMP TABLE tok (t bigint);
INSERT INTO tok SELECT fence_claim('cloned-triggers', '1 hour');

SET ROLE fence_regress_ct_owner;
CREATE TABLE pt (id int, v int, writer_epoch bigint) PARTITION BY LIST (id);
CREATE TABLE pt_prot PARTITION OF pt FOR VALUES IN (1);
SELECT fence_protect('pt_prot', 'writer_epoch', 'repeat');
CREATE TABLE qt (id int, v int, writer_epoch bigint) PARTITION BY LIST (id);
CREATE TABLE qt_plain PARTITION OF qt FOR VALUES IN (1);
GRANT TRIGGER ON pt, pt_prot, qt, qt_plain TO fence_regress_ct_stranger;
RESET ROLE;
BEGIN;
SELECT fence_begin('cloned-triggers', (SELECT t FROM tok));
INSERT INTO pt VALUES (1, 10, (SELECT t FROM tok));
INSERT INTO qt VALUES (1, 10, (SELECT t FROM tok));
COMMIT;

SET ROLE fence_regress_ct_stranger;
CREATE FUNCTION public.ct_flip() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.v := -1; RETURN NEW; END $$;
-- naming the protected partition: refused at the start
CREATE TRIGGER a_flip BEFORE UPDATE ON pt_prot FOR EACH ROW EXECUTE FUNCTION public.ct_flip();
\echo :SQLSTATE
-- through the parent: refused at the end, and rolled back
\set VERBOSITY default
CREATE TRIGGER a_flip BEFORE UPDATE ON pt FOR EACH ROW EXECUTE FUNCTION public.ct_flip();
\set VERBOSITY sqlstate
-- twin: on the tree with no protected partition it lands
CREATE TRIGGER a_flip BEFORE UPDATE ON qt FOR EACH ROW EXECUTE FUNCTION public.ct_flip();
RESET ROLE;
SELECT tgrelid::regclass AS rel, tgname FROM pg_trigger
 WHERE tgname = 'a_flip' ORDER BY 1;
-- the current worker's write lands as written on the protected partition,
-- and is rewritten by the stranger's trigger on the other
BEGIN;
SELECT fence_begin('cloned-triggers', (SELECT t FROM tok));
UPDATE pt SET v = 100 WHERE id = 1;
UPDATE qt SET v = 100 WHERE id = 1;
COMMIT;
SELECT 'pt' AS tree, id, v FROM pt UNION ALL SELECT 'qt', id, v FROM qt ORDER BY 1;

-- the tables' owner may create a trigger through the parent
SET ROLE fence_regress_ct_owner;
CREATE TRIGGER b_note BEFORE UPDATE ON pt FOR EACH ROW EXECUTE FUNCTION public.ct_flip();
SELECT tgrelid::regclass AS rel, tgname FROM pg_trigger
 WHERE tgname = 'b_note' ORDER BY 1;
DROP TRIGGER b_note ON pt;
RESET ROLE;

-- fence_audit: a protected partition whose parent, outside the protected
-- tree, belongs to another role that put a trigger on it (attached by a
-- superuser): an error, beside the warning that it runs before the guard
CREATE TABLE xp (id int, v int, writer_epoch bigint) PARTITION BY LIST (id);
ALTER TABLE xp OWNER TO fence_regress_ct_parent;
CREATE TRIGGER c_flip BEFORE UPDATE ON xp FOR EACH ROW EXECUTE FUNCTION public.ct_flip();
ALTER TABLE pt DETACH PARTITION pt_prot;
ALTER TABLE xp ATTACH PARTITION pt_prot FOR VALUES IN (1);
SELECT severity, problem, fix FROM fence_audit() WHERE relation = 'pt_prot'::regclass;
ALTER TABLE xp DETACH PARTITION pt_prot;
SELECT count(*) AS pt_prot_findings FROM fence_audit() WHERE relation = 'pt_prot'::regclass;

DROP TABLE pt, pt_prot, qt, xp;
DROP FUNCTION public.ct_flip();
REVOKE CREATE ON SCHEMA public FROM fence_regress_ct_owner, fence_regress_ct_stranger;
DROP ROLE fence_regress_ct_owner, fence_regress_ct_stranger, fence_regress_ct_parent;
DROP EXTENSION fence;
