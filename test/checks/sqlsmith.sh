#!/usr/bin/env bash
# test/checks/sqlsmith.sh: random SQL against a database with fence installed.
#
# A throwaway cluster gets fence, protected tables in every mode (strict,
# repeat, shared, a partitioned table), unprotected twins, and live, released
# and expired claims.  Then:
#   1. sqlsmith as a plain role that owns the tables, restricted to user
#      relations (--exclude-catalog), so fence's tables and functions are hit;
#   2. sqlsmith as that role over the whole catalog;
#   3. sqlsmith as a superuser (user relations);
#   4. a targeted fuzzer (test/checks/fence_fuzz.py): three concurrent
#      sessions sending random calls of every fence function and random
#      guarded writes with NULL, empty, huge, negative, forged and
#      injection-shaped arguments, savepoints, PREPARE TRANSACTION, replica
#      role, TRUNCATE, MERGE, upserts.
# Pass: the server log shows no backend crash (terminated by signal, PANIC,
# TRAP), the server still answers, and fence still works afterwards.
# The last line gives the number of statements fuzzed.
#
# Environment: FENCE_PORT (else 54334), FENCE_WORK, FENCE_QUICK=1 (fewer
# queries), FENCE_SOAK=1 (many more), SQLSMITH_QUERIES, FENCE_SEED.
#
# fence-check-packages: sqlsmith python3
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_install_packages sqlsmith python3 || fence_die "cannot install sqlsmith"
fence_pg_setup

if [ "${FENCE_SOAK:-0}" = 1 ]; then
	n=${SQLSMITH_QUERIES:-50000}; fuzz=60000
elif [ "${FENCE_QUICK:-0}" = 1 ]; then
	n=${SQLSMITH_QUERIES:-1500}; fuzz=3000
else
	n=${SQLSMITH_QUERIES:-4000}; fuzz=9000
fi
seed=${FENCE_SEED:-$(( $(date +%s) % 100000 ))}
echo "sqlsmith: seed $seed, $n queries per sqlsmith pass, $fuzz fuzzer statements"

own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-sqlsmith)
	own_work=1
fi
dir=$work/sqlsmith
port=${FENCE_PORT:-$(fence_free_port 54334)}
cleanup()
{
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir"
chown postgres:postgres "$dir"

# sqlsmith's errors are expected by the thousand: keep them out of the log
fence_cluster_init "$dir" "$port" "log_min_error_statement = panic
log_min_messages = warning
max_connections = 30
statement_timeout = '5s'
lock_timeout = '2s'
idle_in_transaction_session_timeout = '30s'" || exit 1
fence_cluster_start "$dir" || exit 1

psql_db() { fence_psql "$dir" -v ON_ERROR_STOP=1 -q "$@"; }

psql_db -d postgres <<'EOF' || exit 1
CREATE ROLE smith LOGIN;
CREATE DATABASE fuzz OWNER smith;
EOF
psql_db -d fuzz >"$dir/setup.out" <<'EOF' || { cat "$dir/setup.out"; exit 1; }
CREATE EXTENSION fence;
-- the worker API is granted to no role on a new install
SELECT fence_grant_worker('smith');
SET ROLE smith;
CREATE TABLE inventory (sku int PRIMARY KEY, qty int NOT NULL, note text,
                        writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE report (id serial PRIMARY KEY, job text, line text, writer_epoch bigint);
CREATE TABLE shared_counts (k text PRIMARY KEY, n bigint NOT NULL DEFAULT 0,
                            e bigint NOT NULL DEFAULT 0);
CREATE TABLE parted (id int, writer_epoch bigint, payload text) PARTITION BY RANGE (id);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100);
CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (100) TO (1000);
CREATE TABLE child_ref (id int PRIMARY KEY, sku int REFERENCES inventory ON DELETE CASCADE,
                        writer_epoch bigint);
CREATE TABLE plain (LIKE inventory INCLUDING ALL);
INSERT INTO inventory SELECT g, g * 10, 'n' || g, 0 FROM generate_series(1, 50) g;
INSERT INTO plain SELECT * FROM inventory;
INSERT INTO report (job, line, writer_epoch) SELECT 'job-' || g, 'line ' || g, 0 FROM generate_series(1, 20) g;
INSERT INTO shared_counts SELECT 'k' || g, g, 0 FROM generate_series(1, 10) g;
INSERT INTO parted SELECT g * 7, 0, 'p' || g FROM generate_series(0, 120) g;
INSERT INTO child_ref SELECT g, g, 0 FROM generate_series(1, 30) g;
SELECT fence_protect('inventory');
SELECT fence_protect('report', 'writer_epoch', 'repeat');
SELECT fence_protect('shared_counts', 'e', 'shared');
SELECT fence_protect('parted');
SELECT fence_protect('child_ref');
-- live, released and expired claims
SELECT fence_claim('job-' || g, '1 day', 'setup') FROM generate_series(1, 30) g;
SELECT fence_release('job-' || g, fence_current('job-' || g)) FROM generate_series(1, 10) g;
SELECT fence_claim('short-' || g, '1 ms') FROM generate_series(1, 10) g;
EOF

target="host=$dir/sock port=$port dbname=fuzz"
total=0
status=0

run_sqlsmith()
{
	local label=$1 conn=$2 s=$3
	shift 3
	local log=$dir/sqlsmith-$label.log
	echo "sqlsmith $label: $n queries (seed $s)"
	# sqlsmith is not always good at stopping on its own: bound it in time
	timeout -k 10 "${SQLSMITH_TIMEOUT:-240}" sqlsmith --target="$conn" --seed="$s" \
		--max-queries="$n" --verbose "$@" >"$log" 2>&1
	local rc=$?
	# its report: the error rate, and how many errors came from fence itself
	echo "  $(tr '\r' '\n' <"$log" | grep '^error rate' | tail -n 1);" \
		"distinct errors from fence among its most frequent: $(tr '\r' '\n' <"$log" |
			grep -iE '^[0-9]+[[:space:]]+ERROR:.*(fenc|protected by|trigger manager)' |
			sed -E 's/^[0-9]+[[:space:]]+//' | sort -u | wc -l)"
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
		# sqlsmith exits non-zero when the server goes away
		if grep -qiE 'broken|connection|terminat' "$log"; then
			echo "sqlsmith $label: exited $rc, server connection broken" >&2
			status=1
		fi
	fi
	total=$((total + n))
}

