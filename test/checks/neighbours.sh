#!/usr/bin/env bash
# test/checks/neighbours.sh: pg_partman and pg_repack keep working on
# protected tables, and the tables stay protected ("pg_partman's
# retention detaches and drops partitions: both work"; pg_repack is table
# maintenance that changes no values).
#
# One throwaway cluster, one database with fence, pg_partman (Debian's 4.x,
# native partitioning, maintenance called directly: no background worker)
# and pg_repack.
#
# 1. pg_partman. Three protected partition sets, each made by create_parent
#    after fence_protect, rows written under fence_begin:
#    - ev_drop, by integer id: run_maintenance creates partitions ahead of the
#      data; each new one has zz_fence_guard and zz_fence_truncate (fence's
#      functions, ENABLE ALWAYS), a registry row, and refuses a write without
#      a token (5F003), straight or through the parent. Then retention with
#      retention_keep_table = false: run_maintenance drops the old partitions
#      (4.x drops them without detaching first); they leave fence_protected
#      and fence_audit_log has a 'drop' row for each.
#    - ev_keep, by timestamp (daily): retention with retention_keep_table =
#      true: run_maintenance detaches the old partitions; each stays
#      protected (registry row, its own guard and TRUNCATE refusal, 'A'),
#      refuses INSERT and UPDATE without a token (5F003) and TRUNCATE
#      (5F005), accepts a fresh token, and has a 'detach' row.
#    - ev_move, by id, retention_schema: detach then SET SCHEMA archive; the
#      table stays protected in its new schema ('detach' and 'rename' rows).
#    - run_maintenance() with no argument (all sets, as the background worker
#      calls it) succeeds afterwards.
#    A maintenance call must succeed: if it fails, its error (with SQLSTATE)
#    is printed in the FAILED line, and a 5F006 from fence is named as such.
# 2. pg_repack (the client, as the postgres OS user over the private socket):
#    - acct, a protected table with a primary key, filled under a token; a
#      writer updates random rows under fresh tokens (recording each write in
#      an unprotected shadow table) before, during and after
#      `pg_repack --table=public.acct`; a transaction left open meanwhile
#      makes pg_repack wait in its log-replay loop ("Waiting for 1
#      transactions to finish"), so writes land in its log and are replayed
#      into the new heap. pg_repack must succeed and rewrite the
#      table (new relfilenode, same oid); afterwards its triggers are fence's,
#      'A', no repack_trigger is left, the registry row is there, every row
#      equals the shadow (values and writer_epoch, the writes that landed
#      during the repack included) and the untouched column is unchanged; the
#      released load token is fenced (5F001), a still-current token older
#      than the rows is fenced (5F002), a write without a token fails (5F003),
#      TRUNCATE fails (5F005) and a fresh token is accepted.
#    - `pg_repack --only-indexes --table=public.acct` succeeds, the table
#      stays protected.
#    - pt, a protected partitioned table: `pg_repack --parent-table=public.pt`
#      rewrites every partition; each keeps its guard ('A') and registry row,
#      rows unchanged, a write without a token fails (5F003), a second write
#      by the load execution fails (5G003: strict mode, the caller's bug),
#      and once released its token
#      fails (5F001).
# 3. The server log shows no crash and no DDL refused by fence.
# One line per assertion ("ok     ..." or "FAILED ..."), then a summary line.
# Exit 0 only if every assertion holds.
#
# Environment: FENCE_PORT (else 54338), FENCE_WORK, FENCE_KEEP=1, FENCE_QUICK=1
# (a smaller repack table).  Standalone it expects fence to be installed.
#
# fence-check-timeout: 300
# fence-check-packages: postgresql-@MAJOR@-partman postgresql-@MAJOR@-repack
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
# shellcheck disable=SC2046
fence_install_packages $(fence_pg_package partman repack) ||
	fence_die "cannot install $(fence_pg_package partman repack | xargs)"
fence_pg_setup

rows=200000
[ "${FENCE_QUICK:-0}" = 1 ] && rows=50000

own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-neighbours)
	own_work=1
