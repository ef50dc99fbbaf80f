# Copyright (c) 2026, the fence authors

# Failover and restore: tokens stay ordered across promotions, restarts
# and restores, and fence_advance() repairs what fence cannot detect.
#
# A history of the counter is its run on one server (system identifier),
# one timeline, since one start of the postmaster (token.c, "Histories").
# Before the first token of any other history -- a promotion, a restart
# (clean or not), a restore -- the counter moves to max(counter + 2^20,
# clock_floor(now + 2 * fence.max_clock_skew)), clock_floor(ms) being the
# milliseconds since 2000-01-01 shifted left by 10 (LOG "fence moved its
# token counter ...", audit action counter_move, once per history); and no
# token leaves above clock_floor(now): the first claim after a move
# returns only once the clock has passed its token.  A counter made by
# CREATE EXTENSION in this history and never used does not move (its
# tokens start at 1).  There is no range and no end of one.
#
# 1. A primary and an async standby.  The standby is caught up, then
#    stopped: it lags.  On the primary, clients claim jobs and write rows
#    with their tokens, and one claims inside a transaction it leaves open.
#    The primary is stopped in immediate mode and the standby promoted
#    (timeline 2).  The lag is real: the new primary has none of the lagged
#    claims and its counter is below the largest token a client saw.  Its
#    first token is above every token a client saw and above the clock
#    floor read before it plus twice the skew, and the claim returns only
#    once the clock has passed it; so is every later one above what any
#    client saw; no token is issued twice.  Every stale
#    holder's write (each lagged token, the open transaction's token) is
#    refused with 5F001 or 5G002 (never issued here), and the new holders'
#    writes land.  The
#    move is logged once and recorded once in fence_audit_log.
#    fence_advance(margin) on the promoted node moves the counter to the
#    largest of the counter, fence_claims and every stored epoch, plus the
#    margin.  (In 1.0 the promoted standby's counter continued from its replayed
#    value and handed the lagged tokens out again, to other holders.)
# 2. A second failover before the move reached the next standby: a standby
#    made from a base backup of the new primary taken before its first
#    claim, then stopped; claims on timeline 2; the new primary stops in
#    immediate mode and the second standby is promoted (timeline 3).  Its
#    counter is still below timeline 2's first token, and nothing in it can
#    tell what timeline 2 issued: only the clock's term covers it.  Its
#    first token is above every token seen on timelines 1 and 2 and above
#    the clock floor plus twice the skew; stale holders of both are
#    refused.  A clean restart begins a new history and moves the counter
#    again (fence cannot tell a clean restart from the start of a copy of
#    the data directory): logged and recorded once more.
# 3. fence_advance(): two protected tables (strict, and shared with the
#    larger epochs) loaded with pg_dump -t into a fresh database with a
#    fresh fence hold epochs above its counter.  A guarded write meets an
#    epoch "from the future": 5F002 naming fence_advance().  A non-superuser
#    gets 42501; a negative or NULL margin 22023.  The fresh counter's
#    first claim moves nothing (made in this history, never used).
#    fence_advance() moves the counter to the largest stored epoch of every
#    protected table plus the margin (by default 2^20, one crash gap),
#    exactly, and records the move; then new claims write, and the source's
#    old tokens are refused.  The counter never moves back
#    (fence_advance(0) with the counter above everything moves nothing),
#    and the margin always counts: 2^40 moves the counter 2^40 above
#    itself, as no range ends; a counter that far ahead of the clock is
#    issued from at once, with a WARNING.
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
my $GAP = 2**20;            # the crash gap: the count term of a move
my $MARGIN = 2**20;         # fence_advance's default margin: one crash gap

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

# the clock's reading in milliseconds since 2000-01-01 (its floor in tokens
# is that << 10)
my $CLOCK_MS_SQL = q{(floor(extract(epoch from clock_timestamp() - timestamptz '2000-01-01 00:00:00+00') * 1000))::bigint};

# fence.max_clock_skew, in tokens: twice the skew << 10 (the GUC exists
# once fence is loaded)
sub two_skews
{
	my ($node) = @_;
	my $ms = q1($node, q{LOAD 'fence'; SELECT (extract(epoch from current_setting('fence.max_clock_skew')::interval) * 1000)::bigint});
	return ((2 * $ms) << 10, $ms);
}

# in one session: the clock floor, the claim of one job, the clock after it
# returned; returns (floor before, token, ms after, stderr)
sub claim_clocked
{
	my ($node, $db, $holder, $job) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, "SELECT $CLOCK_MS_SQL << 10;\nSELECT fence_claim('$job', '1 hour', '$holder');\nSELECT $CLOCK_MS_SQL;",
		stdout => \$out, stderr => \$err, on_error_die => 1);
	my @v = split /\n/, $out;
	die "claim of $job in $db returned <$out> <$err>" unless @v == 3 && !grep { !/^\d+$/ } @v;
	return (@v, $err);
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

