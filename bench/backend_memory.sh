#!/usr/bin/env bash
# bench/backend_memory.sh: what one backend's memory does across a million
# claims and across one transaction that validates 10,000 tokens.
#
#   bash bench/backend_memory.sh            1,000,000 claims; 1,000 and 10,000 tokens
#   bash bench/backend_memory.sh --quick    CI smoke: 5,000 claims; 100 and 1,000 tokens
#
# 1. Claims: one session (pgbench -c 1 -t N, -M prepared) calls fence_claim N
#    times, each its own autocommit transaction, on jobs picked at random
#    among 10,000 (bench/scripts/claim_fence.pgb: 1 ms leases, every attempt
#    a takeover).  The same for the seed's raw conditional UPDATE
#    (claim_raw.pgb) as the control: what PostgreSQL's own caches do in a
#    long session.  Every second, from outside the session: tokens issued,
#    the backend's RssAnon (its private memory), VmRSS and RssShmem (the
#    shared_buffers pages it has touched) from /proc/PID/status, and
#    Private_Dirty (/proc/PID/smaps_rollup: shared_buffers pages that only
#    this backend has touched count there too); and the table's total size
#    before and after the session.  At 1%, 50% and 98% of the run
#    pg_log_backend_memory_contexts(pid) writes the backend's memory
#    contexts to the server log; their "Grand total" is reported.
# 2. One transaction, many tokens: jobs mt_1..mt_K are claimed (1-day leases),
#    then in ONE transaction either
#      stmt    UPDATE of K rows of a fence_protect'ed table, each row written
#              with its own job's token (token in the statement): the guard
#              validates K distinct tokens;
#      begin   SELECT fence_begin(job, token) for each of the K jobs (one
#              statement calling it K times);
#    and, as the control, the same UPDATE on an unprotected copy.  The
#    backend's RssAnon is sampled every 10 ms (before, peak), and inside the
#    transaction: pg_backend_memory_contexts' total and the locks it holds
#    (pg_locks).  Each validated token holds a lock until the transaction
#    ends (doc/fence.md 9.7), so the cluster runs with
#    max_locks_per_transaction = 1024 (the default 64 fails near 12,000).
#
# Options:
#   --claims N      claims in the one session (default 1000000)
#   --tokens "K .." tokens per transaction (default "1000 10000")
#   --quick         5,000 claims; 100 and 1,000 tokens
#   --out DIR       results (default /tmp/fence-memory-out.XXXXXX)
#   --port N        first port to try (default 55740; up to +19)
#   --keep          leave the cluster running
#   --no-priority   do not run server and pgbench at nice -15
#
# Environment: PG_CONFIG, as for bench/run.  fsync, synchronous_commit and
# full_page_writes off, autovacuum and JIT off.  Exit status 1 if a run had
# an error; nothing is judged on the numbers.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=../test/lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=queue_lib.sh
. "$HERE/queue_lib.sh"

CLAIMS=1000000 TOKENS="1000 10000" QUICK=0 OUT="" QB_PORT_BASE=55740 QB_KEEP=0 QB_PRIORITY=1
ARGS=("$@")
while [ $# -gt 0 ]; do
	case $1 in
	--claims) CLAIMS=$2; shift ;;
	--tokens) TOKENS=$2; shift ;;
	--quick) QUICK=1 ;;
	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
	esac
	shift
done
qb_prepare python3 procps
[ "$QUICK" = 1 ] && CLAIMS=5000 TOKENS="100 1000" QB_PRIORITY=0
# The smoke run's session must outlive the sampler's first look at it (one a
# second): at full speed 5,000 claims can end before it, leaving its row out.
RATE=()
[ "$QUICK" = 1 ] && RATE=(-R 1500)
NJOBS=10000
MAXTOK=0
for k in $TOKENS; do [ "$k" -gt "$MAXTOK" ] && MAXTOK=$k; done