fi
dir=$work/neighbours
port=${FENCE_PORT:-$(fence_free_port 54338)}
writer=
cleanup()
{
	[ -n "$writer" ] && kill "$writer" 2>/dev/null && wait "$writer" 2>/dev/null
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir"
chown postgres:postgres "$dir"
fence_cluster_init "$dir" "$port" "max_connections = 30
autovacuum = off
lock_timeout = '20s'" || exit 1
fence_cluster_start "$dir" || exit 1

db=neighbours
# psql on the database, quiet, unaligned, stopping at the first error
sql() { fence_psql "$dir" -d "$db" -XAtq -v ON_ERROR_STOP=1 "$@"; }
# the value of one query (stderr too, so that an error shows as the value)
val() { sql -c "$1" 2>&1; }
# the SQLSTATE of running $1 in its own session: 00000 if it succeeds
state()
{
	local out rc code
	out=$(sql -c '\set VERBOSITY sqlstate' -c "$1" 2>&1 >/dev/null)
	rc=$?
	code=$(sed -n 's/^\(psql:[^ ]* \)\{0,1\}ERROR: *\([0-9A-Z]\{5\}\)$/\2/p' <<<"$out" | head -n 1)
	if [ -n "$code" ]; then
		echo "$code"
	elif [ "$rc" = 0 ] && ! grep -qi 'error' <<<"$out"; then
		echo 00000
	else
		echo "psql exit $rc: $out"
	fi
}
# run $2 (SQL) and record its output in $dir/$1.out; print the error lines
# (VERBOSITY verbose: with SQLSTATE and context) if it fails
run_logged()
{
	local name=$1 out=$dir/$1.out
	if sql -c '\set VERBOSITY verbose' -c "$2" >"$out" 2>&1; then
		return 0
	fi
	grep -E '^(psql:.*)?(ERROR|DETAIL|HINT|CONTEXT)' "$out" | head -n 12 | sed 's/^/    /'
	return 1
}

# did a maintenance command succeed? (names fence's refusal if it was one)
check_run()
{
	local desc=$1 name=$2 sqltext=$3 errs
	if errs=$(run_logged "$name" "$sqltext"); then
		ok "$desc"
	else
		# pg_partman re-raises every error as P0001, keeping the message
		if grep -qE '5F006|on protected table|fence_allow_ddl|fence_unprotect' <<<"$errs"; then
			bad "$desc: refused by fence (5F006):"
		else
			bad "$desc: failed:"
		fi
		printf '%s\n' "$errs"
	fi
}

# Is each table in $1 (regclass names, space separated) protected: both
# triggers on fence's functions, ENABLE ALWAYS, and a registry row with
# writer_epoch / strict?  Prints the tables that are not, with what is wrong.
unprotected_of()
{
	local t bad_list=
	for t in $1; do
		local got
		got=$(val "SELECT (SELECT string_agg(tg.tgname || '=' || tg.tgenabled::text || '/' || tg.tgfoid::regproc, ',' ORDER BY tg.tgname)
		               FROM pg_trigger tg WHERE tg.tgrelid = '$t'::regclass AND tg.tgname LIKE 'zz_fence_%')
		        || ' ' || coalesce((SELECT p.epoch_column || '/' || p.mode FROM fence_protected p
		                             WHERE p.relation = '$t'::regclass), 'unregistered')")
		[ "$got" = "zz_fence_guard=A/fence_guard,zz_fence_truncate=A/fence_refuse_truncate writer_epoch/strict" ] ||
			bad_list="$bad_list ${t}[$got]"
	done
	echo "${bad_list# }"
}
# the partitions of $1, one line each, by name
parts_of() { val "SELECT string_agg(c.oid::regclass::text, ' ' ORDER BY c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '$1'::regclass"; }
# words of $1 not in $2
minus() { comm -23 <(tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort) <(tr ' ' '\n' <<<"$2" | sed '/^$/d' | sort) | paste -sd ' ' -; }
# the audit rows of action $1 whose relation is in $2 (qualified names): count
audit_count()
{
	local list
	list=$(tr ' ' '\n' <<<"$2" | sed '/^$/d; s/.*/'"'"'&'"'"'/' | paste -sd, -)
	[ -n "$list" ] || { echo 0; return; }
	val "SELECT count(DISTINCT relation) FROM fence_audit_log WHERE action = '$1' AND relation IN ($list)"
}
qualify() { local t out=; for t in $1; do [[ $t == *.* ]] || t=public.$t; out="$out $t"; done; echo "${out# }"; }

fence_psql "$dir" -d postgres -XAtq -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db" || exit 1
sql >"$dir/setup.out" 2>&1 <<'EOF' || { cat "$dir/setup.out"; exit 1; }
CREATE EXTENSION fence;
CREATE SCHEMA partman;
CREATE EXTENSION pg_partman SCHEMA partman;
CREATE EXTENSION pg_repack;
CREATE SCHEMA archive;
EOF
echo "neighbours: PostgreSQL $(val 'SHOW server_version'), fence $(val "SELECT extversion FROM pg_extension WHERE extname = 'fence'"), pg_partman $(val "SELECT extversion FROM pg_extension WHERE extname = 'pg_partman'"), pg_repack $(val "SELECT extversion FROM pg_extension WHERE extname = 'pg_repack'") ($(fence_as_pg pg_repack --version 2>&1))"

# ===========================================================================
echo "--- pg_partman"
# a job's token, claimed now (autocommit) and held for an hour
claim() { val "SELECT fence_claim('$1', '1 hour')"; }

sql >"$dir/partman-setup.out" 2>&1 <<'EOF' || { cat "$dir/partman-setup.out"; exit 1; }
CREATE TABLE ev_drop (id bigint NOT NULL, payload text, writer_epoch bigint NOT NULL DEFAULT 0)
  PARTITION BY RANGE (id);
CREATE TABLE ev_keep (at timestamptz NOT NULL, payload text, writer_epoch bigint NOT NULL DEFAULT 0)
  PARTITION BY RANGE (at);
CREATE TABLE ev_move (id bigint NOT NULL, payload text, writer_epoch bigint NOT NULL DEFAULT 0)
  PARTITION BY RANGE (id);
SELECT fence_protect('ev_drop');
SELECT fence_protect('ev_keep');
SELECT fence_protect('ev_move');
EOF

check_run "create_parent ev_drop (id, interval 10, premake 3) on a protected table" create_parent_drop \
	"SELECT partman.create_parent('public.ev_drop', 'id', 'native', '10', p_premake => 3, p_jobmon => false)"
check_run "create_parent ev_keep (timestamptz, 1 day, start 10 days ago) on a protected table" create_parent_keep \
	"SELECT partman.create_parent('public.ev_keep', 'at', 'native', '1 day', p_premake => 2,
	   p_start_partition => (now() - interval '10 days')::date::text, p_jobmon => false)"
