#!/usr/bin/env bash
# test/checks/examples.sh: every worker in examples/ runs its loop against a
# real server, and each is the frozen worker of one stale-worker race
#.
#
# One throwaway cluster (pg_cron preloaded, cron.database_name = examples,
# cron.host = its socket directory), one database with examples/schema.sql
# and counters seeded with a fresh token. The examples are copied to the work
# directory; the C worker is built with its Makefile, the Node packages are
# installed with `npm ci` from the committed package-lock.json files. Every
# worker runs as the postgres OS user, as its own process.
#
# For each of examples/c (libpq), examples/python (clients/python over
# psycopg 3), examples/node (clients/node over node-postgres):
#   - a run whose work outlasts its lease (lease 1 s, work 1.5 s): it renews
#     the lease, writes 1, releases (true), exits 0;
#   - the race: worker A claims the job (lease 1 s), reads 10 and stops itself
#     with SIGSTOP just before its write (FENCE_EXAMPLE_STOP_BEFORE_WRITE=1:
#     a deterministic freeze point). Worker B tries the job until A's lease
#     has run out, claims it, writes 11, releases. A gets SIGCONT: its
#     fence_begin fails with 5F001, it reports "fenced" and exits 3 without a
#     retry. The counter is 11 and carries B's token.
# The twin (python, --table counters_unprotected --lease-only: the same
# worker without fencing, the claim only a lease): the same race lands A's
# stale write. Both executions wrote 11: B's increment is lost.
# examples/shell/rollover.sh (psql, fence_begin_fresh(reason) in one psql
# invocation): a python worker reads 5 and is frozen; the rollover moves 5 into
# counter_history and sets 0 under a fresh token; the thawed worker is fenced
# with 5F002 (strict: the row is newer), the counter stays 0 with the
# rollover's token, and fence_audit_log has the reason.
# examples/shell/pg_cron.sql: the same with a C worker frozen before its
# write, the rollover scheduled with pg_cron ('* * * * *', so it waits for
# the next minute: it runs while the other examples do); job_run_details
# shows it succeeded, the worker is fenced with 5F002, the counter is 0.
# examples/queues (Node 20: graphile-worker 0.17.3, pg-boss 10.4.2):
#   - graphile: a run with renewals; the race: A's task freezes before its
#     write, graphile still holds A's job locked (4 hours), `graphile.js
#     rescue` re-adds it under the same job key once A's fence lease has run
#     out, B (`once`) runs the new job and writes 11; thawed A is fenced
#     (5F001), its task returns (no retry) and no job is left in the queue.
#   - pg-boss: queue expireInSeconds 3 > lease 1; a run with renewals; the
#     race: A freezes before its write, B's supervisor expires A's job and B
#     runs the retry and writes 11; thawed A is fenced (5F001) and resolves;
#     the job is 'completed' once, with B's output.
# examples/python/notify_worker.py and examples/node/notify_worker.js (the
# clients: job.superseded, job.signal): worker A claims notify:ID (lease
# 60 s) and works up to 8 s before an external effect (a line in a file);
# meanwhile an operator's session with fence.notify_superseded on ends A's
# claim (fence_release_any), and B claims the job and makes the effect; A's
# client heard fence_superseded, and A skips its effect: one line.  No
# SIGSTOP here: a frozen client's renewal, on waking, would fail and tell A
# by itself, in both runs.  Twin with the setting off: nothing reaches A
# before its effect (its next renewal is 20 s away), A makes it (two
# lines), and only its write is fenced.
#   - chain (graphile-worker): a 2-step chain whose step enqueues its
#     successor in its final transaction, under fence_once.  Worker A
#     commits step 1 and is killed (SIGKILL) before fence_release; rescue
#     re-adds the job once A's lease has run out; B takes it over, fence_once
#     answers false for the effect and the successor, B runs step 2: the
#     counter is 2.  Twin without fence_once: the counter is 4 (step 1
#     twice, two successors).
# Without node or npm, or with a Node.js older than an example needs, that
# example prints a "SKIP ..." line and the rest still runs.
# One line per assertion ("ok     ..." or "FAILED ..."), then a summary line.
# Exit 0 only if every assertion holds.
#
# Environment: FENCE_PORT (else a free port from 54350), FENCE_WORK,
# FENCE_KEEP=1.  Standalone it expects fence to be installed.
#
# fence-check-timeout: 300
# fence-check-packages: libpq-dev python3-psycopg postgresql-@MAJOR@-cron nodejs
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
# nodejs: already there on most machines (Node.js 20 from another source
# provides it too, and then apt does nothing). Debian's npm is not asked for:
# it conflicts with such a Node.js; without npm the Node examples are skipped.
fence_install_packages libpq-dev python3-psycopg "$(fence_pg_package cron)" nodejs ||
	fence_die "cannot install libpq-dev python3-psycopg $(fence_pg_package cron) nodejs"
