--
-- prune: fence_prune(older_than, batch) deletes finished claims.
--  (a) It deletes released claims and claims whose lease expired longer
--      ago than older_than; it keeps live claims and claims that expired
--      more recently.  It commits after each batch: with batch 2, five
--      prunable rows take three batches, each recorded once in
--      fence_audit_log ('prune'), and fence_stats still counts the pruned
--      rows' claims, takeovers, renewals and releases (fence_pruned).
--  (b) A stale worker of a pruned claim is still fenced: its token is in no
--      row and below the counter, so it reads as superseded (5F001), in
--      the statement's epoch and in fence_begin.  The twin: the same stale
--      write on the unprotected table lands over the newer one.
--  (c) A pruned job can be claimed again, with a token above every token
--      issued before (a first claim: the insert path).
--  (d) Rules: a plain role gets 42501 (it does not own fence_claims);
--      inside a transaction block the procedure cannot commit (2D000);
--      batch outside 1..100000 and a negative older_than: 22023; NULL
--      arguments: 22004.
-- A row that a writer still holds is skipped: specs/prune-race.spec.in.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);
CREATE TABLE pr (id int PRIMARY KEY, v text, writer_epoch bigint);
CREATE TABLE pr_plain (LIKE pr INCLUDING ALL);
INSERT INTO pr VALUES (1, 'init', NULL);
INSERT INTO pr_plain VALUES (1, 'init', NULL);
SELECT fence_protect('pr');
CREATE FUNCTION pg_temp.expire(j text, ago interval) RETURNS void LANGUAGE sql AS
  $$ UPDATE fence_claims SET lease_expires_at = clock_timestamp() - ago WHERE job = j $$;

-- released: r1 (renewed first), r2; expired two days ago: old1 (taken over
-- once before), old2; expired an hour ago: recent; live: live
INSERT INTO tok SELECT 'r1', fence_claim('r1', '1 hour');
SELECT fence_renew('r1', (SELECT t FROM tok WHERE name = 'r1'), '1 hour') IS NOT NULL AS renewed;
SELECT fence_release('r1', (SELECT t FROM tok WHERE name = 'r1'));
INSERT INTO tok SELECT 'r2', fence_claim('r2', '1 hour');
SELECT fence_release('r2', (SELECT t FROM tok WHERE name = 'r2'));
INSERT INTO tok SELECT 'old1-a', fence_claim('old1', '1 hour');
SELECT pg_temp.expire('old1', '1 second');
INSERT INTO tok SELECT 'old1-b', fence_claim('old1', '1 hour');   -- a takeover
SELECT pg_temp.expire('old1', '2 days');
INSERT INTO tok SELECT 'old2', fence_claim('old2', '1 hour');
SELECT pg_temp.expire('old2', '2 days');
INSERT INTO tok SELECT 'old3', fence_claim('old3', '1 hour');
SELECT pg_temp.expire('old3', '3 days');
INSERT INTO tok SELECT 'recent', fence_claim('recent', '1 hour');
SELECT pg_temp.expire('recent', '1 hour');
INSERT INTO tok SELECT 'live', fence_claim('live', '1 hour');
-- old1-b writes row 1 (on both tables)
BEGIN;
SELECT fence_begin('old1', (SELECT t FROM tok WHERE name = 'old1-b'));
UPDATE pr SET v = 'old1-b' WHERE id = 1;
COMMIT;
UPDATE pr_plain SET v = 'old1-b', writer_epoch = (SELECT t FROM tok WHERE name = 'old1-b') WHERE id = 1;

SELECT jobs, claims, takeovers, renewals, releases, pruned FROM fence_stats;

--
-- (a) prune
--
CALL fence_prune('1 day', 2);
SELECT job FROM fence_claims ORDER BY job;
SELECT jobs, claims, takeovers, renewals, releases, pruned FROM fence_stats;
SELECT pruned, claims, takeovers, renewals, releases FROM fence_pruned;
SELECT role = current_user AS by_me, action, detail FROM fence_audit_log
 WHERE action = 'prune' ORDER BY id;
-- nothing left to prune: no batch deletes, no audit row
CALL fence_prune('1 day');
SELECT count(*) AS prune_rows FROM fence_audit_log WHERE action = 'prune';
-- a shorter older_than takes the recent one too; live stays
CALL fence_prune('0 seconds');
SELECT job FROM fence_claims ORDER BY job;

--
-- (b) the stale worker of a pruned claim (old1-a, taken over by old1-b,
-- whose claim was pruned too) and old1-b itself are fenced
--
UPDATE pr SET v = 'stale', writer_epoch = (SELECT t FROM tok WHERE name = 'old1-a') WHERE id = 1;
\echo :SQLSTATE
BEGIN;
SELECT fence_begin('old1', (SELECT t FROM tok WHERE name = 'old1-b'));
\echo :SQLSTATE
ROLLBACK;
-- the twin: on the plain table the stale write lands over old1-b's
UPDATE pr_plain SET v = 'stale', writer_epoch = (SELECT t FROM tok WHERE name = 'old1-a') WHERE id = 1;
SELECT 'pr' AS tbl, v FROM pr UNION ALL SELECT 'pr_plain', v FROM pr_plain ORDER BY 1;

--
-- (c) claimed again, above every token issued before
--
INSERT INTO tok SELECT 'old1-c', fence_claim('old1', '1 hour');
SELECT (SELECT t FROM tok WHERE name = 'old1-c') > (SELECT max(t) FROM tok WHERE name <> 'old1-c') AS above_all;
BEGIN;
SELECT fence_begin('old1', (SELECT t FROM tok WHERE name = 'old1-c'));
UPDATE pr SET v = 'old1-c' WHERE id = 1;
COMMIT;
SELECT v FROM pr;

--
-- (d) rules
--
CREATE ROLE fence_regress_prune_plain;
SET ROLE fence_regress_prune_plain;
CALL fence_prune('1 day');
\echo :SQLSTATE
RESET ROLE;
DROP ROLE fence_regress_prune_plain;
BEGIN;
CALL fence_prune('1 day');
\echo :SQLSTATE
ROLLBACK;
CALL fence_prune('1 day', 0);
\echo :SQLSTATE
CALL fence_prune('1 day', 100001);
\echo :SQLSTATE
CALL fence_prune('-1 day');
\echo :SQLSTATE
CALL fence_prune(NULL);
\echo :SQLSTATE

SELECT fence_unprotect('pr');
DROP TABLE pr, pr_plain, tok;
DROP EXTENSION fence;
