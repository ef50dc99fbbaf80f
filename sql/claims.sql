--
-- claims: the token arbiter.
-- fence_claim, fence_renew, fence_release, fence_current, fence_is_current,
-- the global token counter, leases, and bad input to all of them.
--
-- Token values and timestamps vary from run to run, so they are never
-- printed: they are kept in psql variables (\gset) and compared.
-- Errors are shown as their SQLSTATE (messages are in messages.sql).
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

--
-- A free job: a token is issued and recorded.
--
SELECT fence_claim('job-a', '1 hour', 'worker-1') AS ta \gset
SELECT :ta > 0 AS positive_token;
SELECT job, token = :ta AS token_recorded, holder, released,
       lease_expires_at BETWEEN now() + interval '58 minutes'
                            AND clock_timestamp() + interval '1 hour' AS lease_one_hour
  FROM fence_claims ORDER BY job;
SELECT fence_current('job-a') = :ta AS current_is_ta;
SELECT fence_is_current('job-a', :ta) AS ta_is_current;

-- A held job: another claim returns NULL (and changes nothing), whoever asks.
SELECT fence_claim('job-a') IS NULL AS held;
SELECT fence_claim('job-a', '1 hour', 'worker-2') IS NULL AS held;
SELECT token = :ta AS unchanged, holder FROM fence_claims WHERE job = 'job-a';

-- Defaults: a 5 minute lease and no holder.
SELECT fence_claim('job-b') AS tb \gset
SELECT holder IS NULL AS no_holder,
       lease_expires_at BETWEEN now() + interval '4 minutes 30 seconds'
                            AND clock_timestamp() + interval '5 minutes' AS lease_five_minutes
  FROM fence_claims WHERE job = 'job-b';

--
-- One counter for the whole database: every token is greater than every
-- token issued before it, across jobs.
--
SELECT fence_claim('job-c', '1 hour') AS tc \gset
SELECT :ta < :tb AND :tb < :tc AS increasing_across_jobs;
SELECT last_value >= :tc AS counter_at_or_past_last FROM fence_token_seq;

--
-- fence_release: conditional acknowledgement.
--
SELECT fence_release('job-a', :ta) AS released;
SELECT fence_current('job-a') IS NULL AS no_current_claim;
SELECT fence_is_current('job-a', :ta) AS ta_is_current;
SELECT released FROM fence_claims WHERE job = 'job-a';
-- releasing again: not the current claim any more, so false
SELECT fence_release('job-a', :ta) AS released_again;
-- a released job is free at once, with a token newer than all others
SELECT fence_claim('job-a', '1 hour') AS ta2 \gset
SELECT :ta2 > :tc AS reclaim_gets_newest_token;
SELECT released, token = :ta2 AS token_replaced FROM fence_claims WHERE job = 'job-a';
-- the old token cannot release the new claim
SELECT fence_release('job-a', :ta) AS stale_release;
SELECT fence_current('job-a') = :ta2 AS ta2_still_current;
-- a token of another job cannot release this one
SELECT fence_release('job-a', :tb) AS other_jobs_token;
SELECT fence_current('job-a') = :ta2 AS ta2_still_current;
-- an unknown job has nothing to release
SELECT fence_release('no-such-job', :ta) AS unknown_job;

--
-- Leases: an expired lease lets a new claim take over.
--
SELECT fence_claim('job-e', '1 millisecond', 'worker-1') AS te1 \gset
SELECT pg_sleep(0.02);
-- expired but not yet taken over: still the job's current claim
SELECT fence_current('job-e') = :te1 AS te1_current,
       fence_is_current('job-e', :te1) AS te1_is_current;
SELECT fence_claim('job-e', '1 hour', 'worker-2') AS te2 \gset
SELECT :te2 > :te1 AS takeover_token_is_newer;
SELECT fence_current('job-e') = :te2 AS te2_current,
       fence_is_current('job-e', :te1) AS te1_is_current,
       fence_is_current('job-e', :te2) AS te2_is_current;
SELECT holder FROM fence_claims WHERE job = 'job-e';
-- the superseded worker can neither renew (5F001) nor release (false)
SELECT fence_renew('job-e', :te1);
SELECT fence_renew('job-e', :te1, '1 hour');
SELECT fence_release('job-e', :te1) AS stale_release;
SELECT fence_current('job-e') = :te2 AS te2_still_current, released
  FROM fence_claims WHERE job = 'job-e';

--
-- fence_renew extends the current claim and returns the new expiry.
--
SELECT fence_renew('job-e', :te2, '2 hours') AS exp2 \gset
SELECT lease_expires_at = :'exp2'::timestamptz AS returns_stored_expiry,
       lease_expires_at BETWEEN now() + interval '1 hour 58 minutes'
                            AND clock_timestamp() + interval '2 hours' AS two_hours
  FROM fence_claims WHERE job = 'job-e';