fence_pg_setup
t_start=$(date +%s)

src=${FENCE_SRC:-$(cd "$here/../.." && pwd)}
own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-examples)
	own_work=1
fi
dir=$work/cluster
logs=$work/logs
ex=$work/examples
port=${FENCE_PORT:-$(fence_free_port 54350)}
PIDS=()
cleanup()
{
	local p
	for p in "${PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null
		kill "$p" 2>/dev/null
	done
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir" "$logs"
chown postgres:postgres "$dir" "$logs"
# the examples, without anything installed into them, and beside them the
# clients they use (examples/node and examples/queues depend on
# "file:../../clients/node"; the Python examples find clients/python on
# PYTHONPATH), as in the tree
(cd "$src" && tar -cf - --exclude=node_modules --exclude=./c/worker -C examples .) |
	(mkdir -p "$ex" && cd "$ex" && tar -xf -) || fence_die "cannot copy examples/"
(cd "$src" && tar -cf - --exclude=node_modules --exclude=__pycache__ clients) |
	(cd "$work" && tar -xf -) || fence_die "cannot copy clients/"
chown -R postgres:postgres "$ex" "$work/clients"

fence_cluster_init "$dir" "$port" "shared_preload_libraries = 'pg_cron'
cron.database_name = 'examples'
cron.host = '$dir/sock'
max_connections = 60" || exit 1
fence_cluster_start "$dir" || exit 1

sql() { fence_psql "$dir" -d examples -XAtq -v ON_ERROR_STOP=1 "$@"; }
val() { sql -c "$1" 2>&1; }

n_skip=0
skip() { n_skip=$((n_skip + 1)); printf 'SKIP   %s\n' "$1"; }

# Workers run as postgres with the connection in the environment.  setpriv
# execs in place, so a background worker's $! is the worker itself (SIGSTOP
# and SIGCONT reach it, not a shell in between).
as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups
	env HOME="$FENCE_PG_HOME" USER=postgres LOGNAME=postgres PATH="$FENCE_PG_BIN:/usr/local/bin:/usr/bin:/bin"
	PGHOST="$dir/sock" PGPORT="$port" PGDATABASE=examples PGUSER=postgres
	PYTHONPATH="$work/clients/python")
# spawn LOG CMD...: start CMD in the background; its pid in $spawned
spawn()
{
	local log=$1
	shift
	(cd "$ex" && exec "${as_pg[@]}" "$@") >"$log" 2>&1 &
	spawned=$!
	PIDS+=("$spawned")
}
# run LOG CMD...: run CMD in the foreground (at most 90 s); its exit status
run()
{
	local log=$1
	shift
	(cd "$ex" && exec "${as_pg[@]}" timeout -k 5 90 "$@") >"$log" 2>&1
}
# wait_stopped PID: until the process is stopped (state T), at most 60 s
wait_stopped()
{
	local i st
	for i in $(seq 600); do
		st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
		[ "$st" = T ] && return 0
		[ "$st" = Z ] && return 1
		sleep 0.1
	done
	return 1
}
# thaw PID: SIGCONT, wait for it; its exit status in $thawed
thaw()
{
	kill -CONT "$1"
	reap "$1"
}
# reap PID: wait for a spawned process; its exit status in $thawed
reap()
{
	local p keep=()
	wait "$1"
	thawed=$?
	for p in "${PIDS[@]}"; do
		[ "$p" = "$1" ] || keep+=("$p")
	done
	PIDS=("${keep[@]}")
}
# the token a worker's log says it claimed, and the value it read
token_of() { sed -n 's/^claimed [^ ]* token \([0-9]*\)$/\1/p' "$1" | tail -n 1; }
read_of() { sed -n 's/^read \([0-9]*\)$/\1/p' "$1" | tail -n 1; }
# show a log, indented, when an assertion about it failed
show() { sed 's/^/    | /' "$1" | head -n 40; }
# the counter and its epoch
counter() { val "SELECT value || ' ' || writer_epoch FROM ${2:-counters} WHERE id = '$1'"; }

