#!/usr/bin/env bash
# test/checks/pglogical.sh: pglogical 2.x (Debian's postgresql-N-pglogical)
# replicates into protected tables.
#
# pglogical's apply worker sets up the subscription's replication origin
# (replorigin_session_setup), and so does the session its initial copy runs
# in (pg_replication_origin_session_setup, then SET session_replication_role
# = replica, then COPY ... FROM stdin). fence lets a session with a
# replication origin through at trigger depth 1: both the copy and the apply
# write protected tables as they arrive, epochs as the provider wrote them.
#
# One throwaway cluster, two databases: provider and subscriber (each with
# fence, so each with its own counter; the provider's is moved to 10^6
# first, so a replicated epoch lies above the subscriber's counter and a
# guard that checked or stamped the apply's rows would show).
# Settings: shared_preload_libraries = 'pglogical', wal_level = logical,
# worker and slot limits, and, on PostgreSQL 15.19 and later,
# output_plugin_libraries must name pglogical_output (without it creating
# the subscription's slot fails: 'library "pglogical_output" may not be used
# as an output plugin', 42501). The script adds it when the server knows the
# parameter.
#
# 1. Tables protected on both sides before the subscription exists: acct
#    (strict), stock (shared). Rows written under fence_begin on the
#    provider arrive by the initial copy (synchronize_data), epochs kept.
#    Twin: the same COPY in an ordinary subscriber session (also with
#    session_replication_role = replica, as pglogical's copy sets it) is
#    refused (5G002: the provider's epochs were never issued here; 5F003
#    without them).
# 2. INSERT, UPDATE, DELETE under fence_begin, and a TRUNCATE (the
#    provider's legitimate way: fence_unprotect, TRUNCATE, fence_protect in
#    one transaction) apply; the subscriber's tables equal the provider's,
#    epochs included, and stay protected ('A', registered).
# 3. Local writes on the subscriber without a token: 5F003 (also as
#    replica); TRUNCATE: 5F005.
# 4. pglogical.alter_subscription_resynchronize_table truncates in the
#    caller's session: refused (5F005), nothing changes. The recipe:
#    fence_unprotect, resynchronize_table, fence_protect in one transaction
#    (recorded in fence_audit_log); the re-copy (a copy session with the
#    origin) fills the protected table again, and the apply goes on.
# 5. The subscription stays 'replicating'; the server log shows no crash.
# One line per assertion ("ok     ..." or "FAILED ..."), then a summary line.
# Exit 0 only if every assertion holds. Waits use pglogical's own wait
# functions (under a statement_timeout); no pass or fail depends on timing.
#
# Environment: FENCE_PORT (else 54350), FENCE_WORK, FENCE_KEEP=1. Standalone
# it expects fence to be installed.
#
# fence-check-timeout: 300
# fence-check-packages: postgresql-@MAJOR@-pglogical
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_install_packages "$(fence_pg_package pglogical)" || fence_die "cannot install $(fence_pg_package pglogical)"
fence_pg_setup

own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-pglogical)
	own_work=1