check_run "create_parent ev_move (id, interval 10, premake 3) on a protected table" create_parent_move \
	"SELECT partman.create_parent('public.ev_move', 'id', 'native', '10', p_premake => 3, p_jobmon => false)"

drop_parts0=$(parts_of ev_drop)
check "partitions made by create_parent for ev_drop are protected" "$(unprotected_of "$drop_parts0")" ""

tok=$(claim load:ev)
check "rows written with a token (fence_begin) into the three sets" "$(state "BEGIN;
SELECT fence_begin('load:ev', $tok);
INSERT INTO ev_drop SELECT g, 'd' || g FROM generate_series(1, 35) g;
INSERT INTO ev_move SELECT g, 'm' || g FROM generate_series(1, 35) g;
INSERT INTO ev_keep SELECT date_trunc('day', now()) - k * interval '1 day' + h * interval '1 hour', 'k' || k || ':' || h
  FROM generate_series(0, 10) k, generate_series(0, 23, 6) h;
COMMIT;")" 00000
check "those rows carry the token, none in a default partition" \
	"$(val "SELECT (SELECT count(*) FROM ev_drop WHERE writer_epoch = $tok) + (SELECT count(*) FROM ev_move WHERE writer_epoch = $tok)
	             + (SELECT count(*) FROM ev_keep WHERE writer_epoch = $tok) || ' ' ||
	        (SELECT count(*) FROM ev_drop_default) + (SELECT count(*) FROM ev_keep_default) + (SELECT count(*) FROM ev_move_default)")" \
	"114 0"
val "SELECT fence_release('load:ev', $tok)" >/dev/null

# --- run_maintenance creates partitions ahead of the data
check_run "run_maintenance('public.ev_drop') after the writes" maint_drop_1 \
	"SELECT partman.run_maintenance('public.ev_drop', p_jobmon => false)"
drop_parts1=$(parts_of ev_drop)
new_parts=$(minus "$drop_parts1" "$drop_parts0")
check "run_maintenance created the partitions ahead of the data" "$new_parts" "ev_drop_p40 ev_drop_p50 ev_drop_p60"
check "each new partition: zz_fence_guard and zz_fence_truncate 'A', in fence_protected" \
	"$(unprotected_of "${new_parts:-none_created}")" ""
