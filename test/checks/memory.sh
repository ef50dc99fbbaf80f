#!/usr/bin/env bash
# test/checks/memory.sh: fence keeps a backend's memory flat.
#
# One session (one backend) runs, in order:
#   1. a 1M-row UPDATE of an unprotected table with a no-op C BEFORE ROW
#      trigger (suppress_redundant_updates_trigger, built in): the yardstick.
#      PostgreSQL itself keeps ~30 bytes a row until the end of an UPDATE
#      of a table with any BEFORE ROW UPDATE trigger (C or PL/pgSQL,
#      measured on 15: 3 MB without a trigger, 33 MB with one, for 1M rows),
#      so a table with no trigger at all is not a fair yardstick; that one is
#      printed too;
#   2. the same UPDATE of a protected table, token bound by fence_begin;
#   3. the same UPDATE again, token in the statement (SET writer_epoch = tok);
#   4. 100,000 claims (fence_claim with 1 ms leases over 1,000 jobs, so most
#      are takeovers), one statement each.
# Meanwhile this script samples the backend's private memory (RssAnon in
# /proc/PID/status) and which statement it is running; the session itself
# reads its memory contexts (pg_backend_memory_contexts) between phases and
# every 10,000 claims.
# Pass:
#   - peak RssAnon during a guarded UPDATE <= peak during the no-op-trigger
#     UPDATE + 8 MB (a leak of 8 bytes a row would show);
#   - memory contexts after the guarded UPDATEs <= before + 1 MB;
#   - memory contexts after 100,000 claims <= after the first 10,000 + 1 MB,
#     and RssAnon likewise + 4 MB.
#
# Environment: FENCE_PORT (else 54336), FENCE_WORK, FENCE_QUICK=1 (smaller),
# FENCE_SOAK=1 (larger).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_pg_setup

rows=1000000
claims=100000
if [ "${FENCE_SOAK:-0}" = 1 ]; then
	rows=3000000; claims=500000
fi
step=$((claims / 10))

own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-memory)
	own_work=1