fi
dir=$work/pglogical
port=${FENCE_PORT:-$(fence_free_port 54350)}
cleanup()
{
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir"
chown postgres:postgres "$dir"
conf="shared_preload_libraries = 'pglogical'
wal_level = logical
max_worker_processes = 16
max_replication_slots = 10
max_wal_senders = 10
track_commit_timestamp = on
log_error_verbosity = verbose"
# PostgreSQL 15.19+: output plugins other than PostgreSQL's own must be listed
# (the list is read whole first: grep -q closing the pipe early would fail it under pipefail)
params=$(cd "$dir" && fence_as_pg postgres --describe-config 2>/dev/null)
if grep -q '^output_plugin_libraries' <<<"$params"; then
	conf="$conf
output_plugin_libraries = 'pgoutput, test_decoding, pglogical_output'"
	plugin_note="output_plugin_libraries includes pglogical_output"
else
	plugin_note="no output_plugin_libraries on this server"
fi
fence_cluster_init "$dir" "$port" "$conf" || exit 1
fence_cluster_start "$dir" || exit 1

# psql on database $1, quiet, unaligned, stopping at the first error
sql() { local db=$1; shift; fence_psql "$dir" -d "$db" -XAtq -v ON_ERROR_STOP=1 "$@"; }
# the value of one query on database $1 (stderr too: an error shows as the value)
val() { sql "$1" -c "$2" 2>&1; }
# the SQLSTATE of running $2 on database $1 in its own session: 00000 if it succeeds
state()
{
	local out rc code
	out=$(sql "$1" -c '\set VERBOSITY sqlstate' -c "$2" 2>&1 >/dev/null)
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
# run SQL (stdin) on database $1, output in $dir/$2.out; print the errors if it fails
run_logged()
{
	local db=$1 out=$dir/$2.out
	if sql "$db" -v VERBOSITY=verbose >"$out" 2>&1; then
		return 0
	fi
	grep -E '^(psql:.*)?(ERROR|DETAIL|HINT|CONTEXT)' "$out" | head -n 12 | sed 's/^/    /'
	return 1
}

die_setup() { bad "$1"; echo "pglogical: setup failed"; exit 1; }

# a table's rows, epochs included, on database $1
rows() { val "$1" "SELECT string_agg(t::text, ' ' ORDER BY t::text) FROM $2 t"; }
same_rows()
{
	local p s
	p=$(rows provider "$1")
	s=$(rows subscriber "$1")
	if [ -n "$p" ] && [ "$p" = "$s" ]; then
		ok "$2: $1 on the subscriber equals the provider's, epochs included"
	else
		bad "$2: $1 differs: provider '$p', subscriber '$s'"
	fi
}
# fence's triggers on table $1 of the subscriber and its registry row
protection() { val subscriber "SELECT string_agg(tgname || '=' || tgenabled::text, ',' ORDER BY tgname) || ' ' ||
	coalesce((SELECT mode FROM fence_protected WHERE relation = '$1'::regclass), 'unregistered')
	FROM pg_trigger WHERE tgrelid = '$1'::regclass AND tgname LIKE 'zz_fence_%'"; }
wait_apply() { sql provider -c "SET statement_timeout = '120s'" -c 'SELECT pglogical.wait_slot_confirm_lsn(NULL, NULL)' >/dev/null 2>&1; }
wait_sync()
{
	sql subscriber -c "SET statement_timeout = '120s'" -c "SELECT pglogical.wait_for_subscription_sync_complete('sub1')" >/dev/null 2>&1
}
status() { val subscriber "SELECT status FROM pglogical.show_subscription_status('sub1')"; }

dsn="host=$dir/sock port=$port user=postgres"
fence_psql "$dir" -d postgres -XAtq -v ON_ERROR_STOP=1 -c 'CREATE DATABASE provider' -c 'CREATE DATABASE subscriber' ||
	die_setup "create the databases"

tables="
CREATE EXTENSION fence;
CREATE EXTENSION pglogical;
CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('acct');
CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('stock', mode => 'shared');
"
run_logged provider provider-setup <<EOF || die_setup "provider: tables, node, replication set"
$tables
SELECT fence_advance(1000000);
SELECT fence_claim('load', '1 hour') AS t \gset
BEGIN;
SELECT fence_begin('load', :t);
INSERT INTO acct SELECT g, g * 10 FROM generate_series(1, 6) g;
INSERT INTO stock SELECT 'sku-' || g, 100 FROM generate_series(1, 4) g;
COMMIT;
SELECT pglogical.create_node('provider', '$dsn dbname=provider');
SELECT pglogical.replication_set_add_table('default', 'acct', synchronize_data := true);
SELECT pglogical.replication_set_add_table('default', 'stock', synchronize_data := true);
EOF
echo "pglogical: PostgreSQL $(val provider 'SHOW server_version'), fence $(val provider "SELECT extversion FROM pg_extension WHERE extname = 'fence'"), pglogical $(val provider "SELECT extversion FROM pg_extension WHERE extname = 'pglogical'"); $plugin_note"
load_token=$(val provider "SELECT token FROM fence_claims WHERE job = 'load'")

# ===========================================================================
echo "--- 1. the initial copy into protected tables"
run_logged subscriber subscriber-setup <<EOF || die_setup "subscriber: tables, node, subscription"
$tables
SELECT pglogical.create_node('subscriber', '$dsn dbname=subscriber');
SELECT pglogical.create_subscription('sub1', '$dsn dbname=provider',
       replication_sets := ARRAY['default'], synchronize_structure := false,
       synchronize_data := true);
EOF
if wait_sync; then
	ok "the initial copy completes (wait_for_subscription_sync_complete)"
else
	bad "the initial copy completes (wait_for_subscription_sync_complete)"
	grep -E 'ERROR' "$dir/server.log" | head -n 5
	echo "pglogical: the subscription did not start; stopping here"
	exit 1
fi
check "the subscription is replicating" "$(status)" replicating
same_rows acct "initial copy"
same_rows stock "initial copy"
check "initial copy: acct's rows keep the provider's epoch (above the subscriber's counter $(val subscriber 'SELECT last_value FROM fence_token_seq'))" \
	"$(val subscriber "SELECT count(*) FILTER (WHERE writer_epoch = $load_token) || ' ' || bool_and(writer_epoch > (SELECT last_value FROM fence_token_seq)) FROM acct")" "6 true"
check "pglogical's replication origin exists on the subscriber" \
	"$(val subscriber "SELECT count(*) FROM pg_replication_origin WHERE roname = (SELECT slot_name FROM pglogical.show_subscription_status('sub1'))")" 1

# twin: the same COPY in an ordinary session
sql subscriber -c "CREATE TABLE acct_copy (LIKE acct INCLUDING ALL)" -c "SELECT fence_protect('acct_copy')" >/dev/null ||
	die_setup "subscriber: acct_copy"
copy_into()
{
	local opts=$1 cols=$2 out
	out=$(sql provider -c "COPY acct ($cols) TO STDOUT" |
		sql subscriber -c '\set VERBOSITY sqlstate' -c "$opts" -c "COPY acct_copy ($cols) FROM STDIN" 2>&1 >/dev/null)
	sed -n 's/^\(psql:[^ ]* \)\{0,1\}ERROR: *\([0-9A-Z]\{5\}\)$/\2/p' <<<"$out" | head -n 1
}
check "twin: the copy's rows (the provider's epochs) COPYed by an ordinary session: 5G002" \
	"$(copy_into "SET application_name = twin" "id, v, writer_epoch")" 5G002
check "twin: ... with session_replication_role = replica, as pglogical's copy sets it: 5G002" \
	"$(copy_into "SET session_replication_role = replica" "id, v, writer_epoch")" 5G002
check "twin: ... without the epochs: 5F003" \
	"$(copy_into "SET session_replication_role = replica" "id, v")" 5F003
check "twin: acct_copy stays empty" "$(val subscriber 'SELECT count(*) FROM acct_copy')" 0

# ===========================================================================
echo "--- 2. the apply: INSERT, UPDATE, DELETE, TRUNCATE"
run_logged provider provider-writes <<'EOF' || die_setup "provider: guarded writes"
SELECT fence_claim('w2', '1 hour') AS t \gset
BEGIN;
SELECT fence_begin('w2', :t);
INSERT INTO acct VALUES (7, 70), (8, 80);
UPDATE acct SET v = v + 1 WHERE id IN (1, 2);
DELETE FROM acct WHERE id = 3;
UPDATE stock SET qty = qty - 1 WHERE sku = 'sku-1';
DELETE FROM stock WHERE sku = 'sku-4';
COMMIT;
SELECT fence_claim('w3', '1 hour') AS t3 \gset
UPDATE acct SET v = 444, writer_epoch = :t3 WHERE id = 4;
EOF
wait_apply || bad "wait_slot_confirm_lsn after the writes"
same_rows acct "after INSERT, UPDATE, DELETE"
same_rows stock "after INSERT, UPDATE, DELETE"
w2=$(val provider "SELECT token FROM fence_claims WHERE job = 'w2'")
check "the apply kept the provider's epoch $w2 on the rows it wrote" \
	"$(val subscriber "SELECT string_agg(id::text, ' ' ORDER BY id) FROM acct WHERE writer_epoch = $w2")" "1 2 7 8"
run_logged provider provider-truncate <<'EOF' || die_setup "provider: unprotect, TRUNCATE, protect"
BEGIN;
SELECT fence_unprotect('stock', 'pglogical check: empty the stock');
TRUNCATE stock;
SELECT fence_protect('stock', mode => 'shared');
COMMIT;
SELECT fence_claim('w4', '1 hour') AS t \gset
INSERT INTO stock VALUES ('sku-9', 9, :t);
EOF
wait_apply || bad "wait_slot_confirm_lsn after the TRUNCATE"
check "the replicated TRUNCATE emptied the subscriber's stock (then one new row)" \
	"$(val subscriber 'SELECT count(*) FROM stock')" 1
same_rows stock "after TRUNCATE"
check "acct stays protected on the subscriber" "$(protection acct)" "zz_fence_guard=A,zz_fence_truncate=A strict"
check "stock stays protected on the subscriber" "$(protection stock)" "zz_fence_guard=A,zz_fence_truncate=A shared"

# ===========================================================================
echo "--- 3. local writes on the subscriber"
check "local INSERT without a token: 5F003" "$(state subscriber 'INSERT INTO acct (id, v) VALUES (100, 1)')" 5F003
check "local UPDATE without a token: 5F003" "$(state subscriber 'UPDATE acct SET v = 0 WHERE id = 1')" 5F003
check "local DELETE without a token: 5F003" "$(state subscriber 'DELETE FROM stock')" 5F003
check "local UPDATE as replica: 5F003" \
	"$(state subscriber 'SET session_replication_role = replica; UPDATE acct SET v = 0 WHERE id = 1')" 5F003
check "local TRUNCATE: 5F005" "$(state subscriber 'TRUNCATE acct')" 5F005
same_rows acct "after the refused local writes"

# ===========================================================================
echo "--- 4. resynchronize_table"
check "pglogical.alter_subscription_resynchronize_table alone: its TRUNCATE is refused (5F005)" \
	"$(state subscriber "SELECT pglogical.alter_subscription_resynchronize_table('sub1', 'acct')")" 5F005
same_rows acct "after the refused resynchronization"
if run_logged subscriber resync <<'EOF'; then
BEGIN;
SELECT fence_unprotect('acct', 'pglogical resynchronize_table acct');
SELECT pglogical.alter_subscription_resynchronize_table('sub1', 'acct');
SELECT fence_protect('acct');
COMMIT;
EOF
	ok "the recipe: fence_unprotect, resynchronize_table, fence_protect in one transaction"
else
	bad "the recipe: fence_unprotect, resynchronize_table, fence_protect in one transaction"
fi
# pglogical's sync worker catches up to the provider's position by applying
# a replicated change past it: the provider writes one (a quiet provider would
# leave it waiting).
run_logged provider provider-after <<'EOF' || die_setup "provider: a write after the resynchronization"
SELECT fence_claim('w5', '1 hour') AS t \gset
UPDATE acct SET v = 5, writer_epoch = :t WHERE id = 5;
EOF
if sql subscriber -c "SET statement_timeout = '120s'" -c "SELECT pglogical.wait_for_table_sync_complete('sub1', 'acct')" >/dev/null 2>&1; then
	ok "the re-copy of acct completes"
else
	bad "the re-copy of acct completes"
fi
wait_apply || bad "wait_slot_confirm_lsn after the re-copy"
same_rows acct "after the re-copy"
check "acct is protected again (the re-copy wrote a protected table)" "$(protection acct)" "zz_fence_guard=A,zz_fence_truncate=A strict"
check "fence_audit_log records the unprotect and the protect, with the reason" \
	"$(val subscriber "SELECT string_agg(a, ',' ORDER BY id) FROM (SELECT id, action || coalesce(':' || reason, '') AS a
	    FROM fence_audit_log WHERE relation IN ('acct', 'public.acct') AND action IN ('unprotect', 'protect')
	    ORDER BY id DESC LIMIT 2) last_two")" \
	"unprotect:pglogical resynchronize_table acct,protect"
run_logged provider provider-after2 <<'EOF' || die_setup "provider: writes after the resynchronization"
SELECT fence_claim('w6', '1 hour') AS t \gset
UPDATE acct SET v = 6, writer_epoch = :t WHERE id = 6;
EOF
wait_apply || bad "wait_slot_confirm_lsn after the resynchronization"
same_rows acct "the apply after the re-copy"

# ===========================================================================
echo "--- 5. subscription and server log"
check "the subscription is still replicating" "$(status)" replicating
fence_check_no_crash "$dir/server.log"
if grep -nE '\] pglogical (apply|sync|manager).*ERROR' "$dir/server.log" | head -n 5 | grep .; then
	bad "no pglogical worker met an error"
else
	ok "no pglogical worker met an error"
fi

total=$((n_ok + n_fail))
if [ "$n_fail" = 0 ]; then
	echo "pglogical: all $total assertions hold (initial copy, apply, TRUNCATE, resynchronization recipe into protected tables)"
	exit 0
fi
echo "pglogical: $n_fail of $total assertions FAILED"
exit 1