check "each new partition has an 'attach' row in fence_audit_log" \
	"$(audit_count attach "$(qualify "$new_parts")")" "$(wc -w <<<"$new_parts")"
check "a write without a token straight into new partition ev_drop_p50 fails 5F003" \
	"$(state "INSERT INTO ev_drop_p50 (id, payload) VALUES (55, 'no token')")" 5F003
check "a write without a token through the parent into ev_drop_p40 fails 5F003" \
	"$(state "INSERT INTO ev_drop (id, payload) VALUES (41, 'no token')")" 5F003
tok=$(claim load:ev41)
check "a write with a fresh token into ev_drop_p40 is accepted" \
	"$(state "INSERT INTO ev_drop (id, payload, writer_epoch) VALUES (41, 'token', $tok)")" 00000
check "that row sits in ev_drop_p40 with the token" \
	"$(val "SELECT tableoid::regclass || ' ' || (writer_epoch = $tok) FROM ev_drop WHERE id = 41")" "ev_drop_p40 true"

# --- retention, retention_keep_table = false: old partitions dropped
val "UPDATE partman.part_config SET retention = '20', retention_keep_table = false WHERE parent_table = 'public.ev_drop'" >/dev/null
gone_oids=$(val "SELECT string_agg(oid::text, ',') FROM pg_class WHERE oid IN ('ev_drop_p0'::regclass, 'ev_drop_p10'::regclass)")
check_run "run_maintenance with retention '20', retention_keep_table = false (drops)" maint_drop_2 \
	"SELECT partman.run_maintenance('public.ev_drop', p_jobmon => false)"
drop_parts2=$(parts_of ev_drop)
dropped=$(minus "$drop_parts1" "$drop_parts2")
check "retention removed ev_drop_p0 and ev_drop_p10 (max id 41)" "$dropped" "ev_drop_p0 ev_drop_p10"
check "the removed partitions no longer exist (dropped, not kept)" \
	"$(val "SELECT coalesce(to_regclass('public.ev_drop_p0')::text, 'gone') || ' ' || coalesce(to_regclass('public.ev_drop_p10')::text, 'gone')")" \
	"gone gone"
check "the dropped partitions left fence_protected" \
	"$(val "SELECT count(*) FROM fence_protected WHERE relation::oid IN (${gone_oids:-0})")" 0
check "fence_protected has no row for a relation that does not exist" \
	"$(val "SELECT count(*) FROM fence_protected p WHERE NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = p.relation)")" 0
check "fence_audit_log has a 'drop' row for each dropped partition" \
	"$(audit_count drop "public.ev_drop_p0 public.ev_drop_p10")" 2
check "the partitions that remain are still protected" "$(unprotected_of "$drop_parts2")" ""
check "ev_drop_p70 was created ahead of id 41 by the same run" "$(val "SELECT to_regclass('public.ev_drop_p70') IS NOT NULL")" t

# --- retention, retention_keep_table = true: old partitions detached and kept
keep_parts0=$(parts_of ev_keep)
val "UPDATE partman.part_config SET retention = '5 days', retention_keep_table = true WHERE parent_table = 'public.ev_keep'" >/dev/null
check_run "run_maintenance with retention '5 days', retention_keep_table = true (detaches)" maint_keep \
	"SELECT partman.run_maintenance('public.ev_keep', p_jobmon => false)"
keep_parts1=$(parts_of ev_keep)
detached=$(minus "$keep_parts0" "$keep_parts1")
n_detached=$(wc -w <<<"$detached")
if [ "$n_detached" -ge 4 ]; then
	ok "retention detached $n_detached partitions of ev_keep ($detached)"
else
	bad "retention detached $n_detached partitions of ev_keep, expected at least 4 ($detached)"
fi
first_kept=${detached%% *}
first_kept=${first_kept:-ev_keep_missing}
check "the detached partitions still exist (kept)" \
	"$(val "SELECT count(*) FROM pg_class WHERE oid::regclass::text IN ($(tr ' ' '\n' <<<"${detached:-x}" | sed "s/.*/'&'/" | paste -sd, -)) AND NOT relispartition")" \
	"$n_detached"
check "each detached partition stays protected: own guard and TRUNCATE refusal 'A', registry row" \
	"$(unprotected_of "${detached:-none_detached}")" ""
