#!/bin/sh
# examples/shell/rollover.sh: cron-style maintenance of a protected table,
# one psql invocation, one transaction.
#
#   rollover.sh [PREFIX]          crontab: 0 3 * * *  PGDATABASE=app /opt/app/rollover.sh
#
# Moves every counter whose id starts with PREFIX (all of them by default)
# into counter_history and sets it back to 0 (examples/schema.sql). The script
# is not a job: it claims nothing. It writes the protected table the way fence
# sanctions for such writers (doc/fence.md, 9.9): fence_begin_fresh(reason)
# after BEGIN binds a new token to the transaction, the guard stamps each row
# it writes with that token, and fence_audit_log records the call and its
# reason. The token is newer than every claim before it, so in strict mode a
# job execution that read a counter before the rollover and writes it after
# is refused (5F002): its stale count does not undo the rollover.
#
# The read and the write are one statement: the rows are locked (FOR UPDATE)
# as they are read, so a job's write cannot slip in between. Connection
# settings come from the environment (PGHOST, PGPORT, PGDATABASE, ...). It
# prints the fresh token and one line per counter rolled over; the exit status
# is psql's (non-zero if anything failed, and then nothing was written).
set -eu
prefix=${1:-}
exec psql -X -q -At -v ON_ERROR_STOP=1 -v prefix="$prefix" <<'SQL'
BEGIN;
SELECT fence_begin_fresh('cron: counter rollover') AS token \gset
\echo fresh token :token
WITH old AS (
	SELECT id, value FROM counters
	 WHERE starts_with(id, :'prefix') AND value <> 0
	   FOR UPDATE
), zeroed AS (
	UPDATE counters c SET value = 0 FROM old WHERE c.id = old.id
	RETURNING c.id
)
INSERT INTO counter_history (id, value)
SELECT old.id, old.value FROM old JOIN zeroed USING (id)
RETURNING 'rolled ' || id || ' ' || value;
COMMIT;
SQL
