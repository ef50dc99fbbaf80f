#!/usr/bin/env bash
# bench/instructions.sh: what the guard costs a row, in instructions.
#
#   sudo bash bench/instructions.sh [--quick] [--out DIR] [--keep]
#
# Throughput ratios on a shared 2-core machine move by several percent
# from one run to the next; the number of instructions a backend executes
# for the same statements on the same data does not.  This script counts
# them with cachegrind (valgrind --tool=cachegrind --cache-sim=no: user-space
# instructions, Ir) in a single-user backend (postgres --single), so that a
# reader can trust a ratio that throughput alone cannot settle.  It is
# measured beside bench/run's throughput, not instead of it: the kernel's
# work (fsync, page faults) is not counted.
#
# The data are bench/run's: one copy per variant of the same 100,000-row
# table (bench/sql/setup.sql, rows of ~100 bytes, aged once), fence
# installed and the fence tables protected as bench/run protects them
# (bench/sql/fence_claims.sql, fence_protect.sql; repeat mode), fence
# preloaded.  The settings are a production server's: fsync,
# full_page_writes and synchronous_commit on (a single-user backend runs no
# autovacuum: there is no launcher).  After loading, a CHECKPOINT and a
# clean shutdown; then every run starts from its own copy of that data
# directory, so each begins in the same state.
#
# A run feeds the backend K statements of one variant, each on 1000 rows of
# its own (ids k*1000+1 .. k*1000+1000: every row is written once).  Each
# variant runs with K = K1 and K = K2; its cost per row is
#   (Ir(K2) - Ir(K1)) / ((K2 - K1) * 1000)
# so startup, the catalog caches and each statement's first planning cancel
# out.  The variants (UPDATE sets qty = qty + 1 and, but under fence_begin,
# writer_epoch = the token; T is a current claim's token):
#   plain             the UPDATE on an unguarded table
#   predicate         the seed's hand-written check: ... AND writer_epoch < T
#   noop_trigger      PostgreSQL's floor for any BEFORE ROW trigger:
#                     suppress_redundant_updates_trigger()
#   fence_stmt        fence's guard, the token in the statement (fence
#                     preloaded: the inline form, inline.c)
#   fence_begin       BEGIN; fence_begin(job, T); the UPDATE without the
#                     epoch (the guard stamps it; inline: fence_inline_stamp);
#                     COMMIT
#   fence_after_begin the after form under fence_begin (it does not stamp:
#                     the UPDATE writes T)
#   plain_delete      DELETE of the same rows, unguarded
#   predicate_delete  ... AND writer_epoch < T
#   fence_delete      BEGIN; fence_begin(job, T); the DELETE; COMMIT
#   *_trigger         fence_stmt, fence_begin and fence_delete with
#                     SET fence.inline = off first: the trigger checks
#   single_plain      not one statement on 1000 rows but 100 single-row
#   single_stmt       UPDATEs, each its own statement (parsed and planned
#   single_stmt_trigger  each time, as a single-user backend runs them):
#                     the cost per statement of a one-row UPDATE, plain,
#                     fence_stmt's and fence_stmt_trigger's; set against
#                     single_plain
# The ratio column is plain's Ir per row over the variant's (as a throughput
# ratio reads: 1.00 costs nothing, 0.75 costs a third more); the DELETE
# variants are set against plain_delete, the single_* ones against
# single_plain (their "row" is a statement).
#
# Output: a markdown table on stdout and in DIR/instructions.md (DIR:
# --out, else /tmp/fence-bench-instr.XXXXXX), with each run's cachegrind
# file and backend output in DIR/runs.  It fails if a run's backend printed
# an ERROR, or if, read afterwards, the run did not write (or delete) every
# row of its K ranges.  About 2 minutes on 2 cores (--quick: K1 = 1,
# K2 = 3, 20,000 rows; under a minute, the ratios rougher).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ARGS=("$@")
# shellcheck source=test/lib.sh
. "$HERE/../test/lib.sh"
# shellcheck source=bench/queue_lib.sh
. "$HERE/queue_lib.sh"

OUT=
QUICK=0
QB_KEEP=0
QB_PRIORITY=0
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
	esac
	shift
done

qb_prepare valgrind
fence_pg_setup
PGBIN=$FENCE_PG_BIN
[ -f "$("$FENCE_PG_CONFIG" --sharedir)/extension/fence.control" ] ||
	fence_die "fence is not installed for $FENCE_PG_CONFIG: make install first"