echo "--- setup"
sql -d postgres -c 'CREATE DATABASE examples' || exit 1
sql -f "$ex/schema.sql" >/dev/null || exit 1
sql -c "BEGIN;
SELECT fence_begin_fresh('examples.sh: seed the counters');
INSERT INTO counters (id, value) VALUES
	('c-run', 0), ('c-race', 10), ('py-run', 0), ('py-race', 10),
	('node-run', 0), ('node-race', 10), ('shell-race', 5), ('cron-race', 7),
	('gw-run', 0), ('gw-race', 10), ('pb-run', 0), ('pb-race', 10),
	('chain-k', 0), ('chain-t', 0),
	('py-notify-on', 0), ('py-notify-off', 0), ('node-notify-on', 0), ('node-notify-off', 0);
COMMIT;
INSERT INTO counters_unprotected (id, value) VALUES ('py-race', 10);" >/dev/null || exit 1
if make -s -C "$ex/c" PG_CONFIG="$FENCE_PG_CONFIG" >"$logs/c-build.log" 2>&1; then
	ok "examples/c builds with its Makefile (libpq)"
else
	show "$logs/c-build.log"
	bad "examples/c builds with its Makefile (libpq)"
fi
c_worker=("$ex/c/worker")
py_worker=(/usr/bin/python3 "$ex/python/worker.py")
node_worker=(node "$ex/node/worker.js")

# ---------------------------------------------------------------------------
# pg_cron first: its job runs at the next minute, while the rest runs.
echo "--- examples/shell/pg_cron.sql: a worker frozen before its write, the rollover run by pg_cron"
cron_a=
spawn "$logs/cron-A.log" env FENCE_EXAMPLE_STOP_BEFORE_WRITE=1 "${c_worker[@]}" cron-race 1 0
cron_a=$spawned
if wait_stopped "$cron_a"; then
	check "the C worker read 7 and froze before its write" "$(read_of "$logs/cron-A.log")" 7
	if sql -v schedule='* * * * *' -v prefix=cron-race -f "$ex/shell/pg_cron.sql" >"$logs/cron-schedule.log" 2>&1; then
		ok "pg_cron.sql schedules the rollover (cron.schedule, one command)"
	else
		show "$logs/cron-schedule.log"
		bad "pg_cron.sql schedules the rollover (cron.schedule, one command)"
	fi
else
	show "$logs/cron-A.log"
	bad "the C worker froze before its write"
	cron_a=
fi

# ---------------------------------------------------------------------------
# normal_run NAME ID CMD...: a handler whose work outlasts its lease
normal_run()
{
	local name=$1 id=$2 rc
	shift 2
	run "$logs/$name-run.log" "$@" "$id" 1 1.5
	rc=$?
	if [ "$rc" = 0 ] && grep -q '^renewed until ' "$logs/$name-run.log" &&
		grep -q '^released true$' "$logs/$name-run.log" &&
		[ "$(counter "$id")" = "1 $(token_of "$logs/$name-run.log")" ]; then
		ok "$name: work 1.5 s on a 1 s lease: renewed, wrote 1, released, exit 0"
	else
		show "$logs/$name-run.log"
		bad "$name: work 1.5 s on a 1 s lease (exit $rc, counter '$(counter "$id")')"
	fi
}

