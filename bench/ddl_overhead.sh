#!/usr/bin/env bash
# bench/ddl_overhead.sh: what fence's event triggers cost DDL on tables that
# fence does not protect ("DDL on unprotected tables must not be
# refused or measurably slowed").
#
#   sudo bash bench/ddl_overhead.sh              full run, 6-8 minutes on 2 cores
#   sudo bash bench/ddl_overhead.sh --quick      smoke: under a minute, no timing claims
#   sudo bash bench/ddl_overhead.sh --rounds 9   more rounds (default 6)
#
# What it does:
#   1. copies the source tree (the working tree, committed or not, of the
#      repository holding this script, or --src DIR) and builds it into its
#      OWN copy of the PostgreSQL installation under test (PG_CONFIG's, by
#      default the host's: /usr/lib/postgresql/N) under the work directory
#      (bin, lib, share and the server headers are copied; the copy's
#      pg_config finds them relative to itself).  The system installation is
#      only read from, never written: "make install" runs with PG_CONFIG
#      pointing at the copy, and its output is checked for paths outside it.
#   2. starts one throwaway cluster from the copy, as the postgres user
#      (setpriv), on a private port in 54390-54399 with its socket in the
#      work directory: fsync, synchronous_commit and full_page_writes off,
#      autovacuum and JIT off, shared_buffers 256MB; server and pgbench at
#      nice -15 (--no-priority to turn it off).
#   3. creates the databases, each with the same unrelated table "orders":
#        without_fence   nothing installed;
#        noop_triggers   a control: PL/pgSQL event triggers that do nothing,
#                        one on each event fence has one on (ddl_command_start,
#                        ddl_command_end, sql_drop, table_rewrite in 1.1):
#                        what PostgreSQL's event trigger machinery costs any
#                        extension that has them (--no-control leaves it out);
#        with_fence      CREATE EXTENSION fence, and "orders" protected with
#                        fence_protect, so that the registry is not empty.
#   4. runs the same pgbench workloads against every database, interleaved:
#      in every round they run back to back, odd rounds in the order above,
#      even rounds reversed, after one discarded warm-up round per workload
#      and client count.  Before every run the database is VACUUMed (the
#      catalogs bloat: every transaction creates and drops tables) and the
#      cluster checkpointed.
#   5. estimates, without a profiler, what one of fence's registry look-ups
#      costs: pgbench runs fence's look-up query (the text fence sends through
#      SPI, for an unprotected table) and "SELECT 1", interleaved, 1 client,
#      simple protocol; the difference in time per transaction is its parse,
#      plan and execution;
#   6. restarts the cluster with pg_stat_statements (track = all) and runs
#      100 transactions of each workload in with_fence, to count the queries
#      fence's event triggers send through SPI per transaction;
#   7. prints markdown tables and writes them, with every raw pgbench output
#      and a TSV of all runs, to --out.
#
# Workloads (pgbench -n -M simple -j 1 -r; a fixed number of transactions per
# run; each at 1 and at 2 clients; every statement autocommits, as psql runs
# a migration file without BEGIN; every client works on tables named after
# its :client_id and a counter it keeps across transactions):
#   table      CREATE TABLE (with a primary key); ALTER TABLE ... ADD COLUMN;
#              ALTER TABLE ... ALTER COLUMN ... TYPE bigint (no USING: a
#              rewrite, allowed); CREATE INDEX; DROP TABLE: 5 DDL statements;
#   partition  CREATE TABLE ... PARTITION BY RANGE; two CREATE TABLE ...
#              PARTITION OF it; ALTER TABLE ... DETACH PARTITION of one;
#              DROP TABLE of the detached one; DROP TABLE of the parent
#              (with its remaining partition): 6 DDL statements.
#
# Overhead per statement, wall: in each round, (1/tps_with - 1/tps_without)
# x clients / statements per transaction, the extra time each client waits
# per statement (at 2 clients on 2 vCPUs it includes waiting for a CPU).
# Server CPU: the growth of the postmaster's reaped-children CPU counters
# (cutime + cstime) across a run, read once the run's backends have exited,
# per DDL statement (as bench/run and claim_versions.sh measure it; in
# clock ticks of 10 ms, so a run needs a few seconds).
#
# Options:
#   --quick         few transactions, one round, no warm-up: proves it works
#   --rounds N      measured rounds per workload and client count (default 6)
#   --no-control    leave out the noop_triggers database
#   --src DIR       the fence source tree to build (default: this script's)
#   --out DIR       results (default /tmp/fence-ddl-out.XXXXXX)
#   --work DIR      installation copy, build and cluster (default
#                   /tmp/fence-ddl.XXXXXX; must be new or empty; removed at
#                   the end unless --keep)
#   --port N        first port to try (default 54390; at most 54399)
#   --keep          leave the cluster running and the work directory
#   --no-priority   do not run server and pgbench at nice -15
#
# Needs only Debian packages (postgresql-N, which brings pg_stat_statements,
# postgresql-server-dev-N, build-essential, python3, procps, N the major
# under test; installed if missing) and root (to copy the installation and
# become postgres).  git is used, when present, only to name the commit the
# tree is at.  Exit status 1 if any run had a failed transaction, an aborted
# client or a server ERROR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=../test/lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=queue_lib.sh
. "$HERE/queue_lib.sh"

