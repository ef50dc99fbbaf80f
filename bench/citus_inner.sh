#!/usr/bin/env bash
# bench/citus_inner.sh: the half of bench/citus.sh that runs inside test/
# matrix's PostgreSQL 17 chroot, as root, in a copy of the tree (test/citus/
# run --bench starts it).  Builds and installs fence, makes a Citus cluster
# of a coordinator and two workers on unix sockets at production
# durability (fsync, full_page_writes, synchronous_commit and autovacuum
# on: PostgreSQL's defaults, nothing turned off), and runs pgbench through
# the coordinator, each pair of variants interleaved round by round:
#
#   claims      fence_claim (bench/scripts/claim_fence.pgb) against the
#               seed's raw conditional UPDATE (claim_raw.pgb), both on the
#               coordinator's local tables, 1 ms leases, 1 client
#   fence_begin BEGIN; fence_begin(job, token); a single-row UPDATE of a
#               distributed table; COMMIT, against the same transaction
#               without fence_begin (both read the job's token first)
#
# Prints each run's tps, then each pair's median tps and the ratio of the
# medians.  Environment: FENCE_BENCH_SECONDS (per run, default 10),
# FENCE_BENCH_ROUNDS (default 3), FENCE_BENCH_CLIENTS (the fence_begin
# pair's clients, default 4).

set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config
BIN=$($PG_CONFIG --bindir)
SECS=${FENCE_BENCH_SECONDS:-10}
ROUNDS=${FENCE_BENCH_ROUNDS:-3}
CLIENTS=${FENCE_BENCH_CLIENTS:-4}
NJOBS=1000
NROWS=10000

cd "$SRC" || exit 1
make PG_CONFIG=$PG_CONFIG >build.log 2>&1 && make PG_CONFIG=$PG_CONFIG install >>build.log 2>&1 || {
	tail -n 30 build.log
	exit 1
}

W=$(mktemp -d /tmp/fence-citus-bench.XXXXXX)
chmod 755 "$W"
chown postgres:postgres "$W"
as_pg() { (cd "$W" && setpriv --reuid=postgres --regid=postgres --init-groups env HOME="$W" PATH="$BIN:$PATH" "$@"); }
PORTS=(55431 55432 55433)
NODES=(coordinator worker1 worker2)
stop_all()
{
	for n in "${NODES[@]}"; do
		[ -f "$W/$n/postmaster.pid" ] && as_pg pg_ctl -D "$W/$n" -m fast -w stop >/dev/null 2>&1
	done
	rm -rf "$W"
}
trap stop_all EXIT

for i in 0 1 2; do
	n=${NODES[$i]}
	as_pg initdb -D "$W/$n" -A trust -U postgres -E UTF8 --locale=C >"$W/initdb-$n.log" 2>&1 || { cat "$W/initdb-$n.log"; exit 1; }
	cat >>"$W/$n/postgresql.conf" <<CONF
port = ${PORTS[$i]}
listen_addresses = ''
unix_socket_directories = '$W'
shared_preload_libraries = 'citus,fence'
citus.enable_statistics_collection = off
max_prepared_transactions = 20
max_connections = 100
shared_buffers = 256MB
CONF
	as_pg pg_ctl -D "$W/$n" -l "$W/$n.log" -w start >/dev/null || { tail -n 20 "$W/$n.log"; exit 1; }
	as_pg psql -h "$W" -p "${PORTS[$i]}" -d postgres -XAtq -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION citus' || exit 1
done
q() { as_pg psql -h "$W" -p "${PORTS[0]}" -d postgres -XAtq -v ON_ERROR_STOP=1 "$@"; }
q -c "SELECT citus_set_coordinator_host('$W', ${PORTS[0]})" >/dev/null || exit 1
q -c "SELECT citus_add_node('$W', ${PORTS[1]})" -c "SELECT citus_add_node('$W', ${PORTS[2]})" >/dev/null || exit 1
q <<SQL >/dev/null || exit 1
CREATE EXTENSION fence;
CREATE TABLE claim_jobs (id int PRIMARY KEY, status text NOT NULL DEFAULT 'pending',
	lease_epoch bigint NOT NULL DEFAULT 0, lease_expires_at timestamptz,
	available_at timestamptz NOT NULL DEFAULT now());
