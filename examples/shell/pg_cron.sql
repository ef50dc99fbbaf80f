-- examples/shell/pg_cron.sql: the rollover of rollover.sh as a pg_cron job.
--
--   psql -X -v ON_ERROR_STOP=1 -d app -f examples/shell/pg_cron.sql
--   psql ... -v schedule='*/5 * * * *' -v prefix='eu-' -f examples/shell/pg_cron.sql
--
-- pg_cron (Debian: postgresql-N-cron, N your PostgreSQL major) must be
-- loaded at server start and told the database it schedules in, in
-- postgresql.conf:
--     shared_preload_libraries = 'pg_cron'
--     cron.database_name = 'app'
-- (and cron.host = '/var/run/postgresql' if the server does not listen on
-- localhost: pg_cron connects like a client).
--
-- pg_cron sends the command as one query string, which PostgreSQL runs as one
-- transaction, so fence_begin_fresh binds its token for the statement after
-- it. No BEGIN and COMMIT (with cron.use_background_workers = on they are
-- refused, and fence_begin_fresh warns 25P01 there but still covers the
-- command). The reason is recorded in fence_audit_log at each run: fine for a
-- nightly job, too much for one that runs every minute (leave it out there).
-- cron.schedule replaces a job of the same name, so running this file again
-- changes the schedule.

\if :{?schedule}
\else
\set schedule '0 3 * * *'
\endif
\if :{?prefix}
\else
\set prefix ''
\endif

CREATE EXTENSION IF NOT EXISTS pg_cron;

SELECT cron.schedule('counter-rollover', :'schedule', format($cmd$
SELECT fence_begin_fresh('pg_cron: counter rollover');
WITH old AS (
	SELECT id, value FROM counters
	 WHERE starts_with(id, %L) AND value <> 0
	   FOR UPDATE
), zeroed AS (
	UPDATE counters c SET value = 0 FROM old WHERE c.id = old.id
	RETURNING c.id
)
INSERT INTO counter_history (id, value)
SELECT old.id, old.value FROM old JOIN zeroed USING (id);
$cmd$, :'prefix')) AS jobid;