-- the default lease is 5 minutes; renewing may also shorten a lease
SELECT fence_renew('job-e', :te2) BETWEEN now() + interval '4 minutes 30 seconds'
                                       AND clock_timestamp() + interval '5 minutes' AS five_minutes;
-- renewing an expired claim that nobody took over revives it
SELECT fence_claim('job-f', '1 millisecond') AS tf \gset
SELECT pg_sleep(0.02);
SELECT fence_renew('job-f', :tf, '1 hour') > clock_timestamp() AS revived;
SELECT fence_claim('job-f') IS NULL AS held_again;
-- a released claim cannot be renewed
SELECT fence_release('job-f', :tf) AS released;
SELECT fence_renew('job-f', :tf);
-- an unknown job, or another job's token: not the current claim
SELECT fence_renew('no-such-job', :tf);
SELECT fence_renew('job-e', :tc);
-- a token above the last one issued is not anyone's claim
SELECT fence_renew('job-e', :tc + 1000000);
SELECT fence_release('job-e', :tc + 1000000) AS forged_release;
SELECT fence_is_current('job-e', :tc + 1000000) AS forged_is_current;

--
-- fence_current / fence_is_current of unknown jobs
--
SELECT fence_current('no-such-job') IS NULL AS no_claim;
SELECT fence_is_current('no-such-job', :ta) AS unknown_job;
SELECT fence_is_current('job-b', :ta2) AS other_jobs_token;

--
-- A token is never reused: a claim rolled back burns its token, and a
-- claim row deleted by a superuser does not bring its token back.
--
BEGIN;
SELECT fence_claim('job-r', '1 hour') AS tr1 \gset
ROLLBACK;
SELECT fence_current('job-r') IS NULL AS rolled_back;
SELECT fence_claim('job-r', '1 hour') AS tr2 \gset
SELECT :tr2 > :tr1 AS never_reused;
DELETE FROM fence_claims WHERE job = 'job-r';
SELECT fence_current('job-r') IS NULL AS deleted;
SELECT fence_claim('job-r', '1 hour') AS tr3 \gset
SELECT :tr3 > :tr2 AS never_reused_after_delete;

-- Job names are compared exactly: case and spaces matter.
SELECT fence_claim('JOB-A', '1 hour') IS NOT NULL AS distinct_job,
       fence_claim(' job-a', '1 hour') IS NOT NULL AS distinct_job;

--
-- Bad input: a clear error, never a crash, never a silent NULL.
--
-- job: NULL 22004; empty, or longer than 1024 bytes 22023
SELECT fence_claim(NULL);
SELECT fence_claim(NULL, '1 hour', 'w');
SELECT fence_claim('');
SELECT fence_claim(repeat('x', 1025));
SELECT fence_claim(repeat('x', 1024)) IS NOT NULL AS claimed_1024_bytes;
-- the limit is in bytes: 513 two-byte characters are 1026 bytes
SELECT fence_claim(repeat(U&'\00e9', 513));
SELECT fence_claim(repeat(U&'\00e9', 512)) IS NOT NULL AS claimed_1024_bytes;
-- lease: NULL, zero or negative 22023
SELECT fence_claim('job-bad', NULL);
SELECT fence_claim('job-bad', '0');
SELECT fence_claim('job-bad', '-1 second');
SELECT fence_claim('job-bad', '1 day -25 hours');
-- none of these claimed anything
SELECT count(*) AS bad_claims FROM fence_claims WHERE job = 'job-bad' OR job = '' OR octet_length(job) > 1024;

SELECT fence_renew(NULL, :te2);
SELECT fence_renew('', :te2);
SELECT fence_renew(repeat('x', 1025), :te2);
SELECT fence_renew('job-e', NULL);
SELECT fence_renew('job-e', 0);
SELECT fence_renew('job-e', -1);
SELECT fence_renew('job-e', :te2, NULL);
SELECT fence_renew('job-e', :te2, '0');
SELECT fence_renew('job-e', :te2, '-5 minutes');

SELECT fence_release(NULL, :te2);
SELECT fence_release('', :te2);
SELECT fence_release(repeat('x', 1025), :te2);
SELECT fence_release('job-e', NULL);
SELECT fence_release('job-e', 0);
SELECT fence_release('job-e', -1);

SELECT fence_current(NULL);
SELECT fence_current('');
SELECT fence_current(repeat('x', 1025));

SELECT fence_is_current(NULL, :te2);
SELECT fence_is_current('', :te2);
SELECT fence_is_current(repeat('x', 1025), :te2);
SELECT fence_is_current('job-e', NULL);
SELECT fence_is_current('job-e', 0);
SELECT fence_is_current('job-e', -1);

-- after all that, job-e is still held by te2
SELECT fence_current('job-e') = :te2 AS te2_still_current, released
  FROM fence_claims WHERE job = 'job-e';

DROP EXTENSION fence;