# race NAME ID [--twin] CMD...: A freezes before its write, B takes over
race()
{
	local name=$1 id=$2 twin=0 a rc_a rc_b tb table=counters
	shift 2
	if [ "$1" = --twin ]; then
		twin=1
		table=counters_unprotected
		shift
	fi
	local extra=()
	[ "$twin" = 1 ] && extra=(--table counters_unprotected --lease-only)
	spawn "$logs/$name-A.log" env FENCE_EXAMPLE_STOP_BEFORE_WRITE=1 "$@" "${extra[@]}" "$id" 1 0
	a=$spawned
	if ! wait_stopped "$a"; then
		show "$logs/$name-A.log"
		bad "$name: worker A froze before its write"
		return
	fi
	check "$name: worker A read 10 and froze before its write" "$(read_of "$logs/$name-A.log")" 10
	run "$logs/$name-B.log" "$@" "${extra[@]}" "$id" 1 0
	rc_b=$?
	tb=$(token_of "$logs/$name-B.log")
	check "$name: worker B claimed the job after A's lease ran out, wrote 11 (exit $rc_b)" \
		"$rc_b $(grep -c '^wrote 11 ' "$logs/$name-B.log")" "0 1"
	thaw "$a"
	rc_a=$thawed
	if [ "$twin" = 0 ]; then
		if [ "$rc_a" = 3 ] && grep -q '^fenced 5F001' "$logs/$name-A.log" && ! grep -q '^wrote' "$logs/$name-A.log"; then
			ok "$name: thawed worker A was fenced (5F001), exit 3, no retry"
		else
			show "$logs/$name-A.log"
			bad "$name: thawed worker A was fenced (exit $rc_a)"
		fi
		check "$name: the counter is B's: 11, epoch = B's token" "$(counter "$id")" "11 $tb"
	else
		if [ "$rc_a" = 0 ] && grep -q '^wrote 11 ' "$logs/$name-A.log"; then
			ok "$name: without fencing, thawed worker A's stale write of 11 lands (exit 0)"
		else
			show "$logs/$name-A.log"
			bad "$name: without fencing, thawed worker A's stale write lands (exit $rc_a)"
		fi
		check "$name: two executions, the counter is 11: B's increment was lost" \
			"$(val "SELECT value FROM $table WHERE id = '$id'")" 11
	fi
}

# notify_race NAME ID on|off CMD...: worker A claims job notify:ID (lease
# 60 s, work up to 8 s before its external effect); while it works, an
# operator's session, with fence.notify_superseded on or off, ends A's claim
# with fence_release_any; B claims the job, makes the effect and writes.  On:
# A's client heard fence_superseded, and A skips the effect.  Off (the twin):
# nothing tells A before its effect (its next renewal is 20 s away), A makes
# the effect a second time, and only its write is fenced.
notify_race()
{
	local name=$1 id=$2 setting=$3 a i rc_a rc_b effects
	shift 3
	local file=$logs/$name-effects.txt
	spawn "$logs/$name-A.log" "$@" "$id" "$file" 60 8
	a=$spawned
	for i in $(seq 300); do
		grep -q '^working up to ' "$logs/$name-A.log" 2>/dev/null && break
		kill -0 "$a" 2>/dev/null || break
		sleep 0.1
	done
	if ! grep -q '^working up to ' "$logs/$name-A.log" 2>/dev/null; then
		show "$logs/$name-A.log"
		bad "$name: worker A claimed the job and works"
		return
	fi
	check "$name: an operator ends A's claim (fence_release_any, fence.notify_superseded $setting)" \
		"$(val "SET fence.notify_superseded = $setting; SELECT fence_release_any('notify:$id')")" t
	run "$logs/$name-B.log" "$@" "$id" "$file" 60 0
	rc_b=$?
	check "$name: worker B claimed the job, made the effect, wrote (exit $rc_b)" \
		"$rc_b $(grep -c '^made the external effect$' "$logs/$name-B.log")" "0 1"
	reap "$a"
	rc_a=$thawed
	effects=$(grep -c '^effect of ' "$file" 2>/dev/null)
	if [ "$setting" = on ]; then
		if [ "$rc_a" = 3 ] && grep -q '^superseded: skipping the external effect$' "$logs/$name-A.log" &&
			! grep -q '^made the external effect' "$logs/$name-A.log"; then
			ok "$name: A heard fence_superseded while it worked and skipped its external effect (exit 3)"
		else
			show "$logs/$name-A.log"
			bad "$name: A skipped its external effect (exit $rc_a)"
		fi
		check "$name: the external effect happened once" "$effects" 1
	else
		if [ "$rc_a" = 3 ] && grep -q '^made the external effect$' "$logs/$name-A.log" &&
			grep -q '^fenced 5F001' "$logs/$name-A.log"; then
			ok "$name, the twin with the setting off: A made the external effect, then its write was fenced (5F001)"
		else
			show "$logs/$name-A.log"
			bad "$name, the twin: A made the effect and was fenced (exit $rc_a)"
		fi
		check "$name, the twin: the external effect happened twice" "$effects" 2
	fi
	check "$name: the counter holds B's write only" "$(val "SELECT value FROM counters WHERE id = '$id'")" 1
}