if [ "$QUICK" = 1 ]; then
	ROWS=20000 K1=1 K2=3
else
	ROWS=100000 K1=2 K2=12
fi
SINGLE_ROWS=100			# the single_* variants' statements per K
DB=fence_bench
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/fence-bench-instr.XXXXXX)
mkdir -p "$OUT/runs"

CL=$(fence_mktemp_pg fence-bench-instr)
PORT=$(fence_free_port 54330)
SOCK=$CL/sock
cleanup()
{
	fence_cluster_stop "$CL" immediate
	if [ "$QB_KEEP" = 1 ]; then
		echo "kept: $CL" >&2
	else
		rm -rf "$CL"
	fi
}
trap cleanup EXIT

# the settings: production durability, after test/lib.sh's test defaults
fence_cluster_init "$CL" "$PORT" "$(
	cat <<EOF
# bench/instructions.sh: a production server's durability
fsync = on
full_page_writes = on
synchronous_commit = on
$(qb_conf 256MB)
shared_preload_libraries = 'fence'
EOF
)" || fence_die "initdb failed"
fence_cluster_start "$CL" || fence_die "the cluster did not start"
q() { fence_psql "$CL" -d "$DB" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
fence_psql "$CL" -d postgres -X -q -c "CREATE DATABASE $DB" >/dev/null
q -f "$HERE/sql/fence_claims.sql" >"$OUT/fence_claims.out" 2>&1 ||
	{ cat "$OUT/fence_claims.out" >&2; fence_die "fence_claims.sql failed"; }
TB=$(sed -n 's/^tbase=//p' "$OUT/fence_claims.out")
q -v rows="$ROWS" -v memrows=1000 -v njobs=10 -v tbase="$TB" -f "$HERE/sql/setup.sql" >/dev/null
q -v njobs=10 -f "$HERE/sql/fence_protect.sql" >/dev/null
q -c "CHECKPOINT"
VERSION=$(q -c "SELECT version()")
FENCE_VERSION=$(q -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'")
fence_cluster_stop "$CL" fast

# stmt VARIANT K: the K-th statement of a variant, one line
stmt()
{
	local lo=$(($2 * 1000 + 1)) hi=$(($2 * 1000 + 1000)) t
	t=$(table_of "$1")
	local ids="id BETWEEN $lo AND $hi" set="qty = qty + 1, writer_epoch = $TB"
	local begin="BEGIN; SELECT fence_begin('bench_0', $TB);"
	case $1 in
	fence_*_trigger) stmt "${1%_trigger}" "$2" ;;
	single_*)
		local i
		for ((i = lo; i < lo + SINGLE_ROWS; i++)); do
			echo "UPDATE $t SET $set WHERE id = $i;"
		done
		;;
	plain | noop_trigger | fence_stmt) echo "UPDATE $t SET $set WHERE $ids;" ;;
	predicate) echo "UPDATE $t SET $set WHERE $ids AND writer_epoch < $TB;" ;;
	fence_begin) echo "$begin UPDATE $t SET qty = qty + 1 WHERE $ids; COMMIT;" ;;
	fence_after_begin) echo "$begin UPDATE $t SET $set WHERE $ids; COMMIT;" ;;
	plain_delete) echo "DELETE FROM $t WHERE $ids;" ;;
	predicate_delete) echo "DELETE FROM $t WHERE $ids AND writer_epoch < $TB;" ;;
	fence_delete) echo "$begin DELETE FROM $t WHERE $ids; COMMIT;" ;;
	esac
}

# table_of VARIANT: the table it writes (a DELETE variant deletes from its
# UPDATE twin's table: each run has its own copy of the data)
table_of()
{
	case $1 in
	fence_*_trigger) table_of "${1%_trigger}" ;;
	single_plain) echo b_plain ;;
	single_stmt | single_stmt_trigger) echo b_fence_stmt ;;
	plain | plain_delete) echo b_plain ;;
	predicate | predicate_delete) echo b_predicate ;;
	fence_begin | fence_delete) echo b_fence_begin ;;
	noop_trigger | fence_stmt | fence_after_begin) echo "b_$1" ;;
	*) fence_die "no variant $1" ;;
	esac
}