run_sqlsmith smith-user "$target user=smith" "$seed" --exclude-catalog
run_sqlsmith smith-all "$target user=smith" "$((seed + 1))"
run_sqlsmith superuser "$target user=postgres" "$((seed + 2))" --exclude-catalog

# the targeted fuzzer: three concurrent sessions
echo "fence_fuzz: $fuzz statements in 3 sessions"
fuzz_stmts=0
pids=()
for i in 0 1 2; do
	python3 "$here/fence_fuzz.py" --seed "$((seed * 10 + i))" --count "$((fuzz / 3))" \
		>"$dir/fuzz-$i.sql"
	(fence_psql "$dir" -d fuzz -X -q -v ON_ERROR_STOP=0 -f "$dir/fuzz-$i.sql" \
		>"$dir/fuzz-$i.out" 2>&1; echo $? >"$dir/fuzz-$i.rc") &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for i in 0 1 2; do
	c=$(grep -c '^-- stmt' "$dir/fuzz-$i.sql")
	fuzz_stmts=$((fuzz_stmts + c))
	if grep -qE 'server closed the connection|connection to server was lost|terminating connection because of crash' \
		"$dir/fuzz-$i.out"; then
		echo "fence_fuzz session $i: lost its connection" >&2
		grep -nE -B5 'server closed the connection|connection to server was lost' "$dir/fuzz-$i.out" | head -n 30 >&2
		status=1
	fi
done
echo "fence_fuzz: $fuzz_stmts statements; errors by SQLSTATE (top 12):"
cat "$dir"/fuzz-*.out | sed -n 's/^psql:[^ ]* ERROR:  \([0-9A-Z]\{5\}\)$/\1/p' | sort | uniq -c | sort -rn | head -n 12

# the verdict: the server log
log=$dir/server.log
if grep -nE 'terminated by signal|PANIC:|TRAP:|server process .* was terminated|exited with exit code [^0]' "$log"; then
	echo "sqlsmith: the server log shows a backend crash" >&2
	grep -nE -B20 'terminated by signal|TRAP:' "$log" | grep -E 'STATEMENT|DETAIL|terminated' | head -n 20 >&2
	status=1
fi
# still alive, and fence still works (in a fresh database: the fuzzing may
# have unprotected or re-protected anything in "fuzz")
if ! out=$(psql_db -d postgres -At -c "CREATE DATABASE after_fuzz" \
	-c '\c after_fuzz' -c 'CREATE EXTENSION fence' \
	-c "SELECT fence_claim('after-fuzz', '1 min') > 0" 2>&1) || [ "$(tail -n 1 <<<"$out")" != t ]; then
	echo "sqlsmith: fence does not work after the fuzzing: $out" >&2
	status=1
fi

echo "sqlsmith: $total sqlsmith queries + $fuzz_stmts fuzzer statements, $(grep -cE 'terminated by signal|PANIC:|TRAP:' "$log") crashes"
exit "$status"