echo "--- examples/c (libpq)"
normal_run c c-run "${c_worker[@]}"
race c c-race "${c_worker[@]}"

echo "--- examples/python (psycopg 3)"
normal_run python py-run "${py_worker[@]}"
race python py-race "${py_worker[@]}"
echo "--- examples/python, the twin: the same race on counters_unprotected, lease only"
race python-unfenced py-race --twin "${py_worker[@]}"

# ---------------------------------------------------------------------------
echo "--- examples/shell/rollover.sh: a worker frozen before its write, the rollover in one psql"
spawn "$logs/shell-A.log" env FENCE_EXAMPLE_STOP_BEFORE_WRITE=1 "${py_worker[@]}" shell-race 1 0
a=$spawned
if wait_stopped "$a"; then
	check "shell: the python worker read 5 and froze before its write" "$(read_of "$logs/shell-A.log")" 5
	run "$logs/shell-rollover.log" sh "$ex/shell/rollover.sh" shell-race
	rc=$?
	tf=$(sed -n 's/^fresh token \([0-9]*\)$/\1/p' "$logs/shell-rollover.log")
	check "shell: rollover.sh rolled 5 over under a fresh token (exit $rc)" \
		"$rc $(grep -c '^rolled shell-race 5$' "$logs/shell-rollover.log") ${tf:+token}" "0 1 token"
	thaw "$a"
	rc=$thawed
	if [ "$rc" = 3 ] && grep -q '^fenced 5F002' "$logs/shell-A.log"; then
		ok "shell: the thawed worker was fenced (5F002: the row is newer), exit 3"
	else
		show "$logs/shell-A.log"
		bad "shell: the thawed worker was fenced with 5F002 (exit $rc)"
	fi
	check "shell: the counter is the rollover's: 0, epoch = its fresh token" "$(counter shell-race)" "0 $tf"
	check "shell: counter_history has the 5" "$(val "SELECT string_agg(value::text, ',') FROM counter_history WHERE id = 'shell-race'")" 5
	check "shell: fence_audit_log has the rollover's reason and token" \
		"$(val "SELECT count(*) FROM fence_audit_log WHERE action = 'begin_fresh' AND reason = 'cron: counter rollover' AND detail = 'token $tf'")" 1
else
	show "$logs/shell-A.log"
	bad "shell: the python worker froze before its write"
fi

# ---------------------------------------------------------------------------
node_ok=0
queues_ok=0
node_major=
if ! command -v node >/dev/null 2>&1; then
	skip "examples/node and examples/queues: node is not installed"
elif ! command -v npm >/dev/null 2>&1; then
	skip "examples/node and examples/queues: npm is not installed (Debian's npm conflicts with a Node.js 20 from NodeSource, which has its own)"
else
	node_major=$(node -p 'process.versions.node.split(".")[0]')
	echo "node $(node --version), npm $(npm --version)"
	if [ "$node_major" -lt 20 ]; then
		skip "examples/node: clients/node needs Node.js 20; this is $(node --version)"
	elif (cd "$ex/node" && npm ci --no-audit --no-fund --loglevel=error) >"$logs/npm-node.log" 2>&1; then
		node_ok=1
		ok "examples/node: npm ci (pg $(node -p 'require(process.argv[1]).version' "$ex/node/node_modules/pg/package.json"))"
	else
		show "$logs/npm-node.log"
		bad "examples/node: npm ci"
	fi
	if [ "$node_major" -lt 20 ]; then
		skip "examples/queues: pg-boss 10 needs Node.js 20; this is $(node --version)"
	elif (cd "$ex/queues" && npm ci --no-audit --no-fund --loglevel=error) >"$logs/npm-queues.log" 2>&1; then
		queues_ok=1
		ok "examples/queues: npm ci (graphile-worker $(node -p 'require(process.argv[1]).version' "$ex/queues/node_modules/graphile-worker/package.json"), pg-boss $(node -p 'require(process.argv[1]).version' "$ex/queues/node_modules/pg-boss/package.json"))"
	else
		show "$logs/npm-queues.log"
		bad "examples/queues: npm ci"
	fi
