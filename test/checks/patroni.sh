#!/usr/bin/env bash
# test/checks/patroni.sh: fence under a real orchestrator (issue 29, item 3).
# Tokens never repeat, stale writes are refused, and the protected counter
# loses no update through failovers that Patroni makes, while an
# unprotected twin under the same workload does lose updates.
#
# A single-member etcd (3.4, v3 API) and three PostgreSQL members under
# Patroni (Debian 12's 3.0.2), all on 127.0.0.1, run by postgres by hand in
# the work directory (no service).  Short timings (ttl 10, loop_wait 2,
# retry_timeout 4); Patroni's safety-relevant defaults are kept for the main
# run (check_timeline off, synchronous_mode off, maximum_lag_on_failover
# 1 MB); use_pg_rewind on, so that a node that died rejoins as Patroni
# would rejoin it.  fsync is off (no injection here loses the page cache).
# The leader gets fence, a protected counter table (strict, one row per
# job) and its unprotected twin.
#
# Workers (test/patroni/workload.py, Debian's /usr/bin/python3 with
# python3-psycopg) follow the leader with a multi-host libpq string and
# target_session_attrs=read-write.  Each loops: fence_claim a job of four
# with a one-second lease, log the token with the issuing node's port and
# WAL timeline in its own client-side file, read the job's counter and
# twin, pause up to 1.6 leases, then the read-modify-write of the counter
# under fence_begin and of the twin without fence, each writing an inc_log
# row in its transaction (the server's record of surviving increments).
#
# Injected in sequence, each bounded in time, the nodes that died rejoined
# before the next:
#   1. kill -9 of the leader's postmaster;
#   2. a crash of the whole leader node (patroni and postgres SIGKILLed)
#      while a replica lags (its postgres SIGSTOPped first, SIGCONTed after);
#   3. a zombie leader: its patroni and postgres SIGSTOPped past the TTL,
#      then SIGCONTed;
#   4. patronictl switchover;  5. patronictl failover;
#   6. etcd stopped past the TTL, then restarted;
#   7. the double failover onto a replica that never followed the interim
#      leader: replica B paused (SIGSTOP of its postgres), the leader
#      crashed, replica A promoted (timeline N) and claimed on, A crashed
#      before B could stream from it, B SIGCONTed and promoted: timeline N
#      again.  Patroni's defaults allow it.
# Then the verdict from the client logs and the final leader's tables
# (workload.py report), one "ok     ..."/"FAILED ..." line each:
#   (1) no token returned twice, across all nodes and timelines (the
#       duplicates are listed, and whether the double failover reused the
#       timeline number);
#   (2) no stale write accepted: no acknowledged protected write whose
#       claim had been superseded by a newer acknowledged claim of its job
#       before its COMMIT was sent (stale writes that vanished with a
#       failover, or whose superseding claim did, are the replication's:
#       reported apart);
#   (3) each protected counter equals its surviving increments;
#       acknowledged increments lost with asynchronous replication are
#       counted and reported separately;
#   (4) the unprotected twin lost updates (below its surviving increments):
#       the scenario can lose updates, fence prevents it.
# A second, shorter run on a fresh cluster with synchronous_mode: true
# (leader node crash, switchover, failover, kill -9 of the postmaster) adds
#   (5) no acknowledged commit vanished.
# Exit 0 only if every assertion of both runs holds.  Each injection is
# bounded (leader waits of 40 s, rejoins of 90 s) and the whole check keeps
# to a budget: a step that would start too late is skipped, and fails.  It
# takes 6 to 8 minutes on 2 cores.
#
# On 1.1, whose tokens are ordered by the timeline number, (1) fails in the
# double failover: B hands out A's tokens again (issue 29).
#
# Environment: FENCE_PORT (else 54360; PostgreSQL on +0..+5, Patroni's REST
# API on +10..+15), FENCE_ETCD_PORT (else FENCE_PORT + 180; and the next
# port), FENCE_WORK, FENCE_KEEP=1, FENCE_PATRONI_WORKERS (4).  Standalone it
# expects fence to be installed in PG_CONFIG's PostgreSQL.
#
# fence-check-timeout: 720
# fence-check-packages: patroni python3-etcd etcd-server etcd-client python3-psycopg
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_pg_setup

