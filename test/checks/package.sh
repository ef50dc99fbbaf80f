#!/usr/bin/env bash
# test/checks/package.sh: fence builds as a Debian package the way Debian's
# own postgresql-N-* extension packages do (debian/: control.in,
# pgversions, rules with pg_buildext), and the installed package passes the
# regression tests.
#
# 1. Copies the tree (the build never writes into $FENCE_SRC: a listing of
#    its files, sizes and times is compared before and after) and runs
#    `dpkg-buildpackage -us -uc -b` in the copy as the postgres user (no
#    root, no fakeroot: Rules-Requires-Root: no), after `pg_buildext
#    updatecontrol` made the copy's debian/control list this platform's
#    majors (the committed one is the host's).  That runs `pg_buildext
#    checkcontrol` (debian/control matches debian/control.in and
#    debian/pgversions), `pg_buildext build build-N` (a VPATH build; N is
#    FENCE_PG_MAJOR, the major under test, below too) and `pg_buildext
#    install`.
# 2. The .deb: package postgresql-N-fence, version fence.control's
#    default_version, depends on postgresql-N; it holds fence.so,
#    fence.control and every install and upgrade script of the Makefile's
#    DATA.
# 3. Installs it with dpkg -i: dpkg now owns fence.so and the extension
#    files, and they are the package's (the make-install files were
#    replaced).
# 4. Runs debian/tests/installcheck, the package's autopkgtest: `pg_buildext
#    installcheck`, which makes a throwaway cluster with pg_virtualenv and
#    runs pg_regress (the Makefile's REGRESS) against the installed package.
#    The copy holds no fence.so of its own (the build was in build-N), so
#    only the package can have served the tests.  Each test must pass.
#    Then, in a cluster of this script's own: CREATE EXTENSION fence VERSION
#    '1.0' and ALTER EXTENSION fence UPDATE reach the default version from
#    the packaged scripts, and the packaged fence fences a stale write.
# 5. Removes the package (dpkg -r): its files are gone.  At once reinstalls
#    fence from $FENCE_SRC (`make USE_PGXS=1 install`, nothing to compile:
#    the script refuses to start unless $FENCE_SRC is built), so the checks
#    after this one still have fence; the EXIT trap does the same whatever
#    happened.  Then checks the restore: fence.so, fence.control and every
#    DATA script are back, equal to $FENCE_SRC's, owned by no package, and
#    a new backend loads fence (CREATE EXTENSION, a claim).
# One line per assertion ("ok     ..." or "FAILED ..."), then a summary line.
# Exit 0 only if every assertion holds.
#
# While it runs, the installed fence is the package (built from the same
# tree); between dpkg -r and the reinstall (about a second) there is none.
#
# Environment: FENCE_SRC (a built tree; else this tree, which must be
# built), FENCE_PORT (else 54364; FENCE_PORT+1 too), FENCE_WORK, FENCE_KEEP=1.
#
# fence-check-timeout: 400
# fence-check-packages: postgresql-server-dev-all debhelper dpkg-dev
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_install_packages postgresql-server-dev-all debhelper dpkg-dev ||
	fence_die "cannot install postgresql-server-dev-all debhelper dpkg-dev"
fence_pg_setup

src=${FENCE_SRC:-$(cd "$here/../.." && pwd)}
pkg=$(fence_pg_package fence)
libdir=$FENCE_PG_PKGLIBDIR
extdir=$("$FENCE_PG_CONFIG" --sharedir)/extension
MAKEARGS=(USE_PGXS=1 "PG_CONFIG=$FENCE_PG_CONFIG")

own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-package)
	own_work=1
fi
dir=$work/package
port=${FENCE_PORT:-$(fence_free_port 54364)}


# dpkg, waiting (up to 2 minutes) while another dpkg or apt holds its lock
dpkg_wait()
{
	local out rc
	for _ in $(seq 1 60); do
		out=$(dpkg "$@" 2>&1)
		rc=$?
		if [ "$rc" = 0 ] || ! grep -qi 'lock' <<<"$out"; then
			printf '%s\n' "$out"
			return "$rc"
		fi
		sleep 2
	done
	printf '%s\n' "$out"
	return "$rc"
}
pkg_status() { dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || echo not-installed; }

# A listing of $src (path, size, mtime) to show that nothing wrote into it.
src_listing() { (cd "$src" && find . -path ./.git -prune -o -printf '%P %s %T@\n' | sort | md5sum); }