check "the detached guard is the table's own (not a clone)" \
	"$(val "SELECT count(*) FROM pg_trigger WHERE tgrelid = '$first_kept'::regclass AND tgname = 'zz_fence_guard' AND tgparentid = 0")" 1
check "fence_audit_log has a 'detach' row for each detached partition" \
	"$(audit_count detach "$(qualify "$detached")")" "$n_detached"
check "the detached partition's rows are kept, with their token" \
	"$(val "SELECT count(*) > 0 AND count(*) = count(*) FILTER (WHERE writer_epoch > 0) FROM $first_kept")" t
check "an INSERT without a token into detached $first_kept fails 5F003" \
	"$(state "INSERT INTO $first_kept (at, payload) VALUES ((SELECT min(at) FROM $first_kept), 'no token')")" 5F003
check "an UPDATE without a token of detached $first_kept fails 5F003" \
	"$(state "UPDATE $first_kept SET payload = 'no token'")" 5F003
check "TRUNCATE of detached $first_kept fails 5F005" "$(state "TRUNCATE $first_kept")" 5F005
tok=$(claim keep:update)
check "an UPDATE of detached $first_kept with a fresh token is accepted" \
	"$(state "UPDATE $first_kept SET payload = 'token', writer_epoch = $tok")" 00000

# --- retention_schema: detach, then SET SCHEMA
val "UPDATE partman.part_config SET retention = '10', retention_schema = 'archive' WHERE parent_table = 'public.ev_move'" >/dev/null
check_run "run_maintenance with retention '10', retention_schema = 'archive' (detach, SET SCHEMA)" maint_move \
	"SELECT partman.run_maintenance('public.ev_move', p_jobmon => false)"
check "ev_move_p0 and ev_move_p10 moved to archive" \
	"$(val "SELECT string_agg(c.oid::regclass::text, ' ' ORDER BY c.relname) FROM pg_class c WHERE c.relnamespace = 'archive'::regnamespace AND c.relkind = 'r'")" \
	"archive.ev_move_p0 archive.ev_move_p10"
check "the moved partitions stay protected" "$(unprotected_of "archive.ev_move_p0 archive.ev_move_p10")" ""
check "fence_audit_log has 'detach' rows and 'rename' rows naming the new schema" \
	"$(audit_count detach "public.ev_move_p0 public.ev_move_p10 archive.ev_move_p0 archive.ev_move_p10") $(audit_count rename "archive.ev_move_p0 archive.ev_move_p10")" \
	"2 2"
check "a write without a token to archive.ev_move_p10 fails 5F003" \
	"$(state "UPDATE archive.ev_move_p10 SET payload = 'no token'")" 5F003

# --- partition_data_id: rows in the default partition moved to a new one
# (under fence_begin the moved rows carry their old epoch into the
# INSERT; the copied-rows rule stamps them with the bound token)
sql >"$dir/partman-fill.out" 2>&1 <<'EOSQL' || { cat "$dir/partman-fill.out"; exit 1; }
CREATE TABLE ev_fill (id bigint NOT NULL, payload text, writer_epoch bigint NOT NULL DEFAULT 0)
  PARTITION BY RANGE (id);
SELECT fence_protect('ev_fill');
EOSQL
check_run "create_parent ev_fill (id, interval 10, premake 1) on a protected table" create_parent_fill \
	"SELECT partman.create_parent('public.ev_fill', 'id', 'native', '10', p_premake => 1, p_jobmon => false)"
tok_load=$(claim load:fill)
check "rows beyond the premade partitions land in ev_fill_default" "$(state "BEGIN;
SELECT fence_begin('load:fill', $tok_load);
INSERT INTO ev_fill SELECT g, 'f' || g FROM generate_series(100, 104) g;
COMMIT;")$(val "SELECT ' ' || count(*) FROM ev_fill_default WHERE writer_epoch = $tok_load")" "00000 5"
check "partition_data_id without a token is refused by the guard; the rows stay in the default partition" \
	"$(state "SELECT partman.partition_data_id('public.ev_fill', p_batch_count => 10)" | sed 's/^5F00[34]$/refused/;s/^P0001$/refused/') $(val "SELECT count(*) FROM ev_fill_default")" \
	"refused 5"
