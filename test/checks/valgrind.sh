#!/usr/bin/env bash
# test/checks/valgrind.sh: the pg_regress and isolation suites with the
# server under valgrind memcheck.
#
# The postmaster (and so every backend it forks) runs under
#   valgrind --tool=memcheck --trace-children=yes --track-origins=yes
# with test/valgrind.supp (PostgreSQL's own false positives: Debian does not
# ship src/tools/valgrind.supp, so the file is a small copy of the entries
# that apply to the paths the suites reach, each with the reason).  Then
# `make installcheck` runs REGRESS and ISOLATION against it.
# Pass: zero memcheck errors with a frame in fence.so, and no backend crash.
# Errors elsewhere (PostgreSQL itself, libc) are counted and shown, not failed.
# The suites' own pass/fail is reported; timing-sensitive expected output may
# differ under valgrind, so set VALGRIND_REQUIRE_SUITE=1 to fail on it too.
#
# Debian's PostgreSQL is built without USE_VALGRIND, so palloc'd chunks are
# not marked as such: memcheck sees uninitialised reads and bad frees of
# malloc'd memory, and reads of memory never written, but not overruns
# inside a memory context block.
#
# Environment: FENCE_SRC (built tree; else a copy of this one), FENCE_PORT
# (else 54337), FENCE_WORK, FENCE_QUICK=1 (regress suite only),
# FENCE_VALGRIND_SUITES (default "regress isolation"; CI runs "regress",
# the quick variant, to stay within its time: see .ci/run).
#
# fence-check: slow
# fence-check-timeout: 1800
# fence-check-packages: valgrind
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_install_packages valgrind make || fence_die "cannot install valgrind"
fence_pg_setup

own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-valgrind)
	own_work=1
fi
src=${FENCE_SRC:-}
if [ -z "$src" ]; then
	src=$work/src
	fence_copy_tree "$here/../.." "$src" || exit 1
fi
supp=$src/test/valgrind.supp
[ -f "$supp" ] || supp=$here/../valgrind.supp
dir=$work/valgrind
port=${FENCE_PORT:-$(fence_free_port 54337)}
vgpid=
cleanup()
{
	if [ -f "$dir/data/postmaster.pid" ]; then
		(cd "$dir" && fence_as_pg pg_ctl -D "$dir/data" -m immediate -w -t 120 stop >/dev/null 2>&1)
	fi
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$dir/vglogs"
chown -R postgres:postgres "$dir"

fence_cluster_init "$dir" "$port" "shared_buffers = 16MB
huge_pages = off
max_connections = 20
autovacuum = off
max_prepared_transactions = 10
log_min_messages = warning" || exit 1

echo "valgrind: starting the server under memcheck (port $port)"
(cd "$dir" && fence_as_pg valgrind --quiet --tool=memcheck --trace-children=yes \
	--track-origins=yes --read-var-info=no --num-callers=40 --leak-check=no \
	--error-markers=VALGRINDERROR-BEGIN,VALGRINDERROR-END \
	--suppressions="$supp" --gen-suppressions=all \
	--log-file="$dir/vglogs/valgrind.%p.log" \
	"$FENCE_PG_BIN/postgres" -D "$dir/data" >"$dir/server.log" 2>&1) &
vgpid=$!
for ((i = 0; i < 240; i++)); do
	fence_as_pg pg_isready -q -h "$dir/sock" -p "$port" && break
	if ! kill -0 "$vgpid" 2>/dev/null; then
		tail -n 30 "$dir/server.log" >&2
		fence_die "the server under valgrind did not start"
	fi
	sleep 1
done
fence_as_pg pg_isready -q -h "$dir/sock" -p "$port" || fence_die "the server under valgrind did not become ready"

# shellcheck disable=SC2206
suites=(${FENCE_VALGRIND_SUITES:-regress isolation})
[ "${FENCE_QUICK:-0}" = 1 ] && suites=(regress)
suite_status=0
t0=$(date +%s)
for suite in "${suites[@]}"; do
	if [ "$suite" = regress ]; then
		args=(ISOLATION= TAP_TESTS=)
	else
		args=(REGRESS= TAP_TESTS=)
	fi
	log=$dir/$suite.log
	echo "valgrind: make installcheck ($suite)"
	(cd "$src" && fence_as_pg env PGHOST="$dir/sock" PGPORT="$port" \
		make -s USE_PGXS=1 "PG_CONFIG=$FENCE_PG_CONFIG" installcheck "${args[@]}") >"$log" 2>&1
	rc=$?
	grep -E '^(test |ok |not ok |     [^ ] )| (passed|failed)|tests passed|failed \(' "$log" | sed 's/^/  /'
	if [ "$rc" -ne 0 ]; then
		suite_status=1
		echo "valgrind: $suite suite failed under valgrind (exit $rc)"
		for d in "$src/regression.diffs" "$src/output_iso/regression.diffs"; do
			[ -s "$d" ] && head -n 60 "$d"
		done
	fi
done
echo "valgrind: suites took $(($(date +%s) - t0)) s"

(cd "$dir" && fence_as_pg pg_ctl -D "$dir/data" -m fast -w -t 300 stop >/dev/null 2>&1)
wait "$vgpid" 2>/dev/null

# Sort the errors: those with a frame in fence.so, and the rest.
report=$dir/errors.txt
perl -e '
	my ($fence, $other, %kinds) = (0, 0);
	for my $f (@ARGV) {
		open(my $fh, "<", $f) or next;
		my ($in, $block) = (0, "");
		while (<$fh>) {
			s/^==\d+== ?//;
			if (/VALGRINDERROR-BEGIN/) { ($in, $block) = (1, ""); next; }
			if (/VALGRINDERROR-END/) {
				$in = 0;
				my ($first) = $block =~ /^(\S.*)$/m;
				if ($block =~ /fence\.so|\b(?:claims|fence|guard|xact)\.c:/) {
					$fence++;
					print "=== fence error in $f\n$block\n";
				} else {
					$other++;
					$kinds{$first}++;
				}
				next;
			}
			$block .= $_ if $in;
		}
	}
	print STDERR "valgrind: memcheck errors with a frame in fence.so: $fence\n";
	print STDERR "valgrind: memcheck errors elsewhere (PostgreSQL, libc): $other\n";
	printf STDERR "  %5d  %s\n", $kinds{$_}, $_ for sort { $kinds{$b} <=> $kinds{$a} } keys %kinds;
	exit($fence ? 1 : 0);
' "$dir"/vglogs/valgrind.*.log >"$report"
fence_rc=$?
nlogs=$(ls "$dir"/vglogs | wc -l)
echo "valgrind: $nlogs processes traced"
if [ "$fence_rc" -ne 0 ]; then
	head -n 200 "$report"
fi

status=$fence_rc
if grep -nE 'terminated by signal|PANIC:|TRAP:|server process .* was terminated' "$dir/server.log"; then
	echo "valgrind: the server log shows a backend crash" >&2
	status=1
fi
if [ "$suite_status" -ne 0 ] && [ "${VALGRIND_REQUIRE_SUITE:-0}" = 1 ]; then
	status=1
fi
suite_word=passed
[ "$suite_status" -ne 0 ] && suite_word="had failures (see above)"
fence_errors=$(grep -c '^=== fence error' "$report")
echo "valgrind: suites (${suites[*]}) $suite_word under valgrind; $fence_errors memcheck errors in fence's code"
exit "$status"
