--
-- claim_api: how long and how large a claim may be, and who may renew or
-- release it.
--  (a) The objects: fence_claims.claimed_by (text), fence_release_any(text)
--      and fence_renew_any(text, interval), whose EXECUTE PUBLIC lacks.
--  (b) fence.max_lease, default 1 day: a longer lease raises 22023 in
--      fence_claim and fence_renew (a lease of exactly the maximum is
--      accepted). A superuser's SET changes it; a plain role's SET, SET
--      LOCAL, set_config, ALTER ROLE ... SET and connection option do not
--      (42501; the option is discarded with a WARNING). ALTER ROLE ... SET
--      by a superuser gives one role another maximum.
--  (c) holder: at most 1024 bytes (bytes, not characters): 22023 beyond.
--  (d) claimed_by: the role that made the claim (current_user), on a first
--      claim, a takeover and a claim after a release.
--  (e) A stranger (not a member of the claiming role): fence_release and
--      fence_renew with the right token raise 42501; with a wrong token
--      fence_release returns false and fence_renew raises 5F001 (5G001
--      for another job's token, 5G002 for one never issued); the
--      *_any functions are not executable (42501). Nothing changes. It can
--      still read the claim, bind its token (tokens are not secrets:
--      section 7), and claim, renew and release its own work.
--  (f) Members of the claiming role, roles sharing it, and superusers may.
--  (g) A role granted EXECUTE on fence_release_any / fence_renew_any may
--      release / renew any claim, with fence_release / fence_renew and
--      with the *_any functions; each grant covers its own function only.
--      The *_any functions on a job without an unreleased claim: false /
--      5F001. fence.max_lease holds for them too.
--  (h) claimed_by NULL (claims made before 1.1): unrestricted. A role that
--      no longer exists: superusers and *_any holders only.
--  (i) The issue's abuse cases: releasing a worker's token to claim its
--      job, a 100-year renew of a dead worker's 200 ms lease, a
--      100000-year lease, a 64 MB holder; and fence_release of mismatched
--      job and token keeps no lock (counted in pg_locks; seen from another
--      session in specs/stranger-release.spec).
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
SELECT current_user AS su \gset

CREATE ROLE fence_regress_capi_w1;
CREATE ROLE fence_regress_capi_w2;
CREATE ROLE fence_regress_capi_member;
GRANT fence_regress_capi_w1 TO fence_regress_capi_member;
CREATE ROLE fence_regress_capi_stranger LOGIN;
CREATE ROLE fence_regress_capi_supervisor;
CREATE ROLE fence_regress_capi_releaser;
CREATE ROLE fence_regress_capi_long LOGIN;
CREATE ROLE fence_regress_capi_gone;
-- the worker API is granted to no role until fence_grant_worker
SELECT fence_grant_worker('fence_regress_capi_w1');
SELECT fence_grant_worker('fence_regress_capi_w2');
SELECT fence_grant_worker('fence_regress_capi_member');
SELECT fence_grant_worker('fence_regress_capi_stranger');
SELECT fence_grant_worker('fence_regress_capi_supervisor');
SELECT fence_grant_worker('fence_regress_capi_releaser');
SELECT fence_grant_worker('fence_regress_capi_long');
SELECT fence_grant_worker('fence_regress_capi_gone');

-- fence's locks held by this session (section 6: 0x4601 tokens, 0x4602 jobs)
CREATE VIEW fence_locks_held AS
  SELECT count(*) AS fence_locks_held FROM pg_locks
   WHERE locktype = 'advisory' AND objsubid IN (17921, 17922) AND pid = pg_backend_pid();
GRANT SELECT ON fence_locks_held TO PUBLIC;

--
-- (a) The objects.
--
SELECT attname, atttypid::regtype AS type, attnotnull
  FROM pg_attribute WHERE attrelid = 'fence_claims'::regclass AND attname = 'claimed_by';
SELECT p.oid::regprocedure AS function, p.prorettype::regtype AS returns,
       pg_get_function_arguments(p.oid) AS arguments,
       p.prosecdef AS security_definer, p.proisstrict AS strict
  FROM pg_proc p
 WHERE p.proname IN ('fence_release_any', 'fence_renew_any')
 ORDER BY p.proname;
SELECT f AS function,
       has_function_privilege('fence_regress_capi_stranger', f, 'EXECUTE') AS stranger_may_execute
  FROM unnest(ARRAY['fence_release_any(text)', 'fence_renew_any(text, interval)']) AS f;
-- bad arguments, as in every function
SELECT fence_release_any(NULL);
SELECT fence_release_any('');
SELECT fence_renew_any(NULL);
SELECT fence_renew_any('x', NULL);
SELECT fence_renew_any('x', '-1 hour');

--
-- (b) fence.max_lease.
--
SHOW fence.max_lease;
SELECT fence_claim('cap-2d', '2 days');
SELECT fence_claim('cap-2d', '1 day 1 second');
SELECT fence_claim('cap-2d', '1 mon');
SELECT count(*) AS claims_recorded FROM fence_claims WHERE job = 'cap-2d';
-- exactly the maximum is accepted
SELECT fence_claim('cap-2d', '1 day') IS NOT NULL AS claimed_one_day;
SELECT fence_claim('cap-renew', '1 hour') AS tr \gset
SELECT fence_renew('cap-renew', :tr, '2 days');
SELECT fence_renew('cap-renew', :tr, '24 hours 1 second');
SELECT fence_renew('cap-renew', :tr, '1 day')
         BETWEEN now() + interval '23 hours' AND clock_timestamp() + interval '1 day' AS renewed_one_day;
-- a superuser lowers it for the session
SET fence.max_lease = '1h';
SHOW fence.max_lease;
SELECT fence_claim('cap-1h', '2 hours');
SELECT fence_claim('cap-1h', '1 hour') AS t1h \gset
SELECT fence_renew('cap-1h', :t1h, '61 minutes');
SELECT fence_renew('cap-1h', :t1h, '30 minutes') IS NOT NULL AS renewed;
-- ... or raises it
SET fence.max_lease = '2d';
SELECT fence_claim('cap-36h', '36 hours') IS NOT NULL AS claimed_36_hours;
RESET fence.max_lease;
SHOW fence.max_lease;
SELECT fence_claim('cap-36h-2', '36 hours');
-- a plain role cannot change it
SET ROLE fence_regress_capi_w1;
SET fence.max_lease = '100d';
BEGIN;
SET LOCAL fence.max_lease = '100d';
ROLLBACK;
SELECT set_config('fence.max_lease', '100d', false);
ALTER ROLE fence_regress_capi_w1 SET fence.max_lease = '100d';
SHOW fence.max_lease;
SELECT fence_claim('cap-w1', '2 days');
RESET ROLE;
-- nor with a connection option: it is discarded with a WARNING when fence
-- loads
\c -reuse-previous=on "user=fence_regress_capi_stranger options='-c fence.max_lease=100d'"
SELECT fence_claim('cap-opt', '3 days');
SHOW fence.max_lease;
\c -reuse-previous=on "options=''"
\c - :su
SELECT current_user = :'su' AS superuser_again;
-- ALTER ROLE ... SET by a superuser: that role's sessions get 2 days
ALTER ROLE fence_regress_capi_long SET fence.max_lease = '2d';
\c - fence_regress_capi_long
SELECT current_user;
SELECT fence_current('cap-long') IS NULL AS fence_loaded;
SHOW fence.max_lease;
SELECT fence_claim('cap-long', '36 hours') AS tlong \gset
SELECT :tlong > 0 AS claimed_36_hours;
SELECT fence_renew('cap-long', :tlong, '47 hours') IS NOT NULL AS renewed_47_hours;
SELECT fence_claim('cap-long-2', '3 days');
-- and it cannot raise its own maximum further
SET fence.max_lease = '100d';
ALTER ROLE fence_regress_capi_long SET fence.max_lease = '100d';
\c - :su
SELECT fence_current('cap-long') IS NOT NULL AS fence_loaded;
-- other roles keep the default
SHOW fence.max_lease;
SELECT fence_claim('cap-long-su', '36 hours');
SELECT r.rolname, s.setconfig
  FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
 WHERE r.rolname LIKE 'fence_regress_capi_%' ORDER BY 1;
ALTER ROLE fence_regress_capi_long RESET fence.max_lease;

--
-- (c) holder: at most 1024 bytes.
--
SELECT fence_claim('cap-h', '1 hour', repeat('h', 1025));
SELECT fence_claim('cap-h', '1 hour', repeat(chr(233), 513));   -- 513 characters, 1026 bytes
SELECT count(*) AS claims_recorded FROM fence_claims WHERE job = 'cap-h';
SELECT fence_claim('cap-h', '1 hour', repeat('h', 1024)) IS NOT NULL AS claimed;
SELECT fence_claim('cap-h2', '1 hour', repeat(chr(233), 512)) IS NOT NULL AS claimed;
SELECT job, octet_length(holder) AS holder_bytes FROM fence_claims WHERE job LIKE 'cap-h%' ORDER BY job;

--
-- (d) claimed_by.
--
-- the superuser's claims so far
SELECT job, claimed_by = :'su' AS claimed_by_superuser FROM fence_claims
 WHERE job IN ('cap-2d', 'cap-renew', 'cap-1h', 'cap-36h', 'cap-h', 'cap-h2') ORDER BY job;
SELECT job, claimed_by FROM fence_claims WHERE job = 'cap-long';
SET ROLE fence_regress_capi_w1;
SELECT fence_claim('w1-job', '1 hour', 'w1') AS tw1 \gset
SELECT fence_claim('w1-dead', '200 milliseconds', 'w1') AS tdead \gset
SELECT fence_claim('w1-old', '1 millisecond', 'w1') AS told \gset
SELECT fence_claim('w1-rel', '1 hour', 'w1') AS trel \gset
SELECT fence_release('w1-rel', :trel) AS released_own;
RESET ROLE;
SELECT pg_sleep(0.02);
-- takeover of the expired w1-old by w2; a claim of the released w1-rel by w2
SET ROLE fence_regress_capi_w2;
SELECT fence_claim('w1-old', '1 hour', 'w2') AS tw2 \gset
SELECT fence_claim('w1-rel', '1 hour', 'w2') AS tw2rel \gset
-- a claim that returns NULL changes nothing
SELECT fence_claim('w1-job', '1 hour', 'w2') IS NULL AS held;
RESET ROLE;
SELECT job, holder, claimed_by, released FROM fence_claims WHERE job LIKE 'w1-%' ORDER BY job;
SELECT token = :tw2 AS takeover_token FROM fence_claims WHERE job = 'w1-old';

--
-- (e) A stranger.
--
CREATE TEMP TABLE claims_before AS
  SELECT job, token, released, lease_expires_at, holder, claimed_by FROM fence_claims;
SET ROLE fence_regress_capi_stranger;
-- it can read the claim and its token
SELECT token = :tw1 AS token_in_plain_sight FROM fence_claims WHERE job = 'w1-job';
SELECT fence_current('w1-job') = :tw1 AS current, fence_is_current('w1-job', :tw1) AS is_current;
-- the right token: 42501
SELECT fence_release('w1-job', :tw1);
SELECT fence_renew('w1-job', :tw1, '1 hour');
SELECT fence_renew('w1-job', :tw1);
SELECT fence_release('w1-old', :tw2);
SELECT fence_renew('w1-dead', :tdead, '1 hour');
-- a wrong token: fence_release false; fence_renew 5G002 (never issued),
-- 5G001 (another job's, or a job never claimed), 5F001 (superseded)
SELECT fence_release('w1-job', :tw1 + 1000000) AS never_issued,
       fence_release('w1-job', :tdead) AS other_jobs_token,
       fence_release('w1-old', :told) AS superseded,
       fence_release('w1-rel', :trel) AS released_claim,
       fence_release('no-such-job', :tw1) AS no_such_job;
SELECT fence_renew('w1-job', :tw1 + 1000000);
SELECT fence_renew('w1-job', :tdead);
SELECT fence_renew('w1-old', :told);
SELECT fence_renew('no-such-job', :tw1);
-- the *_any functions: not executable
SELECT fence_release_any('w1-job');
SELECT fence_renew_any('w1-job', '1 hour');
SELECT fence_renew_any('w1-job');
-- binding the token is restricted as renewing it is: holding its lock
-- would keep every takeover of the job waiting (section 7)
BEGIN;
SELECT fence_begin('w1-job', :tw1);
ROLLBACK;
-- its own work: claim, renew, release
SELECT fence_claim('s-job', '1 hour', 'stranger') AS ts \gset
SELECT fence_renew('s-job', :ts, '2 hours') > now() + interval '1 hour' AS renewed_own;
SELECT fence_release('s-job', :ts) AS released_own;
RESET ROLE;
-- nothing the stranger tried changed a claim
SELECT b.job, c.token = b.token AS same_token, c.released = b.released AS same_released,
       c.lease_expires_at = b.lease_expires_at AS same_lease,
       c.claimed_by IS NOT DISTINCT FROM b.claimed_by AS same_claimed_by
  FROM claims_before b JOIN fence_claims c USING (job)
 WHERE b.job LIKE 'w1-%' ORDER BY b.job;
SELECT job, claimed_by FROM fence_claims WHERE job = 's-job';

--
-- (f) Members of the claiming role, another session of the same role, a
-- superuser.
--
SET ROLE fence_regress_capi_member;
SELECT fence_renew('w1-job', :tw1, '2 hours') > now() + interval '1 hour' AS member_renewed;
SELECT fence_release('w1-job', :tw1) AS member_released;
-- membership is one way: w1's member is no member of w2
SELECT fence_release('w1-old', :tw2);
RESET ROLE;
SET ROLE fence_regress_capi_w1;
SELECT fence_claim('w1-shared', '1 hour') AS tsh \gset
SELECT fence_claim('w1-su', '1 hour') AS tsu \gset
RESET ROLE;
-- all workers share one role: nothing changes for them
SET ROLE fence_regress_capi_w1;
SELECT fence_renew('w1-shared', :tsh, '2 hours') > now() + interval '1 hour' AS same_role_renewed;
SELECT fence_release('w1-shared', :tsh) AS same_role_released;
-- but w1 cannot touch w2's claim of w1-old
SELECT fence_renew('w1-old', :tw2);
SELECT fence_release('w1-old', :tw2);
RESET ROLE;
-- a superuser may
SELECT fence_renew('w1-su', :tsu, '2 hours') > now() + interval '1 hour' AS superuser_renewed;
SELECT fence_release('w1-su', :tsu) AS superuser_released;
SELECT fence_renew('w1-old', :tw2, '2 hours') > now() + interval '1 hour' AS superuser_renewed;
SELECT fence_release('w1-old', :tw2) AS superuser_released;

--
-- (g) Supervisors: EXECUTE on fence_release_any / fence_renew_any.
--
GRANT EXECUTE ON FUNCTION fence_release_any(text), fence_renew_any(text, interval)
   TO fence_regress_capi_supervisor;
GRANT EXECUTE ON FUNCTION fence_release_any(text) TO fence_regress_capi_releaser;
SELECT r AS role, f AS function, has_function_privilege(r, f, 'EXECUTE') AS may_execute
  FROM unnest(ARRAY['fence_regress_capi_supervisor', 'fence_regress_capi_releaser',
                    'fence_regress_capi_stranger']) AS r,
       unnest(ARRAY['fence_release_any(text)', 'fence_renew_any(text, interval)']) AS f
 ORDER BY 1, 2;
SET ROLE fence_regress_capi_w1;
SELECT fence_claim('sv-1', '1 hour') AS tsv1 \gset
SELECT fence_claim('sv-2', '1 hour') AS tsv2 \gset
SELECT fence_claim('sv-3', '1 hour') AS tsv3 \gset
SELECT fence_claim('sv-4', '1 hour') AS tsv4 \gset
SELECT fence_claim('sv-5', '1 millisecond') AS tsv5 \gset
RESET ROLE;
SELECT pg_sleep(0.02);
SET ROLE fence_regress_capi_supervisor;
-- with the plain functions and the right token
SELECT fence_renew('sv-1', :tsv1, '2 hours') > now() + interval '1 hour' AS supervisor_renewed;
SELECT fence_release('sv-1', :tsv1) AS supervisor_released;
-- a wrong token is still a wrong token
SELECT fence_release('sv-2', :tsv1) AS wrong_token;
SELECT fence_renew('sv-2', :tsv1);
-- with the *_any functions, whatever the token
SELECT fence_renew_any('sv-2', '2 hours')
         BETWEEN now() + interval '119 minutes' AND clock_timestamp() + interval '2 hours' AS renewed_any;
SELECT fence_renew_any('sv-2')
         BETWEEN now() + interval '4 minutes' AND clock_timestamp() + interval '5 minutes' AS default_five_minutes;
SELECT fence_release_any('sv-2') AS released_any;
SELECT fence_release_any('sv-2') AS released_again;
SELECT fence_renew_any('sv-2');
-- an expired claim that nobody replaced is still unreleased
SELECT fence_release_any('sv-5') AS released_expired;
-- a job never claimed
SELECT fence_release_any('never-claimed') AS released_never_claimed;
SELECT fence_renew_any('never-claimed');
-- the cap holds for supervisors: the issue's 100-year renew
SELECT fence_renew_any('sv-3', '100 years');
SELECT fence_renew_any('sv-3', '2 days');
SELECT fence_renew('sv-3', :tsv3, '100 years');
RESET ROLE;
SET ROLE fence_regress_capi_releaser;
-- EXECUTE on fence_release_any does not allow renewing
SELECT fence_renew('sv-4', :tsv4, '1 hour');
SELECT fence_renew_any('sv-4');
SELECT fence_release('sv-3', :tsv3) AS releaser_released;
SELECT fence_release_any('sv-4') AS releaser_released_any;
RESET ROLE;
-- a superuser may call them without a grant
SELECT fence_claim('sv-6', '1 hour') AS tsv6 \gset
SELECT fence_renew_any('sv-6', '2 hours') IS NOT NULL AS superuser_renewed_any;
SELECT fence_release_any('sv-6') AS superuser_released_any;
SELECT job, released FROM fence_claims WHERE job LIKE 'sv-%' ORDER BY job;
-- released jobs can be claimed at once
SELECT fence_claim('sv-2', '1 hour') IS NOT NULL AS reclaimed;

--
-- (h) Claims made before 1.1 (claimed_by NULL) and claims of a role that
-- no longer exists.
--
SET ROLE fence_regress_capi_w1;
SELECT fence_claim('legacy', '1 hour') AS tleg \gset
RESET ROLE;
UPDATE fence_claims SET claimed_by = NULL WHERE job = 'legacy';
SET ROLE fence_regress_capi_gone;
SELECT fence_claim('orphan-1', '1 hour') AS torph1 \gset
SELECT fence_claim('orphan-2', '1 hour') AS torph2 \gset
RESET ROLE;
SELECT fence_revoke_worker('fence_regress_capi_gone');
DROP ROLE fence_regress_capi_gone;
SELECT job, claimed_by FROM fence_claims WHERE job IN ('legacy', 'orphan-1', 'orphan-2') ORDER BY job;
SET ROLE fence_regress_capi_stranger;
SELECT fence_renew('legacy', :tleg, '2 hours') > now() + interval '1 hour' AS stranger_renewed_legacy;
SELECT fence_release('legacy', :tleg) AS stranger_released_legacy;
SELECT fence_renew('orphan-1', :torph1, '1 hour');
SELECT fence_release('orphan-1', :torph1);
RESET ROLE;
SET ROLE fence_regress_capi_member;
SELECT fence_release('orphan-1', :torph1);
RESET ROLE;
SET ROLE fence_regress_capi_supervisor;
SELECT fence_renew('orphan-1', :torph1, '2 hours') > now() + interval '1 hour' AS supervisor_renewed;
SELECT fence_release('orphan-1', :torph1) AS supervisor_released;
RESET ROLE;
SELECT fence_release('orphan-2', :torph2) AS superuser_released;

--
-- (i) The issue's abuse cases, by a role with no grants at all.
--
SET ROLE fence_regress_capi_w1;
SELECT fence_claim('victim', '1 hour', 'w1') AS tvic \gset
SELECT fence_claim('dead-victim', '200 milliseconds', 'w1') AS tdv \gset
RESET ROLE;
SET ROLE fence_regress_capi_stranger;
-- read a worker's token, release it, claim the job: 42501, NULL
SELECT fence_release('victim', token) FROM fence_claims WHERE job = 'victim';
SELECT fence_claim('victim', '1 hour', 'stranger') IS NULL AS still_held;
-- renew a dead worker's 200 ms lease by 100 years: refused
SELECT fence_renew('dead-victim', token, '100 years') FROM fence_claims WHERE job = 'dead-victim';
SELECT fence_renew('dead-victim', token, '1 hour') FROM fence_claims WHERE job = 'dead-victim';
-- a lease of 100000 years, a holder of 64 MB: 22023
SELECT fence_claim('abuse', '100000 years');
SELECT fence_claim('abuse', '1 hour', repeat('x', 64 * 1024 * 1024));
SELECT count(*) AS abuse_claims FROM fence_claims WHERE job = 'abuse';
-- release every token under a job that does not exist, in one open
-- transaction: every call answers false and no lock is kept
BEGIN;
SELECT count(*) AS calls, count(*) FILTER (WHERE fence_release('no-such-job', token)) AS released
  FROM fence_claims;
SELECT * FROM fence_locks_held;
-- fence_is_current takes no lock
SELECT count(*) FILTER (WHERE fence_is_current('no-such-job', token)) AS current FROM fence_claims;
SELECT * FROM fence_locks_held;
-- fence_renew and fence_begin raise 5G001 (each token is another job's); caught in a savepoint, their
-- locks go with it
\set VERBOSITY terse
DO $$
DECLARE
	t bigint;
	n int := 0;
	renew_refused int := 0;
	begin_refused int := 0;
BEGIN
	FOR t IN SELECT token FROM fence_claims LOOP
		n := n + 1;
		BEGIN
			PERFORM fence_renew('no-such-job', t, '1 hour');
		EXCEPTION WHEN SQLSTATE '5G001' THEN
			renew_refused := renew_refused + 1;
		END;
		BEGIN
			PERFORM fence_begin('no-such-job', t);
		EXCEPTION WHEN SQLSTATE '5G001' THEN
			begin_refused := begin_refused + 1;
		END;
	END LOOP;
	RAISE NOTICE 'of % tokens, fence_renew refused % and fence_begin refused % with 5G001',
		n, renew_refused, begin_refused;
END
$$;
\set VERBOSITY sqlstate
SELECT * FROM fence_locks_held;
COMMIT;
RESET ROLE;
-- the twin: the owner's release with the matching token keeps its lock
-- (meant to be held: a takeover answers NULL until its transaction ends)
SET ROLE fence_regress_capi_w1;
BEGIN;
SELECT fence_release('victim', :tvic) AS released;
SELECT * FROM fence_locks_held;
COMMIT;
RESET ROLE;
-- the dead worker's lease was not extended: the job is free
SELECT pg_sleep(0.25);
SELECT fence_claim('dead-victim', '1 hour', 'w2') IS NOT NULL AS taken_over;

DROP TABLE claims_before;
DROP VIEW fence_locks_held;
DROP EXTENSION fence;
DROP ROLE fence_regress_capi_w1;
DROP ROLE fence_regress_capi_w2;
DROP ROLE fence_regress_capi_member;
DROP ROLE fence_regress_capi_stranger;
DROP ROLE fence_regress_capi_supervisor;
DROP ROLE fence_regress_capi_releaser;
DROP ROLE fence_regress_capi_long;
