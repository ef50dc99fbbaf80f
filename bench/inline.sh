#!/usr/bin/env bash
# bench/inline.sh: the guard's inline form against its trigger, side by
# side on one preloaded server.
#
#   sudo bash bench/inline.sh            warm-up + 5 rounds, about 5 minutes on 2 cores
#   sudo bash bench/inline.sh --quick    CI smoke: 15-20 s, no timing claims
#
# With fence in shared_preload_libraries, the guard's inline form plans its
# check into the statement and skips the trigger's row event (doc/fence.md,
# "The inline form"); fence.inline (user-settable, default on) turns it off
# for a session.  So one server runs both paths: every fence variant below
# runs once with fence.inline on and once off (pgbench's sessions get it
# from PGOPTIONS='-c fence.inline=on|off'), on tables of the same shape, in
# the same rounds, against unguarded baselines.
#
# Shapes and variants (T: the token of the client's job, a current claim:
# jobs bench_0..63 are claimed with 1-day leases by bench/sql/fence_claims.sql,
# consecutive tokens, client c writes with tbase + c; the fence tables are
# protected in repeat mode, as bench/run's are, since the same execution
# rewrites its rows again and again):
#   bulk, 1 client, one statement per transaction on 1000 consecutive rows
#   chosen at random (bench/scripts/bulk.pgb, bulk_begin.pgb):
#     plain           UPDATE b_plain SET qty = qty + 1, writer_epoch = T
#                     WHERE id BETWEEN :lo AND :lo + 999
#     predicate       the same, AND writer_epoch <= T (the seed's check)
#     stmt_trigger    the same on a protected table, fence.inline off
#     stmt_inline     the same, fence.inline on
#     begin_trigger   BEGIN; SELECT fence_begin('bench_0', T); UPDATE ... SET
#                     qty = qty + 1 (the guard stamps the epoch); COMMIT;
#                     fence.inline off
#     begin_inline    the same, fence.inline on
#   delete, 1 client, 1000 rows per transaction:
#     plain_delete          DELETE FROM d_plain_delete WHERE id BETWEEN ...
#     begin_delete_trigger  BEGIN; fence_begin; the DELETE; COMMIT; inline off
#     begin_delete_inline   the same, fence.inline on
#   single, 1 client and 8, an UPDATE of one random row of the client's own
#   slice (bench/scripts/single*.pgb): plain, plain_tx (BEGIN; SELECT 1;
#   UPDATE; COMMIT on b_plain: fence_begin's transaction shape without
#   fence), stmt_trigger, stmt_inline, begin_trigger, begin_inline.
# Every variant has its own table (b_<variant>, d_<variant>; plain_tx
# writes b_plain), copies of the same rows (id int primary key, qty,
# writer_epoch, updated_at, a ~100-byte payload: bench/sql/setup.sql's
# shape), aged by one UPDATE of every row and a VACUUM before the fence
# tables are protected.  The shapes run in the order above: single at 1
# client writes every row with bench_0's token, which the 8-client run's
# tokens (bench_0..7) are all at least, so repeat mode lets them through.
#
# DELETE consumes rows, so every DELETE run starts from the same full table
# and deletes each row once.  A d_ table holds 2 x N rows in 1000-row blocks
# for N transactions per run; transaction k (1..N) of the run deletes block
# permute(k - 1, blocks): pgbench keeps a client's variables from one
# transaction to the next, so "\set k :k + 1" (started by -D k=0) counts
# the transactions, and permute() maps distinct k to distinct blocks, in an
# order scattered over the table and fixed by --random-seed (the same for
# every variant of a round).  No statement is added to the transaction, no
# range repeats, and half of the table is left, so none runs dry.  After
# each DELETE run the table must have lost exactly N blocks (checked); then,
# untimed, the rows are put back (INSERT of the missing ids from the seed
# table, writer_epoch = bench_0's token, which the guard's INSERT check
# accepts) and the table VACUUMed.
#
# Method: pgbench -n -M prepared -j 1, a fixed number of transactions per
# run, the same --random-seed for every variant of a round; the variants of
# a shape interleaved (A B C ... A B C ...), one discarded warm-up round
# (round 0) first, then --rounds rounds.  A VACUUM of the run's table before
# every run (a DELETE run's: after its refill), so every run starts with no
# dead rows left by the last; a CHECKPOINT after each shape.  Measured:
# pgbench's tps, and server CPU per transaction from the postmaster's
# reaped-children counters (bench/queue_lib.sh's qb_pgbench, as bench/run
# measures it; autovacuum workers that ran alongside count too).  Ratios are
# medians of per-round ratios: each variant over its round's plain (DELETE:
# plain_delete; single: plain, and plain_tx for the fence_begin variants),
# and each inline variant over its trigger twin.
#
# Settings: a production server's durability, fsync, full_page_writes and
# autovacuum on (PostgreSQL's defaults); kept for repeatability, as the
# other queue-scale scripts keep them (bench/README.md, "Production
# settings"): synchronous_commit off (test/lib.sh's cluster), shared_buffers
# 512MB (--quick 256MB: every table fits), checkpoint_timeout 1h,
# max_wal_size 20GB, JIT off; shared_preload_libraries = 'fence'.  The
# report starts with the settings as the server reports them.
#
# Checks (exit status 1 if any fails; never on timing): every run without a
# failed transaction, an aborted client or a server-side ERROR (and none in
# the server log at the end); fence_stats' inline_writes and
# trigger_writes_inline_off, read before and after each run: the inline
# variants (UPDATE and DELETE) counted by inline_writes and not by the
# other, the trigger variants the other way round.  fence_stats as it
# stands at the end closes the report.
#
# Options:
#   --rounds N       measured rounds per shape (default 5; --quick 1)
#   --quick          20,000 rows, a few transactions per run, no warm-up
#   --out DIR        results: inline.md, results.tsv, runs/ (raw pgbench
#                    output), scripts/ (default /tmp/fence-bench-inline.XXXXXX)
#   --port N         first port to try (default 55800; up to +19)
#   --keep           leave the cluster running
#   --no-priority    do not run server and pgbench at nice -15
#
# Environment: PG_CONFIG picks the PostgreSQL installation, and with it the
# fence build, which must be installed there (see bench/run --help for
# running a copied installation).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=test/lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=bench/queue_lib.sh
. "$HERE/queue_lib.sh"

