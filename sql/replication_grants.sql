--
-- replication_grants: who may trust logical replication into a protected
-- table (issue 30, item 1).  The guard lets the apply of a subscription
-- through without a token only when its owner is a superuser or
-- fence_grant_replication trusts that role with the table (t/008 runs the
-- real apply); here, the grant itself: only the table's owners and
-- superusers may give or take it, only on a protected table, each call is
-- recorded, and the grant goes with the table's protection.  The twin of
-- the refusals: the table's owner's own call succeeds.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_rg_owner;
CREATE ROLE fence_regress_rg_sub;
CREATE ROLE fence_regress_rg_member;
GRANT fence_regress_rg_sub TO fence_regress_rg_member;

CREATE TABLE vault (id int PRIMARY KEY, v int, writer_epoch bigint);
ALTER TABLE vault OWNER TO fence_regress_rg_owner;
CREATE TABLE loose (id int PRIMARY KEY, v int, writer_epoch bigint);
CREATE TABLE tree (id int, k int, writer_epoch bigint) PARTITION BY LIST (k);
CREATE TABLE tree_1 PARTITION OF tree FOR VALUES IN (1);
SELECT fence_protect('vault');
SELECT fence_protect('tree');

-- Bad input: each its own SQLSTATE.
SELECT fence_grant_replication(NULL, 'fence_regress_rg_sub');
SELECT fence_grant_replication('vault', NULL);
SELECT fence_grant_replication('vault', 0::oid::regrole);
SELECT fence_grant_replication('loose', 'fence_regress_rg_sub');
SELECT fence_revoke_replication('loose', 'fence_regress_rg_sub');

-- A role that does not own the table cannot trust itself with it (42501),
-- nor revoke another's grant ...
SET ROLE fence_regress_rg_sub;
SELECT fence_grant_replication('vault', 'fence_regress_rg_sub');
SELECT fence_revoke_replication('vault', 'fence_regress_rg_sub');
-- ... nor write the grants itself: only fence does (42501).
INSERT INTO fence_replication_grants VALUES ('vault', 'fence_regress_rg_sub');
RESET ROLE;
SELECT count(*) AS grants FROM fence_replication_grants;

-- The twin: the table's owner may.
SET ROLE fence_regress_rg_owner;
SELECT fence_grant_replication('vault', 'fence_regress_rg_sub');
SELECT fence_grant_replication('vault', 'fence_regress_rg_sub');
RESET ROLE;
SELECT fence_grant_replication('tree', 'fence_regress_rg_sub');
SELECT relation, role FROM fence_replication_grants ORDER BY relation::text, role::text;
-- every call recorded, one that changed nothing too
SELECT role, action, relation, detail FROM fence_audit_log
 WHERE action ~ 'replication' ORDER BY id;

-- The grant goes with the table's protection: fence_unprotect forgets it,
-- and so does DROP TABLE; a partition's registry row has no grant of its
-- own (the grant on the partitioned table covers it).
SELECT fence_unprotect('vault', 'test: replication grants go with protection');
SELECT relation, role FROM fence_replication_grants ORDER BY relation::text, role::text;
DROP TABLE tree;
SELECT count(*) AS grants FROM fence_replication_grants;

-- Revoking what was never granted is recorded as unchanged.
SELECT fence_protect('loose');
SELECT fence_revoke_replication('loose', 'fence_regress_rg_member');
SELECT detail FROM fence_audit_log WHERE action = 'revoke_replication' ORDER BY id DESC LIMIT 1;

DROP TABLE vault, loose;
DROP ROLE fence_regress_rg_owner, fence_regress_rg_sub, fence_regress_rg_member;
DROP EXTENSION fence;
