#!/usr/bin/env bash
# bench/claim_profile.sh: where an uncontended fence_claim's time goes, and
# what the token's unique index costs.
#
#   bash bench/claim_profile.sh            profiles + alternatives, ~4 minutes
#   bash bench/claim_profile.sh --quick    CI-sized: seconds, no profile
#   bash bench/claim_profile.sh --cpu-only the CPU-only settings (below)
#
# 1. Profile.  One pgbench client runs bench/scripts/claim_fence.pgb (a
#    takeover of a random job among 10,000, 1 ms leases) while
#    `perf record -e cpu-clock -g -p <backend pid>` samples its backend for
#    --seconds; then the same for the raw conditional UPDATE
#    (claim_raw.pgb).  Reported (OUT/profile_<v>.txt): the flat profile (self
#    time by symbol) and the inclusive share of the functions a claim runs
#    through (perf report --children).  PostgreSQL's own binary is stripped
#    on Debian: exported functions resolve, static ones show as addresses.
#    fence.so resolves when it is built with symbols (a `make install` of
#    the source tree is; a Debian package build is stripped).
#
# 2. The token index, on scratch copies of fence_claims only (fence itself
#    keeps its schema).  Each copy holds the same 10,000 released claims;
#    the pgbench script does in one SQL statement what a takeover writes:
#      UPDATE copy SET token = nextval(seq), holder, claimed_at,
#             lease_expires_at = clock_timestamp() + 1 ms, released = false,
#             n_claims + 1, n_takeovers + 1, claimed_by
#       WHERE job = $job AND (released OR lease_expires_at < clock_timestamp())
#    without fence's locks, WAL flush and checks (those are the same whatever
#    the index), on copies that differ only in how token is indexed:
#      sql_unique       unique btree on token (fence_claims as it is)
#      sql_nonunique    plain btree on token
#      sql_hash         hash index on token
#      sql_unique_ff50  unique btree, fillfactor 50
#      sql_noindex_ff50 no index on token, fillfactor 50 (HOT becomes possible)
#      sql_side         no index on token, and the token-to-job lookup in an
#                       insert-only side table keyed by token (the takeover
#                       appends a row there in the same statement)
#    interleaved with the real fence_claim and the raw UPDATE, at 1 and 8
#    clients, with pg_stat_user_tables' n_tup_hot_upd for each (a claim
#    changes token, so while token is indexed no claim can be HOT).
#    The real fence_claims is also given fillfactor 50 in a second database
#    (fence_ff50), to check that fence's own claims then stay non-HOT.
#
# Options:
#   --seconds N     perf sampling time per variant (default 10)
#   --rounds N      rounds of the alternatives (default 3)
#   --quick         no profile; 1 round of a few hundred attempts
#   --out DIR       results (default /tmp/fence-profile-out.XXXXXX)
#   --port N        first port to try (default 55780; up to +19)
#   --keep          leave the cluster running
#   --no-priority   do not run server and pgbench at nice -15
#   --cpu-only      fsync, full_page_writes and autovacuum off, a VACUUM
#                   before every run (default: production settings, below)
#
# Needs perf (linux-perf, installed if missing) for the profile.  Settings
# as bench/scale.sh's: by default fsync, full_page_writes and autovacuum on,
# no VACUUM between runs (one VACUUM ANALYZE after loading);
# synchronous_commit and JIT off.  --cpu-only: as earlier versions of this
# script always ran.  Each run also reports the WAL it wrote per attempt
# (pg_current_wal_insert_lsn before and after).  Exit status 1 if a run had
# an error; never on timing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=../test/lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=queue_lib.sh
. "$HERE/queue_lib.sh"

SECONDS_=10 ROUNDS=3 QUICK=0 CPU_ONLY=0 OUT="" QB_PORT_BASE=55780 QB_KEEP=0 QB_PRIORITY=1
ARGS=("$@")
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) SECONDS_=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--quick) QUICK=1 ;;
	--cpu-only) CPU_ONLY=1 ;;
	*) qb_option "$@"; shift "$QB_NARGS"; continue ;;
	esac
	shift
done
pkgs=(python3 procps)
[ "$QUICK" = 1 ] || pkgs+=(linux-perf)
qb_prepare "${pkgs[@]}"

