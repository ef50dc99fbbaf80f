# test/lib.sh: shell helpers shared by test/run, demo/run and test/checks/*.sh
#
# Source it from bash:   . "$(dirname "$0")/lib.sh"   (or "$FENCE_LIB" in a check)
#
# It owns the boring parts that every script here needs on a fresh Debian
# machine: becoming root, installing packages, choosing the PostgreSQL to test,
# copying the tree somewhere the postgres user can write, and starting and
# stopping throwaway clusters (initdb and postgres refuse to run as root).
#
# The PostgreSQL under test is PG_CONFIG's; by default the host's, which is
# the newest /usr/lib/postgresql/N installed, else the major that Debian's
# "postgresql" package stands for.  Every path and package name below derives
# from it:
#   FENCE_PG_MAJOR     15, 17, 18, 19, ...
#   FENCE_PG_CONFIG    its pg_config (it may not exist until packages install)
#   FENCE_PG_BIN       its bindir
#   fence_pg_packages  postgresql-N postgresql-server-dev-N postgresql-client-N
#   fence_pg_package X postgresql-N-X, an extension built for that major

FENCE_PG_HOME=/var/lib/postgresql

# The major of a pg_config path, whether or not it is installed yet.
fence_pg_major_of()
{
	local cfg=$1 v
	if [ -x "$cfg" ]; then
		v=$("$cfg" --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')
		[ -n "$v" ] && { printf '%s\n' "$v"; return 0; }
	fi
	v=$(printf '%s\n' "$cfg" | sed -n 's|.*/postgresql/\([0-9][0-9]*\)/bin/pg_config$|\1|p')
	[ -n "$v" ] && printf '%s\n' "$v"
}

# The host's PostgreSQL major: the newest installed, else Debian's default.
fence_pg_default_major()
{
	local v
	v=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/pg_config' 2>/dev/null |
		sed -n 's|^/usr/lib/postgresql/\([0-9][0-9]*\)/bin/pg_config$|\1|p' | sort -n | tail -n 1)
	[ -n "$v" ] && { printf '%s\n' "$v"; return 0; }
	v=$(apt-cache show --no-all-versions postgresql 2>/dev/null |
		sed -n 's/^Depends:.*postgresql-\([0-9][0-9]*\).*/\1/p' | head -n 1)
	if [ -z "$v" ] && [ "$(id -u)" -eq 0 ]; then
		apt-get update -qq >/dev/null 2>&1
		v=$(apt-cache show --no-all-versions postgresql 2>/dev/null |
			sed -n 's/^Depends:.*postgresql-\([0-9][0-9]*\).*/\1/p' | head -n 1)
	fi
	printf '%s\n' "${v:-15}"
}

# A parent script's choice (exported below) holds for its children.
FENCE_PG_CONFIG=${PG_CONFIG:-${FENCE_PG_CONFIG:-}}
if [ -n "$FENCE_PG_CONFIG" ]; then
	FENCE_PG_MAJOR=$(fence_pg_major_of "$FENCE_PG_CONFIG")
	[ -n "$FENCE_PG_MAJOR" ] || { printf 'error: cannot tell the major of PG_CONFIG=%s\n' "$FENCE_PG_CONFIG" >&2; exit 1; }
else
	FENCE_PG_MAJOR=$(fence_pg_default_major)
	FENCE_PG_CONFIG=/usr/lib/postgresql/$FENCE_PG_MAJOR/bin/pg_config
fi
FENCE_PG_BIN=$(dirname "$FENCE_PG_CONFIG")
PG_CONFIG=$FENCE_PG_CONFIG
export FENCE_PG_MAJOR FENCE_PG_CONFIG FENCE_PG_BIN PG_CONFIG

# Debian's packages of the PostgreSQL under test.
fence_pg_packages()
{
	printf '%s\n' "postgresql-$FENCE_PG_MAJOR" "postgresql-server-dev-$FENCE_PG_MAJOR" \
		"postgresql-client-$FENCE_PG_MAJOR"
}

# Debian's package of extension $1 for that major: fence_pg_package cron
fence_pg_package()
{
	local x
	for x in "$@"; do
		printf 'postgresql-%s-%s\n' "$FENCE_PG_MAJOR" "$x"
	done
}

fence_say() { printf '%s\n' "$*"; }
fence_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Re-run the calling script as root (through sudo) unless it already is.
# Usage: fence_need_root "$0" "$@"
fence_need_root()
{
	local script=$1
	shift
	[ "$(id -u)" -eq 0 ] && return 0
	command -v sudo >/dev/null 2>&1 || fence_die "run this as root (no sudo found)"
	exec sudo -E bash "$script" "$@"
}

