#!/usr/bin/env bash
# test/checks/client_python.sh: the Python client (clients/python, package
# fence over psycopg 3) passes its unittest suite against a real server.
#
# One throwaway cluster, database "app", fence installed in a schema of its
# own ("fence", not on the search_path), so that the client's schema-qualified
# SQL and its lookup of the schema in pg_extension are what makes it work.
# clients/python/tests/test_fence.py runs with Debian's /usr/bin/python3 and
# python3-psycopg (stdlib unittest, no pytest), as postgres (a superuser: the
# tests use ALTER DATABASE and fence_release_any), the package on PYTHONPATH
# from the tree itself. What its tests prove (their docstrings are the "ok"
# lines):
#   - claim, job.transaction() (BEGIN, fence_begin, COMMIT), job.once (true,
#     then false), release; schema= and a timedelta lease; fence.Held;
#   - with autocommit off, the claim and the release are committed and
#     survive close(), also when the block leaves a transaction open; twin:
#     raw psycopg rolls both back on close();
#   - a worker (its own process) SIGSTOPped past its lease while another
#     takes the job over and writes: continued, its write raises
#     fence.Fenced (5F), its job.superseded is set, the row holds the
#     successor's write; twin: the same handler on an unprotected copy,
#     without fence, loses an update (11, not 12);
#   - a worker SIGKILLed after COMMIT and before release: the successor's
#     job.once answers False (the effect applied once; twin: twice);
#   - the keeper renews a 2 s lease through a 5 s block (a competing
#     fence_claim is NULL throughout; twin: without renewal it gets a token);
#     job.superseded set by the fence_superseded notification under
#     fence.notify_superseded = on (ALTER DATABASE), not with it off;
#   - programmer errors (a bad lease type, a zero lease, an unknown schema,
#     misuse of once/transaction, an error in the block) are not Fenced.
# Then the server log shows no crash. One line per assertion ("ok     ..."
# or "FAILED ..."), then a summary line. About 20 s.
#
# Environment: FENCE_PORT (else a free port from 54380), FENCE_WORK,
# FENCE_SRC, FENCE_KEEP=1. Standalone it expects fence to be installed.
#
# fence-check-timeout: 300
# fence-check-packages: python3-psycopg
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_install_packages python3-psycopg || fence_die "cannot install python3-psycopg"
fence_pg_setup
t_start=$(date +%s)

src=${FENCE_SRC:-$(cd "$here/../.." && pwd)}
client=$src/clients/python
[ -f "$client/tests/test_fence.py" ] || fence_die "no $client/tests/test_fence.py"
own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-client-python)
	own_work=1
fi
dir=$work/pg
out=$work/out
port=${FENCE_PORT:-$(fence_free_port 54380)}
cleanup()
{
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir" "$out"
chown postgres:postgres "$dir" "$out"
# the client as its own copy, so that no __pycache__ lands in the tree
{ cp -a "$client" "$work/client" && chown -R postgres:postgres "$work/client"; } ||
	fence_die "cannot copy $client"

fence_cluster_init "$dir" "$port" "max_connections = 40" || exit 1
fence_cluster_start "$dir" || exit 1
sql() { fence_psql "$dir" -d app -XAtq -v ON_ERROR_STOP=1 "$@"; }
fence_psql "$dir" -d postgres -XAtq -v ON_ERROR_STOP=1 -c "CREATE DATABASE app" || exit 1
if sql -c "CREATE SCHEMA fence" -c "CREATE EXTENSION fence SCHEMA fence" >"$out/setup.out" 2>&1; then
	ok "CREATE EXTENSION fence SCHEMA fence (not on the search_path)"
else
	bad "CREATE EXTENSION fence SCHEMA fence"
	sed 's/^/    /' "$out/setup.out"
	exit 1
fi
check "fence's functions are not found unqualified" \
	"$(sql -c "SELECT to_regproc('fence_claim') IS NULL")" t
echo "client_python: PostgreSQL $(sql -c 'SHOW server_version'), fence $(sql -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'"), $(/usr/bin/python3 --version 2>&1), psycopg $(/usr/bin/python3 -c 'import psycopg; print(psycopg.__version__)' 2>&1)"

# the suite: its own "ok"/"FAILED" lines, counted here as assertions
(cd "$work/client" && fence_as_pg env PGHOST="$dir/sock" PGPORT="$port" PGDATABASE=app PGUSER=postgres \
	PYTHONPATH="$work/client" timeout -k 10 240 /usr/bin/python3 tests/test_fence.py) >"$out/unittest.out" 2>&1
rc=$?
grep -E '^(ok|FAILED) ' "$out/unittest.out"
n_ok=$((n_ok + $(grep -c '^ok ' "$out/unittest.out")))
n_fail=$((n_fail + $(grep -c '^FAILED ' "$out/unittest.out")))
if [ "$rc" -eq 0 ] && grep -qE '^Ran [1-9][0-9]* tests? in ' "$out/unittest.out"; then
	ok "tests/test_fence.py: $(grep -E '^Ran ' "$out/unittest.out")"
else
	bad "tests/test_fence.py exits 0 (exit $rc)"
	grep -vE '^(ok|FAILED) ' "$out/unittest.out" | sed 's/^/    /' | tail -n 80
fi

fence_check_no_crash "$dir/server.log"

total=$((n_ok + n_fail))
if [ "$n_fail" = 0 ]; then
	echo "client_python: all $total assertions hold ($(($(date +%s) - t_start)) s)"
	exit 0
fi
echo "client_python: $n_fail of $total assertions FAILED ($(($(date +%s) - t_start)) s)"
exit 1
