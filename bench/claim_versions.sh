#!/usr/bin/env bash
# bench/claim_versions.sh: fence_claim throughput of two fence commits, side
# by side, in one time window.
#
#   sudo bash bench/claim_versions.sh                  9959406 (1.0) vs HEAD
#   sudo bash bench/claim_versions.sh --old X --new Y  any two commits
#   sudo bash bench/claim_versions.sh --quick          smoke: seconds, no timing claims
#   sudo bash bench/claim_versions.sh --cpu-only       the CPU-only settings (below)
#
# What it does:
#   1. exports each commit from git (git archive: committed files only, the
#      working tree is not used) and builds it into its OWN copy of the
#      PostgreSQL installation under test (PG_CONFIG's, by default the
#      host's: /usr/lib/postgresql/N) under the work directory (bin, lib,
#      share and the server headers are copied; the copy's pg_config finds
#      them relative to itself).  The system installation is only read from,
#      never written: "make install" runs with PG_CONFIG pointing at a copy.
#   2. starts one throwaway cluster per build, both at once, as the postgres
#      user (setpriv), on private ports 54380-54389 with sockets in the work
#      directory; the same settings for both (below), server and pgbench
#      at nice -15 (--no-priority to turn it off);
#   3. runs the same pgbench workloads against each, interleaved: in every
#      round old and new run back to back with the same --random-seed
#      (odd rounds old first, even rounds new first, so that neither build
#      always runs second), one discarded warm-up round per workload first;
#   4. prints a markdown table (medians, ratio new/old with the per-round
#      range, server CPU per transaction), headed by the settings (read
#      from the servers) and whether a VACUUM ran between runs, and writes
#      it, with every raw pgbench output and a TSV of all runs, to --out.
#
# Settings, for both builds alike.  By default, a production server's
# durability: fsync, full_page_writes and autovacuum at PostgreSQL's
# defaults (on), and no VACUUM between runs (fence_claims is VACUUM
# ANALYZEd once after loading, before the first run): dead row versions,
# autovacuum and the WAL writer's flushes and full-page images land in the
# runs as they would in production.  Both clusters run at once, so one's
# autovacuum may run during the other's run; the alternating order gives
# each build that share alike.  Kept for repeatability: synchronous_commit
# off (from test/lib.sh's cluster: a commit does not wait for its flush),
# shared_buffers 256MB, checkpoint_timeout 1h and max_wal_size 20GB (no
# checkpoint inside a run), JIT off.  --cpu-only: the CPU-only settings
# earlier versions of this script always used (the results in
# doc/benchmarks.md were measured so): fsync, full_page_writes and
# autovacuum off, and a VACUUM of fence_claims before every run.
#
# Workloads (pgbench -M prepared -j 1, a fixed number of transactions per
# run; every one at 1 and at 8 clients):
#   expiry   one fence_claim per transaction of a random job among 10,000,
#            all claimed beforehand with a 1 ms lease: every attempt is a
#            TAKEOVER of an expired lease (bench/scripts/claim_fence.pgb,
#            the same shape bench/run's claims section measures);
#   release  each client claims its own job and releases it right away (two
#            statements, two transactions): every claim is a TAKEOVER of a
#            released claim, and every release an UPDATE of the claim row;
#   first    fence_claim of a job never seen before: the first-claim path
#            (an INSERT), for contrast.
#
# Server CPU per transaction: the growth of the postmaster's reaped-children
# CPU counters (cutime + cstime) across a run, read once the run's backends
# have exited, divided by the transactions (as bench/run does).
#
# Options:
#   --old COMMIT / --new COMMIT   what to compare (default 9959406 / HEAD)
#   --repo DIR      the git repository (default: the one holding this script)
#   --rounds N      measured rounds per workload and client count (default 7)
#   --out DIR       results (default /tmp/fence-claimv-out.XXXXXX)
#   --keep          leave the clusters running and the work directory
#   --no-priority   do not run server and pgbench at nice -15
#   --quick         few transactions, one round: proves the script works
#   --cpu-only      fsync, full_page_writes and autovacuum off, a VACUUM
#                   before every run (default: production settings, above)
#
# Needs only Debian packages (postgresql-N, postgresql-server-dev-N, N the
# major under test, build-essential, git, python3, procps; installed if
# missing) and root (to copy the installation and become postgres).  A full
# run takes 3.5-4 minutes on 2 cores (builds and cluster setup: about 10 s
# of it).  The raw TSV is results.tsv; results from several runs can be
# pooled, since every round is a paired comparison.  Exit status 1 if any
# run had a failed transaction, an aborted client or a server-side ERROR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=../test/lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=queue_lib.sh
. "$HERE/queue_lib.sh"

