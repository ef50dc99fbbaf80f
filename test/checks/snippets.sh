#!/usr/bin/env bash
# test/checks/snippets.sh: every SQL, Python and JavaScript snippet in
# README.md, doc/worker.md and doc/fence.md runs as written, in order,
# against real PostgreSQL with fence installed (the README's first five
# minutes, and a first worker, must work when pasted).
#
# For each file: a fresh throwaway cluster, a database "app" with nothing in
# it (the file's own snippets create the extension), then
# test/checks/snippets.py runs each ```sql block verbatim in its own psql
# session as the superuser, with ON_ERROR_STOP, in file order; psql
# variables (:token from \gset) carry over to the next blocks of the file.
# Each ```python block runs as a program with /usr/bin/python3, the tree's
# clients/python on PYTHONPATH and PGHOST/PGPORT/PGDATABASE=app/PGUSER set
# to the file's database (psycopg.connect("") reaches it); each ```js block
# with node, the same variables, and the tree's clients/node npm-installed
# in a copy ("skip ... (no clients/node in this tree)" while there is none).
# A python or js block passes if it exits 0 within 60 s: a worker in an
# example processes its job and returns.
# Markers, HTML comments on the line before a block (invisible on GitHub):
#   <!-- snippet: error 5F001 -->     the block must raise exactly this SQLSTATE
#   <!-- snippet: skip (reason) -->   not run (shell, replication, pg_cron, ...)
#   <!-- snippet: as ROLE -->         run after SET SESSION AUTHORIZATION ROLE
#                                     (python, js: as PGUSER=ROLE)
#   <!-- snippet: setup               hidden SQL, run at its place; ends with a
#   ...                               line "-->"
#   -->
# Shell blocks (```sh) are never run and must carry a skip marker. Blocks
# without a language (output, signatures) are ignored. The full convention
# is in the header of snippets.py.
#
# One line per block: "ok     FILE:LINE", "FAILED FILE:LINE: why" (with the
# block's output), "skip   FILE:LINE (reason)"; then
# "snippets: N run (E expected errors), S skipped, F failed".  Exit 0 only if
# no block failed and at least one ran.
#
# Environment: FENCE_PORT (else 54360), FENCE_WORK, FENCE_SRC (else this
# tree: fence must already be installed), FENCE_KEEP=1,
# FENCE_SNIPPET_FILES="README.md doc/worker.md doc/fence.md" (paths relative
# to the tree),
# FENCE_SNIPPET_VERBOSE=1 (show the output of every block, not only failed ones).
#
# fence-check-timeout: 480
# fence-check-packages: python3 python3-psycopg
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_pg_setup

src=${FENCE_SRC:-$(cd "$here/../.." && pwd)}
files=${FENCE_SNIPPET_FILES:-README.md doc/worker.md doc/fence.md}
port=${FENCE_PORT:-54360}
own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-snippets)
	own_work=1
fi

cleanup()
{
	local d
	for d in "$work"/snip-*; do
		[ -d "$d" ] && fence_cluster_stop "$d" immediate
	done
	if [ "$own_work" = 1 ] && [ "${FENCE_KEEP:-0}" != 1 ]; then
		rm -rf "$work"
	fi
}
trap cleanup EXIT

run=0 errs=0 skips=0 fails=0 n=0
for f in $files; do
	n=$((n + 1))
	dir=$work/snip-$n
	if [ ! -f "$src/$f" ]; then
		echo "FAILED $f: no such file"
		fails=$((fails + 1))
		continue
	fi
	p=$(fence_free_port "$port")
	if ! fence_cluster_init "$dir" "$p" || ! fence_cluster_start "$dir" ||
		! fence_psql "$dir" -q -d postgres -c 'CREATE DATABASE app' >/dev/null; then
		echo "FAILED $f: cannot start a cluster"
		fails=$((fails + 1))
		continue
	fi
	# shellcheck disable=SC2086
	out=$(/usr/bin/python3 "$here/snippets.py" ${FENCE_SNIPPET_VERBOSE:+--verbose} --label "$f" \
		--psql "$FENCE_PG_BIN/psql" --host "$dir/sock" --port "$p" \
		--user postgres --dbname app --tree "$src" "$src/$f")
	printf '%s\n' "$out" | grep -v '^counts '
	counts=$(printf '%s\n' "$out" | sed -n 's/^counts //p')
	if [ -z "$counts" ]; then
		echo "FAILED $f: snippets.py gave no counts"
		fails=$((fails + 1))
	else
		for kv in $counts; do
			case $kv in
			run=*) run=$((run + ${kv#run=})) ;;
			errors=*) errs=$((errs + ${kv#errors=})) ;;
			skipped=*) skips=$((skips + ${kv#skipped=})) ;;
			failed=*) fails=$((fails + ${kv#failed=})) ;;
			esac
		done
	fi
	if grep -Eq 'PANIC|server process .* was terminated by signal' "$dir/server.log"; then
		echo "FAILED $f: the server log shows a crash"
		grep -E 'PANIC|terminated by signal' "$dir/server.log" | head -5
		fails=$((fails + 1))
	fi
	fence_cluster_stop "$dir"
	port=$((p + 1))
done

echo "snippets: $run run ($errs expected errors), $skips skipped, $fails failed"
[ "$fails" -eq 0 ] && [ "$run" -gt 0 ]
