#!/usr/bin/env bash
# test/checks/neighbours_preload.sh: fence beside the neighbours that must be
# in shared_preload_libraries, pg_cron and pgaudit.  They get a
# cluster of their own, so that test/checks/neighbours.sh (pg_partman,
# pg_repack) runs without them.
#
# One throwaway cluster with shared_preload_libraries =
# 'pg_cron,pgaudit,fence' (fence too: its planner and ExecutorStart hooks,
# the guard's inline form, chained with pgaudit's executor hooks),
# pgaudit.log = 'write, ddl', pg_cron in database postgres (its default
# cron.database_name), jobs run in database "preload" through
# cron.schedule_in_database with a '* * * * *' schedule (Debian 12's pg_cron
# 1.4.2 has no '[1-59] seconds' schedules: that came with 1.5), each
# unscheduled after its first finished run.  The jobs of one part run at
# the same minute boundary, so each part waits up to a minute.
#
# 1. pg_cron, jobs connecting over libpq (the default; cron.host is the
#    cluster's socket directory):
#    - a job without a token that updates a protected table fails, and
#      cron.job_run_details keeps fence's message (pg_cron keeps the message,
#      not the SQLSTATE): it names the table and says the write carries no
#      fencing token (5F003); the row is unchanged.
#    - twin: the same job against an unprotected table succeeds and its
#      write lands, so the failure above is fence's doing.
#    - the sanctioned path of doc/fence.md 9.9, as one job command:
#      'SELECT fence_begin_fresh(''cron: ...''); UPDATE ...'.  pg_cron sends
#      it as one query string, which PostgreSQL runs as one transaction, so
#      the binding covers the UPDATE: the job succeeds, the row carries the
#      fresh token, and fence_audit_log has the begin_fresh row (role, token,
#      reason).
# 2. pg_cron with cron.use_background_workers = on (the cluster restarted):
#    the tokenless job fails with fence's message; the sanctioned command
#    succeeds (one transaction in the worker) and is audited, and, as
#    doc/fence.md 9.9 says, fence_begin_fresh raised the WARNING that it
#    found no transaction block (in the server log).
# 3. pgaudit (CREATE EXTENSION pgaudit too, for its event triggers):
#    fence_protect, a claim, a guarded write under fence_begin, and fence's
#    refusals all work with pgaudit loaded: a released token's write fails
#    5F001 (twin: on an unprotected table the same stale write lands over the
#    successor's), a write without a token fails 5F003, disarming DDL fails
#    5F006 beside pgaudit's event triggers; fence_audit() reports no error.
#    The stale write goes through fence's inline form (fence_stats counts
#    it), its hooks called in turn with pgaudit's.
#    pgaudit's log has the lines: WRITE for the guarded UPDATE and for the
#    refused one (logged before it ran), DDL for CREATE TABLE.
# 4. The server log shows no crash.
# One line per assertion ("ok     ..." or "FAILED ..."), then a summary line.
# Exit 0 only if every assertion holds.
#
# Environment: FENCE_PORT (else 54366), FENCE_WORK, FENCE_KEEP=1.
# Standalone it expects fence to be installed.
#
# fence-check-timeout: 300
# fence-check-packages: postgresql-@MAJOR@-cron postgresql-@MAJOR@-pgaudit
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
# shellcheck disable=SC2046
fence_install_packages $(fence_pg_package cron pgaudit) ||
	fence_die "cannot install $(fence_pg_package cron pgaudit | xargs)"
fence_pg_setup

own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-preload)
	own_work=1
