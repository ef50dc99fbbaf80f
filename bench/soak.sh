#!/usr/bin/env bash
# bench/soak.sh: fence_claim at full speed for a long time.
#
#   bash bench/soak.sh                 three runs of 30 minutes each
#   bash bench/soak.sh --minutes 20 --runs "raw default"
#                                      the raw UPDATE, then fence_claim, 20 minutes each
#   bash bench/soak.sh --quick         CI smoke: 4-s runs, no timing claims
#   bash bench/soak.sh --cpu-only      fsync and full_page_writes off (below)
#
# What it shows: whether claims/s stays flat and fence_claims stays bounded
# in size when a queue claims as fast as it can for a long time, with
# autovacuum doing the cleaning, and how both compare with the seed's raw
# UPDATE doing the same.  Every claim is a takeover (a random job among
# --jobs, all claimed beforehand, 1 ms leases: bench/scripts/
# claim_fence.pgb), so every claim leaves a dead row version and two dead
# index entries behind (doc/fence.md 9.8); the raw UPDATE changes no
# indexed column, so PostgreSQL can do it as a HOT update.
#
# Three runs, one after the other, on one cluster with autovacuum ON:
#   raw       the seed's raw conditional UPDATE on its jobs table (claim_jobs,
#             bench/scripts/claim_raw.pgb), the same jobs, clients and length:
#             the yardstick for fence's size and throughput in the same soak;
#   default   fence_claim, autovacuum's default settings;
#   tuned     fence_claim, fence_claims with the settings doc/fence.md 9.8
#             recommends: autovacuum_vacuum_scale_factor = 0.01,
#             autovacuum_vacuum_cost_delay = 0.
# Each run has its own database, so each starts from the same fresh table.
# pgbench runs with no rate limit (-R): the rate is the highest this machine
# sustains, and a falling rate is what the soak is looking for.
#
# Sampled every --interval seconds (default 10): claims/s (tokens issued, from
# fence_token_seq; raw: the sum of claim_jobs.lease_epoch, which each claim
# raises by one), attempts/s, p50 and p99 latency (from pgbench's per-
# transaction log, one transaction in 10 sampled: --sampling-rate 0.1),
# pg_total_relation_size of the run's table (fence_claims, or claim_jobs),
# the size of its heap and of each of its indexes, dead rows and autovacuum
# runs.  Written to OUT/soak_<run>.csv; plotted (python3-matplotlib,
# bench/soak_plot.py) into PLOTS/soak-<run>.png; summarised in
# OUT/report.md.  Nothing is pass/fail on timing: the exit status is 1
# only if a run had an error.
#
# Options:
#   --minutes N      length of each run (default 30)
#   --clients N      pgbench clients (default 8)
#   --jobs N         jobs in the registry (default 10000)
#   --interval S     sampling interval in seconds (default 10)
#   --runs "A B"     which runs, of raw, default and tuned (default all three)
#   --quick          4-second runs, 1 s samples, 1,000 jobs: proves it works
#   --cpu-only       fsync and full_page_writes off (autovacuum stays on)
#   --out DIR        results (default /tmp/fence-soak-out.XXXXXX)
#   --plots DIR      where the PNGs go (default OUT; the doc's are in doc/)
#   --port N         first port to try (default 55760; up to +19)
#   --keep           leave the cluster running
#   --no-priority    do not run server and pgbench at nice -15
#
# Environment: PG_CONFIG picks the PostgreSQL installation (and fence build),
# as for bench/run.  Server settings, by default a production server's
# durability: fsync, full_page_writes and autovacuum at PostgreSQL's
# defaults (on), checkpoints at theirs (checkpoint_timeout 5min,
# max_wal_size 1GB), and no VACUUM between runs (each run has its own
# database, VACUUM ANALYZEd once after its registry is loaded).  Kept for
# repeatability: synchronous_commit off (test/lib.sh's cluster: a commit
# does not wait for its flush), shared_buffers 1GB, JIT off; and
# log_autovacuum_min_duration = 0 (so the log shows each autovacuum of
# fence_claims; logging only).  --cpu-only turns fsync and full_page_writes
# off, as earlier versions of this script always ran (the soak in
# doc/benchmarks.md was measured so); autovacuum stays on, since cleaning
# up after the claims is what the soak watches, and there is still no
# VACUUM between runs.  The report's first lines state the settings, read
# from the server.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=../test/lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=queue_lib.sh
. "$HERE/queue_lib.sh"

