--
-- begin: fence_begin binds a token to the current transaction.
-- Every write to a protected table until COMMIT or ROLLBACK carries it;
-- nothing survives the transaction; a binding made in a savepoint that is
-- rolled back is undone; PREPARE TRANSACTION is refused.
-- (The lock side of the binding, seen from another session, is in
-- specs/claim-writer.spec.in and specs/savepoint.spec.in.)
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

-- repeat mode, so one execution may write the same row several times here
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, writer_epoch bigint);
INSERT INTO acct VALUES (1, 100, NULL), (2, 200, NULL), (3, 300, NULL);
SELECT fence_protect('acct', 'writer_epoch', 'repeat');

SELECT fence_claim('job-1', '1 hour') AS t1 \gset

--
-- The binding covers every statement of the transaction: UPDATE (which
-- does not assign the epoch column), INSERT (which leaves it out) and
-- DELETE (which can carry no token of its own). The guard stamps the token.
--
BEGIN;
SELECT fence_begin('job-1', :t1);
UPDATE acct SET balance = balance + 1 WHERE id = 1;
INSERT INTO acct (id, balance) VALUES (4, 400);
INSERT INTO acct VALUES (5, 500, 0);      -- 0 means "no token in the statement"
INSERT INTO acct VALUES (6, 600, NULL);   -- so does NULL
DELETE FROM acct WHERE id = 3;
-- binding the same token again is harmless
SELECT fence_begin('job-1', :t1);
UPDATE acct SET balance = balance + 1 WHERE id = 1;
COMMIT;
SELECT id, balance, writer_epoch = :t1 AS stamped_t1 FROM acct ORDER BY id;

-- Nothing survives the transaction.
UPDATE acct SET balance = 0 WHERE id = 2;
DELETE FROM acct WHERE id = 2;
-- fence_begin outside a transaction block binds only its own statement
SELECT fence_begin('job-1', :t1);
UPDATE acct SET balance = 0 WHERE id = 2;
-- a rolled-back transaction leaves no binding and no write behind
BEGIN;
SELECT fence_begin('job-1', :t1);
UPDATE acct SET balance = -1 WHERE id = 2;
ROLLBACK;
UPDATE acct SET balance = 0 WHERE id = 2;
SELECT id, balance, writer_epoch IS NULL AS never_written FROM acct WHERE id = 2;

--
-- fence_begin refuses any token that is not the job's current claim: 5F001
-- superseded; the caller's bugs 5G001 (another job's token, or a job never
-- claimed) and 5G002 (never issued).
-- The transaction is aborted, so nothing it goes on to write can commit.
--
-- superseded by a newer claim after the lease expired
SELECT fence_claim('job-2', '1 millisecond') AS t2old \gset
SELECT pg_sleep(0.02);
SELECT fence_claim('job-2', '1 hour') AS t2 \gset
BEGIN;
SELECT fence_begin('job-2', :t2old);
UPDATE acct SET balance = 0 WHERE id = 2;
COMMIT;
-- released
SELECT fence_claim('job-3', '1 hour') AS t3 \gset
SELECT fence_release('job-3', :t3) AS released;
SELECT fence_begin('job-3', :t3);
-- a token of another job
SELECT fence_begin('job-1', :t2);
-- a job that was never claimed
SELECT fence_begin('no-such-job', :t1);
-- a token above the last one issued (forged)
SELECT fence_begin('job-1', :t3 + 1000000);
-- expired but not taken over: still current, so it binds
SELECT fence_claim('job-4', '1 millisecond') AS t4 \gset
SELECT pg_sleep(0.02);
BEGIN;
SELECT fence_begin('job-4', :t4);
UPDATE acct SET balance = balance + 4 WHERE id = 4;
COMMIT;
SELECT balance, writer_epoch = :t4 AS stamped_t4 FROM acct WHERE id = 4;

-- bad input
SELECT fence_begin(NULL, :t1);
SELECT fence_begin('', :t1);
SELECT fence_begin(repeat('x', 1025), :t1);
SELECT fence_begin('job-1', NULL);
SELECT fence_begin('job-1', 0);
SELECT fence_begin('job-1', -1);