ROUNDS="" QUICK=0 OUT="" QB_PORT_BASE=55800 QB_KEEP=0 QB_PRIORITY=1
ARGS=("$@")
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift ;;
	--quick) QUICK=1 ;;
	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
	esac
	shift
done
qb_prepare python3 procps
fence_pg_setup
[ -f "$("$FENCE_PG_CONFIG" --sharedir)/extension/fence.control" ] ||
	fence_die "fence is not installed for $FENCE_PG_CONFIG: make install first"

# transactions per run (all clients together), sized for 1-3 s a run on 2 cores
if [ "$QUICK" = 1 ]; then
	ROWS=20000 ROUNDS=${ROUNDS:-1} NWARM=0 SHARED_BUFFERS=256MB QB_PRIORITY=0
	N_BULK=5 N_DEL=5
	declare -A N_SINGLE=([1]=200 [8]=400)
else
	ROWS=100000 ROUNDS=${ROUNDS:-5} NWARM=1 SHARED_BUFFERS=512MB
	N_BULK=300 N_DEL=200
	declare -A N_SINGLE=([1]=9000 [8]=24000)
fi
# warm-up runs: fewer transactions
W_BULK=50 W_DEL=50 W_SINGLE=2000
# the DELETE tables: 1000-row blocks, twice as many as a run deletes
DBLOCKS=$((2 * N_DEL))
[ $((DBLOCKS * 1000)) -ge "$ROWS" ] || DBLOCKS=$((ROWS / 1000))
DROWS=$((DBLOCKS * 1000))

BULK=(plain predicate stmt_trigger stmt_inline begin_trigger begin_inline)
DEL=(plain_delete begin_delete_trigger begin_delete_inline)
SINGLE=(plain plain_tx stmt_trigger stmt_inline begin_trigger begin_inline)
FENCE_TABLES=(b_stmt_trigger b_stmt_inline b_begin_trigger b_begin_inline
	d_begin_delete_trigger d_begin_delete_inline)

[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/fence-bench-inline.XXXXXX)
mkdir -p "$OUT/runs" "$OUT/scripts"
RES=$OUT/results.tsv
printf 'shape\tclients\tvariant\tround\ttps\tntx\tcpu_us\tok\tinline_d\toff_d\tunplanned_d\n' >"$RES"

QB_NAME=fence-inline QB_PORT_MAX=$((QB_PORT_BASE + 19)) QB_DB=fence_inline
qb_start "$(
	cat <<EOF
# bench/inline.sh: one preloaded server for every variant, production durability
$(qb_durability 0)
$(qb_conf "$SHARED_BUFFERS")
shared_preload_libraries = 'fence'
EOF
)"

