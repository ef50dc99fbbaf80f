#!/usr/bin/env bash
# bench/scale.sh: fence_claim against the raw conditional UPDATE as the
# registry grows.
#
#   bash bench/scale.sh                          10k, 1M and 10M jobs; 1, 8, 32 clients
#   bash bench/scale.sh --sizes "10000 1000000"  skip 10M
#   bash bench/scale.sh --quick                  CI smoke: 10k jobs, 1 and 8 clients, seconds
#   bash bench/scale.sh --cpu-only               the CPU-only settings (below)
#
# What it measures: claim attempts/s, p50 and p99 latency and server CPU per
# attempt of fence_claim (bench/scripts/claim_fence.pgb) and of the seed's
# raw conditional UPDATE (bench/scripts/claim_raw.pgb), side by side, for a
# registry of each size.  Both pick the job uniformly at random among all
# jobs of the registry (pgbench's random(1, :njobs), the same
# --random-seed for both within a round), so both see the same job
# sequence; every attempt is a takeover (the job's claim was released or its
# 1 ms lease has expired).  Variants are interleaved on one cluster: odd
# rounds raw first, even rounds fence first, one discarded warm-up round per
# size and client count.  At the smallest size it also runs the contended
# case: 32 clients over 4 jobs.
#
# Loading the registry fast: a bench-only shortcut, as a superuser.
# fence_claims is writable by superusers; the loader INSERTs released claims
# straight into it, tokens from nextval('fence_token_seq') (so the counter
# ends above every loaded token: the script checks it, and that
# fence_audit() finds nothing), and the raw
# jobs table likewise (status 'claimed', lease expired).  Then it ages both
# (one UPDATE of every loaded row: a new token, a new lease_epoch) and
# VACUUMs them once, so that pages have the free space a table that has
# seen churn has, as bench/run ages its tables.  The registry grows in place:
# the 1M registry is the 10k one plus 990,000 loaded jobs.  Never write
# fence_claims by hand on a real database: fence_claim is the way in.
#
# Settings, for both variants alike.  By default, a production server's
# durability: fsync, full_page_writes and autovacuum at PostgreSQL's
# defaults (on), and no VACUUM between runs (only the one after each load,
# before that size's first run): dead row versions, autovacuum and the
# WAL writer's flushes and full-page images land in the runs as they would
# in production, and server CPU per attempt counts the autovacuum workers
# that ran alongside (the readings wait for them to exit, up to 10 s).
# Kept for repeatability: synchronous_commit off (from test/lib.sh's
# cluster: a commit does not wait for its flush), shared_buffers 8GB (both
# tables and their indexes prewarmed after each load: reads come from
# memory, not the disk), checkpoint_timeout 1h and max_wal_size 20GB (no
# checkpoint inside a run: the script checkpoints after each load and
# after each size), JIT off; pgbench -M prepared -j 1, a fixed number of
# attempts per run.  --cpu-only: the CPU-only settings earlier versions of this script
# always used (their results in doc/benchmarks.md were measured so): fsync,
# full_page_writes and autovacuum off, and a VACUUM of the run's table
# before every run; everything else the same.  The report's first lines
# state the settings, read from the server.
#
# Options:
#   --sizes "N ..."    registry sizes, ascending (default "10000 1000000 10000000")
#   --clients "N ..."  client counts (default "1 8 32")
#   --rounds N         measured rounds per size and client count (default 5)
#   --no-contended     skip the contended case
#   --quick            10k jobs, 1 and 8 clients (or --clients), 1 round, few attempts
#   --synchronous-commit on|off  (default off, for repeatability; on is
#                      PostgreSQL's default: every commit waits for its flush)
#   --cpu-only         fsync, full_page_writes and autovacuum off, a VACUUM
#                      before every run (default: production settings, above)
#   --out DIR          results (default /tmp/fence-scale-out.XXXXXX)
#   --port N           first port to try (default 55700; up to +19)
#   --keep             leave the cluster running
#   --no-priority      do not run server and pgbench at nice -15
#
# Environment: PG_CONFIG picks the PostgreSQL installation, and with it the
# fence build (see bench/run --help for running a copied installation).
# Exit status 1 if any run had a failed transaction, an aborted client or a
# server-side ERROR, or the counter ended below a loaded token.  Never on
# timing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=../test/lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=queue_lib.sh
. "$HERE/queue_lib.sh"

SIZES="10000 1000000 10000000" CLIENTS="1 8 32" ROUNDS=5 CONTENDED=1 QUICK=0 CPU_ONLY=0 OUT="" CLIENTS_GIVEN=0 SYNC_COMMIT=off
QB_PORT_BASE=55700 QB_KEEP=0 QB_PRIORITY=1
ARGS=("$@")
while [ $# -gt 0 ]; do
	case $1 in
	--sizes) SIZES=$2; shift ;;
	--clients) CLIENTS=$2 CLIENTS_GIVEN=1; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--no-contended) CONTENDED=0 ;;
	--quick) QUICK=1 ;;
	--cpu-only) CPU_ONLY=1 ;;
	--synchronous-commit) SYNC_COMMIT=$2; shift ;;
	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
	esac
	shift
