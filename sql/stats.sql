--
-- stats: the fence_stats and fence_status views.
--  (a) fence_stats counts jobs, live claims, stuck claims (lease expired,
--      never released) and released ones; and sums the claim rows'
--      counters: claims (first claims and re-claims), takeovers (claims
--      over an unreleased claim), renewals, releases.  Each kind of event
--      moves exactly its own counter.
--  (b) Without fence in shared_preload_libraries, refused writes are
--      counted on 17 and later (the DSM registry), and not on 15 and 16:
--      there refusals_counted is false and the refused_5f00N columns are
--      NULL, even after a refusal.  (Preloaded, and every count exactly:
--      t/009_stats.pl.)
--  (c) fence_status: one row per claim, its state held, released,
--      expired_claimable or expired_blocked; an expired claim whose token
--      is held by an open transaction is blocked, with that backend's pid,
--      and fence_claim answers NULL for it; once the transaction ends it is
--      claimable, and the claim is a takeover.
--  (d) A plain role can read both views.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);
CREATE TABLE st (id int PRIMARY KEY, v text, writer_epoch bigint);
INSERT INTO st VALUES (1, 'init', NULL);
SELECT fence_protect('st');
-- expire a claim without waiting for its lease
CREATE FUNCTION pg_temp.expire(j text) RETURNS void LANGUAGE sql AS
  $$ UPDATE fence_claims SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE job = j $$;
CREATE TEMP VIEW counts AS
  SELECT jobs, live_claims, stuck_claims, released_claims, claims, takeovers, renewals, releases
    FROM fence_stats;

--
-- (a) each event moves its own counter
--
SELECT * FROM counts;
INSERT INTO tok SELECT 'a1', fence_claim('a', '1 hour');
SELECT * FROM counts;                                    -- one job, one claim
SELECT fence_renew('a', (SELECT t FROM tok WHERE name = 'a1'), '2 hours') IS NOT NULL AS renewed;
SELECT * FROM counts;                                    -- a renewal
SELECT fence_release('a', (SELECT t FROM tok WHERE name = 'a1'));
SELECT * FROM counts;                                    -- a release; released_claims 1
INSERT INTO tok SELECT 'a2', fence_claim('a', '1 hour');
SELECT * FROM counts;                                    -- a claim after a release: no takeover
INSERT INTO tok SELECT 'b1', fence_claim('b', '1 hour');
SELECT pg_temp.expire('b');
SELECT * FROM counts;                                    -- b is stuck
INSERT INTO tok SELECT 'b2', fence_claim('b', '1 hour');
SELECT * FROM counts;                                    -- a takeover
-- refused calls change nothing
SELECT fence_renew('b', (SELECT t FROM tok WHERE name = 'b1'), '1 hour');
SELECT fence_release('b', (SELECT t FROM tok WHERE name = 'b1'));
SELECT fence_claim('b', '1 hour');                       -- held: NULL
SELECT * FROM counts;

--
-- (b) not preloaded: refusals are counted where the major has the DSM registry
--
UPDATE st SET v = 'no token' WHERE id = 1;
SELECT refusals_counted = (current_setting('server_version_num')::int >= 170000)
           AS counted_iff_dsm_registry,
       CASE WHEN refusals_counted
            THEN refused_5f003 >= 1 AND refused_5f001 IS NOT NULL
            ELSE num_nulls(refused_5f001, refused_5f002, refused_5f003,
                           refused_5f004, refused_5f005, refused_5f006) = 6
       END AS columns_agree
  FROM fence_stats;
SELECT (fence_refusal_counts() IS NOT NULL) = (current_setting('server_version_num')::int >= 170000)
           AS counts_iff_dsm_registry;

--
-- (c) fence_status
--
SELECT job, state, lock_pid, n_claims, n_takeovers, n_renewals, n_releases
  FROM fence_status ORDER BY job;
INSERT INTO tok SELECT 'c1', fence_claim('c', '1 hour');
BEGIN;
SELECT fence_begin('c', (SELECT t FROM tok WHERE name = 'c1'));
UPDATE st SET v = 'c' WHERE id = 1;
SELECT pg_temp.expire('c');
-- expired, and this transaction holds its token: blocked, by this backend
SELECT job, state, lock_pid = pg_backend_pid() AS blocked_by_me
  FROM fence_status WHERE job = 'c';
COMMIT;
SELECT job, state, lock_pid FROM fence_status WHERE job = 'c';
SELECT fence_release('a', (SELECT t FROM tok WHERE name = 'a2'));
SELECT job, state, lock_pid, n_claims, n_takeovers, n_renewals, n_releases
  FROM fence_status ORDER BY job;
INSERT INTO tok SELECT 'c2', fence_claim('c', '1 hour');
SELECT job, state, n_claims, n_takeovers FROM fence_status WHERE job = 'c';

--
-- (d) a plain role reads both views
--
CREATE ROLE fence_regress_stats_reader;
SET ROLE fence_regress_stats_reader;
SELECT jobs, claims, takeovers FROM fence_stats;
SELECT count(*) FROM fence_status;
RESET ROLE;
DROP ROLE fence_regress_stats_reader;

SELECT fence_unprotect('st');
DROP VIEW counts;
DROP TABLE st, tok;
DROP EXTENSION fence;
