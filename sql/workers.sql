--
-- workers: the worker API is granted to no role on a new install (issue
-- 30, item 10).  A role that can merely log in cannot claim, take over,
-- bind, renew, release or record an effect key; fence_grant_worker(role)
-- lets one in, fence_revoke_worker(role) takes it out again, and only a
-- superuser or fence's owner may call either, each leaving a row in
-- fence_audit_log.  The twin: the same role once granted (as every role
-- is under 1.0's PUBLIC grants, which an update keeps) squats a free job
-- name so that the real worker's claim answers NULL.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_wk_nobody;
CREATE ROLE fence_regress_wk_worker;
CREATE ROLE fence_regress_wk_helper;
GRANT fence_regress_wk_helper TO fence_regress_wk_nobody;

-- The worker API, listed once, and who may call what on a new install.
SELECT f AS worker_function FROM fence_worker_functions() f;
SELECT p.oid::regprocedure AS function,
       has_function_privilege('fence_regress_wk_nobody', p.oid, 'EXECUTE') AS plain_role_may
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                  AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'fence'
 WHERE p.proname IN ('fence_claim', 'fence_renew', 'fence_release', 'fence_begin',
                     'fence_once', 'fence_begin_fresh', 'fence_current',
                     'fence_is_current', 'fence_grant_worker', 'fence_revoke_worker',
                     'fence_worker_functions')
 ORDER BY p.proname;

CREATE TABLE acct (id int PRIMARY KEY, v int, writer_epoch bigint);
INSERT INTO acct VALUES (1, 0, NULL);
SELECT fence_protect('acct');
GRANT SELECT, UPDATE ON acct TO fence_regress_wk_nobody, fence_regress_wk_worker;

-- A plain role: every function of the worker API is refused (42501) ...
SET ROLE fence_regress_wk_nobody;
SELECT fence_claim('report:1', '1 hour');
SELECT fence_renew('report:1', 1);
SELECT fence_release('report:1', 1);
BEGIN;
SELECT fence_begin('report:1', 1);
ROLLBACK;
-- ... fence_once under a fresh token too: no stranger records or probes
-- another job's effect key ...
BEGIN;
SELECT fence_begin_fresh('an admin fix') > 0 AS fresh;
SELECT fence_once('charge:order-1');
ROLLBACK;
-- ... while reading claims and writing as a fresh writer still work.
SELECT fence_current('report:1') IS NULL AS no_claim;
BEGIN;
SELECT fence_begin_fresh('an admin fix') > 0 AS fresh;
UPDATE acct SET v = 1;
COMMIT;
RESET ROLE;

-- Only a superuser or fence's owner may grant or revoke the worker API:
-- not the role itself, nor a role given EXECUTE on the grant function.
SET ROLE fence_regress_wk_worker;
SELECT fence_grant_worker('fence_regress_wk_worker');
RESET ROLE;
GRANT EXECUTE ON FUNCTION fence_grant_worker(regrole), fence_set_worker(regrole, bool)
   TO fence_regress_wk_worker;
\set VERBOSITY terse
SET ROLE fence_regress_wk_worker;
SELECT fence_grant_worker('fence_regress_wk_worker');
RESET ROLE;
\set VERBOSITY sqlstate
REVOKE EXECUTE ON FUNCTION fence_grant_worker(regrole), fence_set_worker(regrole, bool)
   FROM fence_regress_wk_worker;
SET ROLE fence_regress_wk_worker;
SELECT fence_revoke_worker('fence_regress_wk_nobody');
RESET ROLE;
-- bad input
SELECT fence_grant_worker(NULL);
SELECT fence_grant_worker('-');
SELECT fence_grant_worker('no_such_role');

-- The superuser grants the worker role: it claims, binds, writes, records
-- an effect key, renews and releases.
SELECT fence_grant_worker('fence_regress_wk_worker');
SELECT has_function_privilege('fence_regress_wk_worker', f, 'EXECUTE') AS may, count(*)
  FROM fence_worker_functions() f GROUP BY 1;
SET ROLE fence_regress_wk_worker;
SELECT fence_claim('report:1', '1 hour') AS t \gset
BEGIN;
SELECT fence_begin('report:1', :t);
SELECT fence_once('report:1:mail');
UPDATE acct SET v = 2;
COMMIT;
SELECT fence_renew('report:1', :t, '1 hour') > now() AS renewed;
SELECT fence_release('report:1', :t) AS released;
RESET ROLE;
SELECT v, writer_epoch = :t AS by_worker FROM acct;

-- The twin: once the plain role is granted (as under 1.0's defaults), it
-- can squat a free job name, and the real worker gets NULL.
SELECT fence_grant_worker('fence_regress_wk_nobody');
SET ROLE fence_regress_wk_nobody;
SELECT fence_claim('report:2', '1 day', 'squatter') IS NOT NULL AS squatted;
SET ROLE fence_regress_wk_worker;
SELECT fence_claim('report:2', '1 hour') IS NULL AS real_worker_refused;
RESET ROLE;

-- Revoked again: refused again.  A grant to a role the plain role belongs
-- to is what it runs with: revoking the role's own grant leaves it that.
SELECT fence_revoke_worker('fence_regress_wk_nobody');
SET ROLE fence_regress_wk_nobody;
SELECT fence_claim('report:3', '1 hour');
RESET ROLE;
SELECT fence_grant_worker('fence_regress_wk_helper');
SET ROLE fence_regress_wk_nobody;
SELECT fence_claim('report:3', '1 hour') IS NOT NULL AS claimed_through_helper;
RESET ROLE;
SELECT fence_revoke_worker('fence_regress_wk_helper');

-- fence_audit warns of the worker API granted to PUBLIC (as after an
-- update from 1.0), and is silent once it is not.
SELECT severity, problem FROM fence_audit();
GRANT EXECUTE ON FUNCTION fence_claim(text, interval, text) TO PUBLIC;
SELECT severity, problem, fix FROM fence_audit();
REVOKE EXECUTE ON FUNCTION fence_claim(text, interval, text) FROM PUBLIC;
SELECT severity, problem FROM fence_audit();

-- Each call is in the audit log, with who made it.
SELECT role = current_user AS by_superuser, action, detail FROM fence_audit_log
 WHERE action IN ('grant_worker', 'revoke_worker') ORDER BY id;

-- A rolled-back grant leaves neither the grant nor its record.
BEGIN;
SELECT fence_grant_worker('fence_regress_wk_nobody');
ROLLBACK;
SELECT has_function_privilege('fence_regress_wk_nobody', 'fence_claim(text, interval, text)', 'EXECUTE') AS may;
SELECT count(*) AS records FROM fence_audit_log WHERE action IN ('grant_worker', 'revoke_worker');

DROP TABLE acct;
DROP EXTENSION fence;
DROP ROLE fence_regress_wk_nobody, fence_regress_wk_worker, fence_regress_wk_helper;
