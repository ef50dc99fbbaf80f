#!/usr/bin/env bash
# test/checks/client_node.sh: the Node client (clients/node, package fence
# over node-postgres) passes its node:test suite against a real server.
#
# One throwaway cluster, database "app", fence installed in a schema of its
# own ("fence", not on the search_path), so that the client's schema-qualified
# SQL and its lookup of the schema in pg_extension are what makes it work.
# `npm ci` installs the pinned pg (8.23.1) from clients/node/package-lock.json
# into a copy of clients/node, then clients/node/test/*.test.js runs with
# `node --test` (no other framework), as postgres (a superuser: the tests use
# ALTER DATABASE and fence_release_any); test/reporter.mjs prints one line a
# test, counted here. What its tests prove (their names are the "ok" lines):
#   - claim, job.transaction() (BEGIN, fence_begin, COMMIT on one client of
#     the pool), job.once (true, then false), release; job.token a string;
#     schema, holder and a lease in milliseconds; the ESM entry point;
#     HeldError;
#   - a worker (its own process, test/worker.js) SIGSTOPped past its lease
#     while another takes the job over and writes: continued, its write
#     rejects with FencedError (5F, the pg error as .cause), its job.signal
#     is aborted, the row holds the successor's write; twin: the same handler
#     on an unprotected copy, without fence, loses an update (11, not 12);
#   - a worker SIGKILLed after COMMIT and before release: the successor's
#     job.once answers false (the effect applied once; twin: twice);
#   - a takeover in process rejects job.transaction() with FencedError
#     (5F001) and aborts the signal; the caller's bugs (5G001, 5G002, 5G003)
#     stay ordinary pg errors;
#   - the keeper renews a 2000 ms lease through a 5 s callback (a competing
#     fence_claim is NULL throughout; twin: without renewal it gets a token);
#     job.signal aborted by the fence_superseded notification under
#     fence.notify_superseded = on (ALTER DATABASE), not with it off;
#   - programmer errors (a bad lease, a zero lease, an unknown schema, a
#     database without fence, once outside job.transaction(), an error in
#     the transaction's callback) are not FencedError.
# Then the server log shows no crash. One line per assertion ("ok     ..."
# or "FAILED ..."), then a summary line. About 30 s.
#
# Environment: FENCE_PORT (else a free port from 54390), FENCE_WORK,
# FENCE_SRC, FENCE_KEEP=1, FENCE_NPM_CACHE (an npm cache that holds the
# lock's packages: npm ci runs offline from a copy of it; test/matrix fills
# one on the host for a chroot that cannot reach the registry).  Standalone
# it expects fence to be installed.
# Node.js 20 and npm: Debian's packages where they are missing (a NodeSource
# nodejs provides npm itself).
#
# fence-check-timeout: 400
# fence-check-packages: nodejs npm
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_install_packages nodejs npm || fence_die "cannot install nodejs and npm"
fence_pg_setup
t_start=$(date +%s)

src=${FENCE_SRC:-$(cd "$here/../.." && pwd)}
client=$src/clients/node
[ -f "$client/package-lock.json" ] || fence_die "no $client/package-lock.json"
own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-client-node)
	own_work=1
fi
dir=$work/pg
out=$work/out
port=${FENCE_PORT:-$(fence_free_port 54390)}
cleanup()
{
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir" "$out" "$work/npm-home"
chown postgres:postgres "$dir" "$out" "$work/npm-home"
# the client as its own copy (without a node_modules of the tree), so that
# npm ci writes nothing into the tree
{ mkdir -p "$work/client" &&
	(cd "$client" && tar -cf - --exclude=./node_modules .) | (cd "$work/client" && tar -xf -) &&
	chown -R postgres:postgres "$work/client"; } || fence_die "cannot copy $client"

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null)
if [ "${node_major:-0}" -ge 20 ] 2>/dev/null; then
	ok "node $(node --version) (20 or later), npm $(npm --version 2>&1)"
else
	bad "node 20 or later (found $(node --version 2>&1))"
	exit 1
fi
# npm ci as postgres, with a HOME (npm's cache) of its own; from a cache
# filled elsewhere and offline with FENCE_NPM_CACHE (npm ci still checks
# every package against the lock's integrity hashes)
npm_args=(--no-audit --no-fund)
if [ -n "${FENCE_NPM_CACHE:-}" ]; then
	cp -a "$FENCE_NPM_CACHE" "$work/npm-cache" && chown -R postgres:postgres "$work/npm-cache" ||
		fence_die "cannot copy the npm cache $FENCE_NPM_CACHE"
	npm_args+=(--offline --cache "$work/npm-cache")
fi
if (cd "$work/client" && fence_as_pg env HOME="$work/npm-home" timeout 180 npm ci "${npm_args[@]}") >"$out/npm.out" 2>&1; then
	ok "npm ci installs pg $(node -p "require('$work/client/node_modules/pg/package.json').version" 2>&1) from clients/node/package-lock.json"
else
	bad "npm ci in a copy of clients/node"
	tail -n 20 "$out/npm.out" | sed 's/^/    /'
	exit 1
fi

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
echo "client_node: PostgreSQL $(sql -c 'SHOW server_version'), fence $(sql -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'"), node $(node --version)"

# the suite: its own "ok"/"FAILED" lines, counted here as assertions
tests=()
for f in "$work"/client/test/*.test.js; do
	[ -f "$f" ] && tests+=("test/${f##*/}")
done
[ ${#tests[@]} -gt 0 ] || { bad "clients/node/test/*.test.js exist"; exit 1; }
(cd "$work/client" && fence_as_pg env HOME="$work/npm-home" PGHOST="$dir/sock" PGPORT="$port" PGDATABASE=app PGUSER=postgres \
	timeout -k 10 300 node --test --test-reporter=./test/reporter.mjs --test-reporter-destination=stdout "${tests[@]}") \
	>"$out/node-test.out" 2>&1
rc=$?
grep -E '^(ok|FAILED) ' "$out/node-test.out"
n_ok=$((n_ok + $(grep -c '^ok ' "$out/node-test.out")))
n_fail=$((n_fail + $(grep -c '^FAILED ' "$out/node-test.out")))
pass=$(sed -n 's/^# pass \([0-9][0-9]*\)$/\1/p' "$out/node-test.out" | tail -n 1)
if [ "$rc" -eq 0 ] && [ "${pass:-0}" -gt 0 ]; then
	ok "node --test ${tests[*]}: $(grep -E '^# (tests|pass|fail) ' "$out/node-test.out" | sed 's/^# //' | paste -sd, - | sed 's/,/, /g')"
else
	bad "node --test exits 0 with tests passed (exit $rc)"
	grep -vE '^(ok|FAILED) ' "$out/node-test.out" | sed 's/^/    /' | tail -n 80
fi

fence_check_no_crash "$dir/server.log"

total=$((n_ok + n_fail))
if [ "$n_fail" = 0 ]; then
	echo "client_node: all $total assertions hold ($(($(date +%s) - t_start)) s)"
	exit 0
fi
echo "client_node: $n_fail of $total assertions FAILED ($(($(date +%s) - t_start)) s)"
exit 1