fi
dir=$work/preload
port=${FENCE_PORT:-$(fence_free_port 54366)}
cleanup()
{
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir"
chown postgres:postgres "$dir"
fence_cluster_init "$dir" "$port" "autovacuum = off
shared_preload_libraries = 'pg_cron,pgaudit,fence'
cron.database_name = 'postgres'
cron.host = '$dir/sock'
pgaudit.log = 'write, ddl'" || exit 1
fence_cluster_start "$dir" || exit 1

db=preload
# psql on $db (or on $2), quiet, unaligned, stopping at the first error
sql() { fence_psql "$dir" -d "$db" -XAtq -v ON_ERROR_STOP=1 "$@"; }
# the value of one query (stderr too, so that an error shows as the value)
val() { fence_psql "$dir" -d "${2:-$db}" -XAtq -v ON_ERROR_STOP=1 -c "$1" 2>&1; }
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

# check_has DESCRIPTION ACTUAL EXTENDED-REGEX
check_has()
{
	if grep -qE "$3" <<<"$2"; then
		ok "$1"
	else
		bad "$1: got '$2', expected it to match /$3/"
	fi
}

# cron_schedule NAME COMMAND: schedule COMMAND in $db every minute; prints
# the job id.  cron_first ID: wait (up to 90 s: the next minute, then
# pg_cron's launcher) for the job's first finished run and print its
# "status|return_message".  cron_stop ID...: unschedule the jobs and wait
# until no run of them is in flight.
cron_schedule() { val "SELECT cron.schedule_in_database('$1', '* * * * *', \$cmd\$$2\$cmd\$, '$db')" postgres; }
cron_first()
{
	local out=''
	[[ $1 =~ ^[0-9]+$ ]] || { echo "not scheduled: $1"; return; }
	for _ in $(seq 1 180); do
		out=$(val "SELECT status || '|' || coalesce(return_message, '') FROM cron.job_run_details
		           WHERE jobid = $1 AND status IN ('succeeded', 'failed') ORDER BY runid LIMIT 1" postgres)
		[ -n "$out" ] && break
		sleep 0.5
	done
	echo "$out"
}
cron_stop()
{
	local id
	for id in "$@"; do
		[[ $id =~ ^[0-9]+$ ]] && val "SELECT cron.unschedule($id)" postgres >/dev/null
	done
	for _ in $(seq 1 60); do
		[ "$(val "SELECT count(*) FROM cron.job_run_details WHERE status NOT IN ('succeeded', 'failed')" postgres)" = 0 ] && break
		sleep 0.5
	done
}

fence_psql "$dir" -d postgres -XAtq -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db" -c "CREATE EXTENSION pg_cron" || exit 1
sql >"$dir/setup.out" 2>&1 <<'EOF' || { cat "$dir/setup.out"; exit 1; }
CREATE EXTENSION fence;
CREATE EXTENSION pgaudit;
CREATE TABLE nightly (id int PRIMARY KEY, v text NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE nightly_plain (id int PRIMARY KEY, v text NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO nightly VALUES (1, 'initial'), (2, 'initial');
INSERT INTO nightly_plain VALUES (1, 'initial'), (2, 'initial');
SELECT fence_protect('nightly');
EOF
echo "neighbours_preload: PostgreSQL $(val 'SHOW server_version'), fence $(val "SELECT extversion FROM pg_extension WHERE extname = 'fence'"), pg_cron $(val "SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'" postgres), pgaudit $(val "SELECT extversion FROM pg_extension WHERE extname = 'pgaudit'"); shared_preload_libraries = $(val 'SHOW shared_preload_libraries')"

# the cron jobs of parts 1 and 2, scheduled together (they write different
# rows) so that one minute boundary runs them all; $1 = a tag for the job
# names and values
cron_jobs()
{
	local tag=$1 r msg reason="cron: nightly fix ($1)" j_tokenless j_plain j_fresh
	j_tokenless=$(cron_schedule "tokenless-$tag" "UPDATE nightly SET v = 'cron $tag' WHERE id = 1")
	j_plain=$(cron_schedule "tokenless-plain-$tag" "UPDATE nightly_plain SET v = 'cron $tag' WHERE id = 1")
	j_fresh=$(cron_schedule "fresh-$tag" "SELECT fence_begin_fresh('$reason'); UPDATE nightly SET v = 'fixed $tag' WHERE id = 2")
	r=$(cron_first "$j_tokenless")
	msg=${r#*|}
	check "$tag: a tokenless job writing protected table nightly fails" "${r%%|*}" failed
	check_has "$tag: job_run_details keeps fence's message (names the table, no fencing token)" \
		"$msg" 'write to "nightly" carries no fencing token'
	r=$(cron_first "$j_plain")
	check "$tag: twin: the same job against unprotected nightly_plain succeeds" "${r%%|*}" succeeded
	r=$(cron_first "$j_fresh")
	check "$tag: fence_begin_fresh(reason) then the UPDATE, as one job command, succeeds" "${r%%|*}" succeeded
	cron_stop "$j_tokenless" "$j_plain" "$j_fresh"
	check "$tag: the protected row is unchanged" "$(val "SELECT v FROM nightly WHERE id = 1")" initial
	check "$tag: twin: the unprotected row has the job's write" "$(val "SELECT v FROM nightly_plain WHERE id = 1")" "cron $tag"
	check "$tag: the fixed row is written, stamped with the token of the latest audited begin_fresh" \
		"$(val "SELECT n.v || ' ' || (n.writer_epoch = (SELECT max(substring(detail FROM '^token ([0-9]+)$')::bigint)
		                                                FROM fence_audit_log WHERE action = 'begin_fresh' AND reason = '$reason'))
		        FROM nightly n WHERE id = 2")" \
		"fixed $tag true"
	check "$tag: fence_audit_log has its begin_fresh row (role postgres, the reason)" \
		"$(val "SELECT count(*) > 0 AND bool_and(role = 'postgres') FROM fence_audit_log WHERE action = 'begin_fresh' AND reason = '$reason'")" t
}

# ===========================================================================
echo "--- pg_cron: jobs over libpq (cron.host = the socket directory)"
check "cron.use_background_workers is off" "$(val 'SHOW cron.use_background_workers')" off
log_before=$(wc -l <"$dir/server.log")
cron_jobs libpq
check "libpq: fence_begin_fresh found the job's transaction block (no WARNING in the server log)" \
	"$(tail -n +"$((log_before + 1))" "$dir/server.log" | grep -c 'fence_begin_fresh outside a transaction block')" 0

# ===========================================================================
echo "--- pg_cron: jobs in background workers (cron.use_background_workers = on)"
echo "cron.use_background_workers = on" >>"$dir/data/postgresql.conf"
fence_cluster_stop "$dir"
fence_cluster_start "$dir" || exit 1
check "cron.use_background_workers is on after the restart" "$(val 'SHOW cron.use_background_workers')" on
log_before=$(wc -l <"$dir/server.log")
val "UPDATE nightly_plain SET v = 'initial' WHERE id = 1" >/dev/null
cron_jobs bgworker
check_has "bgworker: fence_begin_fresh raised its WARNING (no transaction block), as doc/fence.md 9.9 says" \
	"$(tail -n +"$((log_before + 1))" "$dir/server.log" | grep -c 'fence_begin_fresh outside a transaction block')" '^[1-9]'

# ===========================================================================
echo "--- pgaudit (pgaudit.log = 'write, ddl')"
check "pgaudit.log" "$(val 'SHOW pgaudit.log')" "write, ddl"
log_before=$(wc -l <"$dir/server.log")
check "CREATE TABLE and fence_protect with pgaudit loaded" "$(state "
CREATE TABLE ledger (id int PRIMARY KEY, v text NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE ledger_plain (id int PRIMARY KEY, v text NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO ledger_plain VALUES (1, 'initial');
SELECT fence_protect('ledger');")" 00000
stale=$(val "SELECT fence_claim('audit:job', '1 hour')")
check "a claim with pgaudit loaded returns a token" "$([[ $stale =~ ^[0-9]+$ ]] && echo token || echo "$stale")" token
check "a guarded INSERT under fence_begin" "$(state "BEGIN;
SELECT fence_begin('audit:job', $stale);
INSERT INTO ledger VALUES (1, 'initial');
COMMIT;")" 00000
val "SELECT fence_release('audit:job', $stale)" >/dev/null
fresh=$(val "SELECT fence_claim('audit:job', '1 hour')")
check "the successor's guarded UPDATE (audit-guarded) lands, stamped with its token" \
	"$(state "BEGIN; SELECT fence_begin('audit:job', $fresh); UPDATE ledger SET v = 'audit-guarded' WHERE id = 1; COMMIT;") $(val "SELECT v || ' ' || (writer_epoch = $fresh) FROM ledger")" \
	"00000 audit-guarded true"
check "the released token's write (audit-stale) fails 5F001 and the successor's value stays" \
	"$(state "UPDATE ledger SET v = 'audit-stale', writer_epoch = $stale WHERE id = 1") $(val "SELECT v FROM ledger")" \
	"5F001 audit-guarded"
check "twin: on unprotected ledger_plain the stale write lands over the successor's" \
	"$(state "UPDATE ledger_plain SET v = 'plain-successor', writer_epoch = $fresh WHERE id = 1") $(state "UPDATE ledger_plain SET v = 'plain-stale', writer_epoch = $stale WHERE id = 1") $(val "SELECT v FROM ledger_plain")" \
	"00000 00000 plain-stale"
inline_before=$(val "SELECT inline_writes FROM fence_stats")
check "fence's inline form checked that stale write, its hooks chained with pgaudit's (fence_stats counts one UPDATE more)" \
	"$(state "UPDATE ledger SET v = 'audit-stale', writer_epoch = $stale WHERE id = 1") $(val "SELECT inline_writes FROM fence_stats")" \
	"5F001 $((inline_before + 1))"
check "a write without a token fails 5F003" "$(state "UPDATE ledger SET v = 'audit-notoken' WHERE id = 1")" 5F003
check "disarming DDL fails 5F006 beside pgaudit's event triggers" \
	"$(state "ALTER TABLE ledger DISABLE TRIGGER zz_fence_guard")" 5F006
check "pgaudit's event triggers are there and enabled" \
	"$(val "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'pgaudit%' AND evtenabled <> 'D'")" 2
check "fence_audit() reports no error" "$(val "SELECT count(*) FROM fence_audit() WHERE severity = 'error'")" 0
newlog=$(tail -n +"$((log_before + 1))" "$dir/server.log")
check_has "pgaudit logged DDL for CREATE TABLE ledger" "$newlog" 'AUDIT: SESSION,[0-9]+,[0-9]+,DDL,CREATE TABLE,.*ledger'
check_has "pgaudit logged the guarded UPDATE (WRITE)" "$newlog" "AUDIT: SESSION,[0-9]+,[0-9]+,WRITE,UPDATE,.*audit-guarded"
check_has "pgaudit logged the refused stale UPDATE too (WRITE, before the guard refused it)" \
	"$newlog" "AUDIT: SESSION,[0-9]+,[0-9]+,WRITE,UPDATE,.*audit-stale"
check_has "the server log has fence's refusal of that write" "$newlog" "ERROR: +fencing token $stale (of job \"audit:job\" )?has been superseded"

# ===========================================================================
echo "--- server log"
fence_check_no_crash "$dir/server.log"

total=$((n_ok + n_fail))
if [ "$n_fail" = 0 ]; then
	echo "neighbours_preload: all $total assertions hold (pg_cron over libpq and in background workers, pgaudit)"
	exit 0
fi
echo "neighbours_preload: $n_fail of $total assertions FAILED"
exit 1