NJOBS=10000 NWARM=2000
declare -A NTX=([1]=15000 [8]=30000)
[ "$QUICK" = 1 ] && ROUNDS=1 NWARM=0 QB_PRIORITY=0 && NTX=([1]=300 [8]=400)
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/fence-profile-out.XXXXXX)
mkdir -p "$OUT/runs" "$OUT/scripts"

QB_NAME=fence-profile QB_PORT_MAX=$((QB_PORT_BASE + 19)) QB_DB=fence_profile
qb_start "$(
	cat <<EOF
# bench/claim_profile.sh
$(qb_conf 512MB)
$(qb_durability "$CPU_ONLY")
EOF
)"

ALTS=(sql_unique sql_nonunique sql_hash sql_unique_ff50 sql_noindex_ff50 sql_side)
setup_sql()
{
	cat <<EOF
SET client_min_messages = warning;
CREATE EXTENSION fence;
$(qb_raw_jobs_sql "$NJOBS")
$(qb_fence_claims_sql cj_ "$NJOBS" '1 millisecond' profile)
CREATE SEQUENCE alt_seq START 1000000000;
EOF
	local t
	for t in "${ALTS[@]}"; do
		case $t in
		sql_unique) echo "CREATE TABLE $t (LIKE fence_claims INCLUDING ALL);" ;;
		sql_unique_ff50) echo "CREATE TABLE $t (LIKE fence_claims INCLUDING ALL) WITH (fillfactor = 50);" ;;
		*)
			echo "CREATE TABLE $t (LIKE fence_claims INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (job))$([ "$t" = sql_noindex_ff50 ] && echo ' WITH (fillfactor = 50)');"
			;;
		esac
		case $t in
		sql_nonunique) echo "CREATE INDEX ON $t (token);" ;;
		sql_hash) echo "CREATE INDEX ON $t USING hash (token);" ;;
		sql_side) echo "CREATE TABLE ${t}_tokens (token bigint PRIMARY KEY, job text NOT NULL);" ;;
		esac
		echo "INSERT INTO $t SELECT * FROM fence_claims;"
		echo "UPDATE $t SET token = nextval('alt_seq'), released = true;"
		[ "$t" != sql_side ] || echo "INSERT INTO ${t}_tokens SELECT token, job FROM $t;"
	done
	echo "VACUUM ANALYZE;"
	echo "CHECKPOINT;"
}
setup_sql | q >/dev/null
# fence_claims itself at fillfactor 50, in a database of its own
"$PGBIN/createdb" -h "$SOCK" -p "$PORT" -U postgres fence_ff50
setup_sql | QB_DB=fence_ff50 q >/dev/null
QB_DB=fence_ff50 q >/dev/null <<'EOF'
ALTER TABLE fence_claims SET (fillfactor = 50);
VACUUM FULL fence_claims;
ANALYZE fence_claims;
EOF

for t in "${ALTS[@]}"; do
	[ "$t" != sql_side ] || continue
	cat >"$OUT/scripts/$t.pgb" <<EOF
-- a takeover's write, in SQL, on a scratch copy of fence_claims ($t)
\set j random(1, :njobs)
UPDATE $t SET token = nextval('alt_seq'), holder = NULL, claimed_at = clock_timestamp(), lease_expires_at = clock_timestamp() + interval '1 millisecond', released = false, n_claims = n_claims + 1, n_takeovers = n_takeovers + 1, claimed_by = current_user WHERE job = 'cj_' || :j::text AND (released OR lease_expires_at < clock_timestamp()) RETURNING token;
EOF
done
cat >"$OUT/scripts/sql_side.pgb" <<EOF
-- a takeover's write, in SQL, on a copy of fence_claims without a token
-- index, which appends the new token to an insert-only side table (sql_side)
\set j random(1, :njobs)
WITH u AS (UPDATE sql_side SET token = nextval('alt_seq'), holder = NULL, claimed_at = clock_timestamp(), lease_expires_at = clock_timestamp() + interval '1 millisecond', released = false, n_claims = n_claims + 1, n_takeovers = n_takeovers + 1, claimed_by = current_user WHERE job = 'cj_' || :j::text AND (released OR lease_expires_at < clock_timestamp()) RETURNING token, job) INSERT INTO sql_side_tokens SELECT token, job FROM u RETURNING token;
EOF
cp "$HERE/scripts/claim_fence.pgb" "$OUT/scripts/fence_claim.pgb"
cp "$HERE/scripts/claim_raw.pgb" "$OUT/scripts/raw.pgb"
cp "$HERE/scripts/claim_fence.pgb" "$OUT/scripts/fence_claim_ff50.pgb"

