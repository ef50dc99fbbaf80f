# Copyright (c) 2026, the fence authors

# Failover and restore: tokens stay ordered across timelines, and
# fence_advance() repairs what fence cannot detect.
#
# Tokens issued on timeline T lie in [(T - 1) * 2^40, T * 2^40).  The first
# claim on a timeline whose range is above the counter moves the counter to
# the range's start (LOG "fence moved its token counter ...", audit action
# counter_move); a counter already in its range continues.
#
# 1. A primary and an async standby.  The standby is caught up, then
#    stopped: it lags.  On the primary, clients claim jobs and write rows
#    with their tokens, and one claims inside a transaction it leaves open.
#    The primary is stopped in immediate mode and the standby promoted
#    (timeline 2).  The lag is real: the new primary has none of the lagged
#    claims and its counter is below the largest token a client saw.  Its
#    first token is in timeline 2's range and above every token a client
#    saw, and so is every later one; no token is issued twice.  Every stale
#    holder's write (each lagged token, the open transaction's token) is
#    refused with 5F001 or 5F004, and the new holders' writes land.  The
#    move is logged once and recorded once in fence_audit_log.
#    (In 1.0 the promoted standby's counter continued from its replayed
#    value and handed the lagged tokens out again, to other holders.)
# 2. A second failover before the move reached the next standby: a standby
#    made from a base backup of the new primary taken before its first
#    claim, then stopped; claims on timeline 2; the new primary stops in
#    immediate mode and the second standby is promoted (timeline 3).  Its
#    counter is still below timeline 2's range; its first token is in
#    timeline 3's range, above every token seen on timelines 1 and 2; stale
#    holders of both are refused.  After a clean restart the counter just
#    continues (no second move).
# 3. fence_advance(): two protected tables (strict, and shared with the
#    larger epochs) loaded with pg_dump -t into a fresh database with a
#    fresh fence hold epochs above its counter.  A guarded write meets an
#    epoch "from the future": 5F002 naming fence_advance().  A non-superuser
#    gets 42501.  fence_advance() moves the counter past every stored epoch
#    of every protected table plus the margin (2^32), records the move, and
#    never moves the counter back or out of the timeline's range; then new
#    claims write, and the source's old tokens are refused.
#
# On a standby fence_claim, fence_renew, fence_release, the *_any functions
# and fence_prune fail with 25006, saying why.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $t0 = time;
my $R = 2**40;              # tokens per timeline
my $MARGIN = 2**32;         # fence_advance's default margin