done
qb_prepare python3 procps

SHARED_BUFFERS=8GB
# attempts per run, all clients together: ~2-4 s per run on 2 cores
declare -A NTX=([1]=20000 [8]=40000 [32]=40000)
NWARM=4000
if [ "$QUICK" = 1 ]; then
	SIZES=10000 ROUNDS=1 NWARM=0 SHARED_BUFFERS=256MB QB_PRIORITY=0
	[ "$CLIENTS_GIVEN" = 1 ] || CLIENTS="1 8"
	NTX=([1]=400 [8]=800 [32]=800)
fi
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/fence-scale-out.XXXXXX)
mkdir -p "$OUT/runs"
RES=$OUT/results.tsv SIZ=$OUT/sizes.tsv
printf 'size\tcase\tclients\tvariant\tround\torder\ttps\tntx\twon\tcpu_us\tp50_ms\tp99_ms\tupd\thot_upd\tok\n' >"$RES"
printf 'size\tload_s\trelation\tmb\tbtree_levels\n' >"$SIZ"

QB_NAME=fence-scale QB_PORT_MAX=$((QB_PORT_BASE + 19)) QB_DB=fence_scale
qb_start "$(
	cat <<EOF
# bench/scale.sh: the same settings for both variants
$(qb_durability "$CPU_ONLY")
synchronous_commit = $SYNC_COMMIT
$(qb_conf "$SHARED_BUFFERS")
maintenance_work_mem = 1GB
max_connections = 100
EOF
)"

q >/dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION fence;
CREATE EXTENSION pg_prewarm;
CREATE EXTENSION pageinspect;
-- the seed's jobs table, empty: load() fills it
$(qb_raw_jobs_sql 0)
EOF

# load FROM TO: jobs FROM+1 .. TO into both registries, aged, vacuumed,
# prewarmed.  The bench-only superuser shortcut described in the header.
load()
{
	local from=$1 to=$2 t0 tok0
	t0=$(date +%s)
	tok0=$(q -c "SELECT last_value FROM fence_token_seq")
	q >/dev/null <<EOF
SET client_min_messages = warning;
INSERT INTO fence_claims (job, token, holder, claimed_at, lease_expires_at, released)
SELECT 'cj_' || g, nextval('fence_token_seq'), 'scale-load',
	   now() - interval '1 hour', now() - interval '1 hour', true
  FROM generate_series($((from + 1)), $to) g;
INSERT INTO claim_jobs (id, status, lease_epoch, lease_expires_at)
SELECT g, 'claimed', 1, now() - interval '1 hour'
  FROM generate_series($((from + 1)), $to) g;
-- age: every loaded row updated once, then vacuumed (free space in its page)
UPDATE fence_claims SET token = nextval('fence_token_seq') WHERE token > $tok0;
UPDATE claim_jobs SET lease_epoch = lease_epoch + 1 WHERE id > $from;
VACUUM ANALYZE fence_claims;
VACUUM ANALYZE claim_jobs;
SELECT count(pg_prewarm(c)) FROM unnest(ARRAY['fence_claims', 'fence_claims_pkey',
	'fence_claims_token_key', 'claim_jobs', 'claim_jobs_pkey']::regclass[]) c;
CHECKPOINT;
EOF
	# the shortcut's promise: the counter is above every token in the registry
	local bad
	bad=$(q -c "SELECT (SELECT max(token) FROM fence_claims) > (SELECT last_value FROM fence_token_seq)")
	[ "$bad" = f ] || fence_die "the counter ended below a loaded token"
	LOAD_S=$(($(date +%s) - t0))
	# and fence's own audit finds nothing wrong with the loaded registry
	bad=$(q -c "SELECT count(*) FROM fence_audit()")
	[ "$bad" = 0 ] || { q -c "SELECT * FROM fence_audit()" >&2; fence_die "fence_audit() reports problems after the load"; }
}

sizes_of()
{
	local n=$1
	q -F '	' -c "SELECT $n, $LOAD_S, c::text, round(pg_relation_size(c) / 1048576.0, 1),
		CASE WHEN c::text LIKE '%pkey' OR c::text LIKE '%key' THEN (SELECT level + 1 FROM bt_metap(c::text)) END
		FROM unnest(ARRAY['fence_claims', 'fence_claims_pkey', 'fence_claims_token_key',
			'claim_jobs', 'claim_jobs_pkey']::regclass[]) c" >>"$SIZ"
}