# Install Debian packages, skipping apt entirely when all are installed.
fence_install_packages()
{
	local missing=() p provided
	# what installed packages provide counts as installed: NodeSource's
	# nodejs provides (and conflicts with) npm, and asking apt for npm there
	# would replace that nodejs with Debian's
	provided=" $(dpkg-query -W -f='${db:Status-Abbrev}|${Provides}\n' 2>/dev/null |
		sed -n 's/^ii *|//p' | tr ',' '\n' | sed 's/([^)]*)//; s/^ *//; s/ *$//' | tr '\n' ' ') "
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			[[ "$provided" == *" $p "* ]] ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		fence_say "packages: all ${#} already installed"
		return 0
	fi
	fence_say "packages: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || return 1
	apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends "${missing[@]}" ||
		return 1
}

# Set FENCE_PG_BIN, FENCE_PG_INCLUDE_SERVER, FENCE_PG_INCLUDE from pg_config.
fence_pg_setup()
{
	[ -x "$FENCE_PG_CONFIG" ] || fence_die "pg_config not found at $FENCE_PG_CONFIG"
	FENCE_PG_BIN=$("$FENCE_PG_CONFIG" --bindir)
	FENCE_PG_INCLUDE_SERVER=$("$FENCE_PG_CONFIG" --includedir-server)
	FENCE_PG_INCLUDE=$("$FENCE_PG_CONFIG" --includedir)
	FENCE_PG_PKGLIBDIR=$("$FENCE_PG_CONFIG" --pkglibdir)
	export FENCE_PG_CONFIG FENCE_PG_BIN FENCE_PG_INCLUDE_SERVER FENCE_PG_INCLUDE FENCE_PG_PKGLIBDIR
}

# Run a command as the postgres user, with PostgreSQL's binaries on PATH and
# a HOME it can read.  The caller should cd somewhere postgres may enter.
# setpriv execs the command in place (runuser would fork and wait, and stop
# itself when its child is stopped, which breaks SIGSTOP/SIGCONT tests and
# leaves an extra process between a caller and the pid it signals).
fence_as_pg()
{
	setpriv --reuid=postgres --regid=postgres --init-groups \
		env HOME="$FENCE_PG_HOME" USER=postgres LOGNAME=postgres PATH="$FENCE_PG_BIN:$PATH" "$@"
}

# A fresh directory owned by postgres (mode 755 so root and others can read).
fence_mktemp_pg()
{
	local d
	d=$(mktemp -d "${TMPDIR:-/tmp}/${1:-fence}.XXXXXX") || return 1
	chmod 755 "$d"
	chown postgres:postgres "$d"
	printf '%s\n' "$d"
}

# Copy the source tree (working copy, committed or not) without build and
# test leftovers or generated specs, owned by postgres.
fence_copy_tree()
{
	local src=$1 dest=$2
	mkdir -p "$dest"
	(cd "$src" && tar -cf - --exclude=./.git --exclude=./results --exclude=./tmp_check \
		--exclude=./tmp_check_iso --exclude=./output_iso --exclude=./log \
		--exclude='*.o' --exclude='*.so' --exclude='*.bc' \
		--exclude='./specs/*-before.spec' --exclude='./specs/*-after.spec' \
		--exclude=./regression.diffs --exclude=./regression.out .) |
		(cd "$dest" && tar -xf -) || return 1
	chown -R postgres:postgres "$dest"
}

# A port nobody listens on, starting from $1.
fence_free_port()
{
	local p=${1:-54310}
	while [ -e "/tmp/.s.PGSQL.$p" ] || ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; do
		p=$((p + 1))
	done
	printf '%s\n' "$p"
}

# fence_cluster_init_stock DIR PORT: a cluster as initdb makes it by
# default (locale and encoding from the environment, trust for local
# connections, the initdb user postgres as superuser), in DIR/data, run by
# postgres.  postgresql.conf gets only what a private server needs: its
# port, its unix socket in DIR/sock, and no TCP socket (listen_addresses =
# ''); every other setting is PostgreSQL's default.  (initdb's --no-sync
# skips only its own final flush to disk.)  test/run runs `make
# installcheck` against one.
fence_cluster_init_stock()
{
	local dir=$1 port=$2
	shift 2
	mkdir -p "$dir/sock"
	chown postgres:postgres "$dir" "$dir/sock"
	(cd "$dir" && fence_as_pg initdb -D "$dir/data" --no-sync "$@" >"$dir/initdb.log" 2>&1) || {
		cat "$dir/initdb.log" >&2
		return 1
	}
	{
		echo "# added by test/lib.sh"
		echo "port = $port"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$dir/sock'"
	} >>"$dir/data/postgresql.conf"
	echo "$port" >"$dir/port"
}