OLD=9959406 NEW=HEAD REPO=$ROOT ROUNDS=7 OUT="" QB_KEEP=0 QB_PRIORITY=1 QUICK=0 CPU_ONLY=0
unset QB_PORT_BASE # no --port: the clusters' ports are 54380-54389
ARGS=("$@")
while [ $# -gt 0 ]; do
	case $1 in
	--old) OLD=$2; shift ;;
	--new) NEW=$2; shift ;;
	--repo) REPO=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--quick) QUICK=1 ;;
	--cpu-only) CPU_ONLY=1 ;;
	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
	esac
	shift
done
qb_prepare "postgresql-server-dev-$FENCE_PG_MAJOR" build-essential git python3 procps

SYS_PG_CONFIG=$FENCE_PG_CONFIG
SYS_LIB=$("$SYS_PG_CONFIG" --pkglibdir)
SYS_SHARE=$("$SYS_PG_CONFIG" --sharedir)
SYS_INC=$("$SYS_PG_CONFIG" --includedir) # /usr/include/postgresql

if [ "$QUICK" = 1 ]; then
	ROUNDS=1 NJOBS=1000 N1=400 N8=800 NWARM=0
else
	# transactions per run, all clients together: ~2-3 s per run on 2 cores
	NJOBS=10000 N1=40000 N8=60000 NWARM=4000
fi
DB=claimv
if [ "$CPU_ONLY" = 1 ]; then
	MODE="CPU-only (--cpu-only)" VAC="yes, a VACUUM of fence_claims before every run"
else
	MODE="production durability (the default)" VAC="no (VACUUM ANALYZE once after loading, before the first run)"
fi

[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/fence-claimv-out.XXXXXX)
mkdir -p "$OUT/runs" "$OUT/scripts"
WORK=$(mktemp -d /tmp/fence-claimv.XXXXXX)
chmod 755 "$WORK"
RES=$OUT/results.tsv
printf 'workload\tclients\tbuild\tround\torder\ttps\tfailed\taborted\tsrv_errors\tcpu_us_tx\twon\tntx\n' >"$RES"

T0=$(date +%s)

# ---- builds: one copy of the installation per commit
declare -A COMMIT BIN CL PORT PMPID SO_MD5 VER # VER: from each commit's fence.control
build()
{
	local key=$1 rev=$2 sha ver src pgc
	sha=$(git -C "$REPO" rev-parse --verify "$rev^{commit}") || fence_die "no commit $rev in $REPO"
	ver=$(git -C "$REPO" show "$sha:fence.control" | sed -n "s/^default_version = '\(.*\)'/\1/p")
	src=$WORK/src-$key pgc=$WORK/pgc-$key
	mkdir -p "$src" "$pgc/usr/lib/postgresql" "$pgc/usr/share/postgresql" "$pgc/usr/include"
	git -C "$REPO" archive "$sha" | tar -x -C "$src"
	cp -a "$(dirname "$SYS_LIB")" "$pgc/usr/lib/postgresql/"        # .../N (bin, lib)
	cp -a "$SYS_SHARE" "$pgc/usr/share/postgresql/"                 # share
	cp -a "$SYS_INC" "$pgc/usr/include/"                            # headers, for pgxs
	local pgconf=$pgc/usr/lib/postgresql/$FENCE_PG_MAJOR/bin/pg_config
	[ -x "$pgconf" ] || fence_die "no $pgconf: $SYS_PG_CONFIG is not laid out as .../postgresql/$FENCE_PG_MAJOR/bin"
	# never install into the system's directories
	if [ "$("$pgconf" --pkglibdir)" = "$SYS_LIB" ] || [ "$("$pgconf" --sharedir)" = "$SYS_SHARE" ]; then
		fence_die "the copy's pg_config points at the system installation"
	fi
	# whatever fence the system has installed is not this build's
	rm -rf "$("$pgconf" --pkglibdir)"/fence.so "$("$pgconf" --pkglibdir)"/bitcode/fence* \
		"$("$pgconf" --sharedir)"/extension/fence[-.]*
	qb_say "building $rev ($sha, fence $ver) into $pgc"
	make -C "$src" -j2 USE_PGXS=1 PG_CONFIG="$pgconf" install >"$OUT/build-$key.log" 2>&1 ||
		{ tail -n 20 "$OUT/build-$key.log" >&2; fence_die "build of $rev failed"; }
	# every directory and file make install wrote lies inside the copy
	if grep -E '(install -c|mkdir -p) ' "$OUT/build-$key.log" | grep -v "'$pgc/"; then
		fence_die "make install wrote outside $pgc (see $OUT/build-$key.log)"
	fi
	COMMIT[$key]=$sha BIN[$key]=$pgc/usr/lib/postgresql/$FENCE_PG_MAJOR/bin
	SO_MD5[$key]=$(md5sum <"$("$pgconf" --pkglibdir)/fence.so" | cut -c1-12)
	VER[$key]=$ver
}
build old "$OLD"
build new "$NEW"
VER_old=${VER[old]} VER_new=${VER[new]}