fi

if [ "$node_ok" = 1 ]; then
	echo "--- examples/node (node-postgres)"
	normal_run node node-run "${node_worker[@]}"
	race node node-race "${node_worker[@]}"
fi

if [ "$queues_ok" = 1 ]; then
	echo "--- examples/queues/graphile.js (graphile-worker 0.17)"
	gw=(env FENCE_LEASE=1 node "$ex/queues/graphile.js")
	run "$logs/gw-enqueue.log" "${gw[@]}" enqueue gw-run &&
		run "$logs/gw-run.log" env FENCE_WORK=1.5 "${gw[@]}" once
	rc=$?
	if [ "$rc" = 0 ] && grep -q '^renewed until ' "$logs/gw-run.log" && grep -q '^released true$' "$logs/gw-run.log" &&
		[ "$(counter gw-run)" = "1 $(token_of "$logs/gw-run.log")" ]; then
		ok "graphile: a task working 1.5 s on a 1 s lease renewed it, wrote 1, released"
	else
		show "$logs/gw-run.log"
		bad "graphile: a task working 1.5 s on a 1 s lease (exit $rc, counter '$(counter gw-run)')"
	fi
	run "$logs/gw-enqueue2.log" "${gw[@]}" enqueue gw-race
	spawn "$logs/gw-A.log" env FENCE_EXAMPLE_STOP_BEFORE_WRITE=1 "${gw[@]}" once
	a=$spawned
	if wait_stopped "$a"; then
		check "graphile: A's task read 10 and froze before its write" "$(read_of "$logs/gw-A.log")" 10
		check "graphile: graphile-worker still holds A's job locked" \
			"$(val "SELECT count(*) FROM graphile_worker.jobs WHERE key = 'count:gw-race' AND locked_at IS NOT NULL")" 1
		# rescue only once A's lease has run out (a condition, not a delay)
		for _ in $(seq 300); do
			[ "$(val "SELECT lease_expires_at < clock_timestamp() FROM fence_claims WHERE job = 'count:gw-race'")" = t ] && break
			sleep 0.1
		done
		run "$logs/gw-rescue.log" "${gw[@]}" rescue
		check "graphile: rescue re-added the stale job under its key" "$(grep -c '^rescued count:gw-race' "$logs/gw-rescue.log")" 1
		run "$logs/gw-B.log" "${gw[@]}" once
		rc=$?
		tb=$(token_of "$logs/gw-B.log")
		check "graphile: worker B ran the new job and wrote 11 (exit $rc)" "$rc $(grep -c '^wrote 11 ' "$logs/gw-B.log")" "0 1"
		thaw "$a"
		rc=$thawed
		if [ "$rc" = 0 ] && grep -q '^fenced 5F001' "$logs/gw-A.log" && grep -q 'ending it without a retry' "$logs/gw-A.log" &&
			! grep -q '^wrote' "$logs/gw-A.log"; then
			ok "graphile: thawed A's write was fenced (5F001); its task returned, no retry"
		else
			show "$logs/gw-A.log"
			bad "graphile: thawed A's write was fenced (exit $rc)"
		fi
		check "graphile: the counter is B's: 11, epoch = B's token" "$(counter gw-race)" "11 $tb"
		check "graphile: no job is left in the queue (none retried)" "$(val "SELECT count(*) FROM graphile_worker.jobs")" 0
	else
		show "$logs/gw-A.log"
		bad "graphile: A's task froze before its write"
	fi

	echo "--- examples/queues/pgboss.js (pg-boss 10)"
	pb=(env FENCE_LEASE=1 FENCE_EXPIRE=3 FENCE_MAINTENANCE=1 node "$ex/queues/pgboss.js")
	run "$logs/pb-enqueue.log" "${pb[@]}" enqueue pb-run &&
		run "$logs/pb-run.log" env FENCE_WORK=1.5 "${pb[@]}" work 1
	rc=$?
	if [ "$rc" = 0 ] && grep -q '^renewed until ' "$logs/pb-run.log" && grep -q '^released true$' "$logs/pb-run.log" &&
		[ "$(counter pb-run)" = "1 $(token_of "$logs/pb-run.log")" ]; then
		ok "pg-boss: a handler working 1.5 s on a 1 s lease (expiry 3 s) renewed it, wrote 1, released"
	else
		show "$logs/pb-run.log"
		bad "pg-boss: a handler working 1.5 s on a 1 s lease (exit $rc, counter '$(counter pb-run)')"
	fi
	run "$logs/pb-enqueue2.log" "${pb[@]}" enqueue pb-race
	pb_id=$(sed -n 's/^enqueued pg-boss job //p' "$logs/pb-enqueue2.log")
	spawn "$logs/pb-A.log" env FENCE_EXAMPLE_STOP_BEFORE_WRITE=1 "${pb[@]}" work 1
	a=$spawned
	if wait_stopped "$a"; then
		check "pg-boss: A's handler read 10 and froze before its write" "$(read_of "$logs/pb-A.log")" 10
		run "$logs/pb-B.log" "${pb[@]}" work 1
		rc=$?
		tb=$(token_of "$logs/pb-B.log")
		check "pg-boss: B ran the job pg-boss expired and retried, wrote 11 (exit $rc)" "$rc $(grep -c '^wrote 11 ' "$logs/pb-B.log")" "0 1"
		thaw "$a"
		rc=$thawed
		if [ "$rc" = 0 ] && grep -q '^fenced 5F001' "$logs/pb-A.log" && grep -q 'without a retry' "$logs/pb-A.log" &&
			! grep -q '^wrote' "$logs/pb-A.log"; then
			ok "pg-boss: thawed A's write was fenced (5F001); its handler resolved, no retry"
		else
			show "$logs/pb-A.log"
			bad "pg-boss: thawed A's write was fenced (exit $rc)"
		fi
		check "pg-boss: the counter is B's: 11, epoch = B's token" "$(counter pb-race)" "11 $tb"
		check "pg-boss: the job is completed once, with B's result, after one retry" \
			"$(val "SELECT state || ' ' || retry_count || ' ' || (output->>'result') FROM pgboss.job WHERE id = '$pb_id'")" \
			"completed 1 done"
	else
		show "$logs/pb-A.log"
		bad "pg-boss: A's handler froze before its write"
	fi

