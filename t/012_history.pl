# Copyright (c) 2026, the fence authors

# Histories: no token is issued twice, and none is refused, whatever the
# timeline's number does (token.c, "Histories"; doc/fence.md 9.5).
#
# A history is the counter's run on one server, on one timeline, since one
# start of its postmaster.  Before the first token of a new history the
# counter moves to max(counter + 2^20, clock floor of (now + 2 *
# fence.max_clock_skew)), the clock floor being milliseconds since 2000
# shifted left by 10; no token leaves above the clock floor of its moment.
#
# 1. The double failover that reuses a timeline's number (issue 29's pg_ctl
#    reproduction).  A primary with two standbys, a and b.  The primary
#    stops; a is promoted (timeline 2) and claims five jobs; a stops in
#    immediate mode before b streamed from it; b is promoted: timeline 2
#    again, from the same replicated counter.  Every token b issues is
#    above every token a issued; a's tokens are refused on b, by
#    fence_begin and by the guard.  Twin: a plain sequence hands a's values
#    out again on b.  (Under the timeline ranges of the previous rule, b's
#    first claims returned a's tokens, and fence_begin accepted a's.)
#    1b: when the clocks' bound fails (a third standby promoted with its
#    clock two hours behind, libfaketime), its tokens lie below a's: the
#    order of siblings rests on the clocks; a's tokens are still refused
#    there, as never issued.
# 2. A pg_dump of that database (timeline 2) restored into a new cluster
#    (timeline 1), and a dump of a timeline-1 database restored into b (on
#    timeline 2): both keep claiming, above every token of their source.
#    (Before, the first gave 54000 at every claim: the counter lay above
#    timeline 1's range.)
# 3. pg_upgrade of the promoted cluster (timeline 2) into a new one
#    (timeline 1): claims continue above every token before the upgrade;
#    then a standby of the upgraded cluster is promoted, and its tokens lie
#    above those too.
# 4. pg_resetwal after an immediate stop: the WAL since the last checkpoint
#    is gone, and with it the counter's record of the claims made since.
#    The next token is above every token seen before.  Twin: a plain
#    sequence's value committed after the checkpoint is handed out again.
# 5. Clocks: the first token of a new history lies above the clock's
#    reading before the promotion plus twice fence.max_clock_skew, and is
#    returned only once the server's clock has passed it.
#
# Every token each scenario sees is also checked against every token seen
# anywhere before it: none repeats.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use File::Path qw(make_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# fault-test ports: offset 12 (unix sockets only, in this test's directory)
my $port = ($ENV{FENCE_TEST_PORT_BASE} // 54330) + 12;

sub q1
{
	my ($node, $sql, $db) = @_;
	return $node->safe_psql($db // 'postgres', $sql);
}

# (SQLSTATE or 'ok', stderr)
sub try_sql
{
	my ($node, $sql, $db) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db // 'postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ('ok', $err) if $rc == 0 && $err !~ /ERROR/;
	return ($1, $err) if $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ("rc=$rc: $err", $err);
}

sub timeline
{
	return hex(substr(q1($_[0], 'SELECT pg_walfile_name(pg_current_wal_lsn())'), 0, 8));
}

# the clock floor of the server's clock now, and how far a new history's
# first token lies above it at least
my $floor_sql = q{SELECT (floor(extract(epoch FROM pg_catalog.clock_timestamp()
                                       - timestamptz '2000-01-01 00:00:00+00') * 1000))::bigint << 10};
sub clock_floor { return q1($_[0], $floor_sql, $_[1]); }
sub skew_tokens
{
	my ($node) = @_;
	my $ms = q1($node, q{LOAD 'fence'; SELECT pg_catalog.current_setting('fence.max_clock_skew')::interval});
	# "00:00:00.5" -> 500 ms
	my ($h, $m, $s) = split /:/, $ms;
	return int(($h * 3600 + $m * 60 + $s) * 1000) << 10;
}

# claim each job, one statement each; the tokens, and whether each claim
# returned only once the clock had passed it
sub claim_all
{
	my ($node, $db, @jobs) = @_;
	my @rows = split /\n/, q1($node, join("\n", map {
		"SELECT t, (t >> 10) <= (floor(extract(epoch FROM pg_catalog.clock_timestamp()"
		  . " - timestamptz '2000-01-01 00:00:00+00') * 1000))::bigint"
		  . " FROM (SELECT fence_claim('$_', '1 hour') AS t) c;" } @jobs), $db);
	my (@tokens, $behind_clock);
	$behind_clock = 1;
	for (@rows)
	{
		my ($t, $ok) = split /\|/;
		die "claims of @jobs in $db returned <@rows>" unless defined $t && $t =~ /^\d+$/;
		push @tokens, $t;
		$behind_clock = 0 unless $ok eq 't';
	}
	return (\@tokens, $behind_clock);
}

# every token seen so far in one database's line of copies (the primary's
# postgres, its standbys, restores and upgrades), by where it was seen;
# another database is another arbiter
my %seen;
my %branch;		# tokens of a copy that went its own way (a restore)
sub none_seen_before
{
	my ($where, @tokens) = @_;
	my @again = grep { exists $seen{$_} } @tokens;
	my $max = 0;
	$_ > $max and $max = $_ for grep { !$branch{$_} } keys %seen;
	my @below = grep { $_ <= $max } @tokens;
	is(scalar(@again), 0, "$where: no token issued twice"
		  . (@again ? " (again: @again, first seen $seen{$again[0]})" : ''));
	is(scalar(@below), 0, "$where: every token is above every token seen before ($max)");
	$seen{$_} = $where for @tokens;
}

my @jobs = map { "job-$_" } 1 .. 5;

# ---------------------------------------------------------------------------
# 1. the double failover onto a timeline's number again

my $primary = PostgreSQL::Test::Cluster->new('primary', port => $port);
$primary->init(allows_streaming => 1);
$primary->start;
q1($primary, q{
CREATE EXTENSION fence;
CREATE SEQUENCE plain_seq;
CREATE TABLE results (job text PRIMARY KEY, value text,
                      writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO results SELECT 'job-' || g, 'init', 0 FROM generate_series(1, 5) g;
SELECT fence_protect('results');
});
my ($t1) = claim_all($primary, 'postgres', map { "pre-$_" } 1 .. 3);
none_seen_before('the primary (timeline 1)', @$t1);
q1($primary, 'SELECT nextval(\'plain_seq\')');

$primary->backup('b1');
my $a = PostgreSQL::Test::Cluster->new('standby_a', port => $port + 10);
$a->init_from_backup($primary, 'b1', has_streaming => 1);
$a->start;
my $b = PostgreSQL::Test::Cluster->new('standby_b', port => $port + 20);
$b->init_from_backup($primary, 'b1', has_streaming => 1);
$b->start;
my $c = PostgreSQL::Test::Cluster->new('standby_c', port => $port + 60);
$c->init_from_backup($primary, 'b1', has_streaming => 1);
$c->start;
$primary->wait_for_catchup($a, 'replay', $primary->lsn('insert'));
$primary->wait_for_catchup($b, 'replay', $primary->lsn('insert'));
$primary->wait_for_catchup($c, 'replay', $primary->lsn('insert'));
$primary->stop;

my $before_a = clock_floor($a);
$a->promote;
is(timeline($a), 2, 'a is promoted onto timeline 2');
my ($ta, $a_behind) = claim_all($a, 'postgres', @jobs);
none_seen_before('a (timeline 2)', @$ta);
cmp_ok($ta->[0], '>=', $before_a + skew_tokens($a),
	"a's first token ($ta->[0]) lies above its clock before the promotion plus twice the skew");
ok($a_behind, "each of a's claims returned only once a's clock had passed its token");
my $plain_a = q1($a, 'SELECT nextval(\'plain_seq\')');
q1($a, "UPDATE results SET value = 'by a', writer_epoch = $ta->[0] WHERE job = 'job-1'");
$a->stop('immediate');

# b never streamed from a: its promotion picks timeline 2 as well
$b->promote;
is(timeline($b), 2, 'b is promoted onto timeline 2 as well: the number is used twice');
my ($tb, $b_behind) = claim_all($b, 'postgres', @jobs);
none_seen_before('b (timeline 2 again)', @$tb);
ok($b_behind, "each of b's claims returned only once b's clock had passed its token");
is(q1($b, 'SELECT nextval(\'plain_seq\')'), $plain_a,
	"twin: a plain sequence hands a's value ($plain_a) out again on b");
is((try_sql($b, "BEGIN; SELECT fence_begin('job-1', $ta->[0]); COMMIT;"))[0], '5F001',
	"b: fence_begin with a's token of job-1 ($ta->[0]) is fenced (5F001)");
is((try_sql($b, "BEGIN; SELECT fence_begin('job-1', $tb->[0]); "
	  . "UPDATE results SET value = 'by b' WHERE job = 'job-1'; COMMIT;"))[0], 'ok',
	"b: b's holder of job-1 ($tb->[0]) writes");
is((try_sql($b, "UPDATE results SET value = 'stale a', writer_epoch = $ta->[1] WHERE job = 'job-2'"))[0],
	'5F001', "b: the guard refuses a's token of job-2 ($ta->[1]) riding on a write");
like(q1($b, q{SELECT string_agg(reason, ' | ') FROM fence_audit_log WHERE action = 'counter_move'}),
	qr/A new history of the counter begins \(none recorded: a crash, a promotion[^)]*, timeline 2\)/,
	'b: the move is recorded, naming the new history');

# 1b. The bound fails: c, a third standby that followed neither a nor b, is
# promoted with its clock two hours behind (libfaketime).  Its counter's
# floor then lies below a's tokens: the order of sibling histories rests on
# the clocks, as doc/fence.md 9.5 says.  What stays: a's tokens lie above
# c's counter, so the guard refuses them there as never issued (5G002).
SKIP:
{
	my $lib = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
	skip "libfaketime is not installed ($lib)", 4 unless -e $lib;
	$c->stop;
	{
		local $ENV{LD_PRELOAD} = $lib;
		local $ENV{FAKETIME} = '-2h';
		local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
		local $ENV{FAKETIME_DONT_RESET} = '1';
		$c->start;
		$c->promote;
	}
	is(timeline($c), 2, 'c is promoted onto timeline 2 too, its clock two hours behind');
	my ($tc) = claim_all($c, 'postgres', 'on-c-1', 'on-c-2');
	cmp_ok($tc->[0], '<', $ta->[0],
		"with c's clock two hours behind, its first token ($tc->[0]) lies below a's ($ta->[0])");
	is((try_sql($c, "UPDATE results SET value = 'stale a', writer_epoch = $ta->[2] WHERE job = 'job-2'"))[0],
		'5G002', "c: the guard refuses a's token of job-3 ($ta->[2]) on job-2's row as never issued (5G002)");
	is((try_sql($c, "UPDATE results SET value = 'c', writer_epoch = $tc->[0] WHERE job = 'job-3'"))[0],
		'ok', "c: c's own current token ($tc->[0]) writes the same row");
}
$c->stop('immediate');

# ---------------------------------------------------------------------------
# 2. restores across timelines, both ways

my $dumpfile = $PostgreSQL::Test::Utils::tmp_check . '/b.dump';
$b->command_ok([ 'pg_dump', '-Fc', '-f', $dumpfile, '-d', $b->connstr('postgres') ],
	'pg_dump of b (timeline 2)');
my $fresh = PostgreSQL::Test::Cluster->new('fresh', port => $port + 30);
$fresh->init;
$fresh->start;
q1($fresh, 'CREATE DATABASE restored');
$fresh->command_ok([ 'pg_restore', '-d', $fresh->connstr('restored'), $dumpfile ],
	'pg_restore into a new cluster (timeline 1)');
is(timeline($fresh), 1, 'the new cluster is on timeline 1');
my ($tr, $r_behind) = claim_all($fresh, 'restored', map { "restored-$_" } 1 .. 3);
none_seen_before('the restore of timeline 2 into timeline 1', @$tr);
# the restored copy goes its own way: b's later tokens must differ from
# its tokens, not exceed them
$branch{$_} = 1 for @$tr;
ok($r_behind, "the restore's claims return only once the clock has passed their tokens");
is((try_sql($fresh, "BEGIN; SELECT fence_begin('job-1', $tb->[0]); COMMIT;", 'restored'))[0], 'ok',
	"the restore: the restored claim of job-1 ($tb->[0]) is still current");

# the other way: a dump of timeline 1 (the new cluster's own first database)
q1($fresh, q{CREATE EXTENSION fence});
my ($tf) = claim_all($fresh, 'postgres', 'tl1-a', 'tl1-b');
my $dump1 = $PostgreSQL::Test::Utils::tmp_check . '/tl1.dump';
$fresh->command_ok([ 'pg_dump', '-Fc', '-f', $dump1, '-d', $fresh->connstr('postgres') ],
	'pg_dump of a database on timeline 1');
q1($b, 'CREATE DATABASE from_tl1');
my $before_r = clock_floor($b);
$b->command_ok([ 'pg_restore', '-d', $b->connstr('from_tl1'), $dump1 ],
	'pg_restore of it into b (timeline 2)');
my ($t21) = claim_all($b, 'from_tl1', 'tl1-c', 'tl1-d');
cmp_ok($t21->[0], '>', $tf->[-1],
	"the restore into timeline 2 issues above its source's tokens ($t21->[0] > $tf->[-1])");
cmp_ok($t21->[0], '>=', $before_r + skew_tokens($b),
	'... and above the clock\'s reading before the restore plus twice the skew');

# ---------------------------------------------------------------------------
# 3. pg_upgrade of the promoted cluster, then a promotion after it

my ($before_up) = claim_all($b, 'postgres', 'before-upgrade');
none_seen_before('b before the upgrade', @$before_up);
$b->stop;
my $up = PostgreSQL::Test::Cluster->new('upgraded', port => $port + 40);
$up->init(allows_streaming => 1);
my $bindir = $b->config_data('--bindir');
my $updir = $PostgreSQL::Test::Utils::tmp_check . '/upgrade';
make_path($updir);
chdir $updir or die "chdir $updir: $!";
command_ok(
	[
		'pg_upgrade', '--no-sync',
		'-d', $b->data_dir, '-D', $up->data_dir,
		'-b', $bindir, '-B', $bindir,
		'-s', $up->host, '-p', $b->port, '-P', $up->port
	],
	'pg_upgrade of b (timeline 2) into a new cluster');
chdir $FindBin::RealBin;
$up->start;
is(timeline($up), 1, 'the upgraded cluster starts on timeline 1');
my ($tu, $u_behind) = claim_all($up, 'postgres', 'after-upgrade', 'after-upgrade-b');
none_seen_before('after pg_upgrade', @$tu);
ok($u_behind, 'the upgraded cluster returns tokens only once its clock has passed them');

$up->backup('bu');
my $us = PostgreSQL::Test::Cluster->new('upgraded_standby', port => $port + 50);
$us->init_from_backup($up, 'bu', has_streaming => 1);
$us->start;
$up->wait_for_catchup($us, 'replay', $up->lsn('insert'));
my ($tu2) = claim_all($up, 'postgres', 'after-upgrade-2');
none_seen_before('after pg_upgrade, more', @$tu2);
$up->stop('immediate');
$us->promote;
is(timeline($us), 2, 'the upgraded cluster\'s standby is promoted (timeline 2)');
my ($tus) = claim_all($us, 'postgres', 'after-upgrade-promotion', 'after-upgrade-promotion-b');
none_seen_before('a promotion after pg_upgrade', @$tus);

# ---------------------------------------------------------------------------
# 4. pg_resetwal

q1($us, 'CHECKPOINT');
my ($tw) = claim_all($us, 'postgres', 'before-resetwal-1', 'before-resetwal-2');
none_seen_before('before pg_resetwal', @$tw);
my $plain_w = q1($us, 'SELECT nextval(\'plain_seq\')');
$us->stop('immediate');
command_ok([ 'pg_resetwal', '-f', $us->data_dir ], 'pg_resetwal -f after an immediate stop');
$us->start;
is(q1($us, 'SELECT nextval(\'plain_seq\')'), $plain_w,
	"twin: a plain sequence hands its value committed after the checkpoint ($plain_w) out again");
my ($trw) = claim_all($us, 'postgres', 'after-resetwal');
none_seen_before('after pg_resetwal', @$trw);

$us->stop;
$fresh->stop;
done_testing();