table_of()
{
	case $1 in
	raw) echo claim_jobs ;;
	fence_claim | fence_claim_ff50) echo fence_claims ;;
	*) echo "$1" ;;
	esac
}
db_of() { [ "$1" = fence_claim_ff50 ] && echo fence_ff50 || echo fence_profile; }

# ---- 1. the profiles
if [ "$QUICK" = 0 ]; then
	for v in fence_claim raw; do
		qb_say "profile: $v, 1 client, perf for $SECONDS_ s"
		[ "$CPU_ONLY" = 0 ] || q -c "VACUUM $(table_of "$v")"
		(cd "$OUT/runs" && "${QB_NICE[@]}" "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
			-c 1 -j 1 -T $((SECONDS_ + 6)) -D njobs=$NJOBS -f "$OUT/scripts/$v.pgb" "$QB_DB") \
			>"$OUT/runs/profile.$v.out" 2>&1 &
		pgb=$!
		sleep 3
		pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
		[ -n "$pid" ] || fence_die "no pgbench backend found"
		perf record -e cpu-clock -F 2000 -g -p "$pid" -o "$OUT/perf.$v.data" -- sleep "$SECONDS_" \
			>"$OUT/runs/perf.$v.log" 2>&1
		wait "$pgb" || true
		{
			echo "# $v: $(grep '^tps' "$OUT/runs/profile.$v.out")"
			echo "# perf record -e cpu-clock -F 2000 -g -p <backend> -- sleep $SECONDS_"
			echo "## self time, by symbol (perf report --no-children --sort dso,symbol)"
			perf report -i "$OUT/perf.$v.data" --stdio --no-children --sort dso,symbol -g none \
				--percent-limit 0.8 2>/dev/null | grep -v '^#' | grep -v '^$' | sed 's/ *- *- *$//' | head -45
			echo
			echo "## inclusive (perf report --children), the functions a claim runs through"
			perf report -i "$OUT/perf.$v.data" --stdio --children --sort symbol -g none 2>/dev/null |
				grep -E '\] (fence_claim|claims_[a-z_]+|token_[a-z_]+|fence_xact[a-z_]*|nextval_internal|XLogFlush|ExecSimpleRelationUpdate|ExecUpdate|ExecInsertIndexTuples|index_insert|btinsert|_bt_doinsert|heap_update|simple_heap_update|table_tuple_lock|heapam_tuple_lock|heap_lock_tuple|index_getnext_slot|LockAcquireExtended|LockRelease|CommitTransaction|StartTransaction|exec_bind_message|exec_execute_message|PortalRun|ExecutorStart|ExecutorRun|ExecInitNode|standard_ExecutorStart|ExecScan|IndexNext|XLogInsert|XLogInsertRecord|pg_plan_query|CreateExecutorState|FreeExecutorState|PostgresMain)( |$)' |
				sed 's/ *- *- *$//' | head -40
		} >"$OUT/profile_$v.txt"
	done
fi