SRC=$ROOT ROUNDS=6 OUT="" WORK="" QB_PORT_BASE=54390 QB_KEEP=0 QB_PRIORITY=1 QUICK=0 CONTROL=1
ARGS=("$@")
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--rounds) ROUNDS=$2; shift ;;
	--no-control) CONTROL=0 ;;
	--src) SRC=$2; shift ;;
	--work) WORK=$2; shift ;;
	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
	esac
	shift
done
case $ROUNDS in '' | *[!0-9]* | 0) fence_die "--rounds needs a positive number" ;; esac
qb_prepare "postgresql-server-dev-$FENCE_PG_MAJOR" build-essential python3 procps

SYS_PG_CONFIG=$FENCE_PG_CONFIG
SYS_LIB=$("$SYS_PG_CONFIG" --pkglibdir)
SYS_SHARE=$("$SYS_PG_CONFIG" --sharedir)
SYS_INC=$("$SYS_PG_CONFIG" --includedir) # /usr/include/postgresql

if [ "$QUICK" = 1 ]; then
	ROUNDS=1 NWARM=0 NTABLE=60 NPART=60 NLOOKUP=500 LROUNDS=1
else
	# transactions per run, all clients together: 4-7 s per run on 2 cores
	NWARM=300 NTABLE=1000 NPART=1000 NLOOKUP=20000 LROUNDS=5
fi
CLIENTS="1 2"
WORKLOADS="table partition"
DBS="without_fence noop_triggers with_fence"
[ "$CONTROL" = 1 ] || DBS="without_fence with_fence"
DBS_REV=$(echo "$DBS" | tr ' ' '\n' | tac | tr '\n' ' ')

[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/fence-ddl-out.XXXXXX)
mkdir -p "$OUT/runs" "$OUT/scripts"
if [ -n "$WORK" ]; then
	[ ! -e "$WORK" ] || [ -z "$(ls -A "$WORK")" ] || fence_die "--work $WORK exists and is not empty"
	mkdir -p "$WORK"
else
	WORK=$(mktemp -d /tmp/fence-ddl.XXXXXX)
fi
chmod 755 "$WORK"
RES=$OUT/results.tsv
printf 'workload\tclients\tdb\tround\torder\ttps\tfailed\taborted\tsrv_errors\tcpu_us_tx\tntx\tstmt_ms\n' >"$RES"

T0=$(date +%s)