MINUTES=30 CLIENTS=8 JOBS=10000 INTERVAL=10 RUNS="raw default tuned" QUICK=0 CPU_ONLY=0 OUT="" PLOTS=""
QB_PORT_BASE=55760 QB_KEEP=0 QB_PRIORITY=1
ARGS=("$@")
while [ $# -gt 0 ]; do
	case $1 in
	--minutes) MINUTES=$2; shift ;;
	--clients) CLIENTS=$2; shift ;;
	--jobs) JOBS=$2; shift ;;
	--interval) INTERVAL=$2; shift ;;
	--runs) RUNS=$2; shift ;;
	--quick) QUICK=1 ;;
	--cpu-only) CPU_ONLY=1 ;;
	--plots) PLOTS=$2; shift ;;
	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
	esac
	shift
done
qb_prepare python3 python3-matplotlib procps

DURATION=$((MINUTES * 60))
if [ "$QUICK" = 1 ]; then
	DURATION=4 INTERVAL=1 JOBS=1000 CLIENTS=2 QB_PRIORITY=0
fi
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/fence-soak-out.XXXXXX)
[ -n "$PLOTS" ] || PLOTS=$OUT
mkdir -p "$OUT/logs" "$PLOTS"
chmod 777 "$OUT/logs"

QB_NAME=fence-soak QB_PORT_MAX=$((QB_PORT_BASE + 19)) QB_DB=soak_setup
qb_start "$(
	cat <<EOF
# bench/soak.sh: autovacuum on, with its defaults; --cpu-only: fsync and
# full_page_writes off
$(qb_durability "$CPU_ONLY" | sed '/^autovacuum/d')
shared_buffers = 1GB
autovacuum = on
log_autovacuum_min_duration = 0
jit = off
max_connections = 50
EOF
)"

# sample_sql TABLE CLAIMS TOKEN_INDEX: one sample of the run's table; CLAIMS
# counts the claims made so far, TOKEN_INDEX is fence's token index or 0
sample_sql()
{
	echo "SELECT round(extract(epoch FROM clock_timestamp())::numeric, 3), ($2),
	pg_total_relation_size('$1'), pg_relation_size('$1'),
	pg_relation_size('${1}_pkey'), $3,
	n_live_tup, n_dead_tup, autovacuum_count, n_tup_upd, n_tup_hot_upd
	FROM pg_stat_user_tables WHERE relid = '$1'::regclass"
}

for run in $RUNS; do
	case $run in raw | default | tuned) ;; *) fence_die "unknown run: $run (raw, default or tuned)" ;; esac
	QB_DB=soak_$run
	"$PGBIN/createdb" -h "$SOCK" -p "$PORT" -U postgres "$QB_DB"
	if [ "$run" = raw ]; then
		table=claim_jobs pgb=claim_raw.pgb
		sql=$(sample_sql claim_jobs "SELECT sum(lease_epoch) FROM claim_jobs" 0)
		q >/dev/null <<EOF
SET client_min_messages = warning;
$(qb_raw_jobs_sql "$JOBS")
VACUUM ANALYZE claim_jobs;
CHECKPOINT;
EOF
	else
		table=fence_claims pgb=claim_fence.pgb
		sql=$(sample_sql fence_claims "SELECT last_value FROM fence_token_seq" \
			"pg_relation_size('fence_claims_token_key')")
		tuning="-- autovacuum's defaults"
		[ "$run" = tuned ] && tuning="ALTER TABLE fence_claims SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);"
		q >/dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION fence;