# Put fence back as $FENCE_SRC's make install left it: remove the package if
# it is there, then install from $FENCE_SRC.  Done once; the EXIT trap calls
# it too.
touched=0
restored=0
restore()
{
	[ "$touched" = 1 ] && [ "$restored" = 0 ] || return 0
	restored=1
	if [ "$(pkg_status)" != not-installed ]; then
		dpkg_wait -r "$pkg" >"$dir/dpkg-remove.log" 2>&1
		# checked in step 5: the package's files are gone
		gone=$( (for f in "$libdir/fence.so" "$extdir/fence.control"; do [ -e "$f" ] && echo "$f"; done) | paste -sd ' ' -)
	fi
	(cd "$src" && make "${MAKEARGS[@]}" install) >"$dir/restore.log" 2>&1
}
icheck=
cleanup()
{
	[ -n "$icheck" ] && kill -TERM -- -"$icheck" 2>/dev/null && wait "$icheck"
	restore
	fence_cluster_stop "$dir/cluster" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}

trap cleanup EXIT
mkdir -p "$dir"
chown postgres:postgres "$dir"

# Refuse to start unless the reinstall will be quick and will not build:
# $FENCE_SRC is built and up to date.
if ! (cd "$src" && make -q "${MAKEARGS[@]}" all) >/dev/null 2>&1 || [ ! -f "$src/fence.so" ]; then
	echo "package: $src is not built (run make there first): the reinstall must not compile"
	exit 1
fi
[ "$(pkg_status)" = not-installed ] ||
	fence_die "$pkg is already installed: remove it first (dpkg -r $pkg)"
listing0=$(src_listing)
default=$(sed -n "s/^[[:space:]]*default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" "$src/fence.control")
# the Makefile's DATA and REGRESS (after PGXS is included)
# shellcheck disable=SC2016
printf 'print-%%:\n\t@echo $($*)\n' >"$dir/print.mk"
make_var() { (cd "$src" && make -s --no-print-directory -f Makefile -f "$dir/print.mk" "${MAKEARGS[@]}" "print-$1" 2>/dev/null); }
data=$(make_var DATA)
regress=$(make_var REGRESS)
echo "package: fence $default from $src; DATA: $data; $(wc -w <<<"$regress") regression tests"