# ---- build: the source tree into a copy of the installation
PGC=$WORK/pg
mkdir -p "$PGC/usr/lib/postgresql" "$PGC/usr/share/postgresql" "$PGC/usr/include"
cp -a "$(dirname "$SYS_LIB")" "$PGC/usr/lib/postgresql/" # .../N (bin, lib)
cp -a "$SYS_SHARE" "$PGC/usr/share/postgresql/"          # share
cp -a "$SYS_INC" "$PGC/usr/include/"                     # headers, for pgxs
PGCONF=$PGC/usr/lib/postgresql/$FENCE_PG_MAJOR/bin/pg_config
BIN=$PGC/usr/lib/postgresql/$FENCE_PG_MAJOR/bin
[ -x "$PGCONF" ] || fence_die "no $PGCONF: $SYS_PG_CONFIG is not laid out as .../postgresql/$FENCE_PG_MAJOR/bin"
if [ "$("$PGCONF" --pkglibdir)" = "$SYS_LIB" ] || [ "$("$PGCONF" --sharedir)" = "$SYS_SHARE" ]; then
	fence_die "the copy's pg_config points at the system installation"
fi
# whatever fence the system has installed is not this build's
rm -rf "$("$PGCONF" --pkglibdir)"/fence.so "$("$PGCONF" --pkglibdir)"/bitcode/fence* \
	"$("$PGCONF" --sharedir)"/extension/fence[-.]*