--
-- Savepoints.
--
-- A binding made in a savepoint that is rolled back is undone.
BEGIN;
SAVEPOINT s;
SELECT fence_begin('job-1', :t1);
ROLLBACK TO SAVEPOINT s;
UPDATE acct SET balance = balance + 1 WHERE id = 1;
ROLLBACK;
-- ... and a statement token is not confused with the rolled-back binding
BEGIN;
SAVEPOINT s;
SELECT fence_begin('job-1', :t1);
ROLLBACK TO SAVEPOINT s;
UPDATE acct SET balance = balance + 1, writer_epoch = :t2 WHERE id = 1;
COMMIT;
SELECT balance, writer_epoch = :t2 AS stamped_t2 FROM acct WHERE id = 1;
-- A binding made in a savepoint that is released belongs to the transaction.
BEGIN;
SAVEPOINT s;
SELECT fence_begin('job-2', :t2);
RELEASE SAVEPOINT s;
UPDATE acct SET balance = balance + 1 WHERE id = 1;
-- ... and survives a later savepoint's rollback
SAVEPOINT s2;
UPDATE acct SET balance = balance / 0 WHERE id = 1;
ROLLBACK TO SAVEPOINT s2;
UPDATE acct SET balance = balance + 1 WHERE id = 1;
COMMIT;
SELECT balance, writer_epoch = :t2 AS stamped_t2 FROM acct WHERE id = 1;
-- A binding made at top level survives the rollback of a savepoint that
-- bound the same token again.
BEGIN;
SELECT fence_begin('job-2', :t2);
SAVEPOINT s;
SELECT fence_begin('job-2', :t2);
ROLLBACK TO SAVEPOINT s;
UPDATE acct SET balance = balance + 1 WHERE id = 1;
COMMIT;
SELECT balance, writer_epoch = :t2 AS stamped_t2 FROM acct WHERE id = 1;

-- Binding another job's token replaces the binding (the first job stays
-- held until the transaction ends); rolling back the savepoint that made
-- the new binding restores the previous one.
SELECT fence_claim('job-5', '1 hour') AS t5 \gset
BEGIN;
SELECT fence_begin('job-2', :t2);
SAVEPOINT s;
SELECT fence_begin('job-5', :t5);
INSERT INTO acct (id, balance) VALUES (7, 700);
ROLLBACK TO SAVEPOINT s;
INSERT INTO acct (id, balance) VALUES (8, 800);
SELECT fence_begin('job-5', :t5);
INSERT INTO acct (id, balance) VALUES (9, 900);
COMMIT;
SELECT id, writer_epoch = :t2 AS stamped_t2, writer_epoch = :t5 AS stamped_t5
  FROM acct WHERE id >= 7 ORDER BY id;

--
-- PREPARE TRANSACTION is refused (0A000) in a transaction that used a fence
-- token, through fence_begin or through a guarded write carrying its own
-- token. The transaction is rolled back: its writes are gone.
-- (Checked before max_prepared_transactions is, so the result does not
-- depend on that setting.)
--
BEGIN;
SELECT fence_begin('job-4', :t4);
UPDATE acct SET balance = 7 WHERE id = 1;
PREPARE TRANSACTION 'fence_regress_p1';
BEGIN;
UPDATE acct SET balance = 8, writer_epoch = :t4 WHERE id = 2;
PREPARE TRANSACTION 'fence_regress_p2';
SELECT id, balance, writer_epoch = :t2 AS stamped_t2 FROM acct WHERE id IN (1, 2) ORDER BY id;
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid LIKE 'fence_regress_%';
-- (should PREPARE ever succeed, do not leave it holding locks)
SELECT format('ROLLBACK PREPARED %L', gid) FROM pg_prepared_xacts
 WHERE gid LIKE 'fence_regress_%' \gexec
-- the refused transaction left no binding behind
UPDATE acct SET balance = 0 WHERE id = 1;

DROP TABLE acct;
DROP EXTENSION fence;
