--
-- effects: fence_once(key), effect keys that absorb a repeat by a later,
-- legitimate execution (commit, then a crash before the claim is
-- released), and fence_prune_effects.
--  (a) Without a binding: 5F003, with a hint naming fence_begin.  A
--      binding made by the very statement that calls fence_once does not
--      count (5F003, as for a write).  From a trigger: 5F006.
--  (b) Bad input: NULL 22004; empty or over 1024 bytes 22023; 1024 bytes
--      is accepted.
--  (c) The first transaction to record a key gets true; after it commits,
--      any other gets false, whichever job or token it holds.  A second
--      call in the same transaction gets false: the effect is already part
--      of it.  A rollback, or a rollback to a savepoint taken before the
--      call, removes the record (true again); RELEASE SAVEPOINT keeps it.
--  (d) The record holds the binding's job and token; under
--      fence_begin_fresh, no job and the fresh token.
--  (e) The binding's token is checked as a write's is: released in the
--      same transaction, fence_once is refused with 5F001 (the twin
--      without the release records the key).
--  (f) The successor chain in one session: the execution that committed
--      and was then taken over does not enqueue twice; the twin without
--      fence_once does.
--  (g) Privileges: a plain role may call fence_once, and may neither read
--      nor write fence_effects (42501).  A DBA's trigger on fence_effects
--      fires for fence_once's insert.  fence_effects is config-dumped.
--  (h) fence_prune_effects deletes the keys older than its argument, in
--      batches, leaves the others; a pruned key answers true again (the
--      window the doc states); bad arguments 22023/22004; a plain role is
--      refused by PostgreSQL's own check (42501).
--  (i) fence_stats: effect_keys, effects_recorded (pruned ones still
--      counted), repeats_absorbed (counted where refusals are: 17 and
--      later without preloading).
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);
-- a queue the successor chain enqueues into (fence does not protect it)
CREATE TABLE q (id serial PRIMARY KEY, job text, payload text);
CREATE TABLE ledger (id serial PRIMARY KEY, what text, writer_epoch bigint);
SELECT fence_protect('ledger');
CREATE FUNCTION pg_temp.expire(j text) RETURNS void LANGUAGE sql AS
  $$ UPDATE fence_claims SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE job = j $$;
CREATE FUNCTION pg_temp.repeats() RETURNS bigint LANGUAGE sql AS
  $$ SELECT coalesce(repeats_absorbed, 0) FROM fence_stats $$;
INSERT INTO tok SELECT 'a1', fence_claim('job-a', '1 hour');

--
-- (a) no binding
--
SELECT fence_once('k-none');
BEGIN;
SELECT fence_once('k-none');
ROLLBACK;
\set VERBOSITY default
SELECT fence_once('k-none');
\set VERBOSITY sqlstate
-- a binding made by the calling statement itself does not count
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1')), fence_once('k-late');
ROLLBACK;
-- the same two calls as two statements: recorded
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once('k-late');
ROLLBACK;
-- from a trigger: 5F006, even with a binding
CREATE FUNCTION pg_temp.once_trigger() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN PERFORM fence_once('k-trigger-' || NEW.id); RETURN NEW; END $$;
CREATE TABLE trig_t (id int);
CREATE TRIGGER once_trg BEFORE INSERT ON trig_t FOR EACH ROW EXECUTE FUNCTION pg_temp.once_trigger();
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
INSERT INTO trig_t VALUES (1);
ROLLBACK;
DROP TABLE trig_t;

--
-- (b) bad input
--
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once(NULL);
ROLLBACK;
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once('');
ROLLBACK;
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once(repeat('x', 1025));
ROLLBACK;
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once(repeat('é', 513));	-- 1026 bytes
ROLLBACK;
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once(repeat('x', 1024));
ROLLBACK;
-- bad input is refused before the binding is looked at
SELECT fence_once(NULL);
SELECT fence_once('');