# ---- 2. the alternatives, interleaved
RES=$OUT/results.tsv
printf 'variant\tclients\tround\ttps\tntx\tcpu_us\tupd\thot_upd\tok\twal_bytes\n' >"$RES"
VARIANTS=(raw fence_claim fence_claim_ff50 "${ALTS[@]}")
for c in 1 8; do
	first=1
	[ "$NWARM" -gt 0 ] && first=0
	qb_say "alternatives: $c client(s), warm-up + $ROUNDS round(s) of ${VARIANTS[*]}"
	for r in $(seq "$first" "$ROUNDS"); do
		nv=${#VARIANTS[@]}
		for i in $(seq 0 $((nv - 1))); do
			v=${VARIANTS[$(((i + r) % nv))]}
			t=$(table_of "$v")
			db=$(db_of "$v")
			[ "$CPU_ONLY" = 0 ] || QB_DB=$db q -c "VACUUM $t"
			l0=$(q -c "SELECT pg_current_wal_insert_lsn()")
			s0=$(QB_DB=$db q -F ' ' -c "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = '$t'::regclass")
			n=${NTX[$c]}
			[ "$r" = 0 ] && n=$NWARM
			QB_DB=$db qb_pgbench "$OUT/runs/alt.c$c.$v.r$r.out" -M prepared -c "$c" -j 1 -t $((n / c)) \
				--random-seed=$((8000 + r)) -D njobs=$NJOBS -f "$OUT/scripts/$v.pgb"
			wal=$(q -c "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$l0')::bigint")
			s1=$(QB_DB=$db q -F ' ' -c "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = '$t'::regclass")
			[ "$r" = 0 ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$v" "$c" "$r" "$QB_TPS" "$QB_NTX" \
				"$QB_CPU_US" "$((${s1% *} - ${s0% *}))" "$((${s1#* } - ${s0#* }))" "$QB_OK" "$wal" >>"$RES"
		done
	done
done

qb_meta "alternatives: attempts per run x1 ${NTX[1]}, x8 ${NTX[8]}; rounds: $ROUNDS measured + $([ "$NWARM" -gt 0 ] && echo 1 || echo 0) warm-up, first variant rotating"
if [ "$CPU_ONLY" = 1 ]; then
	MODE="CPU-only (--cpu-only)" VAC="yes, a VACUUM of the run's table before every run"
else
	MODE="production durability (the default)" VAC="no (VACUUM ANALYZE once after loading)"
fi
qb_settings "$MODE" "$VAC" >"$OUT/report.md"
python3 - "$RES" >>"$OUT/report.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = lambda v: statistics.median(v) if v else float("nan")
what = {"raw": "raw conditional UPDATE (claim_jobs)", "fence_claim": "fence_claim",
        "fence_claim_ff50": "fence_claim, fence_claims at fillfactor 50",
        "sql_unique": "SQL takeover, unique btree on token (as fence_claims)",
        "sql_nonunique": "SQL takeover, plain btree on token", "sql_hash": "SQL takeover, hash index on token",
        "sql_unique_ff50": "SQL takeover, unique btree, fillfactor 50",
        "sql_noindex_ff50": "SQL takeover, no token index, fillfactor 50",
        "sql_side": "SQL takeover, no token index, new token appended to a side table"}
print("| variant | clients | attempts/s | / sql_unique, per round | server CPU us/attempt | WAL bytes/attempt | HOT updates | errors |")
print("|---|---|---|---|---|---|---|---|")
for c in sorted({r["clients"] for r in rows}, key=int):
    base = {r["round"]: float(r["tps"]) for r in rows if r["clients"] == c and r["variant"] == "sql_unique"}
    for v in what:
        s = [r for r in rows if r["clients"] == c and r["variant"] == v]
        if not s:
            continue
        per = sorted(float(r["tps"]) / base[r["round"]] for r in s if base.get(r["round"]))
        rng = f"{med(per):.2f} ({per[0]:.2f}-{per[-1]:.2f})" if per else "-"
        upd = sum(int(r["upd"]) for r in s)
        hot = sum(int(r["hot_upd"]) for r in s)
        print(f"| {what[v]} | {c} | {med([float(r['tps']) for r in s]):,.0f} | {rng} "
              f"| {med([float(r['cpu_us']) for r in s if r['cpu_us']]):,.0f} "
              f"| {med([int(r['wal_bytes']) / max(int(r['ntx']), 1) for r in s]):,.0f} | {hot:,} of {upd:,} "
              f"| {sum(1 for r in s if r['ok'] != '1')} |")
EOF
cat "$OUT/meta.txt" "$OUT/report.md"
for v in fence_claim raw; do [ -f "$OUT/profile_$v.txt" ] && head -n 30 "$OUT/profile_$v.txt"; done
qb_say "results in $OUT"
[ "$QB_FAILED_RUNS" = 0 ] || { qb_say "$QB_FAILED_RUNS run(s) had errors"; exit 1; }