# ---- clusters, one per build, both running
NICE=()
[ "$QB_PRIORITY" = 1 ] && [ "$QUICK" = 0 ] && NICE=(nice -n -15)
cleanup()
{
	local k
	for k in old new; do
		[ -n "${CL[$k]:-}" ] || continue
		if [ "$QB_KEEP" = 1 ]; then
			echo "cluster kept: ${CL[$k]} (port ${PORT[$k]})" >&2
		else
			FENCE_PG_BIN=${BIN[$k]} fence_cluster_stop "${CL[$k]}" fast
		fi
	done
	[ "$QB_KEEP" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

next_port=54380
for k in old new; do
	export FENCE_PG_BIN=${BIN[$k]} # for test/lib.sh's fence_as_pg
	p=$(fence_free_port "$next_port")
	[ "$p" -le 54389 ] || fence_die "no free port in 54380-54389"
	next_port=$((p + 1))
	d=$(TMPDIR=$WORK fence_mktemp_pg "cluster-$k")
	fence_cluster_init "$d" "$p" "$(
		cat <<EOF
# bench/claim_versions.sh: the same settings for both builds
# (test/lib.sh writes fsync and full_page_writes off above: the last wins)
$(qb_durability "$CPU_ONLY")
$(qb_conf 256MB)
max_connections = 50
EOF
	)" || fence_die "initdb failed"
	(cd "$d" && "${NICE[@]}" setpriv --reuid=postgres --regid=postgres --init-groups \
		env HOME="$FENCE_PG_HOME" "${BIN[$k]}/pg_ctl" -D "$d/data" -l "$d/server.log" -w -t 60 start \
		>/dev/null) || { tail -n 30 "$d/server.log" >&2; fence_die "cluster $k did not start"; }
	CL[$k]=$d PORT[$k]=$p PMPID[$k]=$(head -n 1 "$d/data/postmaster.pid")
done

q()
{
	local k=$1
	shift
	"${BIN[$k]}/psql" -X -q -At -v ON_ERROR_STOP=1 -h "${CL[$k]}/sock" -p "${PORT[$k]}" -U postgres -d "$DB" "$@"
}
for k in old new; do
	"${BIN[$k]}/createdb" -h "${CL[$k]}/sock" -p "${PORT[$k]}" -U postgres "$DB"
	# expiry: every job claimed once with a 1 ms lease, in batches of 1000
	# (one claim holds locks until its transaction ends);
	# release: one job per client, claimed and released.
	q "$k" >/dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION fence;
$(for b in $(seq 0 1000 $((NJOBS - 1))); do
		echo "SELECT count(fence_claim('cj_' || g, interval '1 millisecond', 'bench')) FROM generate_series($((b + 1)), $((b + 1000))) g;"
	done)
SELECT count(fence_release('rj_' || c, fence_claim('rj_' || c, interval '1 minute', 'bench')))
  FROM generate_series(0, 63) c;
VACUUM ANALYZE fence_claims;
CHECKPOINT;
EOF
	got=$(q "$k" -c "SELECT extversion FROM pg_extension WHERE extname = 'fence'")
	[ "$got" = "${VER[$k]}" ] || fence_die "cluster $k runs fence $got, not ${VER[$k]}"
	qb_say "cluster $k: fence $got (fence.so md5 ${SO_MD5[$k]}), port ${PORT[$k]}, ${CL[$k]}"
done

# ---- pgbench scripts
cp "$HERE/scripts/claim_fence.pgb" "$OUT/scripts/expiry.pgb"
cat >"$OUT/scripts/release.pgb" <<'EOF'
-- each client claims its own job and releases it at once: every claim is a
-- takeover of a released claim (two statements, two transactions)
SELECT fence_claim('rj_' || :client_id::text, interval '1 minute') AS tok \gset
SELECT fence_release('rj_' || :client_id::text, :tok);
EOF
cat >"$OUT/scripts/first.pgb" <<'EOF'
-- the first claim of a job nobody has claimed before (:r is unique per run)
\set j random(1, 1000000000000)
SELECT fence_claim('n' || :r::text || '_' || :client_id::text || '_' || :j::text, interval '1 minute');
EOF

# Server CPU: the postmaster's cutime + cstime grow by the CPU time of each
# backend it reaps; wait (up to 5 s) until no child but the auxiliary
# processes is left (bench/queue_lib.sh's qb_backends_gone), so that the
# reading holds every backend of the run just ended and none of the next.
CLK_TCK=$(getconf CLK_TCK)
tokens_issued() { q "$1" -c "SELECT last_value FROM fence_token_seq"; }

FAILED_RUNS=0
# run_one WORKLOAD CLIENTS KEY ROUND ORDER NTX
run_one()
{
	local w=$1 c=$2 k=$3 r=$4 ord=$5 n=$6
	local out=$OUT/runs/$w.c$c.${VER_old}vs${VER_new}.$k.r$r.out rc=0 e0 e1 cpu0 cpu1 w0 w1
	local slog=${CL[$k]}/server.log pm=${PMPID[$k]}
	[ "$CPU_ONLY" = 0 ] || q "$k" -c "VACUUM fence_claims"
	w0=$(tokens_issued "$k")
	e0=$(grep -c 'ERROR:' "$slog" || true)
	qb_backends_gone "$pm" 500
	cpu0=$(qb_cpu_ticks "$pm")
	(cd "$OUT/runs" && "${NICE[@]}" "${BIN[$k]}/pgbench" -h "${CL[$k]}/sock" -p "${PORT[$k]}" -U postgres \
		-n -M prepared -c "$c" -j 1 -t $((n / c)) --random-seed=$((3000 + r)) \
		-D njobs="$NJOBS" -D r="${r}c$c" -f "$OUT/scripts/$w.pgb" "$DB") >"$out" 2>&1 || rc=$?
	qb_backends_gone "$pm" 500
	cpu1=$(qb_cpu_ticks "$pm")
	e1=$(grep -c 'ERROR:' "$slog" || true)
	w1=$(tokens_issued "$k")
	local cpu_tx=""
	qb_pgbench_counts "$out"
	local tps=$QB_TPS ntx=$QB_NTX failed=$QB_FAILED aborted=$QB_ABORTED
	if [ "$rc" != 0 ] || [ "$failed" != 0 ] || [ "$aborted" != 0 ] || [ $((e1 - e0)) != 0 ]; then
		FAILED_RUNS=$((FAILED_RUNS + 1))
		qb_say "ERRORS in $w/c$c/$k round $r (rc=$rc failed=$failed aborted=$aborted server errors=$((e1 - e0))): $out"
		grep -m3 -i 'error' "$out" >&2 || true
		grep 'ERROR:' "$slog" | tail -n 3 >&2 || true
	fi
	[ "$ntx" -gt 0 ] && cpu_tx=$(((cpu1 - cpu0) * 1000000 / CLK_TCK / ntx))
	[ "$r" = 0 ] ||
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$c" "$k" "$r" "$ord" \
			"$tps" "$failed" "$aborted" "$((e1 - e0))" "$cpu_tx" "$((w1 - w0))" "$ntx" >>"$RES"
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
D0=$(date -u '+%Y-%m-%d %H:%M UTC')
TRUN0=$(date +%s)
for w in expiry release first; do
	for c in 1 8; do
		n=$N1
		[ "$c" = 8 ] && n=$N8
		# release: two statements per transaction; half as many transactions
		[ "$w" = release ] && n=$((n / 2))
		qb_say "$w, $c client(s), $n transactions per run, warm-up + $ROUNDS round(s)"
		first=1
		[ "$NWARM" -gt 0 ] && first=0
		for r in $(seq "$first" "$ROUNDS"); do
			nn=$n
			[ "$r" = 0 ] && nn=$NWARM
			if [ $((r % 2)) = 1 ]; then
				run_one "$w" "$c" old "$r" 1 "$nn"
				run_one "$w" "$c" new "$r" 2 "$nn"
			else
				run_one "$w" "$c" new "$r" 1 "$nn"
				run_one "$w" "$c" old "$r" 2 "$nn"
			fi
		done
	done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
TRUN=$(($(date +%s) - TRUN0))

# the settings as each server reports them: one line if they agree
settings_of()
{
	q "$1" -c "SELECT format('fsync %s, full_page_writes %s, autovacuum %s, synchronous_commit %s, shared_buffers %s (also checkpoint_timeout %s, max_wal_size %s, jit %s)',
		current_setting('fsync'), current_setting('full_page_writes'), current_setting('autovacuum'),
		current_setting('synchronous_commit'), current_setting('shared_buffers'),
		current_setting('checkpoint_timeout'), current_setting('max_wal_size'), current_setting('jit'))"
}
SET_old=$(settings_of old) SET_new=$(settings_of new)
if [ "$SET_old" = "$SET_new" ]; then
	SETTINGS="settings: $MODE, both clusters: $SET_old"
else
	SETTINGS="settings: $MODE; old: $SET_old; new: $SET_new"
fi

cat >"$OUT/meta.txt" <<EOF
$SETTINGS
VACUUM between runs: $VAC

date: $D0; mode: $([ "$QUICK" = 1 ] && echo quick || echo full); rounds: $ROUNDS measured + $([ "$NWARM" -gt 0 ] && echo 1 || echo 0) warm-up per workload and client count
old: ${OLD} (${COMMIT[old]:0:7}), fence $VER_old, fence.so md5 ${SO_MD5[old]}
new: ${NEW} (${COMMIT[new]:0:7}), fence $VER_new, fence.so md5 ${SO_MD5[new]}
machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)
server: $("${BIN[old]}/postgres" --version); priority: $([ ${#NICE[@]} -gt 0 ] && echo "nice -n -15" || echo default)
load average (1, 5, 15 min) at start: $LOAD0; at end: $LOAD1
transactions per run (all clients): x1 $N1, x8 $N8 (release: half as many, each a claim and a release); same --random-seed for both builds within a round
measured part: ${TRUN} s; whole script: $(($(date +%s) - T0)) s; failed runs: $FAILED_RUNS
installed into: the two copies under $WORK only (checked in make install's output)
EOF

python3 - "$RES" "$OUT/meta.txt" "$VER_old" "$VER_new" >"$OUT/report.md" <<'EOF'
import csv, statistics, sys
res, meta, vo, vn = sys.argv[1:]
rows = list(csv.DictReader(open(res), delimiter="\t"))
med = lambda v: statistics.median(v) if v else float("nan")
def f(x, d=0):
    return "-" if x != x else f"{x:,.{d}f}"
names = {"expiry": "takeover (expired lease)",
         "release": "claim + release (takeover of a released claim)",
         "first": "first claim (INSERT)"}
# Rows are told apart by build (old, new), not by version: two commits of
# one version are the usual comparison.
vo, vn = f"old ({vo})", f"new ({vn})"
print(open(meta).read())
print(f"| workload | clients | {vo} tps | {vn} tps | ratio new/old | per-round ratio, median (min-max) "
      f"| {vo} CPU us/tx | {vn} CPU us/tx | CPU ratio new/old | claims won/tx old, new | errors |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for w in ["expiry", "release", "first"]:
    for c in ["1", "8"]:
        sel = [r for r in rows if r["workload"] == w and r["clients"] == c]
        if not sel:
            continue
        by = {v: {int(r["round"]): r for r in sel if r["build"] == b}
              for v, b in ((vo, "old"), (vn, "new"))}
        tps = {v: med([float(r["tps"]) for r in by[v].values()]) for v in by}
        cpu = {v: med([float(r["cpu_us_tx"]) for r in by[v].values() if r["cpu_us_tx"]]) for v in by}
        won = {v: med([int(r["won"]) / max(int(r["ntx"]), 1) for r in by[v].values()]) for v in by}
        per = sorted(float(by[vn][k]["tps"]) / float(by[vo][k]["tps"])
                     for k in by[vo] if k in by[vn] and float(by[vo][k]["tps"]) > 0)
        errs = sum(int(r["failed"]) + int(r["aborted"]) + int(r["srv_errors"]) for r in sel)
        rng = f"{med(per):.2f} ({per[0]:.2f}-{per[-1]:.2f})" if per else "-"
        print(f"| {names[w]} | {c} | {f(tps[vo])} | {f(tps[vn])} | {tps[vn] / tps[vo]:.2f} | {rng} "
              f"| {f(cpu[vo])} | {f(cpu[vn])} | {cpu[vn] / cpu[vo]:.2f} | {won[vo]:.3f}, {won[vn]:.3f} | {errs} |")
print()
print("tps: pgbench transactions per second (release: one claim and one release per transaction); "
      "ratio below 1 = the new build is slower. CPU: server CPU per transaction, all backends of the run; "
      "ratio above 1 = the new build costs more. claims won/tx: tokens issued per transaction "
      "(1.000 = every attempt took the job).")
EOF
cat "$OUT/report.md"
qb_say "results in $OUT"
[ "$FAILED_RUNS" = 0 ] || { qb_say "$FAILED_RUNS run(s) had errors"; exit 1; }