--
-- (c) first, repeat, rollback, savepoints
--
SELECT pg_temp.repeats() AS repeats_before \gset
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once('k1') AS first;
SELECT fence_once('k1') AS again_same_xact;
COMMIT;
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once('k1') AS repeat_after_commit;
COMMIT;
-- another job, another token: one namespace
INSERT INTO tok SELECT 'b1', fence_claim('job-b', '1 hour');
BEGIN;
SELECT fence_begin('job-b', (SELECT t FROM tok WHERE name = 'b1'));
SELECT fence_once('k1') AS other_job;
COMMIT;
-- rollback removes the record
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once('k2') AS first;
ROLLBACK;
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once('k2') AS after_rollback;
ROLLBACK;
-- a rollback to a savepoint taken before the call removes it
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SAVEPOINT s;
SELECT fence_once('k3') AS first;
ROLLBACK TO SAVEPOINT s;
SELECT fence_once('k3') AS after_rollback_to;
SAVEPOINT s2;
SELECT fence_once('k4') AS first;
RELEASE SAVEPOINT s2;
SELECT fence_once('k4') AS after_release;
COMMIT;
SELECT key FROM fence_effects WHERE key IN ('k2', 'k3', 'k4') ORDER BY key;
-- a savepoint taken after the call does not remove it
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once('k5') AS first;
SAVEPOINT s;
ROLLBACK TO SAVEPOINT s;
SELECT fence_once('k5') AS kept;
COMMIT;
-- five false answers so far (k1 three times, k4, k5), counted where
-- refusals are (17 and later here; preloaded, t/009_stats.pl)
SELECT CASE WHEN (SELECT refusals_counted FROM fence_stats)
			THEN pg_temp.repeats() - :repeats_before
			ELSE 5 END AS repeats_absorbed;

--
-- (d) what is recorded
--
SELECT f.key, f.job, f.token = (SELECT t FROM tok WHERE name = 'a1') AS a1_token,
	   f.recorded_at <= now() AS recorded_in_past
  FROM fence_effects f WHERE key IN ('k1', 'k3') ORDER BY key;
BEGIN;
SELECT fence_begin_fresh(NULL) AS fresh \gset
SELECT fence_once('k-fresh');
COMMIT;
SELECT job IS NULL AS no_job, token = :fresh AS fresh_token FROM fence_effects WHERE key = 'k-fresh';

--
-- (e) the binding's token is checked: released in the transaction, 5F001
--
INSERT INTO tok SELECT 'c1', fence_claim('job-c', '1 hour');
BEGIN;
SELECT fence_begin('job-c', (SELECT t FROM tok WHERE name = 'c1'));
SELECT fence_release('job-c', (SELECT t FROM tok WHERE name = 'c1'));
SELECT fence_once('k-released');
ROLLBACK;
-- twin: without the release, recorded
BEGIN;
SELECT fence_begin('job-c', (SELECT t FROM tok WHERE name = 'c1'));
SELECT fence_once('k-released');
ROLLBACK;
-- a stale token cannot even bind: fence_begin refuses (5F001) before any key
SELECT pg_temp.expire('job-c');
INSERT INTO tok SELECT 'c2', fence_claim('job-c', '1 hour');
BEGIN;
SELECT fence_begin('job-c', (SELECT t FROM tok WHERE name = 'c1'));
ROLLBACK;