fence_copy_tree "$SRC" "$WORK/src" || fence_die "could not copy $SRC"
# what was built: the commit, and a hash of the copied sources (uncommitted
# changes included)
REV=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo "-")
DIRTY=$(git -C "$SRC" status --porcelain 2>/dev/null | grep -c . || true)
SRC_HASH=$(cd "$WORK/src" && find . -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.sql' \
	-o -name '*.control' -o -name Makefile \) -print0 | sort -z | xargs -0 cat | md5sum | cut -c1-12)
qb_say "building fence from $SRC (HEAD $REV, $DIRTY uncommitted path(s), sources md5 $SRC_HASH) into $PGC"
make -C "$WORK/src" -j2 USE_PGXS=1 PG_CONFIG="$PGCONF" install >"$OUT/build.log" 2>&1 ||
	{ tail -n 20 "$OUT/build.log" >&2; fence_die "build failed"; }
if grep -E '(install -c|mkdir -p) ' "$OUT/build.log" | grep -v "'$PGC/"; then
	fence_die "make install wrote outside $PGC (see $OUT/build.log)"
fi
SO_MD5=$(md5sum <"$("$PGCONF" --pkglibdir)/fence.so" | cut -c1-12)
VER=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$WORK/src/fence.control")

# ---- the cluster
NICE=()
[ "$QB_PRIORITY" = 1 ] && [ "$QUICK" = 0 ] && NICE=(nice -n -15)
export FENCE_PG_BIN=$BIN # for test/lib.sh's fence_as_pg
CL=""
cleanup()
{
	if [ -n "$CL" ]; then
		if [ "$QB_KEEP" = 1 ]; then
			echo "cluster kept: $CL (port $PORT)" >&2
		else
			fence_cluster_stop "$CL" fast
		fi
	fi
	[ "$QB_KEEP" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(fence_free_port "$QB_PORT_BASE")
[ "$PORT" -le 54399 ] || fence_die "no free port in $QB_PORT_BASE-54399"
d=$(TMPDIR=$WORK fence_mktemp_pg cluster)
fence_cluster_init "$d" "$PORT" "$(
	cat <<EOF
# bench/ddl_overhead.sh: one cluster, all databases
$(qb_conf 256MB)
autovacuum = off
max_connections = 20
EOF
)" || fence_die "initdb failed"
start_cluster()
{
	(cd "$CL" && "${NICE[@]}" setpriv --reuid=postgres --regid=postgres --init-groups \
		env HOME="$FENCE_PG_HOME" "$BIN/pg_ctl" -D "$CL/data" -l "$CL/server.log" -w -t 60 start \
		>/dev/null) || { tail -n 30 "$CL/server.log" >&2; fence_die "the cluster did not start"; }
	PMPID=$(head -n 1 "$CL/data/postmaster.pid")
}
CL=$d
start_cluster

q()
{
	local db=$1
	shift
	"$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$CL/sock" -p "$PORT" -U postgres -d "$db" "$@"
}
for db in $DBS; do
	"$BIN/createdb" -h "$CL/sock" -p "$PORT" -U postgres "$db"
	q "$db" <<'EOF'
-- the same unrelated table in every database; protected where fence is
CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL DEFAULT 0,
                     writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO orders (id) SELECT g FROM generate_series(1, 1000) g;
EOF
done
q with_fence <<'EOF'
SET client_min_messages = warning;
CREATE EXTENSION fence;
SELECT fence_protect('orders');
EOF
if [ "$CONTROL" = 1 ]; then
	# one no-op trigger on each event fence has a trigger on
	q noop_triggers -c "CREATE FUNCTION noop_event_trigger() RETURNS event_trigger
		LANGUAGE plpgsql AS \$\$BEGIN END\$\$"
	for ev in $(q with_fence -c "SELECT DISTINCT evtevent FROM pg_event_trigger WHERE evtenabled <> 'D'"); do
		q noop_triggers -c "CREATE EVENT TRIGGER noop_$ev ON $ev EXECUTE FUNCTION noop_event_trigger()"
	done
fi
got=$(q with_fence -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'")
[ "$got" = "$VER" ] || fence_die "with_fence runs fence $got, not $VER"
[ "$(q with_fence -c 'SELECT count(*) FROM fence_protected')" = 1 ] || fence_die "orders is not protected"
ETS=$(q with_fence -c "SELECT string_agg(evtevent, ', ' ORDER BY evtevent) FROM pg_event_trigger WHERE evtenabled <> 'D'")
[ -n "$ETS" ] || fence_die "with_fence has no enabled event triggers"
[ "$(q without_fence -c 'SELECT count(*) FROM pg_event_trigger')" = 0 ] ||
	fence_die "without_fence has event triggers"
qb_say "cluster: fence $got (fence.so md5 $SO_MD5; event triggers on $ETS), port $PORT, $CL"

# ---- pgbench scripts
# :n counts per client across transactions (pgbench keeps a client's
# variables); -D n0=... starts each run elsewhere, so no name is ever reused.
# A variable ends a name (pgbench would read :t_b as the variable t_b).
cat >"$OUT/scripts/table.pgb" <<'EOF'
-- CREATE / ALTER / DROP of one ordinary table: 5 DDL statements
\set n :n + 1
\set t :n0 + :client_id * 1000000 + :n
CREATE TABLE ddl_:t (id int PRIMARY KEY, a int, b text);
ALTER TABLE ddl_:t ADD COLUMN c int DEFAULT 0;
ALTER TABLE ddl_:t ALTER COLUMN a TYPE bigint;
CREATE INDEX ddl_b_:t ON ddl_:t (b);
DROP TABLE ddl_:t;
EOF
cat >"$OUT/scripts/partition.pgb" <<'EOF'
-- a partitioned table, two partitions, DETACH and DROP: 6 DDL statements
\set n :n + 1
\set t :n0 + :client_id * 1000000 + :n
CREATE TABLE pt_:t (id int NOT NULL, k int NOT NULL, v text) PARTITION BY RANGE (k);
CREATE TABLE pt1_:t PARTITION OF pt_:t FOR VALUES FROM (0) TO (100);
CREATE TABLE pt2_:t PARTITION OF pt_:t FOR VALUES FROM (100) TO (200);
ALTER TABLE pt_:t DETACH PARTITION pt1_:t;
DROP TABLE pt1_:t;
DROP TABLE pt_:t;
EOF

# Server CPU: the postmaster's cutime + cstime grow by the CPU time of each
# backend it reaps; wait until no backend of the databases is left, so that
# the reading holds every backend of the run just ended and none of the next.
backends_gone()
{
	for _ in $(seq 1 500); do
		pgrep -P "$PMPID" -f " (with_fence|without_fence|noop_triggers) " >/dev/null || return 0
		sleep 0.01
	done
}
CLK_TCK=$(getconf CLK_TCK)

FAILED_RUNS=0
N0=0
# run_one WORKLOAD CLIENTS DB ROUND ORDER NTX
run_one()
{
	local w=$1 c=$2 db=$3 r=$4 ord=$5 n=$6
	local out=$OUT/runs/$w.c$c.$db.r$r.out rc=0 e0 e1 cpu0 cpu1
	local slog=$CL/server.log
	N0=$((N0 + 10000000))
	q "$db" -c "VACUUM" -c "CHECKPOINT"
	e0=$(grep -c 'ERROR:' "$slog" || true)
	backends_gone
	cpu0=$(qb_cpu_ticks "$PMPID")
	(cd "$OUT/runs" && "${NICE[@]}" "$BIN/pgbench" -h "$CL/sock" -p "$PORT" -U postgres \
		-n -M simple -r -c "$c" -j 1 -t $((n / c)) -D n=0 -D n0="$N0" \
		-f "$OUT/scripts/$w.pgb" "$db") >"$out" 2>&1 || rc=$?
	backends_gone
	cpu1=$(qb_cpu_ticks "$PMPID")
	e1=$(grep -c 'ERROR:' "$slog" || true)
	local cpu_tx="" stmt
	qb_pgbench_counts "$out"
	local tps=$QB_TPS ntx=$QB_NTX failed=$QB_FAILED aborted=$QB_ABORTED
	# pgbench -r: the mean latency (ms) of each SQL statement, in script order
	stmt=$(awk '/^statement latencies/ { on = 1; next }
		on && $1 ~ /^[0-9.]+$/ && $0 !~ /\\set/ { s = s (s == "" ? "" : ",") $1 }
		END { print s }' "$out")
	if [ "$rc" != 0 ] || [ "$failed" != 0 ] || [ "$aborted" != 0 ] || [ $((e1 - e0)) != 0 ]; then
		FAILED_RUNS=$((FAILED_RUNS + 1))
		qb_say "ERRORS in $w/c$c/$db round $r (rc=$rc failed=$failed aborted=$aborted server errors=$((e1 - e0))): $out"
		grep -m3 -i 'error' "$out" >&2 || true
		grep 'ERROR:' "$slog" | tail -n 3 >&2 || true
	fi
	[ "$ntx" -gt 0 ] && cpu_tx=$(((cpu1 - cpu0) * 1000000 / CLK_TCK / ntx))
	[ "$r" = 0 ] ||
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$c" "$db" "$r" "$ord" \
			"$tps" "$failed" "$aborted" "$((e1 - e0))" "$cpu_tx" "$ntx" "$stmt" >>"$RES"
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
D0=$(date -u '+%Y-%m-%d %H:%M UTC')
TRUN0=$(date +%s)
for w in $WORKLOADS; do
	for c in $CLIENTS; do
		n=$NTABLE
		[ "$w" = partition ] && n=$NPART
		qb_say "$w, $c client(s), $n transactions per run, $([ "$NWARM" -gt 0 ] && echo "warm-up + ")$ROUNDS round(s)"
		first=1
		[ "$NWARM" -gt 0 ] && first=0
		for r in $(seq "$first" "$ROUNDS"); do
			nn=$n
			[ "$r" = 0 ] && nn=$NWARM
			order=$DBS
			[ $((r % 2)) = 0 ] && order=$DBS_REV
			i=0
			for db in $order; do
				i=$((i + 1))
				run_one "$w" "$c" "$db" "$r" "$i" "$nn"
			done
		done
	done
done
TRUN=$(($(date +%s) - TRUN0))

# nothing of the benchmark may be left behind, and the registry is unchanged
for db in $DBS; do
	left=$(q "$db" -c "SELECT count(*) FROM pg_class WHERE relname ~ '^(ddl|pt[12]?)_'")
	[ "$left" = 0 ] || qb_say "WARNING: $left benchmark relation(s) left in $db"
done
[ "$(q with_fence -c 'SELECT count(*) FROM fence_protected')" = 1 ] ||
	qb_say "WARNING: fence_protected changed during the runs"

# ---- what one registry look-up costs (step 5)
UNPROT=$(q with_fence -c "CREATE TABLE unprotected_probe (id int)" -c "SELECT 'unprotected_probe'::regclass::oid")
cat >"$OUT/scripts/lookup.pgb" <<EOF
-- the query fence_registry_lookup() sends through SPI, for an unprotected table
SELECT epoch_column::pg_catalog.text, mode FROM public.fence_protected WHERE relation OPERATOR(pg_catalog.=) '$UNPROT'::pg_catalog.text::pg_catalog.oid::pg_catalog.regclass;
EOF
cat >"$OUT/scripts/select1.pgb" <<'EOF'
SELECT 1;
EOF
LRES=$OUT/lookup.tsv
printf 'round\tscript\ttps\n' >"$LRES"
qb_say "registry look-up estimate: $LROUNDS round(s) of $NLOOKUP transactions"
for r in $(seq 1 "$LROUNDS"); do
	order="select1 lookup"
	[ $((r % 2)) = 0 ] && order="lookup select1"
	for s in $order; do
		out=$OUT/runs/lookup.$s.r$r.out
		(cd "$OUT/runs" && "${NICE[@]}" "$BIN/pgbench" -h "$CL/sock" -p "$PORT" -U postgres \
			-n -M simple -c 1 -j 1 -t "$NLOOKUP" -f "$OUT/scripts/$s.pgb" with_fence) >"$out" 2>&1 ||
			{ FAILED_RUNS=$((FAILED_RUNS + 1)); qb_say "ERRORS in $out"; }
		printf '%s\t%s\t%s\n' "$r" "$s" "$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$out")" >>"$LRES"
	done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- fence's SPI queries per transaction (step 6)
qb_say "counting fence's SPI queries (pg_stat_statements, track = all)"
fence_cluster_stop "$CL" fast
cat >>"$CL/data/postgresql.conf" <<'EOF'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
EOF
start_cluster
q with_fence -c "CREATE EXTENSION pg_stat_statements"
SPI=$OUT/spi_queries.tsv
printf 'workload\tcalls_per_tx\tmean_exec_us\tquery\n' >"$SPI"
for w in $WORKLOADS; do
	q with_fence -c "SELECT pg_stat_statements_reset()" >/dev/null
	out=$OUT/runs/$w.count.out
	(cd "$OUT/runs" && "$BIN/pgbench" -h "$CL/sock" -p "$PORT" -U postgres -n -M simple -c 1 -j 1 \
		-t 100 -D n=0 -D n0=$((N0 + 10000000)) -f "$OUT/scripts/$w.pgb" with_fence) >"$out" 2>&1 ||
		{ FAILED_RUNS=$((FAILED_RUNS + 1)); qb_say "ERRORS in $out"; }
	q with_fence -F $'\t' -c "SELECT '$w', round(calls / 100.0, 2), round(mean_exec_time::numeric * 1000, 1),
		regexp_replace(query, '\s+', ' ', 'g') FROM pg_stat_statements
		WHERE NOT toplevel ORDER BY calls DESC, query" >>"$SPI"
done

cat >"$OUT/meta.txt" <<EOF
date: $D0; mode: $([ "$QUICK" = 1 ] && echo quick || echo full); rounds: $ROUNDS measured + $([ "$NWARM" -gt 0 ] && echo 1 || echo 0) warm-up per workload and client count
fence $VER built from $SRC (HEAD $REV, $DIRTY uncommitted path(s), sources md5 $SRC_HASH), fence.so md5 $SO_MD5
databases: $DBS; fence's event triggers: $ETS
machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)
server: $("$BIN/postgres" --version); priority: $([ ${#NICE[@]} -gt 0 ] && echo "nice -n -15" || echo default)
load average (1, 5, 15 min) at start: $LOAD0; at end: $LOAD1
transactions per run (all clients): table $NTABLE, partition $NPART; look-up estimate $NLOOKUP x $LROUNDS rounds; pgbench -n -M simple -j 1 -r
DDL runs: ${TRUN} s; whole script: $(($(date +%s) - T0)) s; failed runs: $FAILED_RUNS
installed into: $PGC only (checked in make install's output)
EOF

python3 - "$RES" "$OUT/meta.txt" "$OUT/scripts" "$LRES" "$SPI" <<'EOF' >"$OUT/report.md"
import csv, os, statistics, sys
res, meta, scripts, lres, spi = sys.argv[1:]
rows = list(csv.DictReader(open(res), delimiter="\t"))
med = lambda v: statistics.median(v) if v else float("nan")
def f(x, d=0):
    return "-" if x != x else f"{x:,.{d}f}"
def rng(v, d=2):
    v = sorted(v)
    return f"{med(v):.{d}f} ({v[0]:.{d}f} to {v[-1]:.{d}f})" if v else "-"
nstmt = {"table": 5, "partition": 6}
names = {"table": "table", "partition": "partition"}
WO, NO, WI = "without_fence", "noop_triggers", "with_fence"
dbs = [d for d in (WO, NO, WI) if any(r["db"] == d for r in rows)]
print(open(meta).read())

def paired(by, a, b, fn):
    return [fn(by[a][i], by[b][i]) for i in sorted(by[a]) if i in by[b]]

wall = lambda c, k: (lambda x, y: (1 / float(x["tps"]) - 1 / float(y["tps"])) * 1e6 * int(c) / k)
cpud = lambda k: (lambda x, y: (float(x["cpu_us_tx"]) - float(y["cpu_us_tx"])) / k)
groups = []
for w in ["table", "partition"]:
    for c in ["1", "2"]:
        sel = [r for r in rows if r["workload"] == w and r["clients"] == c and float(r["tps"] or 0) > 0
               and r["cpu_us_tx"]]
        if sel:
            groups.append((w, c, nstmt[w], sel,
                           {d: {int(r["round"]): r for r in sel if r["db"] == d} for d in dbs}))

print("Throughput, fence against no fence:")
print()
print("| workload | clients | tps without fence | tps with fence | with/without, ratio of medians "
      "| with/without per round, median (min to max) | extra wall time per DDL statement, us, per round "
      "| server CPU per DDL statement, us, without -> with | extra server CPU per DDL statement, us, per round | errors |")
print("|---|---|---|---|---|---|---|---|---|---|")
for w, c, k, sel, by in groups:
    tps = {d: med([float(r["tps"]) for r in by[d].values()]) for d in dbs}
    cpu = {d: med([float(r["cpu_us_tx"]) / k for r in by[d].values()]) for d in dbs}
    ratio = paired(by, WI, WO, lambda x, y: float(x["tps"]) / float(y["tps"]))
    errs = sum(int(r["failed"]) + int(r["aborted"]) + int(r["srv_errors"]) for r in sel)
    print(f"| {names[w]} | {c} | {f(tps[WO])} | {f(tps[WI])} | {tps[WI] / tps[WO]:.2f} | {rng(ratio)} "
          f"| {rng(paired(by, WI, WO, wall(c, k)), 0)} | {f(cpu[WO])} -> {f(cpu[WI])} "
          f"| {rng(paired(by, WI, WO, cpud(k)), 0)} | {errs} |")
print()
print("tps: pgbench transactions per second; a transaction is the workload's 5 or 6 DDL statements, "
      "each its own transaction. Per round: the paired difference (or ratio) within each round, "
      "median (min to max). Extra wall time: (1/tps_with - 1/tps_without) x clients / statements. "
      "Server CPU: all backends of a run, per DDL statement.")
if NO in dbs:
    print()
    print("Where it goes: PostgreSQL's event trigger machinery (no-op PL/pgSQL event triggers on the same "
          "events as fence's) against fence's own functions; server CPU per DDL statement, us, per-round "
          "median (min to max):")
    print()
    print("| workload | clients | tps without / no-op triggers / fence | CPU us without / no-op / fence "
          "| no-op - without (machinery) | fence - no-op (fence's functions) | fence - without (total) |")
    print("|---|---|---|---|---|---|---|")
    for w, c, k, sel, by in groups:
        tps = {d: med([float(r["tps"]) for r in by[d].values()]) for d in dbs}
        cpu = {d: med([float(r["cpu_us_tx"]) / k for r in by[d].values()]) for d in dbs}
        print(f"| {names[w]} | {c} | {f(tps[WO])} / {f(tps[NO])} / {f(tps[WI])} "
              f"| {f(cpu[WO])} / {f(cpu[NO])} / {f(cpu[WI])} "
              f"| {rng(paired(by, NO, WO, cpud(k)), 0)} | {rng(paired(by, WI, NO, cpud(k)), 0)} "
              f"| {rng(paired(by, WI, WO, cpud(k)), 0)} |")

print()
print("Per statement: pgbench -r mean latency, us, median over rounds; difference with - without "
      "within each round, median (min to max):")
print()
print("| workload | clients | statement | " + " | ".join(dbs) + " | with - without |")
print("|---|---|---|" + "---|" * len(dbs) + "---|")
for w, c, k, sel, by in groups:
    stmts = [l.strip() for l in open(os.path.join(scripts, w + ".pgb"))
             if l.strip() and not l.startswith(("--", "\\"))]
    lat = {d: {i: [float(x) * 1000 for x in r["stmt_ms"].split(",")] for i, r in by[d].items()
               if r["stmt_ms"] and len(r["stmt_ms"].split(",")) == len(stmts)} for d in dbs}
    for j, s in enumerate(stmts):
        cols = " | ".join(f(med([v[j] for v in lat[d].values()])) for d in dbs)
        dd = [lat[WI][i][j] - lat[WO][i][j] for i in lat[WI] if i in lat[WO]]
        print(f"| {names[w]} | {c} | `{s.rstrip(';')}` | {cols} | {rng(dd, 0)} |")

lk = list(csv.DictReader(open(lres), delimiter="\t"))
byr = {}
for r in lk:
    if r["tps"]:
        byr.setdefault(r["round"], {})[r["script"]] = float(r["tps"])
d = [(1 / v["lookup"] - 1 / v["select1"]) * 1e6 for v in byr.values() if len(v) == 2]
sq = list(csv.DictReader(open(spi), delimiter="\t"))
print()
print("fence's queries through SPI per transaction (pg_stat_statements, track = all, 100 transactions "
      "in with_fence; mean execution time only, planning not tracked):")
print()
print("| workload | calls per transaction | mean execution, us | query |")
print("|---|---|---|---|")
for r in sq:
    print(f"| {r['workload']} | {r['calls_per_tx']} | {r['mean_exec_us']} | `{r['query'][:100]}...` |")
print()
lookup_us = med(d)
print(f"Registry look-up estimate: fence's look-up query run as a statement costs {rng(d, 1)} us more than "
      f"SELECT 1 (per round, median (min to max); parse, analyze, plan, execute, as SPI_execute_with_args "
      f"does on every call; the SPI connection and the role switch are not in it).")
for w in ["table", "partition"]:
    n = sum(float(r["calls_per_tx"]) for r in sq if r["workload"] == w)
    if n:
        print(f"- {w}: {n:g} SPI queries per transaction x {lookup_us:.0f} us = about "
              f"{n * lookup_us:.0f} us per transaction, {n * lookup_us / nstmt[w]:.0f} us per DDL statement "
              f"(a floor: the queries on pg_event_trigger_ddl_commands() and "
              f"pg_event_trigger_dropped_objects() cost more than a look-up).")
EOF
cat "$OUT/report.md"
qb_say "results in $OUT"
[ "$FAILED_RUNS" = 0 ] || { qb_say "$FAILED_RUNS run(s) had errors"; exit 1; }
