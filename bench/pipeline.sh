#!/usr/bin/env bash
# bench/pipeline.sh: a handler's fence_begin transaction sent as one
# pipeline, against the same transaction without fence.
#
#   bash bench/pipeline.sh            5 rounds at 1 and 8 clients, ~3 minutes
#   bash bench/pipeline.sh --quick    CI smoke: seconds, no timing claims
#
# fence_begin turns a one-row write into BEGIN; SELECT fence_begin(job,
# token); UPDATE ...; COMMIT: four statements, and without pipelining four
# round trips (doc/benchmarks.md: it runs at 0.3-0.45x a bare UPDATE, exactly
# like plain in the same shape).  A client that pipelines (libpq's pipeline
# mode, pgbench \startpipeline) sends all four at once and waits once.  Six
# variants, interleaved on one cluster (the first variant of each round
# rotates), each on its own copy of the same 100,000 rows:
#
#   plain          BEGIN; UPDATE ... SET ..., writer_epoch = $token; COMMIT
#   plain_select   BEGIN; SELECT 1; UPDATE ...; COMMIT  (fence_begin's shape)
#   fence_begin    BEGIN; SELECT fence_begin(job, token); UPDATE ...; COMMIT
#                  on a fence_protect'ed table (repeat mode, as bench/run)
#   ..._pipe       the same statements between \startpipeline and \endpipeline
#
# pgbench -M prepared -j 1, a fixed number of transactions per run, the same
# --random-seed for every variant of a round; client c owns its own slice
# of rows and writes with its own job's token (jobs bench_0..63, claimed with
# 1-day leases, as bench/run).  fsync, synchronous_commit, full_page_writes,
# autovacuum and JIT off; a VACUUM of the run's table before every run.
# Reported: transactions/s and server CPU per transaction, and the ratios
# fence_begin / plain in each mode and pipelined / not pipelined.
#
# Options:
#   --rounds N       measured rounds (default 5)
#   --clients "N .." client counts (default "1 8")
#   --quick          1,000 rows, a few transactions, one round
#   --out DIR        results (default /tmp/fence-pipeline-out.XXXXXX)
#   --port N         first port to try (default 55720; up to +19)
#   --keep           leave the cluster running
#   --no-priority    do not run server and pgbench at nice -15
#
# Environment: PG_CONFIG, as for bench/run.  Exit status 1 if any run had
# an error; never on timing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=../test/lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=queue_lib.sh
. "$HERE/queue_lib.sh"

ROUNDS=5 CLIENTS="1 8" QUICK=0 OUT="" QB_PORT_BASE=55720 QB_KEEP=0 QB_PRIORITY=1
ARGS=("$@")
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift ;;
	--clients) CLIENTS=$2; shift ;;
	--quick) QUICK=1 ;;
	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
	esac
	shift
done
qb_prepare python3 procps

ROWS=100000 NWARM=2000
declare -A NTX=([1]=8000 [8]=24000)
if [ "$QUICK" = 1 ]; then
	ROWS=1000 ROUNDS=1 NWARM=0 QB_PRIORITY=0
	NTX=([1]=200 [8]=400)
fi
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/fence-pipeline-out.XXXXXX)
mkdir -p "$OUT/runs" "$OUT/scripts"
RES=$OUT/results.tsv
printf 'clients\tvariant\tround\ttps\tntx\tcpu_us\tok\n' >"$RES"

QB_NAME=fence-pipeline QB_PORT_MAX=$((QB_PORT_BASE + 19)) QB_DB=fence_pipeline
qb_start "$(
	cat <<EOF
# bench/pipeline.sh: the same settings for every variant
$(qb_conf 512MB)
autovacuum = off
EOF
)"

VARIANTS=(plain plain_select fence_begin plain_pipe plain_select_pipe fence_begin_pipe)
q >/dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION fence;
CREATE TABLE bench_tokens AS
	SELECT c, fence_claim('bench_' || c, interval '1 day', 'bench') AS token
	  FROM generate_series(0, 63) c ORDER BY c;
DO \$\$
BEGIN
	IF EXISTS (SELECT 1 FROM bench_tokens
				WHERE token IS DISTINCT FROM (SELECT token FROM bench_tokens WHERE c = 0) + c) THEN
		RAISE EXCEPTION 'fence_claim did not issue consecutive tokens to bench_0..63';
	END IF;
END \$\$;
$(for v in "${VARIANTS[@]}"; do
		cat <<EOT
CREATE TABLE p_$v (id int PRIMARY KEY, qty int NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0,
	updated_at timestamptz NOT NULL DEFAULT now(), payload text);
INSERT INTO p_$v SELECT g, g % 1000, 0, timestamptz '2026-01-01', md5(g::text) || md5((g + 1)::text)
  FROM generate_series(1, $ROWS) g;
UPDATE p_$v SET qty = qty + 1;
EOT
	done)
SELECT fence_protect('p_fence_begin', 'writer_epoch', 'repeat');
SELECT fence_protect('p_fence_begin_pipe', 'writer_epoch', 'repeat');
VACUUM ANALYZE;
CHECKPOINT;
EOF
TBASE=$(q -c "SELECT token FROM bench_tokens WHERE c = 0")

