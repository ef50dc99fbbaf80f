-- examples/schema.sql: the tables every example in examples/ works on.
--
--   psql -X -v ON_ERROR_STOP=1 -d app -f examples/schema.sql
--
-- counters is the protected table: one row per counter, and the job
-- "count:ID" adds one to the row ID (read, work, write back). Strict mode (the
-- default): each execution writes its row once, so an execution that claimed
-- before a newer writer of the row is refused (5F002), as well as one whose
-- claim was taken over (5F001).
-- counters_unprotected is its twin without fence, for comparison: the same
-- race there loses an update.
-- counter_history is where the maintenance job (examples/shell) moves the
-- counts when it rolls the counters over.

CREATE EXTENSION IF NOT EXISTS fence;

CREATE TABLE counters (
	id           text PRIMARY KEY,
	value        bigint NOT NULL DEFAULT 0,
	writer_epoch bigint NOT NULL DEFAULT 0
);
SELECT fence_protect('counters');

CREATE TABLE counters_unprotected (LIKE counters INCLUDING ALL);

CREATE TABLE counter_history (
	id        text NOT NULL,
	value     bigint NOT NULL,
	rolled_at timestamptz NOT NULL DEFAULT now()
);
