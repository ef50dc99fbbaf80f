# bench/queue_lib.sh: what the benchmarks share.
# shellcheck shell=bash disable=SC2034,SC2094
#
# Sourced, not run, after test/lib.sh, by every benchmark script: bench/run,
# scale.sh, soak.sh, pipeline.sh, claim_profile.sh, backend_memory.sh,
# claim_versions.sh and ddl_overhead.sh.  All of them take their common
# options through qb_option, become root and install their packages through
# qb_prepare, and write the postgresql.conf lines they share with qb_conf;
# bench/run, claim_versions.sh and ddl_overhead.sh, which run their own
# clusters, use qb_pgbench_counts and (not ddl_overhead.sh) qb_backends_gone
# and qb_cpu_ticks with their own postmaster, and define their own q.
#
# The rest is for the queue-scale benchmarks (scale.sh, soak.sh,
# pipeline.sh, claim_profile.sh and backend_memory.sh).  It owns the cluster
# (one throwaway cluster per script, as the postgres user, unix socket only,
# on a private port), psql, and one pgbench run measured the way bench/run
# measures it: throughput as pgbench reports it, server CPU per transaction
# from the postmaster's reaped-children counters, and a failed run counted
# when pgbench failed, a transaction failed, a client aborted or the server
# logged an ERROR.
#
# The caller sets, before qb_start: QB_NAME (directory prefix), QB_PORT_BASE,
# QB_PORT_MAX, QB_DB, QB_PRIORITY (1: server and pgbench at nice -15), and
# passes the extra postgresql.conf lines to qb_start.  Then: CL, PORT, SOCK,
# SLOG, PMPID, PGBIN are set; q runs psql on QB_DB; qb_pgbench runs pgbench.
# QB_DEBUG=1 in the environment writes each run's CPU readings and the
# postmaster's children at the second reading to <run output>.debug.

# qb_option "$@", from the caller's option loop, for an option the caller
# does not know itself: takes the options every benchmark shares, and sets
# QB_NARGS to how many arguments it took (1, or 2 with the option's value)
# for the caller to shift; any other option is an error.
#   --out DIR      sets OUT
#   --port N       sets QB_PORT_BASE; only for a script that sets a default
#                  QB_PORT_BASE before its loop (the others have no --port)
#   --keep         sets QB_KEEP=1
#   --no-priority  sets QB_PRIORITY=0
#   -h, --help     prints the calling script's header comment (from line 2
#                  to its `set -euo` line) and exits
# Usage:
#   while [ $# -gt 0 ]; do
#   	case $1 in
#   	--mine) MINE=$2; shift ;;
#   	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
#   	esac
#   	shift
#   done
qb_option()
{
	QB_NARGS=1
	case $1 in
	--out) OUT=$2 QB_NARGS=2 ;;
	--port)
		[ -n "${QB_PORT_BASE+set}" ] || fence_die "unknown option: $1 (try --help)"
		QB_PORT_BASE=$2 QB_NARGS=2
		;;
	--keep) QB_KEEP=1 ;;
	--no-priority) QB_PRIORITY=0 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) fence_die "unknown option: $1 (try --help)" ;;
	esac
}

# qb_prepare PACKAGE...: re-run the calling script as root (through sudo)
# with the arguments it was given, which the caller saved in ARGS, unless it
# already is root; then install postgresql-N (N the major under test) and
# PACKAGE..., those not installed yet.
qb_prepare()
{
	fence_need_root "$0" "${ARGS[@]}"
	fence_install_packages "postgresql-$FENCE_PG_MAJOR" "$@" >&2 || fence_die "package install failed"
}

# qb_conf SHARED_BUFFERS: the postgresql.conf lines most benchmarks share:
# shared_buffers; no checkpoint inside a run (checkpoint_timeout 1h,
# max_wal_size 20GB), new WAL segments not zero-filled; JIT off.
qb_conf()
{
	printf 'shared_buffers = %s\nmax_wal_size = 20GB\ncheckpoint_timeout = 1h\nwal_init_zero = off\njit = off\n' "$1"
}

# qb_raw_jobs_sql N: SQL that makes the seed's jobs table, claim_jobs, for
# the raw conditional UPDATE (bench/scripts/claim_raw.pgb), with jobs 1..N
# in it, each claimed once and its lease long expired.
qb_raw_jobs_sql()
{
	cat <<EOF
CREATE TABLE claim_jobs (
	id int PRIMARY KEY,
	status text NOT NULL DEFAULT 'pending',
	lease_epoch bigint NOT NULL DEFAULT 0,
	lease_expires_at timestamptz,
	available_at timestamptz NOT NULL DEFAULT now() - interval '1 hour');
INSERT INTO claim_jobs (id, status, lease_epoch, lease_expires_at)
SELECT g, 'claimed', 1, now() - interval '1 hour' FROM generate_series(1, $1) g;
EOF
}