--
-- (f) the successor chain, one step at a time in one session
--
CREATE FUNCTION pg_temp.step(j text, tk bigint, keyed boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fence_begin(j, tk);
	IF NOT keyed OR fence_once(j || ':effect') THEN
		INSERT INTO ledger (what) VALUES ('effect of ' || j);
	END IF;
	IF NOT keyed OR fence_once(j || ':next') THEN
		INSERT INTO q (job, payload) VALUES (j || '-next', 'successor');
	END IF;
END $$;
-- keyed: execution 1 commits, "crashes" before fence_release; the job comes
-- back, execution 2 claims it after the lease and runs the same step
INSERT INTO tok SELECT 'd1', fence_claim('job-d', '1 hour');
BEGIN;
SELECT pg_temp.step('job-d', (SELECT t FROM tok WHERE name = 'd1'), true);
COMMIT;
SELECT pg_temp.expire('job-d');
INSERT INTO tok SELECT 'd2', fence_claim('job-d', '1 hour');
BEGIN;
SELECT pg_temp.step('job-d', (SELECT t FROM tok WHERE name = 'd2'), true);
COMMIT;
SELECT fence_release('job-d', (SELECT t FROM tok WHERE name = 'd2'));
-- the stale execution 1 is fenced (5F001) and enqueues nothing
BEGIN;
SELECT pg_temp.step('job-d', (SELECT t FROM tok WHERE name = 'd1'), true);
ROLLBACK;
SELECT count(*) AS effects FROM ledger WHERE what = 'effect of job-d';
SELECT count(*) AS successors FROM q WHERE job = 'job-d-next';
-- twin without fence_once: applied twice, two successors
INSERT INTO tok SELECT 'e1', fence_claim('job-e', '1 hour');
BEGIN;
SELECT pg_temp.step('job-e', (SELECT t FROM tok WHERE name = 'e1'), false);
COMMIT;
SELECT pg_temp.expire('job-e');
INSERT INTO tok SELECT 'e2', fence_claim('job-e', '1 hour');
BEGIN;
SELECT pg_temp.step('job-e', (SELECT t FROM tok WHERE name = 'e2'), false);
COMMIT;
SELECT count(*) AS effects FROM ledger WHERE what = 'effect of job-e';
SELECT count(*) AS successors FROM q WHERE job = 'job-e-next';

--
-- (g) privileges, a DBA's trigger, config dump
--
CREATE ROLE fence_regress_effects_w;
-- the worker API is granted to no role until fence_grant_worker
SELECT fence_grant_worker('fence_regress_effects_w');
GRANT SELECT, INSERT ON tok TO fence_regress_effects_w;
SET ROLE fence_regress_effects_w;
INSERT INTO tok SELECT 'w1', fence_claim('job-w', '1 hour');
RESET ROLE;
SET ROLE fence_regress_effects_w;
BEGIN;
SELECT fence_begin('job-w', (SELECT t FROM tok WHERE name = 'w1'));
SELECT fence_once('k-w') AS plain_role;
COMMIT;
SELECT count(*) FROM fence_effects;
INSERT INTO fence_effects (key, token) VALUES ('forged', 1);
UPDATE fence_effects SET key = 'x';
DELETE FROM fence_effects;
TRUNCATE fence_effects;
RESET ROLE;
SELECT key, job FROM fence_effects WHERE key = 'k-w';
-- a DBA's trigger on fence_effects sees fence_once's insert
CREATE TABLE effects_log (key text, by_role name);
CREATE FUNCTION effects_log_trg() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN INSERT INTO public.effects_log VALUES (NEW.key, current_user); RETURN NEW; END $$;
CREATE TRIGGER log_effects AFTER INSERT ON fence_effects
  FOR EACH ROW EXECUTE FUNCTION effects_log_trg();
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once('k-logged');
SELECT fence_once('k1');	-- a repeat inserts nothing
COMMIT;
SELECT key, by_role = (SELECT relowner::regrole::name FROM pg_class WHERE oid = 'fence_effects'::regclass) AS as_owner
  FROM effects_log;
DROP TRIGGER log_effects ON fence_effects;
DROP FUNCTION effects_log_trg();
DROP TABLE effects_log;
SELECT 'fence_effects'::regclass = ANY (extconfig) AS config_dumped
  FROM pg_extension WHERE extname = 'fence';

--
-- (h) fence_prune_effects
--
SELECT effect_keys AS keys_before, effects_recorded AS recorded_before FROM fence_stats \gset
UPDATE fence_effects SET recorded_at = now() - interval '2 days' WHERE key IN ('k1', 'k3', 'k4', 'k5');
CALL fence_prune_effects('1 day', 3);
SELECT key FROM fence_effects WHERE key IN ('k1', 'k3', 'k4', 'k5', 'k-w', 'k-fresh', 'k-logged') ORDER BY key;
SELECT :keys_before - effect_keys AS pruned, effects_recorded - :recorded_before AS recorded_delta
  FROM fence_stats;
-- a pruned key is no longer detected: the stated window
BEGIN;
SELECT fence_begin('job-a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT fence_once('k1') AS after_prune;
ROLLBACK;
CALL fence_prune_effects('-1 day');
CALL fence_prune_effects('1 day', 0);
CALL fence_prune_effects('1 day', 100001);
CALL fence_prune_effects(NULL);
SET ROLE fence_regress_effects_w;
CALL fence_prune_effects('1 day');
RESET ROLE;

--
-- (i) fence_stats, read by a plain role
--
SET ROLE fence_regress_effects_w;
SELECT effect_keys > 0 AS has_keys, effects_recorded >= effect_keys AS recorded_ge,
	   (repeats_absorbed IS NOT NULL) = refusals_counted AS repeats_where_counted
  FROM fence_stats;
RESET ROLE;

DROP OWNED BY fence_regress_effects_w;
DROP ROLE fence_regress_effects_w;
SELECT fence_unprotect('ledger');
DROP TABLE q, ledger, tok;
DROP EXTENSION fence;
