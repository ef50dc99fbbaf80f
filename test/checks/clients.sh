#!/usr/bin/env bash
# test/checks/clients.sh: every program of doc/clients.md runs, against a
# throwaway server, and does what the page says.
#
# The programs are not copied here: they are extracted from doc/clients.md
# itself. Each code block that follows a line `<!-- test: clients/NAME -->`
# is written to clients/NAME, so the page and this check cannot drift. Every
# extracted file must have a runner below and every runner a file, or the
# check fails.
#
# One cluster (unix socket, plus 127.0.0.1 on the same private port for
# PgJDBC, which has no Unix-socket support of its own), database "app":
# 1. schema.sql and queue.sql (psql) create the protected table and the queue
#    table.
# 2. One program per client library: libpq (C, built with cc), psycopg 3
#    (Debian's python3-psycopg), node-postgres (test/clients: a pinned pg
#    and package-lock.json, `npm ci`), JDBC (Debian's PgJDBC, Java's
#    single-file launch), ruby-pg and DBD::Pg. Each claims its job, sees a
#    second claim return NULL, writes under fence_begin, releases, claims
#    again (token b), runs its handler with the old token a (refused, class
#    5F, the handler stops) and with b (lands); it exits non-zero otherwise
#    and prints "NAME: ok, token A fenced, token B wrote". The check then
#    reads the row itself: quantity 8 (two writes, not three), writer_epoch B,
#    and the job's claim is B, released. fence's own clients run the same
#    story: fence-python.py with clients/python on PYTHONPATH, fence-node.js
#    with clients/node copied into the node_modules of the pinned pg.
# 3. The unprotected twin: the stale write of step 2 (token a, after b's
#    write), made with the epoch in the statement, is refused with 5F001 on
#    the protected table and lands on an unprotected copy, where b's
#    decrement is then applied twice.
# 4. skip-locked.py: a plain FOR UPDATE SKIP LOCKED queue; the row is
#    redelivered after its visibility timeout, the second worker's claim of
#    the same fence job ('restock_jobs:<id>') supersedes the first, the first
#    is fenced and changes nothing: the row is done once, quantity 9.
# 5. PgBouncer 1.18 (Debian's), started here in transaction mode on its own
#    unix socket with a pool of ONE server connection to the cluster.
#    pgbouncer.py claims in autocommit, begins, writes and commits through
#    it; the next client gets the same server connection (the check requires
#    "same server connection: True"), sees client a's session SET, and its
#    write without a token fails with 5F003: the binding did not leak. Twin:
#    two psycopg clients WITHOUT prepare_threshold=None collide on the one
#    server connection (42P05), which is why the page says to set it.
# 6. frozen.py: a worker frozen inside its transaction is ended by
#    idle_in_transaction_session_timeout; on waking it gets a broken
#    connection (psycopg: OperationalError, no 5F), its write is gone, and
#    its old token is 5F001 after the takeover. The program waits for the
#    server to end the session by polling pg_stat_activity (bounded), not by
#    sleeping a fixed time.
# 7. The server log shows no crash.
# One line per assertion ("ok     ..." or "FAILED ..."), then a summary line.
#
# Environment: FENCE_PORT (else 54360; FENCE_PORT+1 is PgBouncer's),
# FENCE_WORK, FENCE_SRC, FENCE_KEEP=1. Standalone it expects fence to be
# installed. Node.js and npm come with the machine (not from Debian here).
#
# fence-check-timeout: 300
# fence-check-packages: libpostgresql-jdbc-java default-jdk-headless ruby-pg libdbd-pg-perl pgbouncer python3-psycopg
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
packages=(libpostgresql-jdbc-java default-jdk-headless ruby-pg libdbd-pg-perl pgbouncer python3-psycopg
	libpq-dev gcc)
fence_install_packages "${packages[@]}" || fence_die "cannot install ${packages[*]}"
fence_pg_setup