tok_fill=$(claim maint:fill)
check "partition_data_id under fence_begin moves the rows" "$(state "BEGIN;
SELECT fence_begin('maint:fill', $tok_fill);
SELECT partman.partition_data_id('public.ev_fill', p_batch_count => 10);
COMMIT;")" 00000
check "the moved rows are in their new partition, stamped with the bound token" \
	"$(val "SELECT (SELECT count(*) FROM ev_fill_default) || ' ' || count(*) || ' ' || count(*) FILTER (WHERE writer_epoch = $tok_fill) FROM ev_fill_p100")" \
	"0 5 5"
check "the partition partition_data_id created is protected" "$(unprotected_of public.ev_fill_p100)" ""
check "a stale write with the load token to a moved row is refused (5F002)" \
	"$(state "BEGIN; SELECT fence_begin('load:fill', $tok_load); UPDATE ev_fill SET payload = 'stale' WHERE id = 100; COMMIT;")" 5F002

# --- the background worker's call: every set at once
check_run "run_maintenance() over every partition set" maint_all \
	"SELECT partman.run_maintenance(p_jobmon => false)"
all_parts="$(parts_of ev_drop) $(parts_of ev_keep) $(parts_of ev_move)"
check "every partition of the three sets is protected" "$(unprotected_of "$all_parts")" ""

# ===========================================================================
echo "--- pg_repack"
repack()
{
	# repack NAME ARGS...: run the client; its output goes to $dir/NAME.out
	local name=$1
	shift
	(cd "$dir" && fence_as_pg timeout 120 pg_repack -h "$dir/sock" -p "$port" -U postgres -d "$db" "$@") \
		>"$dir/$name.out" 2>&1
}

early=$(claim repack:early) # still current afterwards, older than every row
sql >"$dir/repack-setup.out" 2>&1 <<EOF || { cat "$dir/repack-setup.out"; exit 1; }
CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL, note text NOT NULL,
                   writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE acct_shadow (id int PRIMARY KEY, v int NOT NULL, epoch bigint NOT NULL);
SELECT fence_protect('acct');
SELECT fence_claim('repack:load', '1 hour') AS tok \gset
BEGIN;
SELECT fence_begin('repack:load', :tok);
INSERT INTO acct SELECT g, g, md5(g::text) || repeat('.', 60) FROM generate_series(1, $rows) g;
COMMIT;
SELECT fence_release('repack:load', :tok);
INSERT INTO acct_shadow SELECT id, v, writer_epoch FROM acct;
DELETE FROM acct_shadow WHERE id % 10 = 0;
INSERT INTO acct_shadow SELECT id, v, writer_epoch FROM acct WHERE id % 10 = 0;
EOF
# (the DELETE + INSERT leaves dead tuples in the shadow only: the protected
# table is repacked as it is)
load_tok=$(val "SELECT max(writer_epoch) FROM acct")
acct_oid=$(val "SELECT 'acct'::regclass::oid")
acct_node0=$(val "SELECT pg_relation_filenode('acct')")
notes0=$(val "SELECT md5(string_agg(id || ':' || note, ',' ORDER BY id)) FROM acct")

# the writer: one transaction per psql run (claim, fence_begin, UPDATE acct,
# record it in acct_shadow, COMMIT, release), until told to stop; a line
# per write: its number, exit status, whether pg_repack ran all along
cat >"$dir/write.sql" <<'EOF'
\set ON_ERROR_STOP 1
SELECT fence_claim(:'job', '1 minute') AS tok \gset
BEGIN;
SELECT fence_begin(:'job', :tok);
UPDATE acct SET v = v + 1 WHERE id = :id;
UPDATE acct_shadow SET v = v + 1, epoch = :tok WHERE id = :id;
COMMIT;
SELECT fence_release(:'job', :tok);
EOF
chown postgres:postgres "$dir/write.sql"
rm -f "$dir/stop" "$dir/repacking"
(
	i=0
	while [ ! -e "$dir/stop" ]; do
		i=$((i + 1))
		before=0
		[ -e "$dir/repacking" ] && before=1
		fence_psql "$dir" -d "$db" -XAtq -v job="writer:$i" -v id=$(((i * 7919) % rows + 1)) \
			-f "$dir/write.sql" >>"$dir/writer.err" 2>&1
		rc=$?
		after=0
		[ -e "$dir/repacking" ] && after=1
		echo "$i $rc $((before & after))"
	done
) >"$dir/writer.log" &
writer=$!
sleep 1
# an open transaction: pg_repack copies the rows, then replays its log and
# waits for the transactions that were open when it took its snapshot, so
# the writer's writes meanwhile reach the new table only through that log
fence_psql "$dir" -d "$db" -XAtq -c "SELECT pg_sleep(3)" >/dev/null 2>&1 &
sleeper=$!
sleep 0.3
touch "$dir/repacking"
t0=$(date +%s%N)
repack repack_table --table=public.acct
rc=$?
t1=$(date +%s%N)
rm -f "$dir/repacking"
wait "$sleeper"
sleep 1
touch "$dir/stop"
wait "$writer"
writer=
if [ "$rc" = 0 ]; then
	ok "pg_repack --table=public.acct on the protected table succeeds ($(((t1 - t0) / 1000000)) ms)"