# qb_fence_claims_sql PREFIX N LEASE HOLDER: SQL that claims jobs PREFIX1 ..
# PREFIXN with fence_claim, a thousand to a statement.
qb_fence_claims_sql()
{
	local b
	for b in $(seq 0 1000 $(($2 - 1))); do
		echo "SELECT count(fence_claim('$1' || g, interval '$3', '$4')) FROM generate_series($((b + 1)), $((b + 1000 < $2 ? b + 1000 : $2))) g;"
	done
}

qb_say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# qb_start "EXTRA_CONF": initdb and start the cluster; registers cleanup.
# Says where the results go (OUT), and sets T0 (seconds), LOAD0 (the load
# average) and D0 (the date) as the measuring starts.
qb_start()
{
	local extra=$1
	fence_pg_setup
	PGBIN=$FENCE_PG_BIN
	CL=$(fence_mktemp_pg "$QB_NAME")
	PORT=$(fence_free_port "$QB_PORT_BASE")
	[ "$PORT" -le "$QB_PORT_MAX" ] || fence_die "no free port in $QB_PORT_BASE-$QB_PORT_MAX"
	SOCK=$CL/sock
	SLOG=$CL/server.log
	trap qb_cleanup EXIT
	fence_cluster_init "$CL" "$PORT" "$extra" || fence_die "initdb failed"
	QB_NICE=()
	[ "${QB_PRIORITY:-0}" = 1 ] && QB_NICE=(nice -n -15)
	(cd "$CL" && "${QB_NICE[@]}" setpriv --reuid=postgres --regid=postgres --init-groups \
		env HOME="$FENCE_PG_HOME" "$PGBIN/pg_ctl" -D "$CL/data" -l "$SLOG" -w -t 60 start \
		>/dev/null) || {
		tail -n 30 "$SLOG" >&2
		fence_die "cluster did not start"
	}
	PMPID=$(head -n 1 "$CL/data/postmaster.pid")
	QB_CLK_TCK=$(getconf CLK_TCK)
	QB_FAILED_RUNS=0
	"$PGBIN/createdb" -h "$SOCK" -p "$PORT" -U postgres "$QB_DB"
	qb_say "cluster $CL on port $PORT; results in $OUT"
	T0=$(date +%s)
	LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
	D0=$(date -u '+%Y-%m-%d %H:%M UTC')
}

qb_cleanup()
{
	[ -n "${CL:-}" ] || return 0
	if [ "${QB_KEEP:-0}" = 1 ]; then
		echo "cluster kept: $CL (port $PORT)" >&2
		return 0
	fi
	fence_cluster_stop "$CL" fast
	rm -rf "$CL"
}

q() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres -d "$QB_DB" "$@"; }

# The fence build the cluster runs: the md5 of its fence.so and its version.
qb_fence_build()
{
	local so
	so=$("$FENCE_PG_CONFIG" --pkglibdir)/fence.so
	printf 'fence.so %s (md5 %s, %s)' "$so" "$(md5sum <"$so" | cut -c1-12)" \
		"$(date -u -r "$so" '+%Y-%m-%d %H:%M UTC')"
}

# Server CPU: the postmaster's cutime + cstime (clock ticks) grow by the CPU
# time of each backend it reaps.  Waiting until the postmaster has no child
# left but its long-lived auxiliary processes makes one reading hold every
# backend of the run just ended and none of the next, nor the VACUUM run
# before it.  A backend that is exiting may no longer show its title (its
# memory map is torn down before it turns zombie, which takes a while after
# touching many shared buffers), and a zombie's CPU is not counted until the
# postmaster reaps it: so any child that is not an auxiliary process counts.
# (Waiting only for children titled with the database let a whole run's CPU
# slip out of the readings at 1M and 10M jobs.)
# qb_backends_gone PID [TRIES]: wait for the postmaster PID to have no such
# child left, up to TRIES times 10 ms (default 1000, 10 s).
# qb_cpu_ticks PID: the postmaster PID's cutime + cstime.
qb_backends_gone()
{
	local pm=$1 tries=${2:-1000}
	for _ in $(seq 1 "$tries"); do
		ps --ppid "$pm" -o args= | grep -q -v -E \
			'^postgres: (checkpointer|background writer|walwriter|autovacuum launcher|logical replication launcher|archiver)' ||
			return 0
		sleep 0.01
	done
	return 0
}
qb_cpu_ticks() { awk '{ print $16 + $17 }' "/proc/$1/stat"; }

# qb_pgbench_counts OUTFILE: from pgbench's output, QB_TPS, QB_NTX (the
# transactions it processed), QB_FAILED (its failed transactions), each 0
# if the output has none, and QB_ABORTED (the clients that aborted).
qb_pgbench_counts()
{
	QB_TPS=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1")
	QB_NTX=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1")
	QB_FAILED=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$1")
	QB_ABORTED=$(grep -c 'aborted in command\|aborted while' "$1" || true)
	: "${QB_TPS:=0}" "${QB_NTX:=0}" "${QB_FAILED:=0}"
}