fi
dir=$work/memory
port=${FENCE_PORT:-$(fence_free_port 54336)}
cleanup()
{
	[ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir"
chown postgres:postgres "$dir"
fence_cluster_init "$dir" "$port" "shared_buffers = 256MB
max_wal_size = 4GB
checkpoint_timeout = 30min
autovacuum = off" || exit 1
fence_cluster_start "$dir" || exit 1

echo "memory: setting up $rows rows"
fence_psql "$dir" -d postgres -v ON_ERROR_STOP=1 -q >/dev/null <<EOF || exit 1
CREATE EXTENSION fence;
CREATE TABLE big (id int PRIMARY KEY, v int NOT NULL, writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO big SELECT g, 0, 0 FROM generate_series(1, $rows) g;
CREATE TABLE big_plain (LIKE big INCLUDING ALL);
INSERT INTO big_plain SELECT * FROM big;
CREATE TABLE big_trig (LIKE big INCLUDING ALL);
INSERT INTO big_trig SELECT * FROM big;
CREATE TRIGGER noop BEFORE UPDATE ON big_trig
  FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
SELECT fence_protect('big');
VACUUM ANALYZE big;
VACUUM ANALYZE big_plain;
VACUUM ANALYZE big_trig;
EOF

# the session's script
script=$dir/session.sql
{
	echo "SET application_name = 'fence_mem';"
	echo "\\set ON_ERROR_STOP 1"
	echo "SELECT pg_sleep(0.5);"
	echo "SELECT 'MEM before ' || sum(total_bytes) FROM pg_backend_memory_contexts;"
	echo "UPDATE big_plain SET v = v + 1;"
	echo "SELECT pg_sleep(0.5);"
	echo "UPDATE big_trig SET v = v + 1 /* noop_trigger */;"
	echo "SELECT 'MEM after_plain ' || sum(total_bytes) FROM pg_backend_memory_contexts;"
	echo "SELECT pg_sleep(0.5);"
	echo "SELECT fence_claim('mem', '1 hour') AS tok \\gset"
	echo "BEGIN;"
	echo "SELECT fence_begin('mem', :tok);"
	echo "UPDATE big SET v = v + 1 /* guarded_begin */;"
	echo "COMMIT;"
	echo "SELECT 'MEM after_guarded_begin ' || sum(total_bytes) FROM pg_backend_memory_contexts;"
	echo "SELECT fence_release('mem', :tok);"
	echo "SELECT fence_claim('mem', '1 hour') AS tok \\gset"
	echo "UPDATE big SET v = v + 1, writer_epoch = :tok /* guarded_stmt */;"
	echo "SELECT 'MEM after_guarded_stmt ' || sum(total_bytes) FROM pg_backend_memory_contexts;"
	echo "SELECT 'CHECK ' || count(*) FILTER (WHERE v = 2 AND writer_epoch = :tok) FROM big;"
	echo "SELECT pg_sleep(0.5);"
	for ((i = 1; i <= claims; i++)); do
		echo "SELECT fence_claim('loop-$((i % 1000))', '1 ms');"
		if ((i % step == 0)); then
			echo "SELECT 'MEM claims_$i ' || sum(total_bytes) FROM pg_backend_memory_contexts;"
		fi
	done
	echo "SELECT 'TOP ' || name || ' ' || total_bytes FROM pg_backend_memory_contexts ORDER BY total_bytes DESC LIMIT 8;"
} >"$script"
chown postgres:postgres "$script"

# the sampler: the session's RssAnon (kB) and what it is running
samples=$dir/samples.txt
: >"$samples"
(
	while true; do
		line=$(fence_psql "$dir" -d postgres -XAt -F '|' -c \
			"SELECT pid, coalesce(substring(query from '/\\* (\\w+) \\*/'), CASE WHEN query LIKE 'UPDATE big_plain%' THEN 'plain' WHEN query LIKE 'SELECT fence_claim(''loop-%' THEN 'claims' ELSE 'other' END)
			   FROM pg_stat_activity WHERE application_name = 'fence_mem'" 2>/dev/null)
		if [ -n "$line" ]; then
			pid=${line%%|*}
			phase=${line#*|}
			rss=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
			[ -n "$rss" ] && echo "$phase $rss" >>"$samples"
		fi
		sleep 0.2
	done
) &
sampler=$!

echo "memory: one session: 4 x $rows-row UPDATE, then $claims claims"
t0=$(date +%s)
out=$dir/session.out
if ! fence_psql "$dir" -d postgres -XAtq -f "$script" >"$out" 2>&1; then
	tail -n 20 "$out"
	echo "memory: the session failed" >&2
	exit 1
fi
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
sampler=
echo "memory: session took $(($(date +%s) - t0)) s"

mem() { sed -n "s/^MEM $1 //p" "$out"; }
peak() { awk -v p="$1" '$1 == p && $2 > m {m = $2} END {print m + 0}' "$samples"; }
first() { awk -v p="$1" '$1 == p {print $2; exit}' "$samples"; }
last() { awk -v p="$1" '$1 == p {v = $2} END {print v + 0}' "$samples"; }

status=0
check()
{
	# check DESCRIPTION VALUE LIMIT
	if [ "$2" -le "$3" ]; then
		echo "ok     $1: $2 <= $3"
	else
		echo "FAILED $1: $2 > $3"
		status=1
	fi
}

updated=$(sed -n 's/^CHECK //p' "$out")
check "rows stamped by the guarded UPDATEs (all $rows)" "$((rows - updated))" 0

p_plain=$(peak plain)
p_trig=$(peak noop_trigger)
p_begin=$(peak guarded_begin)
p_stmt=$(peak guarded_stmt)
echo "RssAnon peak (kB) during a $rows-row UPDATE: no trigger $p_plain, no-op C BEFORE ROW trigger $p_trig," \
	"fence guard with fence_begin $p_begin, fence guard with the token in the statement $p_stmt"
if [ "$p_trig" -eq 0 ] || [ "$p_begin" -eq 0 ] || [ "$p_stmt" -eq 0 ]; then
	echo "FAILED: the sampler missed a phase (samples: $(wc -l <"$samples"))"
	status=1
fi
check "guarded UPDATE (fence_begin) peak RssAnon kB vs no-op trigger + 8 MB" "$p_begin" $((p_trig + 8192))
check "guarded UPDATE (token in statement) peak RssAnon kB vs no-op trigger + 8 MB" "$p_stmt" $((p_trig + 8192))

m_before=$(mem after_plain)
m_after=$(mem after_guarded_stmt)
echo "memory contexts (bytes): before $(mem before), after unguarded $m_before, after fence_begin UPDATE $(mem after_guarded_begin), after token-in-statement UPDATE $m_after"
check "memory contexts after the guarded UPDATEs vs before + 1 MB" "$m_after" $((m_before + 1048576))

c_first=$(mem "claims_$step")
c_last=$(mem "claims_$claims")
echo "memory contexts (bytes) every $step claims: $(for ((i = step; i <= claims; i += step)); do printf '%s ' "$(mem "claims_$i")"; done)"
check "memory contexts after $claims claims vs after $step + 1 MB" "$c_last" $((c_first + 1048576))
r_first=$(first claims)
r_last=$(last claims)
echo "RssAnon (kB) during the claims: first sample $r_first, last $r_last, peak $(peak claims)"
check "RssAnon kB at the end of the claim loop vs its start + 4 MB" "${r_last:-0}" $((${r_first:-0} + 4096))
sed -n 's/^TOP /  largest context: /p' "$out"

if grep -nE 'terminated by signal|PANIC:|TRAP:|out of memory' "$dir/server.log"; then
	echo "FAILED: server log"
	status=1
fi
[ "$status" = 0 ] && echo "memory: flat over $rows-row guarded UPDATEs and $claims claims in one session"
exit "$status"