else
	bad "pg_repack --table=public.acct on the protected table: exit $rc:"
	sed 's/^/    /' "$dir/repack_table.out" | head -n 20
fi
n_writes=$(wc -l <"$dir/writer.log")
n_failed=$(awk '$2 != 0' "$dir/writer.log" | wc -l)
n_during=$(awk '$2 == 0 && $3 == 1' "$dir/writer.log" | wc -l)
if [ "$n_failed" = 0 ] && [ "$n_writes" -gt 0 ]; then
	ok "the concurrent writer's $n_writes token writes all committed"
else
	bad "the concurrent writer: $n_failed of $n_writes writes failed:"
	grep -E 'ERROR|FATAL' "$dir/writer.err" | sort | uniq -c | head -n 5 | sed 's/^/    /'
fi
if grep -q 'Waiting for 1 transactions to finish' "$dir/repack_table.out"; then
	ok "pg_repack replayed its log while it waited for the open transaction"
else
	bad "pg_repack did not wait for the open transaction (its output: $(tr '\n' ' ' <"$dir/repack_table.out"))"
fi
if [ "$n_during" -gt 0 ]; then
	ok "$n_during of those writes ran entirely while pg_repack ran"
else
	bad "no write ran entirely while pg_repack ran (it took $(((t1 - t0) / 1000000)) ms)"
fi
check "pg_repack rewrote acct: same oid, new relfilenode" \
	"$(val "SELECT 'acct'::regclass::oid = $acct_oid AND pg_relation_filenode('acct') <> $acct_node0")" t
check "acct keeps its triggers: fence's two, 'A', and no repack_trigger left" \
	"$(val "SELECT string_agg(tgname || '=' || tgenabled::text, ',' ORDER BY tgname) FROM pg_trigger WHERE tgrelid = 'acct'::regclass AND NOT tgisinternal")" \
	"zz_fence_guard=A,zz_fence_truncate=A"
check "acct is still protected (triggers on fence's functions, registry row)" "$(unprotected_of acct)" ""
check "every row of acct equals the shadow: values and writer_epoch, the writes during the repack included" \
	"$(val "SELECT count(*) FROM acct a FULL JOIN acct_shadow s USING (id) WHERE a.v IS DISTINCT FROM s.v OR a.writer_epoch IS DISTINCT FROM s.epoch") $(val "SELECT count(*) FROM acct")" \
	"0 $rows"
touched=$(awk -v n="$rows" '$2 == 0 {print ($1 * 7919) % n + 1}' "$dir/writer.log" | sort -u | wc -l)
check "the rows the writer touched, and only those, have a newer writer_epoch than the load token" \
	"$(val "SELECT count(*) FILTER (WHERE writer_epoch > $load_tok) || ' ' || count(*) FILTER (WHERE writer_epoch < $load_tok) FROM acct")" \
	"$touched 0"
check "column note unchanged by the repack" \
	"$(val "SELECT md5(string_agg(id || ':' || note, ',' ORDER BY id)) FROM acct")" "$notes0"
check "a write with the released load token (stale) fails 5F001" \
	"$(state "UPDATE acct SET v = -1, writer_epoch = $load_tok WHERE id = 3")" 5F001
check "a write with a current token older than the row's epoch fails 5F002" \
	"$(state "UPDATE acct SET v = -1, writer_epoch = $early WHERE id = 3")" 5F002
check "the same under fence_begin fails 5F002" \
	"$(state "BEGIN; SELECT fence_begin('repack:early', $early); UPDATE acct SET v = -1 WHERE id = 3; COMMIT;")" 5F002