fi

# ---------------------------------------------------------------------------
echo "--- examples/shell/pg_cron.sql: the result"
if [ -n "$cron_a" ]; then
	# wait for pg_cron's first run (the next minute boundary; bounded)
	st=
	for _ in $(seq 1300); do
		st=$(val "SELECT d.status FROM cron.job_run_details d JOIN cron.job j USING (jobid)
			WHERE j.jobname = 'counter-rollover' AND d.status IN ('succeeded', 'failed') ORDER BY d.runid LIMIT 1")
		[ -n "$st" ] && break
		sleep 0.1
	done
	val "SELECT cron.unschedule('counter-rollover')" >/dev/null
	check "pg_cron ran the rollover" "$st" succeeded
	[ "$st" = failed ] && val "SELECT return_message FROM cron.job_run_details" | sed 's/^/    | /'
	thaw "$cron_a"
	rc=$thawed
	if [ "$rc" = 3 ] && grep -q '^fenced 5F002' "$logs/cron-A.log"; then
		ok "pg_cron: the thawed C worker was fenced (5F002: the row is newer), exit 3"
	else
		show "$logs/cron-A.log"
		bad "pg_cron: the thawed C worker was fenced with 5F002 (exit $rc)"
	fi
	check "pg_cron: the counter is the rollover's (0) and counter_history has the 7" \
		"$(val "SELECT c.value || ' ' || (c.writer_epoch > $(token_of "$logs/cron-A.log")) || ' ' || h.value
			FROM counters c JOIN counter_history h USING (id) WHERE c.id = 'cron-race'")" "0 true 7"
	# one row per run: on a slow machine the job may have run again (every
	# minute) before it was unscheduled
	check "pg_cron: fence_audit_log has the job's reason, once per run" \
		"$(val "SELECT count(*) >= 1 AND count(*) = (SELECT count(*) FROM cron.job_run_details WHERE status = 'succeeded')
			FROM fence_audit_log WHERE action = 'begin_fresh' AND reason = 'pg_cron: counter rollover'")" t
fi

# ---------------------------------------------------------------------------
# After pg_cron's result: these would otherwise delay it past a second run.
echo "--- examples/python/notify_worker.py: the superseded worker told at once (LISTEN fence_superseded)"
notify_race python-notify py-notify-on on /usr/bin/python3 "$ex/python/notify_worker.py"
notify_race python-notify-off py-notify-off off /usr/bin/python3 "$ex/python/notify_worker.py"
if [ "$node_ok" = 1 ]; then
	echo "--- examples/node/notify_worker.js: the superseded worker told at once (AbortController)"
	notify_race node-notify node-notify-on on node "$ex/node/notify_worker.js"
	notify_race node-notify-off node-notify-off off node "$ex/node/notify_worker.js"
fi
if [ "$queues_ok" = 1 ]; then
	echo "--- examples/queues/chain.js (graphile-worker 0.17): the successor chain, a kill -9 after commit"
	# chain_crash ID [env...]: A runs step 1 of a 2-step chain and dies by
	# SIGKILL after its commit, before fence_release; rescue re-adds the job
	# once A's lease has run out; B runs the queue dry
	chain_crash()
	{
		local id=$1 rc
		shift
		local ch=(env FENCE_LEASE=1 "$@" node "$ex/queues/chain.js")
		run "$logs/chain-$id-enqueue.log" "${ch[@]}" enqueue "$id" 2
		run "$logs/chain-$id-A.log" env FENCE_EXAMPLE_KILL_AFTER_COMMIT=1 "${ch[@]}" once
		rc=$?
		check "chain $id: worker A committed step 1 and was killed (SIGKILL) before fence_release" \
			"$rc $(grep -c "^committed chain:$id:1$" "$logs/chain-$id-A.log") $(val "SELECT NOT released FROM fence_claims WHERE job = 'chain:$id:1'")" \
			"137 1 t"
		for _ in $(seq 300); do
			[ "$(val "SELECT lease_expires_at < clock_timestamp() FROM fence_claims WHERE job = 'chain:$id:1'")" = t ] && break
			sleep 0.1
		done
		run "$logs/chain-$id-rescue.log" "${ch[@]}" rescue
		check "chain $id: rescue re-added the dead worker's job" "$(grep -c "^rescued chain:$id:1" "$logs/chain-$id-rescue.log")" 1
		run "$logs/chain-$id-B.log" "${ch[@]}" once
		rc=$?
		check "chain $id: worker B ran the queue dry (exit $rc)" "$rc" 0
		check "chain $id: no job is left pending" \
			"$(val "SELECT count(*) FROM graphile_worker.jobs WHERE task_identifier = 'chain' AND locked_at IS NULL")" 0
	}
	chain_crash chain-k
	check "chain-k: B's fence_once answered false for step 1's effect and successor" \
		"$(grep -c -e '^effect chain:chain-k:1 already applied: skipped$' -e '^successor of chain:chain-k:1 already enqueued: skipped$' "$logs/chain-chain-k-B.log")" 2
	check "chain-k: each step's effect once: the counter is 2" "$(val "SELECT value FROM counters WHERE id = 'chain-k'")" 2
	chain_crash chain-t FENCE_EXAMPLE_NO_ONCE=1
	check "chain-t, the twin without fence_once: B enqueued step 2 again" \
		"$(grep -c '^enqueued chain:chain-t:2$' "$logs/chain-chain-t-B.log")" 1
	check "chain-t, the twin: step 1 applied twice, two successors: the counter is 4" \
		"$(val "SELECT value FROM counters WHERE id = 'chain-t'")" 4
fi

echo "--- server log"
fence_check_no_crash "$dir/server.log"

total=$((n_ok + n_fail))
dt=$(($(date +%s) - t_start))
if [ "$n_fail" = 0 ]; then
	ran="c, python and its unfenced twin, shell, pg_cron"
	[ "$node_ok" = 1 ] && ran="$ran, node"
	[ "$queues_ok" = 1 ] && ran="$ran, graphile-worker, pg-boss, the successor chain"
	echo "examples: all $total assertions hold, $n_skip skipped, ${dt}s ($ran)"
	exit 0
fi
echo "examples: $n_fail of $total assertions FAILED (${dt}s)"
exit 1