# qb_pgbench OUTFILE [pgbench arguments]: one measured pgbench run on QB_DB,
# from the directory of OUTFILE (where --log files go).  Sets QB_TPS,
# QB_NTX, QB_FAILED, QB_ABORTED, QB_SRV_ERRORS, QB_CPU_US (server CPU per
# transaction, microseconds) and QB_OK (1 or 0).
qb_pgbench()
{
	local out=$1 rc=0 e0 e1 c0 c1
	shift
	e0=$(grep -c 'ERROR:' "$SLOG" || true)
	qb_backends_gone "$PMPID"
	c0=$(qb_cpu_ticks "$PMPID")
	(cd "$(dirname "$out")" && "${QB_NICE[@]}" "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres \
		-n "$@" "$QB_DB") >"$out" 2>&1 || rc=$?
	qb_backends_gone "$PMPID"
	c1=$(qb_cpu_ticks "$PMPID")
	[ -z "${QB_DEBUG:-}" ] || { echo "cpu ticks $c0 -> $c1"; ps --ppid "$PMPID" -o pid=,stat=,args=; } >>"$out.debug"
	e1=$(grep -c 'ERROR:' "$SLOG" || true)
	qb_pgbench_counts "$out"
	QB_SRV_ERRORS=$((e1 - e0))
	QB_CPU_US=""
	[ "$QB_NTX" -gt 0 ] && QB_CPU_US=$(((c1 - c0) * 1000000 / QB_CLK_TCK / QB_NTX))
	QB_OK=1
	if [ "$rc" != 0 ] || [ "$QB_FAILED" != 0 ] || [ "$QB_ABORTED" != 0 ] || [ "$QB_SRV_ERRORS" != 0 ]; then
		QB_OK=0
		QB_FAILED_RUNS=$((QB_FAILED_RUNS + 1))
		qb_say "ERRORS in $out (rc=$rc failed=$QB_FAILED aborted=$QB_ABORTED server errors=$QB_SRV_ERRORS)"
		grep -m3 -i 'error' "$out" >&2 || true
		grep 'ERROR:' "$SLOG" | tail -n 3 >&2 || true
	fi
}

# qb_durability CPU_ONLY: the postgresql.conf lines for fsync,
# full_page_writes and autovacuum.  0: PostgreSQL's defaults (on), as a
# production server runs; 1: the CPU-only settings (all three off).
# test/lib.sh's fence_cluster_init writes fsync and full_page_writes off
# for every cluster; qb_start appends these lines after its own, and the
# last one in postgresql.conf wins.
qb_durability()
{
	local v=on
	[ "$1" = 1 ] && v=off
	printf 'fsync = %s\nfull_page_writes = %s\nautovacuum = %s\n' "$v" "$v" "$v"
}

# qb_settings LABEL VACUUM: a report's settings lines, the values read from
# the running server (SHOW), not from what the script meant to set.  LABEL
# names the mode, VACUUM says whether a VACUUM ran between runs.
qb_settings()
{
	echo "settings: $1: $(q -c "SELECT format('fsync %s, full_page_writes %s, autovacuum %s, synchronous_commit %s, shared_buffers %s (also checkpoint_timeout %s, max_wal_size %s, jit %s)',
		current_setting('fsync'), current_setting('full_page_writes'), current_setting('autovacuum'),
		current_setting('synchronous_commit'), current_setting('shared_buffers'),
		current_setting('checkpoint_timeout'), current_setting('max_wal_size'), current_setting('jit'))")"
	echo "VACUUM between runs: $2"
}

# qb_meta DETAIL...: write OUT/meta.txt, the lines every report starts
# with: the date (D0) and the mode (QUICK), the machine, the server and
# fence build, the priority, the load average at the start (LOAD0) and now;
# then a line for each DETAIL; then the whole script's time (since T0) and
# its failed runs.
qb_meta()
{
	local load1 line
	load1=$(cut -d' ' -f1-3 /proc/loadavg)
	{
		echo "date: $D0; mode: $([ "$QUICK" = 1 ] && echo 'quick (smoke: not a measurement)' || echo full)"
		echo "machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)"
		echo "server: $("$PGBIN/postgres" --version); fence $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'" 2>/dev/null || echo '?'), $(qb_fence_build)"
		echo "priority: $([ ${#QB_NICE[@]} -gt 0 ] && echo "server and pgbench at ${QB_NICE[*]}" || echo normal)"
		echo "load average (1, 5, 15 min) at start: $LOAD0; at end: $load1"
		for line in "$@"; do echo "$line"; done
		echo "whole script: $(($(date +%s) - T0)) s; failed runs: $QB_FAILED_RUNS"
	} >"$OUT/meta.txt"
}