# ===========================================================================
echo "--- build (dpkg-buildpackage -us -uc -b, as postgres, in a copy)"
build=$dir/build/fence-$default
fence_copy_tree "$src" "$build" || fence_die "cannot copy $src"
rm -rf "$build/debian/$pkg" "$build"/build-* "$build"/debian/*.substvars "$build"/debian/files
chown -R postgres:postgres "$dir/build"
# debian/control lists one postgresql-N-fence per major that debian/pgversions
# and this machine's postgresql-common both support; the committed one is the
# host's (15).  On another platform make it that platform's, as a backport
# build does (pg_buildext updatecontrol).
(cd "$build" && fence_as_pg pg_buildext updatecontrol) >"$dir/updatecontrol.log" 2>&1
check "debian/control, made for this platform, builds $pkg" \
	"$(grep -c "^Package: $pkg\$" "$build/debian/control")" 1
t0=$(date +%s)
if (cd "$build" && fence_as_pg dpkg-buildpackage -us -uc -b) >"$dir/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc -b succeeds as the postgres user ($(($(date +%s) - t0)) s)"
else
	bad "dpkg-buildpackage -us -uc -b:"
	tail -n 40 "$dir/build.log" | sed 's/^/    /'
fi
check "debian/rules clean ran pg_buildext checkcontrol: debian/control is current" \
	"$(grep -c 'pg_buildext checkcontrol' "$dir/build.log") $(grep -c 'debian/control needs updating' "$dir/build.log")" "1 0"
check "pg_buildext built and installed for PostgreSQL $FENCE_PG_MAJOR (build-$FENCE_PG_MAJOR)" \
	"$(grep -cE "^### End $FENCE_PG_MAJOR (build|install) ###" "$dir/build.log")" 2
deb=$(ls "$dir/build/${pkg}_"*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { bad "a $pkg .deb was built"; deb=/nonexistent; }

# ===========================================================================
echo "--- the .deb"
check "package name" "$(dpkg-deb -f "$deb" Package 2>&1)" "$pkg"
check "package version is fence.control's default_version" "$(dpkg-deb -f "$deb" Version 2>&1)" "$default"
depends=$(dpkg-deb -f "$deb" Depends 2>&1)
if grep -qE "(^|, )postgresql-$FENCE_PG_MAJOR( |,|\$)" <<<"$depends"; then
	ok "it depends on postgresql-$FENCE_PG_MAJOR ($depends)"
else
	bad "it depends on postgresql-$FENCE_PG_MAJOR: Depends is '$depends'"
fi
contents=$(dpkg-deb -c "$deb" 2>&1 | awk '{print $6}' | sed 's|^\./|/|')
want="$libdir/fence.so $extdir/fence.control"
for f in $data; do want="$want $extdir/$f"; done
absent_files=
for f in $want; do grep -qxF "$f" <<<"$contents" || absent_files="$absent_files $f"; done
check "it holds fence.so, fence.control and every DATA script" "${absent_files# }" ""
# the user's pages, as debian/rules lists them (dh_compress may gzip them)
absent_docs=
for f in README.md fence.md worker.md clients.md; do
	grep -qE "^/usr/share/doc/$pkg/${f//./\\.}(\.gz)?$" <<<"$contents" || absent_docs="$absent_docs $f"
done
check "it holds README.md, doc/fence.md, doc/worker.md and doc/clients.md in /usr/share/doc/$pkg" "${absent_docs# }" ""
mkdir -p "$dir/deb"
dpkg-deb -x "$deb" "$dir/deb" 2>/dev/null

# ===========================================================================
echo "--- dpkg -i"
touched=1
if out=$(dpkg_wait -i "$deb"); then
	ok "dpkg -i $(basename "$deb")"
else
	bad "dpkg -i $(basename "$deb"):"
	printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /'
fi
check "$pkg is installed" "$(pkg_status)" installed
check "dpkg owns fence.so and fence.control" \
	"$(dpkg -S "$libdir/fence.so" "$extdir/fence.control" 2>&1 | cut -d: -f1 | sort -u)" "$pkg"
differ=
for f in $want; do cmp -s "$f" "$dir/deb$f" || differ="$differ $f"; done
check "the installed files are the package's" "${differ# }" ""
check "the build copy has no fence.so of its own (only the package can serve the tests)" \
	"$(find "$build" -maxdepth 1 -name 'fence.so' | wc -l)" 0

# ===========================================================================
echo "--- debian/tests/installcheck (pg_buildext installcheck, pg_virtualenv)"
vport=$(fence_free_port $((port + 1)))
t0=$(date +%s)
# in a session of its own, so that cleanup can stop all of it (pg_virtualenv
# drops its cluster when it gets SIGTERM)
(cd "$build" && PGPORT=$vport exec setsid timeout 600 debian/tests/installcheck) >"$dir/installcheck.log" 2>&1 &
icheck=$!
wait "$icheck"
rc=$?
icheck=
n_pass=0
failed_tests=
for t in $regress; do
	st=$(fence_regress_status "$dir/installcheck.log" "$t")
	if [ "$st" = ok ]; then
		n_pass=$((n_pass + 1))
	else
		failed_tests="$failed_tests $t(${st:-no result})"
	fi
done
if [ "$rc" = 0 ] && [ -z "$failed_tests" ] && [ "$n_pass" -gt 0 ]; then
	ok "all $n_pass regression tests pass against the installed package ($(($(date +%s) - t0)) s)"
else
	bad "regression tests against the installed package: exit $rc, failed:${failed_tests:- none}"
	grep -E '^(\*\*\*|diff|[-+@]{1,3} )' "$dir/installcheck.log" | head -n 60 | sed 's/^/    /'
	tail -n 15 "$dir/installcheck.log" | sed 's/^/    /'
fi
check "pg_buildext found the package installed for PostgreSQL $FENCE_PG_MAJOR and tested that version" \
	"$(grep -cE "^### PostgreSQL $FENCE_PG_MAJOR installcheck ###\$" "$dir/installcheck.log")" 1

# --- our own cluster: the upgrade path and a fenced write, from the package
mkdir -p "$dir/cluster"
chown postgres:postgres "$dir/cluster"
fence_cluster_init "$dir/cluster" "$port" "autovacuum = off" && fence_cluster_start "$dir/cluster" ||
	{ bad "start a cluster"; exit 1; }
val() { fence_psql "$dir/cluster" -d "${2:-postgres}" -XAtq -v ON_ERROR_STOP=1 -c "$1" 2>&1; }
state()
{
	local out
	out=$(fence_psql "$dir/cluster" -d "${2:-postgres}" -XAtq -v ON_ERROR_STOP=1 -c '\set VERBOSITY sqlstate' -c "$1" 2>&1 >/dev/null) &&
		{ echo 00000; return; }
	sed -n 's/^\(psql:[^ ]* \)\{0,1\}ERROR: *\([0-9A-Z]\{5\}\)$/\2/p' <<<"$out" | head -n 1
}
val "CREATE DATABASE pkg_upgrade" >/dev/null
# The update keeps 1.0's EXECUTE for PUBLIC on the worker functions and
# says so with a WARNING (fence--1.0--1.1.sql); the version is read apart
# from what the update printed.
upgrade_out=$(val "CREATE EXTENSION fence VERSION '1.0'" pkg_upgrade; val "ALTER EXTENSION fence UPDATE" pkg_upgrade)
check "packaged scripts: CREATE EXTENSION fence VERSION '1.0', ALTER EXTENSION fence UPDATE -> $default" \
	"$(val "SELECT extversion FROM pg_extension WHERE extname = 'fence'" pkg_upgrade)" \
	"$default"
check "the packaged update warns that PUBLIC keeps EXECUTE on the worker functions" \
	"$(grep -c '^WARNING:  fence 1.1 keeps EXECUTE on its worker functions granted to PUBLIC' <<<"$upgrade_out")" 1
val "CREATE DATABASE pkg_fence" >/dev/null
val "CREATE EXTENSION fence;
     CREATE TABLE t (id int PRIMARY KEY, result text, writer_epoch bigint NOT NULL DEFAULT 0);
     CREATE TABLE t_plain (id int PRIMARY KEY, result text, writer_epoch bigint NOT NULL DEFAULT 0);
     INSERT INTO t VALUES (1, 'none'); INSERT INTO t_plain VALUES (1, 'none');
     SELECT fence_protect('t')" pkg_fence >/dev/null
# a stale execution (claimed, then superseded) and its successor; the
# successor writes first, the stale one after it
stale=$(val "SELECT fence_claim('pkg:job', '1 hour')" pkg_fence)
val "SELECT fence_release('pkg:job', $stale)" pkg_fence >/dev/null
fresh=$(val "SELECT fence_claim('pkg:job', '1 hour')" pkg_fence)
check "the packaged fence: the successor's write lands, the stale one fails 5F001, the successor's result stays" \
	"$(state "UPDATE t SET result = 'successor', writer_epoch = $fresh WHERE id = 1" pkg_fence) $(state "UPDATE t SET result = 'stale', writer_epoch = $stale WHERE id = 1" pkg_fence) $(val "SELECT result FROM t" pkg_fence)" \
	"00000 5F001 successor"
check "twin: on an unprotected table the stale write lands and the successor's result is lost" \
	"$(state "UPDATE t_plain SET result = 'successor', writer_epoch = $fresh WHERE id = 1" pkg_fence) $(state "UPDATE t_plain SET result = 'stale', writer_epoch = $stale WHERE id = 1" pkg_fence) $(val "SELECT result FROM t_plain" pkg_fence)" \
	"00000 00000 stale"

# ===========================================================================
echo "--- dpkg -r, and fence reinstalled from \$FENCE_SRC"
gone=unchecked
t0=$(date +%s%N)
restore
t1=$(date +%s%N)
check "dpkg -r $pkg: removed" "$(pkg_status)" not-installed
check "the package's fence.so and fence.control were gone after dpkg -r" "$gone" ""
if grep -qiE 'error|warning: unable' "$dir/dpkg-remove.log"; then
	bad "dpkg -r reported: $(tr '\n' ' ' <"$dir/dpkg-remove.log")"
fi
if grep -qE '^(gcc|cc|clang) ' "$dir/restore.log"; then
	bad "the reinstall compiled in \$FENCE_SRC"
else
	ok "make install in \$FENCE_SRC reinstalled fence without compiling ($(((t1 - t0) / 1000000)) ms from dpkg -r to installed)"
fi
differ=
for f in fence.so $(cd "$src" && echo fence.control $data); do
	case $f in fence.so) inst=$libdir/$f ;; *) inst=$extdir/$f ;; esac
	cmp -s "$inst" "$src/$f" || differ="$differ $inst"
done
check "fence.so, fence.control and every DATA script are back, equal to \$FENCE_SRC's" "${differ# }" ""
check "no package owns them" "$(dpkg -S "$libdir/fence.so" "$extdir/fence.control" 2>/dev/null | wc -l)" 0
val "CREATE DATABASE pkg_restored" >/dev/null
check "a new backend loads the restored fence: CREATE EXTENSION, a claim" \
	"$(val "CREATE EXTENSION fence; SELECT extversion, fence_claim('restored', '1 minute') > 0 FROM pg_extension WHERE extname = 'fence'" pkg_restored)" \
	"$default|t"
check "nothing wrote into \$FENCE_SRC (its listing of files, sizes and times is unchanged)" "$(src_listing)" "$listing0"

total=$((n_ok + n_fail))
if [ "$n_fail" = 0 ]; then
	echo "package: all $total assertions hold ($pkg $default built, installed, $n_pass regression tests passed, removed, fence reinstalled)"
	exit 0
fi
echo "package: $n_fail of $total assertions FAILED"
exit 1
