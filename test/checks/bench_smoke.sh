#!/usr/bin/env bash
# test/checks/bench_smoke.sh: the benchmark's CI smoke run.
#
# Runs bench/run --quick: tiny tables, a few transactions per variant and
# shape, one round, no timing assertions.  It proves that every variant
# (fence's included: --require-fence) runs without a failed transaction, an
# aborted client or a server-side ERROR, and that the report tables print;
# and, from the WAL measurement, that fence's after form logs no
# row lock per updated row where a BEFORE ROW trigger logs one per row.
# Then bench/instructions.sh --quick: every variant's instructions per row
# counted by cachegrind in a single-user backend, each run's rows read
# back (the script fails if a run did not write or delete them all), and
# its table printed with a row per variant.
# Exit 0 on success.  Uses its own cluster on $FENCE_PORT (set by test/run)
# or else a port from 54321 up, so it can run beside a full benchmark (54320).
#
# fence-check-packages: valgrind
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

out=$(mktemp -d "${TMPDIR:-/tmp}/fence-bench-smoke.XXXXXX")
trap 'rm -rf "$out"' EXIT

status=0
bash "$root/bench/run" --quick --require-fence --port "${FENCE_PORT:-54321}" --out "$out" || status=$?

# The report must hold every table and every variant.
for want in 'Guarded UPDATE' 'Claims:' 'Memory:' 'Targets' \
	'plain (no trigger)' 'predicate' 'noop C trigger' 'moddatetime' 'PL/pgSQL guard' \
	'fence (token in statement)' 'fence (fence_begin)' 'raw_update' 'fence_claim' \
	'fence after form (token in statement' 'fence after form (fence_begin' \
	'WAL per 1000-row UPDATE'; do
	if ! grep -qF "$want" "$out/report.md" 2>/dev/null; then
		echo "bench_smoke: report lacks \"$want\"" >&2
		status=1
	fi
done
# Every run must have recorded a throughput.
if awk -F'\t' 'NR > 1 && !($6 > 0) { bad = 1 } END { exit !bad }' "$out/results.tsv"; then
	echo "bench_smoke: a run recorded no throughput" >&2
	status=1
fi
# WAL per UPDATE, from pg_waldump: a BEFORE ROW trigger (the noop
# C trigger, fence's default form) logs a row lock for each of the 1000
# rows; fence's after form logs none, as plain.
locks()
{
	awk -F'\t' -v v="$1" 'NR > 1 && $1 == v { print $6 }' "$out/wal.tsv" 2>/dev/null | sort -u | paste -sd' '
}
for want in 'noop_trigger 1000' 'fence_stmt 1000' 'plain 0' 'fence_after_stmt 0' 'fence_after_begin 0'; do
	got=$(locks "${want% *}")
	if [ "$got" != "${want#* }" ]; then
		echo "bench_smoke: Heap/LOCK records per UPDATE of ${want% *}: got '$got', expected ${want#* }" >&2
		status=1
	fi
done
# Instructions per row: the script and its table
if bash "$root/bench/instructions.sh" --quick --out "$out/instr" >"$out/instr.log" 2>&1; then
	n=$(grep -cE '^\| [a-z_]+ \| [0-9]+ \| [0-9.]+ \| [-+][0-9]+ \|$' "$out/instr/instructions.md")
	if [ "$n" != 15 ]; then
		echo "bench_smoke: bench/instructions.sh printed $n variant rows, not 15" >&2
		status=1
	fi
else
	tail -n 20 "$out/instr.log" >&2
	echo "bench_smoke: bench/instructions.sh --quick failed" >&2
	status=1
fi
[ "$status" = 0 ] && echo "bench_smoke: every variant ran; report printed; the after form logged no row locks; instructions counted"
exit "$status"
