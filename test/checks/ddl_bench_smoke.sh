#!/usr/bin/env bash
# test/checks/ddl_bench_smoke.sh: the DDL overhead benchmark's CI smoke run.
#
# Runs bench/ddl_overhead.sh --quick: a few transactions of every DDL
# workload against a database without fence, one with no-op event triggers
# and one with fence (one table protected), no timing assertions.  It proves
# that DDL on unprotected tables runs through fence's event triggers with no
# error, failed transaction or aborted client (the script exits non-zero on
# any), and that the report prints.  The full run (6-8 minutes) is
# `sudo bash bench/ddl_overhead.sh`; its results are in doc/benchmarks.md.
# fence-check-timeout: 300
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

out=$(mktemp -d "${TMPDIR:-/tmp}/fence-ddl-smoke.XXXXXX")
trap 'rm -rf "$out"' EXIT

bash "$root/bench/ddl_overhead.sh" --quick --src "$root" --out "$out"
for want in 'fence against no fence' 'table' 'partition'; do
	if ! grep -rqF "$want" "$out" 2>/dev/null; then
		echo "ddl_bench_smoke: report lacks \"$want\"" >&2
		exit 1
	fi
done
echo "ddl_bench_smoke: every DDL workload ran through fence's event triggers without an error; report printed"