$(qb_fence_claims_sql cj_ "$JOBS" '1 millisecond' soak)
$tuning
VACUUM ANALYZE fence_claims;
CHECKPOINT;
EOF
	fi
	qb_say "soak $run: $table, $CLIENTS clients, $JOBS jobs, $DURATION s, samples every $INTERVAL s ($(q -c "SELECT coalesce(array_to_string(reloptions, ', '), 'no reloptions') FROM pg_class WHERE oid = '$table'::regclass"))"
	samples=$OUT/samples_$run.csv
	echo "epoch,claims,total_bytes,heap_bytes,pkey_bytes,token_bytes,live_tup,dead_tup,autovacuums,tup_upd,tup_hot_upd" >"$samples"
	q -F, -c "$sql" >>"$samples"
	rm -f "$OUT/logs/soak_$run".*
	START=$(date +%s.%N)
	# the sampler: one row every INTERVAL seconds until pgbench is done
	(
		n=1
		while [ ! -e "$OUT/logs/.done_$run" ]; do
			target=$(awk -v s="$START" -v n="$n" -v i="$INTERVAL" 'BEGIN { printf "%.3f", s + n * i }')
			while awk -v t="$target" -v now="$(date +%s.%N)" 'BEGIN { exit !(now < t) }'; do
				[ -e "$OUT/logs/.done_$run" ] && break
				sleep 0.2
			done
			q -F, -c "$sql" >>"$samples" 2>/dev/null || true
			n=$((n + 1))
		done
	) &
	sampler=$!
	qb_pgbench "$OUT/logs/soak_$run.out" -M prepared -c "$CLIENTS" -j 1 -T "$DURATION" \
		--random-seed=4242 -D njobs="$JOBS" -f "$HERE/scripts/$pgb" \
		--log --log-prefix="soak_$run" --sampling-rate=0.1
	touch "$OUT/logs/.done_$run"
	wait "$sampler" || true
	q -F, -c "$sql" >>"$samples"
	echo "$run	$START	$QB_TPS	$QB_NTX	$QB_CPU_US	$QB_OK" >>"$OUT/runs.tsv"
	# each autovacuum of the run's table, with its detail lines (pages, tuples,
	# index scans, buffer usage, system usage: elapsed)
	awk -v t="automatic vacuum of table \"soak_$run.public.$table\"" '
		index($0, t) { keep = 1; print; next }
		/^\t/ && keep { print; next }
		{ keep = 0 }' "$SLOG" >"$OUT/autovacuum_$run.log"
	qb_say "soak $run: $QB_NTX attempts, $QB_TPS/s, server CPU $QB_CPU_US us/attempt; $(grep -c 'automatic vacuum' "$OUT/autovacuum_$run.log" || true) autovacuums of $table"
	q -c "CHECKPOINT"
done

qb_meta "each run: $DURATION s, $CLIENTS clients (-j 1, -M prepared, no -R), $JOBS jobs, every attempt a takeover (1 ms leases); samples every $INTERVAL s"

if [ "$CPU_ONLY" = 1 ]; then
	MODE="CPU-only (--cpu-only; autovacuum stays on)"
else
	MODE="production durability (the default)"
fi
{
	qb_settings "$MODE" "no (each run in its own database, VACUUM ANALYZE once after loading it)"
	echo
	/usr/bin/python3 "$HERE/soak_plot.py" --out "$OUT" --plots "$PLOTS" --interval "$INTERVAL" \
		--runs "$RUNS"
} >"$OUT/report.md"
cat "$OUT/meta.txt" "$OUT/report.md"
qb_say "results in $OUT; plots in $PLOTS"
[ "$QB_FAILED_RUNS" = 0 ] || { qb_say "$QB_FAILED_RUNS run(s) had errors"; exit 1; }