[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/fence-memory-out.XXXXXX)
mkdir -p "$OUT/runs"
QB_NAME=fence-memory QB_PORT_MAX=$((QB_PORT_BASE + 19)) QB_DB=fence_memory
qb_start "$(
	cat <<EOF
# bench/backend_memory.sh
shared_buffers = 512MB
max_locks_per_transaction = 1024
max_connections = 20
max_wal_size = 20GB
checkpoint_timeout = 1h
autovacuum = off
jit = off
EOF
)"

q >/dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION fence;
$(qb_raw_jobs_sql "$NJOBS")
$(qb_fence_claims_sql cj_ "$NJOBS" '1 millisecond' memory)
$(qb_fence_claims_sql mt_ "$MAXTOK" '1 day' memory)
CREATE TABLE m_fence (id int PRIMARY KEY, qty int NOT NULL DEFAULT 0, writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO m_fence (id) SELECT g FROM generate_series(1, $MAXTOK) g;
CREATE TABLE m_plain (LIKE m_fence INCLUDING ALL);
INSERT INTO m_plain (id) SELECT g FROM generate_series(1, $MAXTOK) g;
SELECT fence_protect('m_fence', 'writer_epoch', 'repeat');
VACUUM ANALYZE;
CHECKPOINT;
EOF

kb() { awk -v k="$1" '$1 == k ":" { print $2; exit }' "$2" 2>/dev/null || echo 0; }

# ---- 1. one session, CLAIMS claims
CLM=$OUT/claims.tsv
printf 'variant\tclaims\tseconds\trss_anon_kb\tvm_rss_kb\trss_shmem_kb\tprivate_dirty_kb\n' >"$CLM"
CTX=$OUT/contexts.tsv
printf 'variant\tat_claims\tgrand_total_bytes\n' >"$CTX"
table_of() { [ "$1" = fence ] && echo fence_claims || echo claim_jobs; }
claims_done()
{
	case $1 in
	fence) q -c "SELECT last_value FROM fence_token_seq" ;;
	raw) q -c "SELECT sum(lease_epoch) FROM claim_jobs" ;;
	esac
}
for v in raw fence; do
	script=claim_raw.pgb
	[ "$v" = fence ] && script=claim_fence.pgb
	c0=$(claims_done "$v")
	size0=$(q -c "SELECT pg_total_relation_size('$(table_of "$v")')")
	qb_say "memory: one session, $CLAIMS claims ($v)"
	(cd "$OUT/runs" && "${QB_NICE[@]}" "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
		-c 1 -j 1 -t "$CLAIMS" "${RATE[@]}" --random-seed=7000 -D njobs=$NJOBS -f "$HERE/scripts/$script" "$QB_DB") \
		>"$OUT/runs/claims.$v.out" 2>&1 &
	pgb=$!
	pid=""
	for _ in $(seq 1 200); do
		pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
		[ -n "$pid" ] && break
		sleep 0.05
	done
	[ -n "$pid" ] || fence_die "no pgbench backend found"
	t0=$(date +%s.%N)
	marks=(1 50 98)
	while kill -0 "$pgb" 2>/dev/null && [ -r "/proc/$pid/status" ]; do
		done_=$(($(claims_done "$v") - c0))
		st=/proc/$pid/status
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$v" "$done_" \
			"$(awk -v t0="$t0" -v t="$(date +%s.%N)" 'BEGIN { printf "%.1f", t - t0 }')" \
			"$(kb RssAnon "$st")" "$(kb VmRSS "$st")" "$(kb RssShmem "$st")" \
			"$(kb Private_Dirty "/proc/$pid/smaps_rollup")" >>"$CLM"
		if [ ${#marks[@]} -gt 0 ] && [ "$done_" -ge $((CLAIMS * marks[0] / 100)) ]; then
			q -c "SELECT pg_log_backend_memory_contexts($pid)" >/dev/null
			echo "$v $done_" >>"$OUT/runs/ctx_marks"
			marks=("${marks[@]:1}")
		fi
		sleep 1
	done
	wait "$pgb" || { QB_FAILED_RUNS=$((QB_FAILED_RUNS + 1)); qb_say "pgbench failed: $OUT/runs/claims.$v.out"; }
	grep -q 'number of failed transactions: 0 ' "$OUT/runs/claims.$v.out" ||
		{ QB_FAILED_RUNS=$((QB_FAILED_RUNS + 1)); qb_say "failed transactions: $OUT/runs/claims.$v.out"; }
	printf '%s\t%s\t%s\n' "$v" "$size0" "$(q -c "SELECT pg_total_relation_size('$(table_of "$v")')")" >>"$OUT/table_sizes.tsv"
	# the contexts the backend logged, in the order asked for
	grep -F "[$pid] " "$SLOG" | grep -o 'Grand total: [0-9]*' | awk '{ print $3 }' >"$OUT/runs/ctx.$v" || true
	paste <(grep "^$v " "$OUT/runs/ctx_marks" | awk '{ print $2 }') "$OUT/runs/ctx.$v" |
		awk -v v="$v" -F'\t' '{ print v "\t" $1 "\t" $2 }' >>"$CTX"
done

# ---- 2. one transaction, K tokens
TXM=$OUT/tokens.tsv
printf 'variant\ttokens\tbefore_kb\tpeak_kb\tgrowth_kb\tcontexts_bytes\tlocks\tseconds\n' >"$TXM"
tx_run()
{
	local v=$1 k=$2
	local sqlf=$OUT/runs/tx.$v.$k.sql pidf=$OUT/runs/tx.pid res=$OUT/runs/tx.$v.$k.res
	local body base=0 peak=0 val t0 t1 psqlpid pid
	case $v in
	plain) body="UPDATE m_plain p SET qty = qty + 1, writer_epoch = c.token FROM fence_claims c WHERE c.job = 'mt_' || p.id AND p.id <= $k;" ;;
	stmt) body="UPDATE m_fence p SET qty = qty + 1, writer_epoch = c.token FROM fence_claims c WHERE c.job = 'mt_' || p.id AND p.id <= $k;" ;;
	begin) body="SELECT count(fence_begin(c.job, c.token)) FROM generate_series(1, $k) g JOIN fence_claims c ON c.job = 'mt_' || g;" ;;
	esac
	rm -f "$pidf" "$res"
	cat >"$sqlf" <<EOF