# fence_cluster_init DIR PORT: the same, but the C locale, UTF8 and trust
# whatever the environment, fast and forgetful (fsync off), prepared
# transactions enabled, lc_messages C and the application name in the log
# line: what the check scripts build on.  $3, if given, is appended to
# postgresql.conf (extra settings, one per line).
fence_cluster_init()
{
	local dir=$1 port=$2 extra=${3:-}
	fence_cluster_init_stock "$dir" "$port" -A trust -U postgres -E UTF8 --locale=C || return 1
	{
		echo "fsync = off"
		echo "synchronous_commit = off"
		echo "full_page_writes = off"
		echo "max_prepared_transactions = 10"
		echo "lc_messages = 'C'"
		echo "log_line_prefix = '%m [%p] %q%a '"
		[ -z "$extra" ] || printf '%s\n' "$extra"
	} >>"$dir/data/postgresql.conf"
}

fence_cluster_start()
{
	local dir=$1
	(cd "$dir" && fence_as_pg pg_ctl -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null) || {
		tail -n 30 "$dir/server.log" >&2
		return 1
	}
}

fence_cluster_stop()
{
	local dir=$1 mode=${2:-fast}
	[ -f "$dir/data/postmaster.pid" ] || return 0
	(cd "$dir" && fence_as_pg pg_ctl -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null 2>&1) ||
		(cd "$dir" && fence_as_pg pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null 2>&1) || true
}

# Stop every cluster whose data directory lies under $1 (leftovers of a
# check script or a TAP test that died): by its postmaster.pid, nothing else.
fence_stop_clusters_under()
{
	local root=$1 pidfile data
	[ -d "$root" ] || return 0
	while IFS= read -r pidfile; do
		data=$(dirname "$pidfile")
		(cd / && fence_as_pg pg_ctl -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1) || true
	done < <(find "$root" -name postmaster.pid -type f 2>/dev/null)
}

# The results in make installcheck's output $1 of pg_regress or
# pg_isolation_regress, one line per test: "ok NAME" or "failed NAME".  15
# prints "test NAME ... ok" (indented, no "test", in a parallel group); 16
# and later print TAP, "ok 3 - NAME 12 ms" or "not ok 3 + NAME" (+ in a
# parallel group).
fence_regress_results()
{
	sed -nE 's/^(test +| +)([^ ]+) +\.\.\. +ok( .*)?$/ok \2/p
		s/^(test +| +)([^ ]+) +\.\.\. +(FAILED|failed)( .*)?$/failed \2/p
		s/^ok +[0-9]+ +[-+] +([^ ]+)( .*)?$/ok \1/p
		s/^not ok +[0-9]+ +[-+] +([^ ]+)( .*)?$/failed \1/p' "$1"
}

# The result of test $2 in that output $1: "ok", "failed", or nothing.
fence_regress_status()
{
	fence_regress_results "$1" | awk -v t="$2" '$2 == t { s = $1 } END { print s }'
}

# psql against a cluster made by fence_cluster_init: fence_psql DIR [args...]
fence_psql()
{
	local dir=$1
	shift
	(cd "$dir" && fence_as_pg psql -X -P pager=off -h "$dir/sock" -p "$(cat "$dir/port")" -U postgres "$@")
}

# --- assertions, for check scripts ------------------------------------------
# ok DESC and bad DESC count one assertion each and print one line; check
# DESC ACTUAL EXPECTED compares two values; fence_check_no_crash LOG asserts
# that a server log shows no backend crash.  n_ok and n_fail hold the counts.
n_ok=0
n_fail=0
ok() { n_ok=$((n_ok + 1)); printf 'ok     %s\n' "$1"; }
bad() { n_fail=$((n_fail + 1)); printf 'FAILED %s\n' "$1"; }
check()
{
	if [ "$2" = "$3" ]; then
		ok "$1"
	else
		bad "$1: got '$2', expected '$3'"
	fi
}
fence_check_no_crash()
{
	if grep -nE 'terminated by signal|PANIC:|TRAP:|server process .* exited with exit code [^0]' "$1"; then
		bad "the server log shows no crash"
	else
		ok "the server log shows no crash"
	fi
}
