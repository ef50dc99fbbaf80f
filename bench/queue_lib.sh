# bench/queue_lib.sh: what the queue-scale benchmarks share.
# shellcheck shell=bash disable=SC2034,SC2094
#
# Sourced, not run, by bench/scale.sh, soak.sh, pipeline.sh, claim_profile.sh
# and backend_memory.sh, after test/lib.sh.  It owns the cluster (one
# throwaway cluster per script, as the postgres user, unix socket only, on a
# private port), psql, and one pgbench run measured the way bench/run
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

qb_say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# qb_start "EXTRA_CONF": initdb and start the cluster; registers cleanup.
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
qb_backends_gone()
{
	for _ in $(seq 1 1000); do
		ps --ppid "$PMPID" -o args= | grep -q -v -E \
			'^postgres: (checkpointer|background writer|walwriter|autovacuum launcher|logical replication launcher|archiver)' ||
			return 0
		sleep 0.01
	done
	return 0
}
qb_cpu_ticks() { awk '{ print $16 + $17 }' "/proc/$PMPID/stat"; }

# qb_pgbench OUTFILE [pgbench arguments]: one measured pgbench run on QB_DB,
# from the directory of OUTFILE (where --log files go).  Sets QB_TPS,
# QB_NTX, QB_FAILED, QB_ABORTED, QB_SRV_ERRORS, QB_CPU_US (server CPU per
# transaction, microseconds) and QB_OK (1 or 0).
qb_pgbench()
{
	local out=$1 rc=0 e0 e1 c0 c1
	shift
	e0=$(grep -c 'ERROR:' "$SLOG" || true)
	qb_backends_gone
	c0=$(qb_cpu_ticks)
	(cd "$(dirname "$out")" && "${QB_NICE[@]}" "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres \
		-n "$@" "$QB_DB") >"$out" 2>&1 || rc=$?
	qb_backends_gone
	c1=$(qb_cpu_ticks)
	[ -z "${QB_DEBUG:-}" ] || { echo "cpu ticks $c0 -> $c1"; ps --ppid "$PMPID" -o pid=,stat=,args=; } >>"$out.debug"
	e1=$(grep -c 'ERROR:' "$SLOG" || true)
	QB_TPS=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$out")
	QB_NTX=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
	QB_FAILED=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out")
	QB_ABORTED=$(grep -c 'aborted in command\|aborted while' "$out" || true)
	QB_SRV_ERRORS=$((e1 - e0))
	: "${QB_TPS:=0}" "${QB_NTX:=0}" "${QB_FAILED:=0}"
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

# qb_meta: the lines every report starts with (machine, server, load).
qb_meta()
{
	echo "machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)"
	echo "server: $("$PGBIN/postgres" --version); fence $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'" 2>/dev/null || echo '?'), $(qb_fence_build)"
	echo "priority: $([ ${#QB_NICE[@]} -gt 0 ] && echo "server and pgbench at ${QB_NICE[*]}" || echo normal)"
}