# ---- fence, the claims, the tables
q -f "$HERE/sql/fence_claims.sql" >"$OUT/fence_claims.out" 2>&1 ||
	{ cat "$OUT/fence_claims.out" >&2; fence_die "fence_claims.sql failed"; }
TBASE=$(sed -n 's/^tbase=//p' "$OUT/fence_claims.out")
[ -n "$TBASE" ] || fence_die "no tbase from fence_claims.sql"
[ "$(q -c "SELECT current_setting('fence.inline', true)")" = on ] ||
	fence_die "fence.inline is not on: is fence preloaded?"
[ "$(q -c "SELECT inline_writes IS NOT NULL FROM fence_stats")" = t ] ||
	fence_die "fence_stats.inline_writes is NULL: fence is not preloaded"

q >/dev/null <<EOF
SET client_min_messages = warning;
CREATE TABLE inline_seed AS
	SELECT g AS id, (g % 1000)::int AS qty, 0::bigint AS writer_epoch,
		   timestamptz '2026-01-01' AS updated_at, md5(g::text) || md5((g + 1)::text) AS payload
	  FROM generate_series(1, $DROWS) g;
ALTER TABLE inline_seed ADD PRIMARY KEY (id);
$(for v in "${BULK[@]}" "${DEL[@]}"; do
		t=b_$v n=$ROWS
		[[ $v == *delete* ]] && t=d_$v n=$DROWS
		cat <<EOT
CREATE TABLE $t (id int PRIMARY KEY, qty int NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0,
	updated_at timestamptz NOT NULL DEFAULT now(), payload text);
INSERT INTO $t SELECT * FROM inline_seed WHERE id <= $n;
UPDATE $t SET qty = qty;
EOT
	done)
VACUUM ANALYZE;
$(for t in "${FENCE_TABLES[@]}"; do
		echo "SELECT fence_protect('$t', 'writer_epoch', mode => 'repeat');"
	done)
CHECKPOINT;
EOF

# ---- pgbench scripts: bench/run's templates where they fit
gen()
{
	local tmpl=$1 dest=$2 t=$3 pred=${4:-} set=${5:-}
	sed -e "s/@T@/$t/g" -e "s/@PRED@/$pred/g" -e "s/@SET@/$set/g" "$tmpl" >"$OUT/scripts/$dest"
}
S=$HERE/scripts
for v in "${BULK[@]}"; do
	case $v in
	predicate) gen "$S/bulk.pgb" "bulk.$v.pgb" "b_$v" " AND writer_epoch <= :t" ;;
	begin_*) gen "$S/bulk_begin.pgb" "bulk.$v.pgb" "b_$v" ;;
	*) gen "$S/bulk.pgb" "bulk.$v.pgb" "b_$v" ;;
	esac
done
for v in "${SINGLE[@]}"; do
	case $v in
	plain_tx) gen "$S/single_tx.pgb" "single.$v.pgb" b_plain ;;
	begin_*) gen "$S/single_begin.pgb" "single.$v.pgb" "b_$v" ;;
	*) gen "$S/single.pgb" "single.$v.pgb" "b_$v" ;;
	esac
done
cat >"$OUT/scripts/delete.tmpl" <<'EOF'
-- bench/inline.sh, delete shape: 1000 rows per transaction, each
-- transaction of a run its own block.  k counts this client's transactions
-- (pgbench keeps a client's variables across transactions; -D k=0 starts
-- it); permute() maps distinct k to distinct blocks of the table, in an
-- order fixed by --random-seed.
\set t :tbase + :client_id
\set k :k + 1
\set lo permute(:k - 1, :blocks) * 1000 + 1
\set hi :lo + 999
@BEGIN@DELETE FROM @T@ WHERE id BETWEEN :lo AND :hi;@COMMIT@
EOF
for v in "${DEL[@]}"; do
	if [ "$v" = plain_delete ]; then
		sed -e "s/@T@/d_$v/; s/@BEGIN@//; s/@COMMIT@//" "$OUT/scripts/delete.tmpl"
	else
		sed -e "s/@T@/d_$v/" -e "s/@BEGIN@/BEGIN;\nSELECT fence_begin('bench_' || :client_id::text, :t);\n/" \
			-e 's/@COMMIT@/\nCOMMIT;/' "$OUT/scripts/delete.tmpl"
	fi >"$OUT/scripts/delete.$v.pgb"
done
rm "$OUT/scripts/delete.tmpl"