SELECT pg_backend_pid() \\g $pidf
SELECT pg_sleep(0.3);
BEGIN;
$body
SELECT (SELECT sum(total_bytes) FROM pg_backend_memory_contexts) || ' ' ||
	   (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()) \\g $res
COMMIT;
EOF
	t0=$(date +%s.%N)
	q -f "$sqlf" >/dev/null 2>"$OUT/runs/tx.err" &
	psqlpid=$!
	while [ ! -s "$pidf" ] && kill -0 "$psqlpid" 2>/dev/null; do sleep 0.01; done
	pid=$(tr -dc 0-9 <"$pidf" 2>/dev/null || true)
	while [ -n "$pid" ] && kill -0 "$psqlpid" 2>/dev/null && [ -r "/proc/$pid/status" ]; do
		val=$(kb RssAnon "/proc/$pid/status")
		if [ -n "$val" ] && [ "$val" != 0 ]; then
			[ "$base" = 0 ] && base=$val
			[ "$val" -gt "$peak" ] && peak=$val
		fi
		sleep 0.01
	done
	if ! wait "$psqlpid"; then
		QB_FAILED_RUNS=$((QB_FAILED_RUNS + 1))
		qb_say "ERRORS in one transaction of $k tokens ($v):"
		cat "$OUT/runs/tx.err" >&2
	fi
	t1=$(date +%s.%N)
	read -r ctxb locks <"$res" || true
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$v" "$k" "$base" "$peak" "$((peak - base))" "${ctxb:-}" \
		"${locks:-}" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a - 0.3 }')" >>"$TXM"
}
for k in $TOKENS; do
	qb_say "memory: one transaction, $k tokens"
	for v in plain stmt begin; do
		tx_run "$v" "$k"
	done