# fault-test ports: offset 6.  The nodes listen on unix sockets only (in
# this test's own directory), so the standbys' ports need only differ from
# the primary's and from each other.
my $port = ($ENV{FENCE_TEST_PORT_BASE} // 54330) + 6;

sub q1
{
	my ($node, $sql, $db) = @_;
	return $node->safe_psql($db // 'postgres', $sql);
}

# ('ok', stderr) if $sql succeeds, else (SQLSTATE or the whole error, stderr)
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

sub sqlstate { return (try_sql(@_))[0]; }

# claim each job in autocommit, one statement each; returns the tokens
sub claim_all_db
{
	my ($node, $db, $holder, @jobs) = @_;
	my @tokens = split /\n/, q1($node,
		join("\n", map { "SELECT fence_claim('$_', '1 hour', '$holder');" } @jobs), $db);
	die "claims of @jobs in $db returned <@tokens>"
	  unless @tokens == @jobs && !grep { !/^\d+$/ } @tokens;
	return @tokens;
}

sub claim_all
{
	my ($node, $holder, @jobs) = @_;
	return claim_all_db($node, 'postgres', $holder, @jobs);
}

# write each job's row with its token (the epoch rides on the write),
# one statement each
sub write_all
{
	my ($node, $value, $jobs, $tokens) = @_;
	q1($node, join("\n", map {
		"UPDATE results SET value = '$value', writer_epoch = $tokens->[$_]"
		  . " WHERE job = '$jobs->[$_]';" } 0 .. $#$jobs));
}

sub timeline
{
	return hex(substr(q1($_[0], 'SELECT pg_walfile_name(pg_current_wal_lsn())'), 0, 8));
}

sub counter
{
	my ($node, $db) = @_;
	return q1($node, 'SELECT last_value FROM fence_token_seq', $db);
}

sub counter_moves
{
	my ($node, $db) = @_;
	return q1($node, q{SELECT count(*) FROM fence_audit_log WHERE action = 'counter_move'}, $db);
}

sub max_of { my $m = 0; $_ > $m and $m = $_ for @_; return $m; }

my $moved_re = qr/fence moved its token counter/;

# ---------------------------------------------------------------------------
# 1. primary, async standby, lag, crash, promote

my $primary = PostgreSQL::Test::Cluster->new('primary', port => $port);
$primary->init(allows_streaming => 1);
$primary->start;
my $njobs = 40;
my @jobs = map { "job-$_" } 1 .. $njobs;
q1($primary, qq{
CREATE EXTENSION fence;
CREATE TABLE results (job text PRIMARY KEY, value text,
                      writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('results');
});

# before the lag (replicated): every job's row, written with its token,
# then released
my @pre = claim_all($primary, 'loader', @jobs, 'job-open');
q1($primary, join("\n", map {
	"INSERT INTO results VALUES ('" . (@jobs, 'job-open')[$_] . "', 'pre', $pre[$_]);" } 0 .. $#pre));
q1($primary, join("\n", map {
	"SELECT fence_release('" . (@jobs, 'job-open')[$_] . "', $pre[$_]);" } 0 .. $#pre));

$primary->backup('b1');
my $standby1 = PostgreSQL::Test::Cluster->new('standby1', port => $port + 10);
$standby1->init_from_backup($primary, 'b1', has_streaming => 1);
$standby1->start;
$primary->wait_for_catchup($standby1, 'replay', $primary->lsn('insert'));
is(q1($standby1, q{SELECT count(*) FROM results WHERE value = 'pre'}), $njobs + 1,
	'standby 1 has replayed the rows written before the lag');

my ($st, $err) = try_sql($standby1, q{SELECT fence_claim('on-standby', '1 hour')});
is($st, '25006', 'fence_claim on a standby: 25006');
like($err, qr/fence issues no tokens on a standby/, 'fence_claim on a standby says why');
# renew, release and prune change fence_claims: 25006 naming fence, never
# an internal error ("cannot assign TransactionIds during recovery")
my ($held_job, $held_token) = split /\|/,
  q1($standby1, 'SELECT job, token FROM fence_claims ORDER BY token DESC LIMIT 1');
for my $call (
	"SELECT fence_renew('$held_job', $held_token, '1 hour')",
	"SELECT fence_release('$held_job', $held_token)",
	"SELECT fence_renew_any('$held_job', '1 hour')",
	"SELECT fence_release_any('$held_job')",
	"CALL fence_prune('1 day')")
{
	($st, $err) = try_sql($standby1, $call);
	is($st, '25006', "on a standby: $call gives 25006");
	like($err, qr/fence cannot \w+ (a claim|claims) on a standby/, "on a standby: $call says why");
}

# the lag: the standby stops receiving
$standby1->stop;

# on the primary: every job claimed again and its row written; the tokens
# and the rows never reach the standby
my @lagged = claim_all($primary, 'worker', @jobs);
write_all($primary, 'lagged', \@jobs, \@lagged);
# a claim no standby saw, of a job the standby never heard of
my ($lag_only) = claim_all($primary, 'worker', 'lag-only');
q1($primary, "INSERT INTO results VALUES ('lag-only', 'lagged', $lag_only)");
# a claim inside a transaction left open, which writes its row too
my $u = FenceTest::Client->new($primary, 'U');
my $u_tok = $u->run_ok("BEGIN;\nSELECT fence_claim('job-open', '1 hour', 'open');");
$u->run_ok("UPDATE results SET value = 'open', writer_epoch = $u_tok WHERE job = 'job-open';");
like($u_tok, qr/^\d+$/, "a client saw token $u_tok inside an open transaction");

# everything a client saw on timeline 1: every token, and every epoch in a row
my @row_epochs = split /\n/, q1($primary, 'SELECT writer_epoch FROM results');
my @seen1 = (@pre, @lagged, $lag_only, $u_tok, @row_epochs);
my %seen = map { $_ => 'timeline 1' } @seen1;
my $max_seen1 = max_of(@seen1);
note("timeline 1: " . scalar(@seen1) . " tokens seen, the largest $max_seen1");

$primary->stop('immediate');
$u->quit;

$standby1->start;
$standby1->promote;
is(timeline($standby1), 2, 'the promoted standby 1 is on timeline 2');

# the lag is real
is(q1($standby1, 'SELECT count(*) FROM fence_claims WHERE token IN ('
	  . join(',', @lagged, $lag_only, $u_tok) . ')'),
	0, 'the new primary has none of the lagged claims');
is(q1($standby1, q{SELECT count(*) FROM results WHERE value <> 'pre'}), 0,
	'... and none of the lagged rows');
my $counter_at_promotion = counter($standby1);
cmp_ok($counter_at_promotion, '<', $max_seen1,
	"its counter ($counter_at_promotion) is below the largest token a client saw ($max_seen1)");
ok(!$standby1->log_contains($moved_re), 'no counter move logged before the first claim');
is(counter_moves($standby1), 0, 'no counter_move recorded before the first claim');

# ---------------------------------------------------------------------------
# a second standby, from a base backup taken before the first claim on
# timeline 2; it catches up and then stops (it lags)

$standby1->backup('b2');
my $standby2 = PostgreSQL::Test::Cluster->new('standby2', port => $port + 20);
$standby2->init_from_backup($standby1, 'b2', has_streaming => 1);
$standby2->start;
$standby1->wait_for_catchup($standby2, 'replay', $standby1->lsn('insert'));
($st, $err) = try_sql($standby2, q{SELECT fence_claim('on-standby', '1 hour')});
isnt($st, 'ok', "fence_claim on standby 2 fails too ($st)");
$standby2->stop;

# ---------------------------------------------------------------------------
# timeline 2: the first claim

my ($n1) = claim_all($standby1, 'new-worker', 'job-1');
cmp_ok($n1, '>=', $R, "first token on timeline 2 ($n1) is in its range (>= 2^40)");
cmp_ok($n1, '<', 2 * $R, '... and below timeline 3\'s range');
cmp_ok($n1, '>', $max_seen1, "... and above every token a client saw on timeline 1 ($max_seen1)");
ok($standby1->log_contains($moved_re), 'the move is logged ("fence moved its token counter")');
is(counter_moves($standby1), 1, 'the move is recorded in fence_audit_log (counter_move)');
note('audit: ' . q1($standby1, q{SELECT format('%s %s %s', role, detail, reason)
                                   FROM fence_audit_log WHERE action = 'counter_move'}));

# every other job claimed again, from several backends
my @n = ($n1);
for my $i (0 .. 3)
{
	push @n, claim_all($standby1, "new-worker-$i",
		@jobs[ 1 + $i * 10 .. ($i == 3 ? $njobs - 1 : 10 + $i * 10) ]);
}
push @n, claim_all($standby1, 'new-worker', 'job-open', 'lag-only');
is(scalar(grep { $_ <= $max_seen1 || $seen{$_} } @n), 0,
	'no token issued on timeline 2 is equal to or below a token seen on timeline 1 ('
	  . scalar(@n) . ' claims)');
is(join(',', @n), join(',', sort { $a <=> $b } @n), '... and they increase');
is(counter_moves($standby1), 1, 'the counter moved once (later claims continue)');
my @moved_lines = grep { /$moved_re/ } split /\n/, slurp_file($standby1->logfile);
is(scalar(@moved_lines), 1, 'one LOG line for the move');
note("LOG: $moved_lines[0]") if @moved_lines;

# the new holders write; every stale holder of a lagged token is refused
my %tok_of = map { ((@jobs, 'job-open', 'lag-only')[$_] => $n[$_]) } 0 .. $#n;
write_all($standby1, 'new', [ @jobs, 'job-open' ], [ @tok_of{ @jobs, 'job-open' } ]);
is(q1($standby1, q{SELECT count(*) FROM results WHERE value = 'new'}), $njobs + 1,
	'the new holders\' writes land');

is(sqlstate($standby1,
	"UPDATE results SET value = 'stale', writer_epoch = $lagged[0] WHERE job = 'job-1'"),
	'5F001', "the stale holder of job-1 (token $lagged[0], lost) is fenced (5F001)");
my %refused;
for my $i (0 .. $#jobs)
{
	my $s = sqlstate($standby1,
		"UPDATE results SET value = 'stale', writer_epoch = $lagged[$i] WHERE job = '$jobs[$i]'");
	$refused{$s}++;
}
my $refused_desc = join(' ', map { "$_=$refused{$_}" } sort keys %refused);
is(($refused{'5F001'} // 0) + ($refused{'5F004'} // 0), $njobs,
	"every stale holder of a lagged token is fenced ($njobs writes: $refused_desc)");
like(sqlstate($standby1,
	"UPDATE results SET value = 'stale', writer_epoch = $u_tok WHERE job = 'job-open'"),
	qr/^5F00[14]$/, "the open transaction's token ($u_tok) is refused");
like(sqlstate($standby1,
	"UPDATE results SET value = 'stale', writer_epoch = $lagged[-1] WHERE job = 'job-open'"),
	qr/^5F00[14]$/, "the largest lagged token ($lagged[-1]) is refused on another job's row");
like(sqlstate($standby1,
	"INSERT INTO results VALUES ('lag-only-2', 'stale', $lag_only)"),
	qr/^5F00[14]$/, "a lagged claim's token ($lag_only) of a job the new primary never saw is refused");
is(q1($standby1, q{SELECT count(*) FROM results WHERE value = 'stale'}), 0,
	'no stale write landed');

# ---------------------------------------------------------------------------
# 2. timeline 2 issues and writes more, and an open transaction claims;
# then the second failover, to the standby that saw none of timeline 2's
# tokens

my @more = claim_all($standby1, 'worker-2', map { "tl2-$_" } 1 .. 5);
my $u2 = FenceTest::Client->new($standby1, 'U2');
my $u2_tok = $u2->run_ok("BEGIN;\nSELECT fence_claim('tl2-open', '1 hour', 'open');");
my @seen2 = (@n, @more, $u2_tok);
$seen{$_} = 'timeline 2' for @seen2;
my $max_seen2 = max_of(@seen2);

$standby1->stop('immediate');
$u2->quit;

$standby2->start;
$standby2->promote;
is(timeline($standby2), 3, 'the promoted standby 2 is on timeline 3');
my $c2 = counter($standby2);
cmp_ok($c2, '<', $R, "its counter ($c2) never reached timeline 2's range: the move was lost");
is(q1($standby2, "SELECT count(*) FROM fence_claims WHERE token >= $R"), 0,
	'... and it has none of timeline 2\'s claims');

my ($m1) = claim_all($standby2, 'tl3-worker', 'job-1');
cmp_ok($m1, '>=', 2 * $R, "first token on timeline 3 ($m1) is in its range (>= 2 * 2^40)");
cmp_ok($m1, '<', 3 * $R, '... and below timeline 4\'s range');
cmp_ok($m1, '>', $max_seen2, "... and above every token seen on timeline 2 ($max_seen2)");
my @m = ($m1, claim_all($standby2, 'tl3-worker', @jobs[ 1 .. 9 ], 'tl2-open'));
is(scalar(grep { $_ <= $max_seen2 || $seen{$_} } @m), 0,
	'no token issued on timeline 3 is equal to or below a token seen before ('
	  . scalar(@m) . ' claims)');
ok($standby2->log_contains($moved_re), 'timeline 3: the move is logged');
is(counter_moves($standby2), 1, 'timeline 3: the move is recorded once');

is(sqlstate($standby2,
	"UPDATE results SET value = 'stale', writer_epoch = $n1 WHERE job = 'job-1'"),
	'5F001', "timeline 3: the timeline 2 holder of job-1 (token $n1) is fenced");
is(sqlstate($standby2,
	"UPDATE results SET value = 'stale', writer_epoch = $lagged[0] WHERE job = 'job-1'"),
	'5F001', "timeline 3: the lost timeline 1 holder of job-1 (token $lagged[0]) is fenced");
like(sqlstate($standby2,
	"UPDATE results SET value = 'stale', writer_epoch = $u2_tok WHERE job = 'job-2'"),
	qr/^5F00[14]$/, "timeline 3: timeline 2's open-transaction token ($u2_tok) is refused");
is(sqlstate($standby2,
	"UPDATE results SET value = 'tl3', writer_epoch = $m1 WHERE job = 'job-1'"),
	'ok', 'timeline 3: the current holder of job-1 writes');

# a clean restart on the same timeline: the counter continues
$standby2->restart;
my ($m_after) = claim_all($standby2, 'tl3-worker', 'after-restart');
my $m_last = max_of(@m);
cmp_ok($m_after, '>', $m_last, "after a restart the next token ($m_after) is above the last ($m_last)");
cmp_ok($m_after - $m_last, '<', 1000, '... and continues from it (no new move)');
is(counter_moves($standby2), 1, '... and no counter_move is recorded');

# ---------------------------------------------------------------------------
# 3. fence_advance: tables loaded with pg_dump -t into a database with a
# fresh fence hold epochs above its counter

my $node = $standby2;
# rows written with tokens well above timeline 3's start; the shared table
# holds the largest
my @w = claim_all($node, 'tl3-writer', @jobs[ 10 .. 14 ]);
write_all($node, 'tl3', [ @jobs[ 10 .. 14 ] ], \@w);
q1($node, q{
CREATE TABLE inventory (sku text PRIMARY KEY, quantity int NOT NULL,
                        writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('inventory', mode => 'shared');
});
claim_all($node, 'filler', map { "filler-$_" } 1 .. 20);
my ($inv_tok) = claim_all($node, 'stocker', 'restock');
q1($node, "INSERT INTO inventory VALUES ('sku-1', 5, $inv_tok), ('sku-2', 7, $inv_tok)");
my $max_results = q1($node, 'SELECT max(writer_epoch) FROM results');
my $max_epoch = max_of($max_results, $inv_tok);
cmp_ok($inv_tok, '>', $max_results, "the shared table holds the largest epoch ($inv_tok)");

$node->safe_psql('postgres', 'CREATE DATABASE restored');
q1($node, 'CREATE EXTENSION fence', 'restored');
{
	my ($out, $load_err) = ('', '');
	my $ok = IPC::Run::run(
		[ $node->installed_command('pg_dump'), '-h', $node->host, '-p', $node->port,
		  '-t', 'results', '-t', 'inventory', '-d', 'postgres' ],
		'<', \undef, '|',
		[ $node->installed_command('psql'), '-X', '-q', '-v', 'ON_ERROR_STOP=1',
		  '-h', $node->host, '-p', $node->port, '-d', 'restored' ],
		'>', \$out, '2>', \$load_err);
	ok($ok && $load_err !~ /ERROR/,
		'pg_dump -t results -t inventory loads into a fresh fence database')
	  or diag($load_err);
}
my $prot = q1($node, q{SELECT string_agg(format('%s %s', relation, mode), ', ' ORDER BY relation::text)
                         FROM fence_protected}, 'restored');
note("restored: protected after the load: <$prot>");
for my $t ([ 'results', 'strict' ], [ 'inventory', 'shared' ])
{
	next if q1($node, "SELECT count(*) FROM fence_protected WHERE relation = '$t->[0]'::regclass",
		'restored');
	q1($node, "SELECT fence_protect('$t->[0]', mode => '$t->[1]')", 'restored');
}
is(q1($node, q{SELECT string_agg(format('%s %s', relation, mode), ', ' ORDER BY relation::text)
                 FROM fence_protected}, 'restored'),
	'inventory shared, results strict', 'restored: both tables are protected');
is(q1($node, 'SELECT max(writer_epoch) FROM results', 'restored'), $max_results,
	'restored: the rows keep their epochs');

my $moves0 = counter_moves($node, 'restored');
my ($r1) = claim_all_db($node, 'restored', 'r-worker', 'r-job');
cmp_ok($r1, '<', $max_results,
	"restored: the first claim's token ($r1) is below the stored epochs ($max_results)");
my $fresh_counter = counter($node, 'restored');
my ($code, $msg) = try_sql($node,
	"UPDATE results SET value = 'r', writer_epoch = $r1 WHERE job = '$jobs[14]'", 'restored');
is($code, '5F002', 'restored: a guarded write meeting an epoch from the future gets 5F002');
like($msg, qr/ERROR:.*future/, '... its message says the epoch is from the future');
like($msg, qr/fence_advance/, '... and names fence_advance()');
note("restored: $msg");
($code, $msg) = try_sql($node,
	"UPDATE inventory SET quantity = 0, writer_epoch = $r1 WHERE sku = 'sku-1'", 'restored');
note("restored: a write to the shared table's future row: $code $msg");

# not by a non-superuser
q1($node, 'CREATE ROLE app LOGIN', 'restored');
is(sqlstate($node, 'SET ROLE app; SELECT fence_advance()', 'restored'), '42501',
	'fence_advance by a non-superuser: 42501');
is(counter($node, 'restored'), $fresh_counter, '... and the counter did not move');

my $adv = q1($node, 'SELECT fence_advance()', 'restored');
my $c_adv = counter($node, 'restored');
note("fence_advance() returned $adv; the counter is now $c_adv");
cmp_ok($c_adv, '>=', $max_epoch + $MARGIN,
	"fence_advance() moved the counter ($c_adv) past every stored epoch of both tables ($max_epoch) plus 2^32");
cmp_ok($c_adv, '<', 3 * $R, '... inside timeline 3\'s range');
is($adv, $c_adv, '... and returned the counter\'s last value');
is(counter_moves($node, 'restored') - $moves0, 2,
	'restored: the range move and fence_advance are both recorded (counter_move)');
note('audit: ' . q1($node, q{SELECT string_agg(format('%s | %s | %s', role, detail, reason), E'\n' ORDER BY id)
                              FROM fence_audit_log WHERE action = 'counter_move'}, 'restored'));

my ($r2) = claim_all_db($node, 'restored', 'r-worker', 'r-job2');
cmp_ok($r2, '>', $max_epoch + $MARGIN, "restored: a new token ($r2) is above the stored epochs plus the margin");
is(sqlstate($node, "UPDATE results SET value = 'r2', writer_epoch = $r2 WHERE job = '$jobs[14]'",
		'restored'),
	'ok', '... and writes the row that was from the future');
is(q1($node, "SELECT writer_epoch FROM results WHERE job = '$jobs[14]'", 'restored'), $r2,
	'... stamped with it');
like(sqlstate($node, "UPDATE results SET value = 'old', writer_epoch = $w[4] WHERE job = '$jobs[13]'",
		'restored'),
	qr/^5F00[14]$/, "restored: the source's token $w[4] is refused");
like(sqlstate($node, "UPDATE inventory SET quantity = 1, writer_epoch = $inv_tok WHERE sku = 'sku-2'",
		'restored'),
	qr/^5F00[14]$/, "restored: the source's token $inv_tok is refused on the shared table");

# never backwards, never out of the range
q1($node, 'SELECT fence_advance(0)', 'restored');
cmp_ok(counter($node, 'restored'), '>=', $c_adv, 'fence_advance(0) does not move the counter back');
my $c_before = counter($node, 'restored');
($code, $msg) = try_sql($node, "SELECT fence_advance($R)", 'restored');
isnt($code, 'ok', "fence_advance(2^40) would leave timeline 3's range: an error ($code)");
note("fence_advance(2^40): $msg");
is(counter($node, 'restored'), $c_before, '... and the counter did not move');

$node->stop;
note(sprintf('runtime %.1f s', time - $t0));
done_testing();