# ---- runs
table_of()
{
	case $1.$2 in
	delete.*) echo "d_$2" ;;
	*.plain_tx) echo b_plain ;;
	*) echo "b_$2" ;;
	esac
}
counters() { q -F ' ' -c "SELECT inline_writes, trigger_writes_inline_off, trigger_writes_unplanned FROM fence_stats"; }
CHECK_FAILS=0
check_fail() { CHECK_FAILS=$((CHECK_FAILS + 1)); qb_say "CHECK FAILED: $*"; }

# refill TABLE: put back the rows a DELETE run removed (untimed)
refill()
{
	q >/dev/null <<EOF
VACUUM $1;
INSERT INTO $1 SELECT id, qty, $TBASE, updated_at, payload FROM inline_seed s
 WHERE NOT EXISTS (SELECT FROM $1 d WHERE d.id = s.id);
EOF
	[ "$(q -c "SELECT count(*) FROM $1")" = "$DROWS" ] || fence_die "$1: the refill did not restore $DROWS rows"
}

# run_one SHAPE CLIENTS VARIANT ROUND NTX
run_one()
{
	local shape=$1 c=$2 v=$3 r=$4 n=$5 t opts="" a b id od ud
	t=$(table_of "$shape" "$v")
	[ "$shape" = delete ] && refill "$t"
	q -c "VACUUM $t"
	case $v in *_trigger) opts="-c fence.inline=off" ;; *_inline) opts="-c fence.inline=on" ;; esac
	a=$(counters)
	PGOPTIONS=$opts qb_pgbench "$OUT/runs/$shape.c$c.$v.r$r.out" -M prepared -c "$c" -j 1 -t $((n / c)) \
		--random-seed=$((7000 + r)) -D tbase="$TBASE" -D nclients="$c" -D rows="$ROWS" \
		-D k=0 -D blocks="$DBLOCKS" -f "$OUT/scripts/$shape.$v.pgb"
	b=$(counters)
	read -r -a A <<<"$a"
	read -r -a B <<<"$b"
	id=$((B[0] - A[0])) od=$((B[1] - A[1])) ud=$((B[2] - A[2]))
	# what the run did: the rows deleted, and the inline path taken or not
	if [ "$shape" = delete ]; then
		local left
		left=$(q -c "SELECT count(*) FROM $t")
		[ "$left" = $((DROWS - QB_NTX * 1000)) ] ||
			check_fail "$shape/$v round $r: $left rows left of $DROWS after $QB_NTX 1000-row DELETEs"
	fi
	case $shape.$v in
	*.*_inline)
		{ [ "$id" -gt 0 ] && [ "$od" = 0 ]; } ||
			check_fail "$shape c$c $v round $r: not the inline path (inline_writes +$id, trigger_writes_inline_off +$od, unplanned +$ud)"
		;;
	*.*_trigger)
		{ [ "$od" -gt 0 ] && [ "$id" = 0 ]; } ||
			check_fail "$shape c$c $v round $r: not the trigger (inline_writes +$id, trigger_writes_inline_off +$od, unplanned +$ud)"
		;;
	esac
	[ "$r" = 0 ] && return 0
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$shape" "$c" "$v" "$r" "$QB_TPS" "$QB_NTX" \
		"$QB_CPU_US" "$QB_OK" "$id" "$od" "$ud" >>"$RES"
}

# rounds SHAPE CLIENTS NTX NWARM VARIANT...
rounds()
{
	local shape=$1 c=$2 n=$3 w=$4 r v
	shift 4
	qb_say "$shape, $c client(s), $n transactions per run: $([ "$NWARM" = 1 ] && echo 'warm-up + ')$ROUNDS round(s) of $*"
	for r in $(seq $((1 - NWARM)) "$ROUNDS"); do
		for v in "$@"; do
			run_one "$shape" "$c" "$v" "$r" "$([ "$r" = 0 ] && echo "$w" || echo "$n")"
		done
	done
	q -c "CHECKPOINT"
}

rounds bulk 1 "$N_BULK" "$W_BULK" "${BULK[@]}"
rounds delete 1 "$N_DEL" "$W_DEL" "${DEL[@]}"
for c in 1 8; do
	rounds single "$c" "${N_SINGLE[$c]}" "$W_SINGLE" "${SINGLE[@]}"
done

srv_errors=$(grep 'ERROR:' "$SLOG" | grep -vc 'canceling autovacuum task' || true)
[ "$srv_errors" = 0 ] || check_fail "$srv_errors ERROR line(s) in the server log ($SLOG)"