done
# the guarded UPDATE stamped each row with its own job's token
bad=$(q -c "SELECT count(*) FROM m_fence p JOIN fence_claims c ON c.job = 'mt_' || p.id WHERE p.id <= $MAXTOK AND p.writer_epoch <> c.token")
[ "$bad" = 0 ] || fence_die "m_fence rows not stamped with their own job's token: $bad"

qb_meta "claims in one session: $CLAIMS per variant over $NJOBS jobs; tokens per transaction: $TOKENS; max_locks_per_transaction 1024"

python3 - "$CLM" "$CTX" "$TXM" >"$OUT/report.md" <<'EOF'
import csv, sys
clm, ctx, txm = sys.argv[1:]
rows = list(csv.DictReader(open(clm), delimiter="\t"))
ctxs = list(csv.DictReader(open(ctx), delimiter="\t"))
sizes = {l.split("\t")[0]: l.split("\t")[1:] for l in open(clm.replace("claims.tsv", "table_sizes.tsv")).read().split("\n") if l}
print("| session | claims | seconds | RssAnon MB first -> last sample (max) | VmRSS MB first -> last "
      "| RssShmem MB first -> last | Private_Dirty MB first -> last | memory contexts, grand total MB (at claims) "
      "| its table's total size MB before -> after |")
print("|---|---|---|---|---|---|---|---|---|")
mb = lambda x: int(x) / 1024.0
for v, name in (("raw", "raw conditional UPDATE"), ("fence", "fence_claim")):
    s = [r for r in rows if r["variant"] == v and int(r["rss_anon_kb"] or 0) > 0]
    if not s:
        continue
    a, b = s[0], s[-1]
    c = ", ".join(f"{int(x['grand_total_bytes']) / 1048576:.2f} ({int(x['at_claims']):,})"
                  for x in ctxs if x["variant"] == v and x["grand_total_bytes"])
    print(f"| {name} | {int(b['claims']):,} | {b['seconds']} | {mb(a['rss_anon_kb']):.1f} -> {mb(b['rss_anon_kb']):.1f} "
          f"({max(mb(r['rss_anon_kb']) for r in s):.1f}) | {mb(a['vm_rss_kb']):.1f} -> {mb(b['vm_rss_kb']):.1f} "
          f"| {mb(a['rss_shmem_kb']):.1f} -> {mb(b['rss_shmem_kb']):.1f} "
          f"| {mb(a['private_dirty_kb']):.1f} -> {mb(b['private_dirty_kb']):.1f} | {c} "
          f"| {int(sizes[v][0]) / 1048576:.1f} -> {int(sizes[v][1]) / 1048576:.1f} |")
print()
print("First sample: as the session starts (its first claims); then one every second: OUT/claims.tsv. "
      "Memory contexts: the Grand total pg_log_backend_memory_contexts() logged at 1%, 50% and 98% of the claims.")
print()
print("| one transaction | tokens | RssAnon before MB | peak MB | growth MB | memory contexts MB (in the transaction) "
      "| locks held | seconds |")
print("|---|---|---|---|---|---|---|---|")
names = {"plain": "UPDATE, unprotected copy (control)", "stmt": "UPDATE, protected, token per row in the statement",
         "begin": "fence_begin of each job's token"}
for r in csv.DictReader(open(txm), delimiter="\t"):
    cb = f"{int(r['contexts_bytes']) / 1048576:.2f}" if r["contexts_bytes"] else "-"
    print(f"| {names[r['variant']]} | {int(r['tokens']):,} | {mb(r['before_kb']):.1f} | {mb(r['peak_kb']):.1f} "
          f"| {mb(r['growth_kb']):.1f} | {cb} | {r['locks']} | {r['seconds']} |")
EOF
cat "$OUT/meta.txt" "$OUT/report.md"
qb_say "results in $OUT"
[ "$QB_FAILED_RUNS" = 0 ] || { qb_say "$QB_FAILED_RUNS run(s) had errors"; exit 1; }