# the scripts: the same header, then the statements, pipelined or not
for v in "${VARIANTS[@]}"; do
	base=${v%_pipe}
	{
		echo "-- bench/pipeline.sh, variant $v"
		echo '\set t :tbase + :client_id'
		echo '\set part :rows / :nclients'
		echo '\set id :client_id * :part + random(1, :part)'
		[ "$base" != "$v" ] && printf '%s\n' '\startpipeline'
		echo 'BEGIN;'
		case $base in
		plain) echo "UPDATE p_$v SET qty = qty + 1, writer_epoch = :t WHERE id = :id;" ;;
		plain_select)
			echo 'SELECT 1;'
			echo "UPDATE p_$v SET qty = qty + 1, writer_epoch = :t WHERE id = :id;"
			;;
		fence_begin)
			echo "SELECT fence_begin('bench_' || :client_id::text, :t);"
			echo "UPDATE p_$v SET qty = qty + 1 WHERE id = :id;"
			;;
		esac
		echo 'COMMIT;'
		[ "$base" != "$v" ] && printf '%s\n' '\endpipeline'
	} >"$OUT/scripts/$v.pgb"
done

for c in $CLIENTS; do
	first=1
	[ "$NWARM" -gt 0 ] && first=0
	qb_say "$c client(s): warm-up + $ROUNDS round(s) of ${VARIANTS[*]}"
	for r in $(seq "$first" "$ROUNDS"); do
		n=${NTX[$c]:-24000}
		[ "$r" = 0 ] && n=$NWARM
		nv=${#VARIANTS[@]}
		for i in $(seq 0 $((nv - 1))); do
			v=${VARIANTS[$(((i + r) % nv))]}
			q -c "VACUUM p_$v"
			qb_pgbench "$OUT/runs/c$c.$v.r$r.out" -M prepared -c "$c" -j 1 -t $((n / c)) \
				--random-seed=$((6000 + r)) -D tbase="$TBASE" -D nclients="$c" -D rows="$ROWS" \
				-f "$OUT/scripts/$v.pgb"
			[ "$r" = 0 ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$v" "$r" "$QB_TPS" "$QB_NTX" \
				"$QB_CPU_US" "$QB_OK" >>"$RES"
		done
	done
done
# every fence transaction wrote with its client's token: check the stamps
stale=$(q -c "SELECT count(*) FROM p_fence_begin_pipe WHERE writer_epoch <> 0 AND writer_epoch < $TBASE")
[ "$stale" = 0 ] || fence_die "p_fence_begin_pipe holds epochs below the first token"

qb_meta "rows: $ROWS per table; transactions per run (all clients): $(for c in $CLIENTS; do printf 'x%s %s ' "$c" "${NTX[$c]:-24000}"; done); rounds: $ROUNDS measured + $([ "$NWARM" -gt 0 ] && echo 1 || echo 0) warm-up"

python3 - "$RES" >"$OUT/report.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = lambda v: statistics.median(v) if v else float("nan")
names = {"plain": "plain: BEGIN; UPDATE; COMMIT", "plain_select": "plain_select: BEGIN; SELECT 1; UPDATE; COMMIT",
         "fence_begin": "fence_begin: BEGIN; SELECT fence_begin(job, token); UPDATE; COMMIT"}
def per_round(c, a, b):
    ta = {r["round"]: float(r["tps"]) for r in rows if r["clients"] == c and r["variant"] == a}
    tb = {r["round"]: float(r["tps"]) for r in rows if r["clients"] == c and r["variant"] == b}
    v = sorted(ta[k] / tb[k] for k in ta if k in tb and tb[k] > 0)
    return f"{med(v):.2f} ({v[0]:.2f}-{v[-1]:.2f})" if v else "-"
print("| clients | transaction | not pipelined tx/s | pipelined tx/s | pipelined / not, per round "
      "| CPU us/tx not pipelined, pipelined | errors |")
print("|---|---|---|---|---|---|---|")
for c in sorted({r["clients"] for r in rows}, key=int):
    for b in ["plain", "plain_select", "fence_begin"]:
        s = [r for r in rows if r["clients"] == c and r["variant"] == b]
        p = [r for r in rows if r["clients"] == c and r["variant"] == b + "_pipe"]
        t = lambda rs: med([float(r["tps"]) for r in rs])
        u = lambda rs: med([float(r["cpu_us"]) for r in rs if r["cpu_us"]])
        errs = sum(1 for r in s + p if r["ok"] != "1")
        print(f"| {c} | {names[b]} | {t(s):,.0f} | {t(p):,.0f} | {per_round(c, b + '_pipe', b)} "
              f"| {u(s):,.0f}, {u(p):,.0f} | {errs} |")
print()
print("| clients | ratio | not pipelined, per round | pipelined, per round |")
print("|---|---|---|---|")
for c in sorted({r["clients"] for r in rows}, key=int):
    for a, b in [("fence_begin", "plain"), ("fence_begin", "plain_select")]:
        print(f"| {c} | {a} / {b} | {per_round(c, a, b)} | **{per_round(c, a + '_pipe', b + '_pipe')}** |")
print()
print("Ratios are medians (min-max) of the per-round ratios of transactions/s; below 1 = fence_begin is slower.")
EOF
cat "$OUT/meta.txt" "$OUT/report.md"
qb_say "results in $OUT"
[ "$QB_FAILED_RUNS" = 0 ] || { qb_say "$QB_FAILED_RUNS run(s) had errors"; exit 1; }