# ---- report
qb_meta "rows: $ROWS per table (delete tables: $DROWS); transactions per run (all clients): bulk $N_BULK, delete $N_DEL, single x1 ${N_SINGLE[1]}, x8 ${N_SINGLE[8]}; rounds: $ROUNDS measured + $NWARM warm-up; same --random-seed for every variant of a round" \
	"tokens: bench_0..63 from $TBASE; fence tables in repeat mode; trigger variants: PGOPTIONS='-c fence.inline=off', inline variants: '-c fence.inline=on'"
{
	qb_settings "production durability, fence preloaded (shared_preload_libraries '$(q -c "SHOW shared_preload_libraries")', fence.inline $(q -c "SHOW fence.inline") by default)" \
		"yes, a VACUUM of the run's table before every run (a DELETE run's after its refill); a CHECKPOINT after each shape"
	echo
	cat "$OUT/meta.txt"
	echo
	python3 - "$RES" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = lambda v: statistics.median(v) if v else float("nan")
def tps(shape, c, v):
    return {r["round"]: float(r["tps"]) for r in rows if (r["shape"], r["clients"], r["variant"]) == (shape, c, v)}
def ratio(shape, c, v, base):
    a, b = tps(shape, c, v), tps(shape, c, base)
    x = sorted(a[k] / b[k] for k in a if k in b and b[k] > 0)
    if not x:
        return "-"
    return f"{med(x):.2f}" if len(x) == 1 else f"{med(x):.2f} ({x[0]:.2f}-{x[-1]:.2f})"
titles = {"bulk": "Bulk UPDATE: 1000 rows per statement", "delete": "Bulk DELETE: 1000 rows per transaction",
          "single": "Single-row UPDATE"}
for shape, c in [("bulk", "1"), ("delete", "1"), ("single", "1"), ("single", "8")]:
    sel = [r for r in rows if r["shape"] == shape and r["clients"] == c]
    if not sel:
        continue
    vs = list(dict.fromkeys(r["variant"] for r in sel))
    base = "plain_delete" if shape == "delete" else "plain"
    tx = shape == "single"
    print(f"### {titles[shape]}, {c} client{'s' if c != '1' else ''}")
    print()
    print(f"| variant | median tps | ratio to {base} |" + (" ratio to plain_tx |" if tx else "")
          + " inline / trigger | CPU us/tx | inline, trigger (off), unplanned stmts/tx | errors |")
    print("|---|---:|---:|" + ("---:|" if tx else "") + "---:|---:|---|---:|")
    for v in vs:
        rs = [r for r in sel if r["variant"] == v]
        t = med([float(r["tps"]) for r in rs])
        cpu = med([float(r["cpu_us"]) for r in rs if r["cpu_us"]])
        ntx = sum(int(r["ntx"]) for r in rs) or 1
        per = ", ".join(f"{sum(int(r[k]) for r in rs) / ntx:.2f}" for k in ("inline_d", "off_d", "unplanned_d"))
        errs = sum(1 for r in rs if r["ok"] != "1")
        line = f"| {v} | {t:,.0f} | {'1' if v == base else ratio(shape, c, v, base)} |"
        if tx:
            line += f" {ratio(shape, c, v, 'plain_tx') if v.startswith(('begin_', 'plain_tx')) else ''} |"
        twin = v.replace("_inline", "_trigger")
        line += f" {ratio(shape, c, v, twin) if v.endswith('_inline') else ''} |"
        line += f" {'-' if cpu != cpu else f'{cpu:,.0f}'} | {per} | {errs} |"
        print(line)
    print()
print("tps: pgbench's transactions per second. Ratios: the median (min-max) of the per-round ratios of tps, "
      "below 1 = slower than the baseline; inline / trigger: each inline variant over its trigger twin "
      "(above 1 = the inline form is faster). CPU: server CPU per transaction, every backend of the run. "
      "stmts/tx: the run's fence_stats deltas (inline_writes, trigger_writes_inline_off, "
      "trigger_writes_unplanned) per transaction.")
EOF
	echo
	echo "### fence_stats at the end"
	echo
	echo "| column | value |"
	echo "|---|---|"
	q -x -c "SELECT * FROM fence_stats" | sed 's/^\([^|]*\)|\(.*\)$/| \1 | \2 |/'
} >"$OUT/inline.md"
cat "$OUT/inline.md"
qb_say "results in $OUT"
[ "$QB_FAILED_RUNS" = 0 ] || qb_say "$QB_FAILED_RUNS run(s) had errors"
[ "$CHECK_FAILS" = 0 ] || qb_say "$CHECK_FAILS check(s) failed"
if [ "$QB_FAILED_RUNS" != 0 ] || [ "$CHECK_FAILS" != 0 ]; then exit 1; fi