won_counter()
{
	case $1 in
	raw) q -c "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'claim_jobs'::regclass" ;;
	fence) q -c "SELECT last_value FROM fence_token_seq" ;;
	esac
}
stats_of()
{
	local t=claim_jobs
	[ "$1" = fence ] && t=fence_claims
	q -F ' ' -c "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = '$t'::regclass"
}

# run_one SIZE CASE CLIENTS VARIANT ROUND ORDER NTX NJOBS
run_one()
{
	local size=$1 cas=$2 c=$3 v=$4 r=$5 ord=$6 n=$7 njobs=$8
	local tbl=claim_jobs script=claim_raw.pgb prefix w0 w1 s0 s1 pct
	[ "$v" = fence ] && tbl=fence_claims script=claim_fence.pgb
	prefix=$size.$cas.c$c.$v.r$r
	[ "$CPU_ONLY" = 0 ] || q -c "VACUUM $tbl"
	w0=$(won_counter "$v")
	s0=$(stats_of "$v")
	qb_pgbench "$OUT/runs/$prefix.out" -M prepared -c "$c" -j 1 -t $((n / c)) \
		--random-seed=$((5000 + r)) -D njobs="$njobs" -f "$HERE/scripts/$script" \
		--log --log-prefix="$prefix"
	w1=$(won_counter "$v")
	s1=$(stats_of "$v")
	pct=$(python3 "$HERE/report.py" pct "$OUT/runs/$prefix".[0-9]*)
	rm -f "$OUT/runs/$prefix".[0-9]*
	[ "$r" = 0 ] && return 0
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$cas" "$c" "$v" "$r" "$ord" \
		"$QB_TPS" "$QB_NTX" "$((w1 - w0))" "$QB_CPU_US" "${pct%% *}" "${pct##* }" \
		"$((${s1% *} - ${s0% *}))" "$((${s1#* } - ${s0#* }))" "$QB_OK" >>"$RES"
}

# rounds SIZE CASE CLIENTS NJOBS
rounds()
{
	local size=$1 cas=$2 c=$3 njobs=$4 first=1 r n
	[ "$NWARM" -gt 0 ] && first=0
	qb_say "size $size, $cas, $c client(s) over $njobs job(s): warm-up + $ROUNDS round(s)"
	for r in $(seq "$first" "$ROUNDS"); do
		n=${NTX[$c]}
		[ "$r" = 0 ] && n=$NWARM
		if [ $((r % 2)) = 1 ]; then
			run_one "$size" "$cas" "$c" raw "$r" 1 "$n" "$njobs"
			run_one "$size" "$cas" "$c" fence "$r" 2 "$n" "$njobs"
		else
			run_one "$size" "$cas" "$c" fence "$r" 1 "$n" "$njobs"
			run_one "$size" "$cas" "$c" raw "$r" 2 "$n" "$njobs"
		fi
	done
}

prev=0
for size in $SIZES; do
	[ "$size" -gt "$prev" ] || fence_die "--sizes must ascend"
	qb_say "loading jobs $((prev + 1))..$size into both registries"
	load "$prev" "$size"
	sizes_of "$size"
	qb_say "loaded in $LOAD_S s: fence_claims $(q -c "SELECT pg_size_pretty(pg_total_relation_size('fence_claims'))"), claim_jobs $(q -c "SELECT pg_size_pretty(pg_total_relation_size('claim_jobs'))")"
	for c in $CLIENTS; do
		rounds "$size" uncontended "$c" "$size"
	done
	if [ "$CONTENDED" = 1 ] && [ "$prev" = 0 ]; then
		rounds "$size" contended 32 4
	fi
	q -c "CHECKPOINT"
	prev=$size
done

qb_meta "attempts per run (all clients): x1 ${NTX[1]}, x8 ${NTX[8]}, x32 ${NTX[32]}; rounds: $ROUNDS measured + $([ "$NWARM" -gt 0 ] && echo 1 || echo 0) warm-up; shared_buffers $SHARED_BUFFERS"
if [ "$CPU_ONLY" = 1 ]; then
	MODE="CPU-only (--cpu-only)" VAC="yes, a VACUUM of the run's table before every run"
else
	MODE="production durability (the default)" VAC="no (VACUUM ANALYZE once after each load, before that size's first run)"
fi
{
	qb_settings "$MODE" "$VAC"
	echo
	python3 "$HERE/scale_report.py" "$OUT" "$([ "$CPU_ONLY" = 1 ] && echo 'CPU-only settings' || echo 'production settings')"
} >"$OUT/report.md"
cat "$OUT/meta.txt" "$OUT/report.md"
qb_say "results in $OUT"
[ "$QB_FAILED_RUNS" = 0 ] || { qb_say "$QB_FAILED_RUNS run(s) had errors"; exit 1; }