src=${FENCE_SRC:-$(cd "$here/../.." && pwd)}
wl=$src/test/patroni/workload.py
py=/usr/bin/python3
own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-patroni)
	own_work=1
fi
base_port=${FENCE_PORT:-$(fence_free_port 54360)}
etcd_port=${FENCE_ETCD_PORT:-$(fence_free_port $((base_port + 180)))}
nworkers=${FENCE_PATRONI_WORKERS:-4}
njobs=4
lease=1
ttl=10
t_begin=$(date +%s)

etcd_pid=
worker_pids=()
run=            # the current run's directory
scope=
sync=false
pg_ports=()
api_ports=()
tl_a=
tl_b=
final=

# --- processes ---------------------------------------------------------------
# bg_pg CMD...: run as postgres, like fence_as_pg, but with exec: started with
# &, $! is then the pid of CMD itself (signals reach it, not a subshell)
bg_pg()
{
	exec setpriv --reuid=postgres --regid=postgres --init-groups \
		env HOME="$FENCE_PG_HOME" USER=postgres LOGNAME=postgres PATH="$FENCE_PG_BIN:$PATH" "$@"
}
# pids of node $1's postgres: its postmaster and the postmaster's children
pg_pids()
{
	local pm
	pm=$(head -n 1 "$run/n$1/data/postmaster.pid" 2>/dev/null) || return 0
	[ -n "$pm" ] && kill -0 "$pm" 2>/dev/null || return 0
	echo "$pm"
	ps -o pid= --ppid "$pm" 2>/dev/null | tr -d ' '
}
patroni_pid() { cat "$run/n$1/patroni.pid" 2>/dev/null; }
signal_pg()
{
	local sig=$1 p
	for p in $(pg_pids "$2"); do
		kill "-$sig" "$p" 2>/dev/null
	done
}
start_node()
{
	local d=$run/n$1
	bg_pg patroni "$d/patroni.yml" >>"$d/patroni.log" 2>&1 </dev/null &
	echo $! >"$d/patroni.pid"
	disown $!
}
crash_node()
{
	local p
	p=$(patroni_pid "$1")
	[ -n "$p" ] && kill -KILL "$p" 2>/dev/null
	signal_pg KILL "$1"
	rm -f "$run/n$1/patroni.pid"
}
stop_workers()
{
	local p
	touch "$run/stop"
	# they finish the statement at hand (a connection attempt to a dead
	# node takes up to 2 s a host), then stop; after 10 s they are killed
	for _ in $(seq 100); do
		for p in "${worker_pids[@]}"; do
			kill -0 "$p" 2>/dev/null && break
			p=
		done
		[ -n "${p:-}" ] || break
		sleep 0.1
	done
	for p in "${worker_pids[@]}"; do
		kill -KILL "$p" 2>/dev/null
	done
	worker_pids=()
}
# stop run $run: workers, then each node's patroni and postgres
stop_run()
{
	local i p
	[ -n "$run" ] || return 0
	stop_workers
	for i in 1 2 3; do
		signal_pg CONT "$i"
		p=$(patroni_pid "$i")
		[ -n "$p" ] && kill -CONT "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
		rm -f "$run/n$i/patroni.pid"
	done
	fence_stop_clusters_under "$run"
}
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup()
{
	stop_run
	[ -n "$etcd_pid" ] && kill -KILL "$etcd_pid" 2>/dev/null
	fence_stop_clusters_under "$work"
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
# every process below runs in the work directory (postgres may enter it)
cd "$work" || exit 1

# --- etcd ------------------------------------------------------------------
etcdctl_() { ETCDCTL_API=3 timeout 10 etcdctl --endpoints="http://127.0.0.1:$etcd_port" "$@"; }
start_etcd()
{
	bg_pg etcd --name e1 --data-dir "$work/etcd" \
		--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
		--listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
		--initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
		--initial-cluster "e1=http://127.0.0.1:$((etcd_port + 1))" >>"$work/etcd.log" 2>&1 </dev/null &
	etcd_pid=$!
	disown "$etcd_pid"
	for _ in $(seq 50); do
		etcdctl_ endpoint health >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	tail -n 20 "$work/etcd.log"
	return 1
}

# --- a run: three members of scope $scope --------------------------------------
# write_conf I: node I's patroni.yml
write_conf()
{
	local i=$1 d=$run/n$1
	mkdir -p "$d/pglog"
	cat >"$d/patroni.yml" <<EOF
scope: $scope
name: n$i
log:
  level: INFO
restapi:
  listen: 127.0.0.1:${api_ports[$i]}
  connect_address: 127.0.0.1:${api_ports[$i]}
etcd3:
  host: 127.0.0.1:$etcd_port
bootstrap:
  dcs:
    ttl: $ttl
    loop_wait: 2
    retry_timeout: 4
    synchronous_mode: $sync
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: 'on'
        max_connections: 40
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        fsync: 'off'
  initdb:
  - encoding: UTF8
  - locale: C
  - auth-local: trust
  - auth-host: trust
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:${pg_ports[$i]}
  connect_address: 127.0.0.1:${pg_ports[$i]}
  data_dir: $d/data
  bin_dir: $FENCE_PG_BIN
  pgpass: $d/pgpass
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: '$d'
    lc_messages: C
    logging_collector: 'on'
    log_directory: '$d/pglog'
    log_line_prefix: '%m [%p] %q%a '
    idle_in_transaction_session_timeout: 10s
tags:
  nofailover: false
EOF
	chown -R postgres:postgres "$d"
}

patronictl_() { (timeout 30 patronictl -c "$run/n1/patroni.yml" "$@" </dev/null); }
# "NAME ROLE STATE TL" per member
members() { patronictl_ list -f json 2>/dev/null | "$py" "$wl" members; }
# the node number of the running leader, or nothing
leader() { members | awk '$2 == "Leader" && $3 == "running" { sub(/^n/, "", $1); print $1; exit }'; }
# psql on node I
nsql() { (PGCONNECT_TIMEOUT=2 fence_as_pg timeout 10 psql -X -h 127.0.0.1 -p "${pg_ports[$1]}" -U postgres -d postgres -Atq "${@:2}"); }
timeline() { nsql "$1" -c "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int" 2>/dev/null; }
writable() { [ "$(nsql "$1" -c 'SELECT NOT pg_is_in_recovery()' 2>/dev/null)" = t ]; }
# wait_leader SECONDS [NODE-TO-AVOID]: the number of the new writable leader
wait_leader()
{
	local end=$(($(date +%s) + $1)) l
	while [ "$(date +%s)" -lt "$end" ]; do
		l=$(leader)
		if [ -n "$l" ] && [ "$l" != "${2:-}" ] && writable "$l"; then
			echo "$l"
			return 0
		fi
		sleep 0.5
	done
	return 1
}
# wait_streaming SECONDS N: until the leader has N streaming replicas
wait_streaming()
{
	local end=$(($(date +%s) + $1)) l n
	while [ "$(date +%s)" -lt "$end" ]; do
		l=$(leader)
		if [ -n "$l" ]; then
			n=$(nsql "$l" -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null)
			[ "${n:-0}" -ge "$2" ] && return 0
		fi
		sleep 0.5
	done
	echo "  (after $1 s the leader has ${n:-no} streaming replicas, not $2: $(members | tr '\n' ';'))"
	return 1
}
replicas_of() { local i; for i in 1 2 3; do [ "$i" = "$1" ] || echo "$i"; done; }
# candidate LEADER head|tail: the replica to hand over to; with
# synchronous_mode Patroni accepts only the synchronous standby
candidate()
{
	local c=
	[ "$sync" = true ] && c=$(members | awk '$2 == "Sync_Standby" { sub(/^n/, "", $1); print $1; exit }')
	[ -n "$c" ] || c=$(replicas_of "$1" | "$2" -n 1)
	echo "$c"
}
phase()
{
	echo "$(date +%s.%N) $1" >>"$run/phases"
	echo "--- $1 ($(($(date +%s) - t_begin)) s): $(members | tr '\n' ' ')"
}
# how many tokens workers logged as issued by node I since phase start
claims_on() { cat "$run"/worker-*.log 2>/dev/null | grep -c "\"e\":\"claim\".*\"port\":${pg_ports[$1]}," ; }

# start_run NAME SYNC PORT-OFFSET: three members, fence and the tables, the workers
start_run()
{
	local i l
	run=$work/$1
	scope=fence-$1
	sync=$2
	for i in 1 2 3; do
		pg_ports[i]=$((base_port + $3 + i - 1))
		api_ports[i]=$((base_port + 10 + $3 + i - 1))
	done
	mkdir -p "$run"
	chown postgres:postgres "$run"
	for i in 1 2 3; do write_conf "$i"; done
	start_node 1
	l=$(wait_leader 60) || { echo "patroni: no leader after 60 s"; tail -n 30 "$run/n1/patroni.log"; return 1; }
	start_node 2
	start_node 3
	nsql "$l" -v ON_ERROR_STOP=1 <<<"$("$py" "$wl" schema --jobs "$njobs")" >"$run/schema.out" 2>&1 ||
		{ cat "$run/schema.out"; return 1; }
	# two replicas cloned by pg_basebackup: on a busy machine that can take
	# more than a minute.  A member whose patroni has exited by then (seen
	# once on a new machine while the matrix chroots were being built, with
	# no trace left) gets its log shown and one restart.
	if ! wait_streaming 120 2; then
		for i in 2 3; do
			kill -0 "$(patroni_pid "$i")" 2>/dev/null && continue
			echo "  n$i: patroni is not running; the end of its log, then one restart:"
			tail -n 20 "$run/n$i/patroni.log" | sed 's/^/    /'
			start_node "$i"
		done
		wait_streaming 120 2 || {
			for i in 1 2 3; do
				echo "  n$i: the end of its log:"
				tail -n 10 "$run/n$i/patroni.log" | sed 's/^/    /'
			done
			return 1
		}
	fi
	dsn="host=127.0.0.1,127.0.0.1,127.0.0.1 port=${pg_ports[1]},${pg_ports[2]},${pg_ports[3]} user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=2"
	rm -f "$run/stop"
	for i in $(seq "$nworkers"); do
		bg_pg "$py" "$wl" work --dsn "$dsn application_name=worker-$i" --worker "$i" \
			--log "$run/worker-$i.log" --stop "$run/stop" --jobs "$njobs" --lease "$lease" \
			--until $(($(date +%s) + 600)) </dev/null >>"$run/worker-$i.out" 2>&1 &
		worker_pids+=($!)
		disown $!
	done
	echo "$1: PostgreSQL $(nsql "$l" -c 'SHOW server_version'), fence $(nsql "$l" -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'"), $(patroni --version 2>&1), etcd $(etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p'); synchronous_mode $sync; $nworkers workers, $njobs jobs, lease ${lease}s"
	phase "workload"
	sleep 4
}

# rejoin I: start node I's patroni again (pg_rewind or a new base backup, as Patroni decides)
rejoin() { start_node "$1"; }
settle() { wait_streaming "${1:-60}" 2; sleep 2; }

inject_kill_postmaster()
{
	local l
	l=$(leader)
	phase "kill -9 postmaster n$l"
	kill -KILL "$(head -n 1 "$run/n$l/data/postmaster.pid")" 2>/dev/null
	l=$(wait_leader 40) || echo "  (no writable leader 40 s after the kill)"
	echo "  leader now n${l:-?}"
	settle 60
}
inject_node_crash_lag()
{
	local l lag a
	l=$(leader)
	read -r lag a < <(replicas_of "$l" | tr '\n' ' ')
	# with synchronous_mode, the replica that lags is the one that is not the synchronous standby
	if [ "$sync" = true ] && [ "$(members | awk -v n="n$lag" '$1 == n { print $2 }')" = Sync_Standby ]; then
		read -r a lag < <(replicas_of "$l" | tr '\n' ' ')
	fi
	phase "node crash n$l, n$lag lagging"
	signal_pg STOP "$lag"
	sleep 3
	crash_node "$l"
	a=$(wait_leader 40 "$l") || echo "  (no new leader 40 s after the crash)"
	echo "  leader now n${a:-?}"
	sleep 3
	signal_pg CONT "$lag"
	rejoin "$l"
	settle 90
}
inject_zombie()
{
	local l a p
	l=$(leader)
	phase "zombie leader n$l"
	p=$(patroni_pid "$l")
	kill -STOP "$p"
	signal_pg STOP "$l"
	sleep $((ttl + 2))
	a=$(wait_leader 30 "$l") || echo "  (no new leader while n$l was stopped)"
	echo "  leader now n${a:-?}"
	sleep 3
	signal_pg CONT "$l"
	kill -CONT "$p"
	settle 90
}
inject_switchover()
{
	local l c a
	l=$(leader)
	c=$(candidate "$l" head)
	phase "switchover n$l -> n$c"
	patronictl_ switchover --leader "n$l" --candidate "n$c" --force >"$run/switchover.out" 2>&1
	grep -i -E 'fail|error' "$run/switchover.out" | sed 's/^/  /'
	a=$(wait_leader 40 "$l") || echo "  (no new leader after the switchover)"
	echo "  leader now n${a:-?}"
	settle 60
}
inject_failover()
{
	local l c a
	l=$(leader)
	c=$(candidate "$l" tail)
	phase "failover n$l -> n$c"
	patronictl_ failover --candidate "n$c" --force >"$run/failover.out" 2>&1
	grep -i -E 'fail|error' "$run/failover.out" | sed 's/^/  /'
	a=$(wait_leader 40 "$l") || echo "  (no new leader after the failover)"
	echo "  leader now n${a:-?}"
	settle 60
}
inject_etcd_down()
{
	local a
	phase "etcd stopped"
	kill -TERM "$etcd_pid"
	for _ in $(seq 50); do
		kill -0 "$etcd_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$etcd_pid" 2>/dev/null
	etcd_pid=
	sleep $((ttl + 4))
	echo "  while etcd was down: $(for i in 1 2 3; do printf 'n%s %s ' "$i" "$(nsql "$i" -c "SELECT CASE WHEN pg_is_in_recovery() THEN 'read-only' ELSE 'writable' END" 2>/dev/null)"; done)"
	start_etcd || echo "  (etcd did not come back)"
	a=$(wait_leader 40) || echo "  (no leader after etcd came back)"
	echo "  leader now n${a:-?}"
	settle 60
}
# the double failover; sets tl_a and tl_b
inject_double_failover()
{
	local l a b c n0 end
	l=$(leader)
	read -r a b < <(replicas_of "$l" | tr '\n' ' ')
	phase "double failover: n$b paused, n$l crashed"
	signal_pg STOP "$b"
	sleep 1
	crash_node "$l"
	c=$(wait_leader 40 "$l") || echo "  (no interim leader after the crash)"
	if [ "${c:-}" != "$a" ]; then
		echo "  (interim leader is n${c:-?}, not n$a)"
		a=${c:-$a}
	fi
	tl_a=$(timeline "$a")
	phase "interim leader n$a (timeline $tl_a)"
	n0=$(claims_on "$a")
	end=$(($(date +%s) + 10))
	while [ "$(date +%s)" -lt "$end" ] && [ $(($(claims_on "$a") - n0)) -lt 30 ]; do
		sleep 0.5
	done
	echo "  the workers hold $(($(claims_on "$a") - n0)) tokens from n$a"
	phase "n$a crashed, n$b resumed"
	crash_node "$a"
	signal_pg CONT "$b"
	c=$(wait_leader 60 "$a") || echo "  (no leader after the second crash: $(members | tr '\n' ' '))"
	echo "  leader now n${c:-?}"
	tl_b=$(timeline "${c:-$b}")
	phase "final leader n${c:-$b} (timeline $tl_b)"
	final=${c:-$b}
	sleep 6
}

# in_budget WHAT SECONDS: true while the check has run less than SECONDS;
# else WHAT is skipped, and that fails (a skipped injection proves nothing)
in_budget()
{
	local t=$(($(date +%s) - t_begin))
	[ "$t" -lt "$2" ] && return 0
	bad "$1 skipped: the check has run ${t}s, its budget for it is $2 s"
	return 1
}

verdict()
{
	local label=$1 rc
	shift
	stop_workers
	"$py" "$wl" report --logs "$run" --label "$label" --phases "$run/phases" \
		--dsn "host=127.0.0.1 port=${pg_ports[$final]} user=postgres dbname=postgres connect_timeout=5" "$@" >"$run/report.out" 2>&1
	rc=$?
	cat "$run/report.out"
	n_ok=$((n_ok + $(grep -c '^ok ' "$run/report.out")))
	n_fail=$((n_fail + $(grep -c '^FAILED ' "$run/report.out")))
	[ "$rc" -eq 0 ] || grep -q '^FAILED ' "$run/report.out" || bad "$label: workload.py report exited $rc"
}

# ===========================================================================
start_etcd || { bad "etcd starts on 127.0.0.1:$etcd_port"; exit 1; }
echo "etcd on 127.0.0.1:$etcd_port"

echo "=== main run: Patroni's defaults (synchronous_mode off)"
if start_run main false 0; then
	in_budget "main: kill -9 of the postmaster" 300 && inject_kill_postmaster
	in_budget "main: node crash" 300 && inject_node_crash_lag
	in_budget "main: zombie leader" 300 && inject_zombie
	in_budget "main: switchover" 300 && inject_switchover
	in_budget "main: failover" 300 && inject_failover
	in_budget "main: etcd stopped" 300 && inject_etcd_down
	in_budget "main: double failover" 360 && inject_double_failover
	[ -n "$final" ] || final=$(leader)
	if [ -n "$tl_a" ] && [ "$tl_a" = "$tl_b" ]; then
		echo "main: the double failover reused timeline $tl_a (interim leader and final leader)"
	else
		echo "main: the double failover did not reuse a timeline (interim ${tl_a:-?}, final ${tl_b:-?})"
	fi
	verdict main
else
	bad "main: three Patroni members start"
fi
stop_run

echo "=== second run: synchronous_mode: true"
if ! in_budget "sync: the second run" 460; then
	:
elif start_run sync true 3; then
	in_budget "sync: node crash" 600 && inject_node_crash_lag
	in_budget "sync: switchover" 600 && inject_switchover
	in_budget "sync: failover" 600 && inject_failover
	in_budget "sync: kill -9 of the postmaster" 600 && inject_kill_postmaster
	final=$(leader)
	verdict sync --sync
else
	bad "sync: three Patroni members start"
fi
stop_run
run=

total=$((n_ok + n_fail))
if [ "$n_fail" = 0 ]; then
	echo "patroni: all $total assertions hold ($(($(date +%s) - t_begin)) s)"
	exit 0
fi
echo "patroni: $n_fail of $total assertions FAILED ($(($(date +%s) - t_begin)) s)"
exit 1