INSERT INTO claim_jobs (id) SELECT g FROM generate_series(1, $NJOBS) g;
CREATE TABLE dist (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
SELECT create_distributed_table('dist', 'id');
INSERT INTO dist (id) SELECT g FROM generate_series(1, $NROWS) g;
CREATE TABLE bench_tokens (j int PRIMARY KEY, token bigint NOT NULL);
INSERT INTO bench_tokens SELECT g, fence_claim('bj_' || g, interval '1 day') FROM generate_series(1, $NJOBS) g;
VACUUM ANALYZE;
SQL

cat >"$W/dist.pgb" <<'PGB'
\set id random(1, 10000)
\set j random(1, 1000)
BEGIN;
SELECT token AS tok FROM bench_tokens WHERE j = :j \gset
UPDATE dist SET v = v + 1 WHERE id = :id;
COMMIT;
PGB
cat >"$W/dist_begin.pgb" <<'PGB'
\set id random(1, 10000)
\set j random(1, 1000)
BEGIN;
SELECT token AS tok FROM bench_tokens WHERE j = :j \gset
SELECT fence_begin('bj_' || :j, :tok);
UPDATE dist SET v = v + 1 WHERE id = :id;
COMMIT;
PGB
cp "$SRC/bench/scripts/claim_raw.pgb" "$SRC/bench/scripts/claim_fence.pgb" "$W/"
chown postgres:postgres "$W"/*.pgb

# run VARIANT SCRIPT CLIENTS: one pgbench run; prints its tps
run()
{
	local tps
	tps=$(as_pg pgbench -h "$W" -p "${PORTS[0]}" -n -M prepared -c "$3" -j "$3" -T "$SECS" \
		-D njobs=$NJOBS -f "$W/$2" postgres 2>"$W/pgbench.err" |
		sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
	[ -n "$tps" ] || { cat "$W/pgbench.err" >&2; tps=0; }
	echo "$tps"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "bench/citus.sh: $("$PG_CONFIG" --version), Citus $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'citus'"), fence $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'")"
echo "one coordinator and two workers, unix sockets, fsync/full_page_writes/synchronous_commit/autovacuum on; $ROUNDS rounds of $SECS s per variant, interleaved"
declare -A TPS
for r in $(seq 1 "$ROUNDS"); do
	for v in raw_update fence_claim dist dist_begin; do
		case $v in
		raw_update) t=$(run $v claim_raw.pgb 1) ;;
		fence_claim) t=$(run $v claim_fence.pgb 1) ;;
		dist) t=$(run $v dist.pgb "$CLIENTS") ;;
		dist_begin) t=$(run $v dist_begin.pgb "$CLIENTS") ;;
		esac
		TPS[$v]="${TPS[$v]:-} $t"
		printf 'round %d  %-12s %10s tps\n' "$r" "$v" "$t"
	done
done
echo
printf '%-58s %12s %12s %7s\n' "pair (through the coordinator)" "baseline" "fence" "ratio"
pair()
{
	local label=$1 base fence
	# shellcheck disable=SC2086
	base=$(median ${TPS[$2]})
	# shellcheck disable=SC2086
	fence=$(median ${TPS[$3]})
	printf '%-58s %12.1f %12.1f %7.3f\n' "$label" "$base" "$fence" "$(awk -v a="$fence" -v b="$base" 'BEGIN {print (b > 0) ? a / b : 0}')"
}
pair "claim: fence_claim vs the seed's raw UPDATE (1 client)" raw_update fence_claim
pair "shard UPDATE with fence_begin vs without ($CLIENTS clients)" dist dist_begin