src=${FENCE_SRC:-$(cd "$here/../.." && pwd)}
doc=$src/doc/clients.md
[ -f "$doc" ] || fence_die "no $doc"
own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-clients)
	own_work=1
fi
dir=$work/pg
pgb=$work/pgbouncer
snip=$work/clients
out=$work/out
port=${FENCE_PORT:-$(fence_free_port 54360)}
pgb_port=$((port + 1))
pgb_pid=
cleanup()
{
	[ -n "$pgb_pid" ] && kill "$pgb_pid" 2>/dev/null && wait "$pgb_pid" 2>/dev/null
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir" "$pgb" "$snip" "$out"
chown postgres:postgres "$dir" "$pgb"


# ===========================================================================
# Extract the programs. A marker line must be followed at once by a fence.
if ! awk -v dest="$snip" '
	/^<!-- test: [^ ]+ -->$/ {
		if (file != "") { print "marker inside a block at line " NR > "/dev/stderr"; exit 2 }
		file = $3; sub(/^clients\//, "", file); want_fence = NR + 1; next
	}
	want_fence == NR {
		if ($0 !~ /^```/) { print "marker at line " NR - 1 " is not followed by a code block" > "/dev/stderr"; exit 2 }
		if (file ~ /\// || seen[file]++) { print "bad or repeated file name " file > "/dev/stderr"; exit 2 }
		path = dest "/" file; printf "" > path; inblock = 1; next
	}
	inblock && /^```$/ { close(path); print file; inblock = 0; file = ""; next }
	inblock { print > path }
	END { if (inblock) { print "unterminated block " file > "/dev/stderr"; exit 2 } }
' "$doc" >"$out/extracted" 2>"$out/extract.err"; then
	bad "extract the programs of doc/clients.md: $(cat "$out/extract.err")"
	exit 1
fi
expected="Fenced.java dbd-pg.pl fence-node.js fence-python.py frozen.py libpq.c node-postgres.js pgbouncer.py psycopg3.py queue.sql ruby-pg.rb schema.sql skip-locked.py"
check "doc/clients.md has exactly the programs this check runs" "$(sort "$out/extracted" | paste -sd ' ' -)" "$expected"

# ===========================================================================
fence_cluster_init "$dir" "$port" "listen_addresses = '127.0.0.1'
max_connections = 40" || exit 1
fence_cluster_start "$dir" || exit 1
fence_psql "$dir" -d postgres -XAtq -v ON_ERROR_STOP=1 -c "CREATE DATABASE app" || exit 1
export PGHOST=$dir/sock PGPORT=$port PGDATABASE=app PGUSER=postgres
sql() { fence_psql "$dir" -d app -XAtq -v ON_ERROR_STOP=1 "$@"; }
val() { sql -c "$1" 2>&1; }
# the SQLSTATE of running $1 in its own session: 00000 if it succeeds
state()
{
	local o code
	o=$(sql -c '\set VERBOSITY sqlstate' -c "$1" 2>&1 >/dev/null)
	code=$(sed -n 's/^\(psql:[^ ]* \)\{0,1\}ERROR: *\([0-9A-Z]\{5\}\)$/\2/p' <<<"$o" | head -n 1)
	if [ -n "$code" ]; then echo "$code"; elif [ -z "$o" ]; then echo 00000; else echo "psql: $o"; fi
}

for f in schema.sql queue.sql; do
	if sql -f "$snip/$f" >"$out/$f.out" 2>&1; then
		ok "psql runs clients/$f"
	else
		bad "psql runs clients/$f"
		sed 's/^/    /' "$out/$f.out"
		exit 1
	fi
done
echo "clients: PostgreSQL $(val 'SHOW server_version'), fence $(val "SELECT extversion FROM pg_extension WHERE extname = 'fence'")"

# run NAME COMMAND...: run a program (2 minutes at most), show its output,
# require exit 0; its output is kept in $out/NAME.out
run()
{
	local name=$1 rc
	shift
	(cd "$snip" && timeout -k 10 120 "$@") >"$out/$name.out" 2>&1
	rc=$?
	sed 's/^/    /' "$out/$name.out"
	if [ "$rc" -eq 0 ]; then
		ok "clients/$name runs (exit 0)"
		return 0
	fi
	bad "clients/$name runs: exit $rc"
	return 1
}

# the client library's row, after its program: A fenced, B wrote, quantity 8
verify_row()
{
	local name=$1 label=$2 sku=$3 line a b
	line=$(grep -E "^$label: ok, token [0-9]+ fenced, token [0-9]+ wrote$" "$out/$name.out" | tail -n 1)
	if [ -z "$line" ]; then
		bad "clients/$name prints '$label: ok, token A fenced, token B wrote'"
		return
	fi
	a=$(sed -E 's/.*token ([0-9]+) fenced.*/\1/' <<<"$line")
	b=$(sed -E 's/.*token ([0-9]+) wrote.*/\1/' <<<"$line")
	check "$label: token a fenced (class 5F), token b landed: $sku has quantity 8, writer_epoch b, the claim is b and released" \
		"$(val "SELECT quantity || ' ' || writer_epoch FROM inventory WHERE sku = '$sku'") $(val "SELECT token || ' ' || released FROM fence_claims WHERE job = 'restock:$sku'")" \
		"8 $b $b true"
	[ "$a" -lt "$b" ] || bad "$label: token a ($a) is below token b ($b)"
}

echo "--- libpq (C)"
if (cd "$snip" && cc -Wall -Wextra -Werror -o libpq libpq.c -I"$("$FENCE_PG_CONFIG" --includedir)" -lpq) >"$out/cc.out" 2>&1; then
	ok "clients/libpq.c builds with -Wall -Wextra -Werror"
	run libpq.c ./libpq && verify_row libpq.c libpq sku-c
else
	bad "clients/libpq.c builds with -Wall -Wextra -Werror"
	sed 's/^/    /' "$out/cc.out"
fi

echo "--- psycopg 3 ($(/usr/bin/python3 -c 'import psycopg; print(psycopg.__version__)' 2>&1))"
run psycopg3.py /usr/bin/python3 psycopg3.py && verify_row psycopg3.py psycopg sku-py
echo "--- fence's Python client (clients/python)"
PYTHONPATH="$src/clients/python" run fence-python.py /usr/bin/python3 -B fence-python.py &&
	verify_row fence-python.py fence-python sku-fpy

echo "--- node-postgres (node $(node --version 2>&1), npm $(npm --version 2>&1))"
cp "$src/test/clients/package.json" "$src/test/clients/package-lock.json" "$snip/"
if (cd "$snip" && timeout 180 npm ci --no-audit --no-fund) >"$out/npm.out" 2>&1; then
	ok "npm ci installs pg $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$snip/node_modules/pg/package.json" | head -n 1) from test/clients/package-lock.json"
	run node-postgres.js node node-postgres.js && verify_row node-postgres.js node-postgres sku-js
	echo "--- fence's Node client (clients/node, beside that node-postgres)"
	mkdir -p "$snip/node_modules/fence"
	cp "$src/clients/node/package.json" "$src/clients/node"/index.* "$snip/node_modules/fence/"
	run fence-node.js node fence-node.js && verify_row fence-node.js fence-node sku-fjs
else
	bad "npm ci in a copy of test/clients"
	tail -n 20 "$out/npm.out" | sed 's/^/    /'
fi

echo "--- JDBC ($(java -version 2>&1 | head -n 1), libpostgresql-jdbc-java $(dpkg-query -W -f='${Version}' libpostgresql-jdbc-java 2>&1))"
JDBC_URL="jdbc:postgresql://127.0.0.1:$port/app?user=postgres" \
	run Fenced.java java -cp /usr/share/java/postgresql.jar Fenced.java && verify_row Fenced.java JDBC sku-java

echo "--- ruby-pg ($(ruby -rpg -e 'print "ruby #{RUBY_VERSION}, pg #{PG::VERSION}"' 2>&1))"
run ruby-pg.rb ruby ruby-pg.rb && verify_row ruby-pg.rb ruby-pg sku-rb

echo "--- DBD::Pg ($(perl -MDBD::Pg -e 'print "DBD::Pg $DBD::Pg::VERSION"' 2>&1))"
run dbd-pg.pl perl dbd-pg.pl && verify_row dbd-pg.pl DBD::Pg sku-pl

# ===========================================================================
echo "--- the unprotected twin: the stale write of token a after token b's"
sql >/dev/null 2>&1 <<'EOF'
CREATE TABLE inventory_plain (LIKE inventory);
INSERT INTO inventory_plain VALUES ('sku-twin', 10, 0);
BEGIN;
SELECT fence_begin_fresh();
INSERT INTO inventory VALUES ('sku-twin', 10, 0);
COMMIT;
EOF
ta=$(val "SELECT fence_claim('restock:sku-twin', '30 seconds', 'twin-a')")
tr_=$(val "SELECT fence_release('restock:sku-twin', $ta)")
tb=$(val "SELECT fence_claim('restock:sku-twin', '30 seconds', 'twin-b')")
for t in inventory inventory_plain; do
	sql -c "UPDATE $t SET quantity = quantity - 1, writer_epoch = $tb WHERE sku = 'sku-twin'" >/dev/null 2>&1
done
check "twin: token a released ($tr_), token b claimed, b's write landed on both tables" \
	"$(val "SELECT string_agg(quantity::text, ' ' ORDER BY t) FROM (SELECT 1 t, quantity FROM inventory WHERE sku = 'sku-twin' UNION ALL SELECT 2, quantity FROM inventory_plain WHERE sku = 'sku-twin') s")" "9 9"
check "twin: the stale write (token a) on the protected table is refused" \
	"$(state "UPDATE inventory SET quantity = quantity - 1, writer_epoch = $ta WHERE sku = 'sku-twin'")" 5F001
check "twin: the same stale write on the unprotected table lands" \
	"$(state "UPDATE inventory_plain SET quantity = quantity - 1, writer_epoch = $ta WHERE sku = 'sku-twin'")" 00000
check "twin: protected keeps b's row (9, epoch b); unprotected has b's decrement twice and a's stale epoch" \
	"$(val "SELECT quantity || '/' || (writer_epoch = $tb) FROM inventory WHERE sku = 'sku-twin'") $(val "SELECT quantity || '/' || (writer_epoch = $ta) FROM inventory_plain WHERE sku = 'sku-twin'")" \
	"9/true 8/true"

# ===========================================================================
echo "--- a plain FOR UPDATE SKIP LOCKED queue"
if run skip-locked.py /usr/bin/python3 skip-locked.py; then
	check "skip-locked: the row was delivered twice, done once; quantity 9; worker a was fenced" \
		"$(val "SELECT status || ' ' || attempts FROM restock_jobs") $(val "SELECT quantity FROM inventory WHERE sku = 'sku-queue'") $(grep -c '^worker a: fenced (5F001)$' "$out/skip-locked.py.out")" \
		"done 2 9 1"
fi

# ===========================================================================
echo "--- PgBouncer in transaction mode ($(pgbouncer --version 2>&1 | head -n 1))"
cat >"$pgb/pgbouncer.ini" <<EOF
[databases]
app = host=$dir/sock port=$port dbname=app user=postgres

[pgbouncer]
listen_addr =
listen_port = $pgb_port
unix_socket_dir = $pgb
auth_type = any
pool_mode = transaction
default_pool_size = 1
max_client_conn = 20
logfile = $pgb/pgbouncer.log
pidfile = $pgb/pgbouncer.pid
EOF
chown -R postgres:postgres "$pgb"
(cd "$pgb" && exec setpriv --reuid=postgres --regid=postgres --init-groups \
	env HOME="$FENCE_PG_HOME" pgbouncer "$pgb/pgbouncer.ini") >"$pgb/stdout" 2>&1 &
pgb_pid=$!
for _ in $(seq 1 100); do
	[ -S "$pgb/.s.PGSQL.$pgb_port" ] && break
	kill -0 "$pgb_pid" 2>/dev/null || break
	sleep 0.1
done
if [ -S "$pgb/.s.PGSQL.$pgb_port" ]; then
	ok "pgbouncer listens on $pgb/.s.PGSQL.$pgb_port (transaction mode, pool of 1)"
	if PGHOST=$pgb PGPORT=$pgb_port run pgbouncer.py /usr/bin/python3 pgbouncer.py; then
		check "pgbouncer: client b ran on client a's server connection, saw a's SET, and its write without a token was 5F003" \
			"$(grep -c "^same server connection: True; the SET leaked: 'left by client a'; the binding did not: 5F003$" "$out/pgbouncer.py.out")" 1
		check "pgbouncer: a's write landed once (quantity 9, epoch = the job's token, released)" \
			"$(val "SELECT quantity || ' ' || (writer_epoch = c.token) || ' ' || c.released FROM inventory, fence_claims c WHERE sku = 'sku-pgb' AND c.job = 'restock:sku-pgb'")" \
			"9 true true"
	fi
	# the twin of prepare_threshold=None: psycopg's default prepares after 5 runs
	cat >"$snip/prepare-twin.py" <<'EOF'
import psycopg
a, b = (psycopg.connect(autocommit=True) for _ in range(2))   # default prepare_threshold
try:
    for _ in range(8):
        for c in (a, b):
            c.execute("SELECT fence_current(%s)", ("restock:sku-pgb",)).fetchone()
    print("no error")
except psycopg.Error as e:
    print(e.sqlstate, e)
EOF
	PGHOST=$pgb PGPORT=$pgb_port timeout 60 /usr/bin/python3 "$snip/prepare-twin.py" >"$out/prepare-twin.out" 2>&1
	sed 's/^/    /' "$out/prepare-twin.out"
	check "pgbouncer twin: without prepare_threshold=None the second client fails (42P05)" \
		"$(cut -d' ' -f1 "$out/prepare-twin.out" | head -n 1)" 42P05
else
	bad "pgbouncer did not start"
	sed 's/^/    /' "$pgb/stdout" "$pgb/pgbouncer.log" 2>/dev/null | tail -n 20
fi

# ===========================================================================
echo "--- a worker frozen inside its transaction"
if run frozen.py /usr/bin/python3 frozen.py; then
	check "frozen: a broken connection without a 5F code, then 5F001 for the old token after the takeover" \
		"$(grep -cE '^frozen worker: OperationalError, sqlstate (None|25P03): ' "$out/frozen.py.out") $(grep -cE '^token [0-9]+ after the takeover by [0-9]+: 5F001$' "$out/frozen.py.out")" "1 1"
	check "frozen: the frozen worker's write never landed (quantity 10)" \
		"$(val "SELECT quantity FROM inventory WHERE sku = 'sku-frozen'")" 10
fi
if grep -q 'terminating connection due to idle-in-transaction timeout' "$dir/server.log"; then
	ok "frozen: the server log shows the idle-in-transaction timeout"
else
	bad "frozen: the server log shows the idle-in-transaction timeout"
fi

# ===========================================================================
fence_check_no_crash "$dir/server.log"

total=$((n_ok + n_fail))
if [ "$n_fail" = 0 ]; then
	echo "clients: all $total assertions hold (fence-python, fence-node, libpq, psycopg, node-postgres, JDBC, ruby-pg, DBD::Pg, SKIP LOCKED queue, PgBouncer, frozen worker)"
	exit 0
fi
echo "clients: $n_fail of $total assertions FAILED"
exit 1