check "an UPDATE without a token fails 5F003" "$(state "UPDATE acct SET v = -1 WHERE id = 3")" 5F003
check "an INSERT without a token fails 5F003" "$(state "INSERT INTO acct (id, v, note) VALUES (-1, 0, 'x')")" 5F003
check "TRUNCATE acct fails 5F005" "$(state "TRUNCATE acct")" 5F005
tok=$(claim repack:after)
check "a write with a fresh token is accepted after the repack" \
	"$(state "UPDATE acct SET v = v + 1000, writer_epoch = $tok WHERE id = 3")" 00000

if repack repack_indexes --only-indexes --table=public.acct; then
	ok "pg_repack --only-indexes --table=public.acct succeeds"
else
	bad "pg_repack --only-indexes --table=public.acct: exit $?:"
	sed 's/^/    /' "$dir/repack_indexes.out" | head -n 20
fi
check "acct still protected after the index repack" "$(unprotected_of acct)" ""
check "acct's index still serves the rows" \
	"$(val "SET enable_seqscan = off; SELECT count(*) FROM acct WHERE id BETWEEN 1 AND 1000")" 1000

# --- a protected partitioned table
tok=$(claim load:pt)
sql >"$dir/pt-setup.out" 2>&1 <<EOF || { cat "$dir/pt-setup.out"; exit 1; }
CREATE TABLE pt (id int PRIMARY KEY, v text NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0)
  PARTITION BY RANGE (id);
CREATE TABLE pt_1 PARTITION OF pt FOR VALUES FROM (0) TO (5000);
CREATE TABLE pt_2 PARTITION OF pt FOR VALUES FROM (5000) TO (10000);
SELECT fence_protect('pt');
INSERT INTO pt SELECT g, md5(g::text), $tok FROM generate_series(0, 9999) g;
EOF
pt_nodes0=$(val "SELECT pg_relation_filenode('pt_1') || ' ' || pg_relation_filenode('pt_2')")
pt_sum0=$(val "SELECT md5(string_agg(id || ':' || v || ':' || writer_epoch, ',' ORDER BY id)) FROM pt")
if repack repack_parent --parent-table=public.pt; then
	ok "pg_repack --parent-table=public.pt (protected partitioned table) succeeds"
else
	bad "pg_repack --parent-table=public.pt: exit $?:"
	sed 's/^/    /' "$dir/repack_parent.out" | head -n 20
fi
pt_nodes1=$(val "SELECT pg_relation_filenode('pt_1') || ' ' || pg_relation_filenode('pt_2')")
check "both partitions were rewritten (new relfilenodes)" \
	"$([ "${pt_nodes0% *}" != "${pt_nodes1% *}" ] && echo pt_1) $([ "${pt_nodes0#* }" != "${pt_nodes1#* }" ] && echo pt_2)" \
	"pt_1 pt_2"
check "pt and its partitions are still protected" "$(unprotected_of "pt pt_1 pt_2")" ""
check "pt's rows unchanged (values and writer_epoch)" \
	"$(val "SELECT md5(string_agg(id || ':' || v || ':' || writer_epoch, ',' ORDER BY id)) FROM pt")" "$pt_sum0"
check "a write without a token to pt_2 fails 5F003" "$(state "UPDATE pt SET v = 'x' WHERE id = 7000")" 5F003
check "a second write by the load execution (strict) fails 5G003" \
	"$(state "UPDATE pt SET v = 'x', writer_epoch = $tok WHERE id = 1")" 5G003
check "once its claim is released, a write with the load token fails 5F001" \
	"$(val "SELECT fence_release('load:pt', $tok)") $(state "UPDATE pt SET v = 'x', writer_epoch = $tok WHERE id = 1")" \
	"t 5F001"

# ===========================================================================
echo "--- server log"
fence_check_no_crash "$dir/server.log"
if grep -nE 'cannot run .* on protected table|fence_allow_ddl' "$dir/server.log" | head -n 5 | grep .; then
	bad "no DDL was refused by fence during the partman and pg_repack runs"
else
	ok "no DDL was refused by fence during the partman and pg_repack runs"
fi

total=$((n_ok + n_fail))
if [ "$n_fail" = 0 ]; then
	echo "neighbours: all $total assertions hold (pg_partman retention drop/keep/schema and new partitions, pg_repack table/indexes/partitions)"
	exit 0
fi
echo "neighbours: $n_fail of $total assertions FAILED"
exit 1
