#!/usr/bin/env bash
# demo/worker.sh: one job worker of the demo, a real process with its own
# database connections.  demo/run starts it as the postgres user and may
# freeze it (SIGSTOP) while its handler runs, then thaw it (SIGCONT).
#
#   worker.sh NAME JOB TABLE LEASE STATUSFILE
#
# The handler is the seed's read-modify-write: read the counter, compute +1,
# write it back.  The write carries the worker's token in the epoch column
# ("the epoch rides on the write"): on a protected table fence's guard checks
# it; on the unprotected twin nothing does.
set -uo pipefail
name=$1 job=$2 table=$3 lease=$4 status=$5
: "${PGHOST:?}" "${PGPORT:?}" "${PGDATABASE:?}"

case $name in
A) color=33 ;; # yellow
*) color=36 ;; # cyan
esac
[ -t 1 ] || color=
say()
{
	if [ -n "$color" ]; then
		printf '  \033[%sm[worker %s]\033[0m %s\n' "$color" "$name" "$*"
	else
		printf '  [worker %s] %s\n' "$name" "$*"
	fi
}
q() { psql -X -q -At -P pager=off -v ON_ERROR_STOP=1 -c "$1"; }

echo "pid $$" >>"$status"

token=$(q "SELECT fence_claim('$job', '$lease', 'worker $name')") || exit 1
if [ -z "$token" ]; then
	say "fence_claim('$job') = NULL: the job is held by someone else; try later"
	echo "not-claimed" >>"$status"
	exit 0
fi
say "fence_claim('$job', '$lease') = token $token"
value=$(q "SELECT value FROM $table WHERE id = 1") || exit 1
say "reads counter = $value, computes $value + 1 ..."
echo "read $value" >>"$status"

sleep 1 # the handler's work: demo/run freezes worker A right here

new=$((value + 1))
say "writes counter = $new with token $token:"
say "  UPDATE $table SET value = $new, writer_epoch = $token WHERE id = 1"
if out=$(psql -X -q -At -P pager=off -v ON_ERROR_STOP=1 -v VERBOSITY=verbose 2>&1 <<SQL
UPDATE $table SET value = $new, writer_epoch = $token WHERE id = 1;
SQL
); then
	say "write accepted"
	released=$(q "SELECT fence_release('$job', $token)")
	if [ "$released" = t ]; then
		say "fence_release('$job', $token) = t: job done"
	else
		say "fence_release('$job', $token) = f: the job record noticed the stale worker, the table it wrote did not"
	fi
	echo "wrote $new" >>"$status"
else
	printf '%s\n' "$out" | grep -v '^LOCATION:' | sed 's/^/      /'
	state=$(printf '%s\n' "$out" | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p' | head -n 1)
	say "write REFUSED with SQLSTATE ${state:-?}: this execution was superseded, so the handler stops"
	echo "fenced ${state:-?}" >>"$status"
fi
