--
-- declared_partitions: a declaration on a partitioned table covers its
-- partitions in every check, the table_rewrite check included.  A change
-- of type rewrites a partitioned table partition by partition, and each
-- partition's rewrite is checked on its own: fence_allow_ddl on the parent
-- must let them all through, as it does at the end of the command (and as
-- DISABLE TRIGGER ALL on the parent shows).  The twins: undeclared, the
-- same command is refused naming the partition; declared on another table,
-- too; declared on the parent of a legacy inheritance tree, its children's
-- rewrites go through.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TEMP TABLE tok (t bigint);
INSERT INTO tok SELECT fence_claim('declared-partitions', '1 hour');

CREATE TABLE pp (id int, v int, writer_epoch bigint) PARTITION BY LIST (id);
CREATE TABLE pp_a PARTITION OF pp FOR VALUES IN (1);
CREATE TABLE pp_b PARTITION OF pp FOR VALUES IN (2) PARTITION BY LIST (id);
CREATE TABLE pp_b1 PARTITION OF pp_b FOR VALUES IN (2);
SELECT fence_protect('pp');
BEGIN;
SELECT fence_begin('declared-partitions', (SELECT t FROM tok));
INSERT INTO pp VALUES (1, 10, (SELECT t FROM tok)), (2, 20, (SELECT t FROM tok));
COMMIT;

-- undeclared: refused, naming the first partition rewritten
\set VERBOSITY terse
ALTER TABLE pp ALTER COLUMN v TYPE bigint;
\set VERBOSITY sqlstate
-- declared on another protected table: still refused
CREATE TABLE other (id int, writer_epoch bigint);
SELECT fence_protect('other');
BEGIN;
SELECT fence_allow_ddl('other', 'not this one');
ALTER TABLE pp ALTER COLUMN v TYPE bigint;
\echo :SQLSTATE
ROLLBACK;
SELECT attrelid::regclass AS rel, format_type(atttypid, atttypmod) AS v_type
  FROM pg_attribute WHERE attname = 'v' AND attrelid IN ('pp'::regclass, 'pp_a'::regclass, 'pp_b1'::regclass)
 ORDER BY 1;

-- declared on one partition: its sibling's rewrite is still refused
BEGIN;
SELECT fence_allow_ddl('pp_a', 'widen v on pp_a only');
ALTER TABLE pp ALTER COLUMN v TYPE bigint;
\echo :SQLSTATE
ROLLBACK;

-- declared on the parent: every partition, at every level, is rewritten
BEGIN;
SELECT fence_allow_ddl('pp', 'widen v');
ALTER TABLE pp ALTER COLUMN v TYPE bigint;
COMMIT;
SELECT attrelid::regclass AS rel, format_type(atttypid, atttypmod) AS v_type
  FROM pg_attribute WHERE attname = 'v' AND attrelid IN ('pp'::regclass, 'pp_a'::regclass, 'pp_b1'::regclass)
 ORDER BY 1;
SELECT * FROM pp ORDER BY id;
-- still protected: a write with no token is refused
INSERT INTO pp VALUES (1, 11, 0);
\echo :SQLSTATE
-- legacy inheritance: the declaration on the parent covers its children
CREATE TABLE ip (id int, v int, writer_epoch bigint);
CREATE TABLE ipc () INHERITS (ip);
SELECT fence_protect('ip');
ALTER TABLE ip ALTER COLUMN v TYPE bigint;
\echo :SQLSTATE
BEGIN;
SELECT fence_allow_ddl('ip', 'widen v');
ALTER TABLE ip ALTER COLUMN v TYPE bigint;
COMMIT;
SELECT format_type(atttypid, atttypmod) AS ipc_v_type FROM pg_attribute
 WHERE attrelid = 'ipc'::regclass AND attname = 'v';

SELECT action, relation, reason FROM fence_audit_log WHERE action = 'allow_ddl' ORDER BY id;

DROP TABLE pp, other, ip, ipc;
DROP EXTENSION fence;