my ($two_skews, $skew_ms) = two_skews($standby1);
my ($floor1, $n1, $ms1) = claim_clocked($standby1, 'postgres', 'new-worker', 'job-1');
cmp_ok($n1, '>', $max_seen1, "first token on timeline 2 ($n1) is above every token a client saw on timeline 1 ($max_seen1)");
cmp_ok($n1, '>', $floor1 + $two_skews,
	"... and above the clock floor read before the claim ($floor1) plus twice fence.max_clock_skew ($skew_ms ms)");
cmp_ok($n1 >> 10, '<=', $ms1, "... and the claim returned only once the clock ($ms1 ms) had passed its token");
ok($standby1->log_contains($moved_re), 'the move is logged ("fence moved its token counter")');
is(counter_moves($standby1), 1, 'the move is recorded in fence_audit_log (counter_move)');
my ($move1, $reason1) = split /\t/, q1($standby1,
	q{SELECT detail || E'\t' || reason FROM fence_audit_log WHERE action = 'counter_move'});
is($move1, "from $counter_at_promotion to " . ($n1 - 1),
	"... from the replayed counter to just below the first token ($move1)");
like($reason1, qr/^A new history of the counter begins \(/, "... with its reason ($reason1)");

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
is(($refused{'5F001'} // 0) + ($refused{'5G002'} // 0), $njobs,
	"every stale holder of a lagged token is fenced ($njobs writes: $refused_desc)");
like(sqlstate($standby1,
	"UPDATE results SET value = 'stale', writer_epoch = $u_tok WHERE job = 'job-open'"),
	qr/^(?:5F001|5G002)$/, "the open transaction's token ($u_tok) is refused");
like(sqlstate($standby1,
	"UPDATE results SET value = 'stale', writer_epoch = $lagged[-1] WHERE job = 'job-open'"),
	qr/^(?:5F001|5G002)$/, "the largest lagged token ($lagged[-1]) is refused on another job's row");
like(sqlstate($standby1,
	"INSERT INTO results VALUES ('lag-only-2', 'stale', $lag_only)"),
	qr/^(?:5F001|5G002)$/, "a lagged claim's token ($lag_only) of a job the new primary never saw is refused");
is(q1($standby1, q{SELECT count(*) FROM results WHERE value = 'stale'}), 0,
	'no stale write landed');

# fence_advance on the promoted node: the largest of the counter, the
# registry and every stored epoch, plus the margin, which always counts.  A
# margin of one gap (about a second of the clock) is waited out by the next
# claim, not warned about.
{
	my $highest = q1($standby1, q{SELECT greatest((SELECT last_value FROM fence_token_seq),
	                                              (SELECT max(token) FROM fence_claims),
	                                              (SELECT max(writer_epoch) FROM results))});
	my $moves0 = counter_moves($standby1);
	my $adv = q1($standby1, "SELECT fence_advance($GAP)");
	is($adv, $highest + $GAP, "promoted node: fence_advance(2^20) moves the counter to the largest token or epoch ($highest) plus the margin ($adv)");
	is(counter($standby1), $adv, '... which is the counter\'s last value');
	is(counter_moves($standby1) - $moves0, 1, '... recorded (counter_move)');
	my ($fl, $t, $ms, $e) = claim_clocked($standby1, 'postgres', 'new-worker', 'after-advance');
	is($t, $adv + 1, "... the next claim takes the next token ($t): the same history, no move");
	cmp_ok($t >> 10, '<=', $ms, "... and returns only once the clock ($ms ms) has passed it");
	unlike($e, qr/WARNING/, '... without a warning: a gap ahead of the clock is waited out');
	push @n, $t;
	$seen{$t} = 'timeline 2';
}

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
cmp_ok($c2, '<', $n1, "its counter ($c2) is below timeline 2's first token ($n1): the move was lost");
cmp_ok($c2 + $GAP, '<', $max_seen2, '... and a gap above it is below what timeline 2 issued: only the clock\'s term covers that');
is(q1($standby2, "SELECT count(*) FROM fence_claims WHERE token >= $n1"), 0,
	'... and it has none of timeline 2\'s claims');

my ($floor3, $m1, $ms3) = claim_clocked($standby2, 'postgres', 'tl3-worker', 'job-1');
cmp_ok($m1, '>', $max_seen2, "first token on timeline 3 ($m1) is above every token seen on timeline 2 ($max_seen2)");
cmp_ok($m1, '>', $floor3 + $two_skews,
	"... and above the clock floor read before the claim ($floor3) plus twice the skew");
cmp_ok($m1 >> 10, '<=', $ms3, "... and the claim returned only once the clock ($ms3 ms) had passed its token");
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
	qr/^(?:5F001|5G002)$/, "timeline 3: timeline 2's open-transaction token ($u2_tok) is refused");
is(sqlstate($standby2,
	"UPDATE results SET value = 'tl3', writer_epoch = $m1 WHERE job = 'job-1'"),
	'ok', 'timeline 3: the current holder of job-1 writes');

# a clean restart on the same timeline begins a new history: fence cannot
# tell it from the start of a copy of the data directory whose original
# went on issuing, so the counter moves again
my $lines_before = () = grep { /$moved_re/ } split /\n/, slurp_file($standby2->logfile);
$standby2->restart;
my ($floor_r, $m_after, $ms_r) = claim_clocked($standby2, 'postgres', 'tl3-worker', 'after-restart');
my $m_last = max_of(@m);
cmp_ok($m_after, '>', $m_last + $GAP,
	"after a clean restart the next token ($m_after) is at least a gap above the last ($m_last): a new history");
cmp_ok($m_after, '>', $floor_r + $two_skews, '... and above the clock floor plus twice the skew');
cmp_ok($m_after >> 10, '<=', $ms_r, '... and the claim returned only once the clock had passed it');
is(counter_moves($standby2), 2, '... and a second counter_move is recorded');
my $lines_after = () = grep { /$moved_re/ } split /\n/, slurp_file($standby2->logfile);
is($lines_after - $lines_before, 1, '... and logged once');

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
is($r1, 1, 'restored: the fresh counter, made in this history and never used, does not move at its first claim (token 1)');
is(counter_moves($node, 'restored'), $moves0, '... and records no counter_move');
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
for my $bad ('-1', 'NULL')
{
	is(sqlstate($node, "SELECT fence_advance($bad)", 'restored'), '22023', "fence_advance($bad): 22023");
}
is(counter($node, 'restored'), $fresh_counter, '... and the counter did not move');

my $adv = q1($node, 'SELECT fence_advance()', 'restored');
my $c_adv = counter($node, 'restored');
note("fence_advance() returned $adv; the counter is now $c_adv");
is($c_adv, $max_epoch + $MARGIN,
	"fence_advance() moved the counter ($c_adv) to the largest stored epoch of both tables ($max_epoch) plus the default margin (2^20)");
is($adv, $c_adv, '... and returned the counter\'s last value');
is(counter_moves($node, 'restored') - $moves0, 1,
	'restored: fence_advance is recorded (counter_move), the only move');
is(q1($node, q{SELECT detail || ' ' || reason FROM fence_audit_log WHERE action = 'counter_move' ORDER BY id DESC LIMIT 1},
		'restored'),
	"from $fresh_counter to $c_adv fence_advance()", '... from the counter to the epoch plus the margin');
note('audit: ' . q1($node, q{SELECT string_agg(format('%s | %s | %s', role, detail, reason), E'\n' ORDER BY id)
                              FROM fence_audit_log WHERE action = 'counter_move'}, 'restored'));

# the default margin is about a second of the clock's floor: the claim
# waits for the clock if it must, and does not warn
my (undef, $r2, $r2_ms, $r2_err) = claim_clocked($node, 'restored', 'r-worker', 'r-job2');
is($r2, $c_adv + 1, "restored: the next token ($r2) is the next value above the margin");
cmp_ok($r2 >> 10, '<=', $r2_ms, '... the claim returned only once the clock had passed it');
unlike($r2_err, qr/WARNING/, '... and without a warning');
is(sqlstate($node, "UPDATE results SET value = 'r2', writer_epoch = $r2 WHERE job = '$jobs[14]'",
		'restored'),
	'ok', '... and writes the row that was from the future');
is(q1($node, "SELECT writer_epoch FROM results WHERE job = '$jobs[14]'", 'restored'), $r2,
	'... stamped with it');
like(sqlstate($node, "UPDATE results SET value = 'old', writer_epoch = $w[4] WHERE job = '$jobs[13]'",
		'restored'),
	qr/^(?:5F001|5G002)$/, "restored: the source's token $w[4] is refused");
like(sqlstate($node, "UPDATE inventory SET quantity = 1, writer_epoch = $inv_tok WHERE sku = 'sku-2'",
		'restored'),
	qr/^(?:5F001|5G002)$/, "restored: the source's token $inv_tok is refused on the shared table");

# never backwards; the margin always counts, and no range ends
my $c_before = counter($node, 'restored');
my $moves1 = counter_moves($node, 'restored');
is(q1($node, 'SELECT fence_advance(0)', 'restored'), $c_before,
	'fence_advance(0), with the counter above everything, leaves it where it is');
is(counter($node, 'restored'), $c_before, '... not moved back');
is(counter_moves($node, 'restored'), $moves1, '... and records no move');
my $big = 2**40;
($code, $msg) = try_sql($node, "SELECT fence_advance($big)", 'restored');
is($code, 'ok', 'fence_advance(2^40) succeeds: there is no range to leave') or diag($msg);
is(counter($node, 'restored'), $c_before + $big, '... and moves the counter 2^40 above itself: the margin counts');
my (undef, $r3, undef, $r3_err) = claim_clocked($node, 'restored', 'r-worker', 'r-job3');
is($r3, $c_before + $big + 1, "... the next claim takes the next token ($r3)");
like($r3_err, qr/WARNING:.*fence's token counter is ahead of this server's clock/, '... with the warning');

$node->stop;
note(sprintf('runtime %.1f s', time - $t0));
done_testing();