# count VARIANT K: Ir of a single-user backend running K statements of
# VARIANT on a fresh copy of the data directory
count()
{
	local v=$1 k=$2 i run=$OUT/runs/$1-$2 data=$CL/run-data
	rm -rf "$data"
	cp -a "$CL/data" "$data"
	rm -f "$data/postmaster.pid"
	{
		# once a run, so that it cancels out of the cost per row
		[[ $v == *_trigger && $v != noop_trigger ]] && echo "SET fence.inline = off;"
		for ((i = 0; i < k; i++)); do stmt "$v" "$i"; done
	} >"$run.sql"
	# cachegrind writes as postgres, into the cluster's directory (DIR may
	# be one postgres cannot enter); the file is then kept in DIR/runs
	rm -f "$CL/run.cg"
	(cd "$CL" && runuser -u postgres -- env HOME="$FENCE_PG_HOME" \
		valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$CL/run.cg" \
		"$PGBIN/postgres" --single -D "$data" -c exit_on_error=on "$DB" <"$run.sql") >"$run.out" 2>&1 ||
		{ tail -n 20 "$run.out" >&2; fence_die "$v, $k statements: the backend failed"; }
	[ -s "$CL/run.cg" ] || { tail -n 20 "$run.out" >&2; fence_die "$v, $k statements: cachegrind wrote no counts"; }
	mv "$CL/run.cg" "$run.cg"
	if grep -q 'ERROR:' "$run.out"; then
		grep -m 3 'ERROR:' "$run.out" >&2
		fence_die "$v, $k statements: an ERROR"
	fi
	# what the run did, read afterwards without valgrind: every row of the
	# K ranges written (UPDATE: it carries T) or gone (DELETE)
	local got want
	got=$(cd "$CL" && check_query "$v" |
		runuser -u postgres -- env HOME="$FENCE_PG_HOME" "$PGBIN/postgres" --single -D "$data" "$DB" 2>&1 |
		sed -n 's/.*n = "\([0-9]*\)".*/\1/p')
	case $v in
	*_delete | *_delete_trigger) want=$((ROWS - k * 1000)) ;;
	single_*) want=$((k * SINGLE_ROWS)) ;;
	*) want=$((k * 1000)) ;;
	esac
	[ "$got" = "$want" ] || fence_die "$v, $k statements: $got rows where $want were expected"
	sed -n 's/^summary: *//p' "$run.cg"
}

# check_query VARIANT: the count that tells what a run of VARIANT did
check_query()
{
	case $1 in
	*_delete | *_delete_trigger) echo "SELECT count(*) AS n FROM $(table_of "$1");" ;;
	*) echo "SELECT count(*) AS n FROM $(table_of "$1") WHERE writer_epoch = $TB;" ;;
	esac
}

VARIANTS=(plain predicate noop_trigger fence_stmt fence_stmt_trigger fence_begin
	fence_begin_trigger fence_after_begin plain_delete predicate_delete fence_delete
	fence_delete_trigger single_plain single_stmt single_stmt_trigger)
declare -A PER_ROW
for v in "${VARIANTS[@]}"; do
	a=$(count "$v" "$K1")
	b=$(count "$v" "$K2")
	n=1000
	[[ $v == single_* ]] && n=$SINGLE_ROWS
	PER_ROW[$v]=$(((b - a) / ((K2 - K1) * n)))
	qb_say "$v: $a Ir at $K1 statements, $b at $K2: ${PER_ROW[$v]} per row"
done
rm -rf "$CL/run-data"

{
	echo "### Instructions per row (cachegrind, single-user backend)"
	echo
	echo "$VERSION; fence $FENCE_VERSION, preloaded; $ROWS rows per table; 1000-row statements,"
	echo "$((K2 - K1)) statements measured ($K2 against $K1); fsync, full_page_writes and"
	echo "synchronous_commit on; no autovacuum (a single-user backend has none)."
	echo
	echo "| variant | Ir per row | ratio to plain | Ir over plain |"
	echo "|---|---:|---:|---:|"
	for v in "${VARIANTS[@]}"; do
		base=plain
		[[ $v == *_delete || $v == *_delete_trigger ]] && base=plain_delete
		[[ $v == single_* ]] && base=single_plain
		awk -v v="$v" -v n="${PER_ROW[$v]}" -v p="${PER_ROW[$base]}" \
			'BEGIN { printf "| %s | %d | %.3f | %+d |\n", v, n, p / n, n - p }'
	done
} | tee "$OUT/instructions.md"
echo "results: $OUT/instructions.md"
