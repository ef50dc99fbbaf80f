# Copyright (c) 2026, the fence authors

# Replicas, PITR, restores and the upgrade: no token a client saw is issued
# again, whatever WAL was lost, and fence_advance() covers the one case
# PostgreSQL cannot see.
#
# A history of the counter is its run on one server (system identifier),
# one timeline, since one start of the postmaster (token.c, "Histories").
# Before the first token of any other history -- a promotion, a PITR, a
# restart, the start of a copied data directory, the update from 1.0 --
# the counter moves to max(counter + 2^20, clock_floor(now + 2 *
# fence.max_clock_skew)), clock_floor(ms) being the milliseconds since
# 2000-01-01 shifted left by 10 (LOG "fence moved its token counter ...",
# audit action counter_move, once per history); and no token leaves above
# clock_floor(now), so the first claim after a move returns only once the
# clock has passed its token.  Every token an earlier or a sibling history
# issued lies below its own server's clock floor, and so below the move.
# A counter made by CREATE EXTENSION in this history and never used does
# not move.  Under 1.0's objects (the binary-first window) each backend's
# first claim moves the counter to the clock's term only.  fence 1.0 had
# no histories: a new primary continued from the counter it had replayed
# and handed out again every token above it.  Scenarios 1, 2 and 3 draw a
# plain sequence (plain_seq) once with every claim: that is fence 1.0's
# counter, and on the new primary (or the copy) it hands out again values
# the clients saw (the twin: the unprotected path, on real PostgreSQL).
#
# 1. Synchronous replication (synchronous_standby_names = '*',
#    synchronous_commit on).  (c) Ordinary claims, acknowledged by the sync
#    standby.  Then the standby stops: (b) 40 claims in one autocommit
#    statement whose sync wait is cancelled (pg_cancel_backend) -- PostgreSQL
#    warns that the transaction committed locally but may not have
#    replicated, and the client has the 40 tokens -- and their rows, written
#    the same way; (a) a claim inside a transaction left open (seen, never
#    committed).  The primary stops in immediate mode; the standby, which
#    never received any of (a) or (b), is promoted (timeline 2).  Asserted:
#    the new primary lacks the lost claims and its counter is below the
#    largest token a client saw (the loss is real; plain_seq reissues); its
#    first token is above the clock floor read before it plus twice the
#    skew, and the claim returns only once the clock has passed it; the
#    move is logged and recorded once; no token it issues is equal to or
#    below a token a client saw; every stale token's write is refused (5F001
#    or 5G002); the acknowledged holders still write.  The sync wait does not
#    protect the tokens -- a cancelled wait and an open transaction both
#    hand the client a token the standby never saw -- the move does.
#    (1.0: the first token on timeline 2 was the replayed counter + 1, and
#    the lost tokens went out again, to other holders: "no token <= a token
#    seen" fails.)
# 2. PITR from an older base backup, with WAL archived: claims and writes
#    before and after a restore point; the backup is restored with
#    recovery_target_name and recovery_target_action = promote, which ends
#    on timeline 2.  The claims before the target are there and their
#    holder writes; the claims after it are lost; the first token is above
#    every token a client saw and above the clock floor plus twice the skew,
#    no token a client saw (before or after the target) is issued again,
#    stale holders are refused; plain_seq reissues.  (1.0: it continued
#    from the restore point's counter, reissuing the tokens after the
#    target.)
# 3. A disk snapshot restored on the SAME timeline (the server stopped, its
#    data directory copied, the server run on and stopped, the copy
#    started).  PostgreSQL cannot tell, but the copy's postmaster start
#    begins a new history: in database snapa, without fence_advance(), the
#    copy's first claim moves the counter (logged, counter_move) above every
#    token the original issued after the snapshot, and every holder of one
#    is refused, while plain_seq, drawn with each claim on the original,
#    hands out again on the copy values the clients saw (the twin).  In
#    database snapb, fence_advance() first: its margin counts (the counter
#    moves to the largest token or epoch the copy knows plus the default
#    margin, 2^20, exactly),
#    and the first claim still moves the counter for the new history (two
#    moves recorded); every new token is above every token the original
#    issued, and every stale holder is refused.  (1.0: the copy reissued
#    every token the original issued after the snapshot, and a holder whose
#    claim existed nowhere wrote.)
# 4. The upgrade from 1.0 on a promoted server.  Only one fence library is
#    installed at a time and this one is 1.1's: a database at 1.0 runs
#    1.0's SQL objects with 1.1's library, the "binary-first window" of
#    every upgrade (t/005_upgrade.pl).  Two databases at 1.0 (protected
#    table, claims, a superseded token) fail over with scenario 1 to
#    timeline 2, where their counters are behind the server's clock.  In
#    v10 no claim is made until ALTER EXTENSION fence UPDATE: the counter is
#    unchanged by the update; the first claim after it begins a new history
#    (none recorded: the update from 1.0) and moves the counter past the
#    clock floor plus twice the skew (LOG + counter_move, from the counter
#    to just below that token); before and after the update and after the
#    move, the current holder's token still writes and the superseded one
#    gets 5F001.  In win a claim is made in the window: 1.1's library moves
#    the counter then, to the clock's term (LOG only: 1.0 has no
#    fence_audit_log, so no counter_move row is ever recorded for that
#    move); the update itself changes nothing, and the first claim after it
#    moves the counter once more, as the update begins a new history (LOG +
#    counter_move).  (1.0's library: the first claim on timeline 2 is the
#    replayed counter + 1.)
#
# Numbers for doc/fence.md 9.4-9.5 are noted at the end ("report: ...").

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $t0 = time;
my $GAP = 2**20;            # the crash gap: the count term of a move
my $MARGIN = 2**20;         # fence_advance's default margin: one crash gap
my @report;

# fault-test ports: offset 7 (the other nodes: 17, 27, 37, 47).  The nodes
# listen on unix sockets only, in this test's own directory.
my $port = ($ENV{FENCE_TEST_PORT_BASE} // 54330) + 7;

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

# the same, drawing plain_seq (fence 1.0's counter) with each claim;
# returns ([tokens], [plain values])
sub claim_pairs
{
	my ($node, $holder, @jobs) = @_;
	return claim_pairs_db($node, 'postgres', $holder, @jobs);
}

sub claim_pairs_db
{
	my ($node, $db, $holder, @jobs) = @_;
	my @rows = split /\n/, q1($node, join("\n", map {
		"SELECT fence_claim('$_', '1 hour', '$holder') || ' ' || nextval('plain_seq');" } @jobs), $db);
	die "claims of @jobs returned <@rows>"
	  unless @rows == @jobs && !grep { !/^\d+ \d+$/ } @rows;
	return ([ map { (split / /)[0] } @rows ], [ map { (split / /)[1] } @rows ]);
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

# LOG lines "fence moved its token counter" in the node's log so far
sub moved_lines
{
	my ($node) = @_;
	return scalar(grep { /fence moved its token counter/ } split /\n/, slurp_file($node->logfile));
}

# the clock's reading in milliseconds since 2000-01-01 (its floor in tokens
# is that << 10)
my $CLOCK_MS_SQL = q{(floor(extract(epoch from clock_timestamp() - timestamptz '2000-01-01 00:00:00+00') * 1000))::bigint};

sub clock_floor { return q1($_[0], "SELECT $CLOCK_MS_SQL << 10", $_[1]); }

# twice fence.max_clock_skew, in tokens, and the skew in ms (the GUC exists
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

# the last counter_move: "detail | reason"
sub last_move
{
	my ($node, $db) = @_;
	return q1($node, q{SELECT detail || ' | ' || reason FROM fence_audit_log
	                    WHERE action = 'counter_move' ORDER BY id DESC LIMIT 1}, $db);
}

sub max_of { my $m = 0; $_ > $m and $m = $_ for @_; return $m; }

# how many of @new are in @seen
sub reissued
{
	my ($new, $seen) = @_;
	my %s = map { $_ => 1 } @$seen;
	return scalar(grep { $s{$_} } @$new);
}

# fence 1.0 continued from the counter: of the tokens seen, those it would
# have handed out again in $n claims
sub reissued_by_10
{
	my ($counter, $n, @seen) = @_;
	my %s = map { $_ => 1 } @seen;
	return scalar(grep { $_ > $counter && $_ <= $counter + $n } keys %s);
}

# every stale (job, token) writes with its token; returns the count of
# 5F001 + 5G002 (never issued here) and a description
sub stale_refused
{
	my ($node, $db, $sql_of, @pairs) = @_;
	my %n;
	$n{ sqlstate($node, $sql_of->(@$_), $db) }++ for @pairs;
	return (($n{'5F001'} // 0) + ($n{'5G002'} // 0),
		join(' ', map { "$_=$n{$_}" } sort keys %n));
}

my $results_sql = q{
CREATE TABLE results (job text PRIMARY KEY, value text,
                      writer_epoch bigint NOT NULL DEFAULT 0);
};

# ---------------------------------------------------------------------------
# 1. synchronous replication

my $primary = PostgreSQL::Test::Cluster->new('sync_primary', port => $port);
$primary->init(allows_streaming => 1);
$primary->start;
q1($primary, $results_sql . q{
CREATE EXTENSION fence;
SELECT fence_protect('results');
CREATE SEQUENCE plain_seq;
});

# scenario 4's databases, at 1.0: they fail over with the rest.  job-a is
# held (its row written with its token); job-s was claimed, written,
# released and claimed again (s1 superseded by s2).
my %v10;
for my $db ('v10', 'win')
{
	$primary->safe_psql('postgres', "CREATE DATABASE $db");
	q1($primary, qq{CREATE EXTENSION fence VERSION '1.0';
$results_sql
SELECT fence_protect('results', mode => 'repeat');}, $db);
	my ($ta) = claim_all_db($primary, $db, 'holder-a', 'job-a');
	my ($s1) = claim_all_db($primary, $db, 'holder-s1', 'job-s');
	q1($primary, "INSERT INTO results VALUES ('job-a', 'tl1', $ta);\n"
		  . "INSERT INTO results VALUES ('job-s', 'tl1', $s1);\n"
		  . "SELECT fence_release('job-s', $s1);", $db);
	my ($s2) = claim_all_db($primary, $db, 'holder-s2', 'job-s');
	q1($primary, "UPDATE results SET value = 'tl1-s2', writer_epoch = $s2 WHERE job = 'job-s'", $db);
	$v10{$db} = { a => $ta, s1 => $s1, s2 => $s2 };
}

$primary->backup('sync_b');
my $standby = PostgreSQL::Test::Cluster->new('sync_standby', port => $port + 10);
$standby->init_from_backup($primary, 'sync_b', has_streaming => 1);
$standby->start;
# set after the backup, so the standby, once promoted, does not wait for
# a standby of its own
$primary->append_conf('postgresql.conf',
	"synchronous_standby_names = '*'\nsynchronous_commit = on");
$primary->reload;
$primary->poll_query_until('postgres',
	q{SELECT sync_state = 'sync' FROM pg_stat_replication})
  or die 'the standby never became synchronous';
pass('the standby is synchronous');

# (c) acknowledged claims and writes
my @ack_jobs = map { "ack-$_" } 1 .. 10;
my ($ack, $ack_plain) = claim_pairs($primary, 'acked', @ack_jobs);
q1($primary, join("\n", map {
	"INSERT INTO results VALUES ('$ack_jobs[$_]', 'acked', $ack->[$_]);" } 0 .. $#ack_jobs));
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
is(q1($standby, 'SELECT count(*) FROM fence_claims WHERE token IN (' . join(',', @$ack) . ')'),
	scalar(@ack_jobs), 'the standby has the acknowledged claims');

# the standby goes away: every commit now waits for it
$standby->stop;

# the sync wait of $sql (sent by $client, backend $pid) is cancelled from
# another session; returns ($out, $err) of $sql
sub cancel_sync_wait
{
	my ($node, $client, $pid, $sql) = @_;
	my $mark = $client->send($sql);
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $pid AND wait_event = 'SyncRep'")
	  or die "$sql never waited for the synchronous standby";
	q1($node, "SELECT pg_cancel_backend($pid)");
	return $client->wait_for($mark);
}

# (b) 40 claims in one statement, then their rows; both sync waits cancelled
my $c = FenceTest::Client->new($primary, 'C');
my $c_pid = $c->run_ok('SELECT pg_backend_pid();');
my $nb = 40;
my @b_jobs = map { "jb-$_" } 1 .. $nb;
my ($b_out, $b_err) = cancel_sync_wait($primary, $c, $c_pid,
	"SELECT fence_claim('jb-' || i, '1 hour', 'sync-cancelled') || ' ' || nextval('plain_seq')"
	  . " FROM generate_series(1, $nb) i;");
like($b_err, qr/canceling wait for synchronous replication.*committed locally/s,
	'cancelled sync wait: PostgreSQL warns the claims committed locally only');
unlike($b_err, qr/ERROR/, '... and raises no error');
my @b_rows = grep { /^\d+ \d+$/ } split /\n/, $b_out;
is(scalar(@b_rows), $nb, "... and the client has the $nb tokens");
my @b_tok = map { (split / /)[0] } @b_rows;
my @b_plain = map { (split / /)[1] } @b_rows;
my ($w_out, $w_err) = cancel_sync_wait($primary, $c, $c_pid,
	q{INSERT INTO results SELECT job, 'sync-cancelled', token FROM fence_claims WHERE job LIKE 'jb-%';});
like($w_err, qr/committed locally/, 'their rows, written with the tokens: the sync wait cancelled too');
unlike($w_err, qr/ERROR/, '... the guard let the writes through');

# (a) a claim in a transaction left open, which writes its row too
my $u = FenceTest::Client->new($primary, 'U');
my ($u_tok, $u_plain) = split / /, $u->run_ok(
	"BEGIN;\nSELECT fence_claim('job-open', '1 hour', 'open') || ' ' || nextval('plain_seq');");
$u->run_ok("INSERT INTO results VALUES ('job-open', 'open', $u_tok);");
like($u_tok, qr/^\d+$/, "a client saw token $u_tok inside an open transaction");

is(q1($primary, q{SELECT count(*) FROM fence_claims WHERE job LIKE 'jb-%'}), $nb,
	'the old primary has the cancelled claims (committed locally)');
is(q1($primary, q{SELECT count(*) FROM results WHERE value = 'sync-cancelled'}), $nb,
	'... and their rows');

my @row_epochs = split /\n/, q1($primary, 'SELECT writer_epoch FROM results');
my @seen1 = (@$ack, @b_tok, $u_tok, @row_epochs);
my @plain1 = (@$ack_plain, @b_plain, $u_plain);
my $max_seen1 = max_of(@seen1);
my %distinct1 = map { $_ => 1 } @seen1;
note('sync: ' . scalar(keys %distinct1) . " distinct tokens seen, the largest $max_seen1");

$primary->stop('immediate');
$c->quit;
$u->quit;

$standby->start;
$standby->promote;
is(timeline($standby), 2, 'the promoted standby is on timeline 2');
is(q1($standby, 'SELECT count(*) FROM fence_claims WHERE token IN ('
	  . join(',', @b_tok, $u_tok) . ')'),
	0, 'the new primary has none of the cancelled or uncommitted claims');
is(q1($standby, q{SELECT count(*) FROM results WHERE value IN ('sync-cancelled', 'open')}), 0,
	'... and none of their rows');
is(q1($standby, q{SELECT count(*) FROM results WHERE value = 'acked'}), scalar(@ack_jobs),
	'... but every acknowledged row');
my $c_prom = counter($standby);
cmp_ok($c_prom, '<', $max_seen1,
	"its counter ($c_prom) is below the largest token a client saw ($max_seen1)");
my $lost1 = grep { $_ > $c_prom } keys %distinct1;
note("sync: $lost1 tokens seen are above the promoted counter");

# the twin: fence 1.0's counter, a plain sequence, hands out seen values again
my @new_jobs = (@b_jobs, 'job-open', map { "tl2-$_" } 1 .. 19);
my $n_new = scalar(@new_jobs);
my @plain_new = split /\n/, q1($standby,
	"SELECT nextval('plain_seq') FROM generate_series(1, $n_new)");
my $plain_re1 = reissued(\@plain_new, \@plain1);
cmp_ok($plain_re1, '>', 0,
	"twin: a plain sequence (fence 1.0's counter) hands out $plain_re1 values clients saw, again");

is(moved_lines($standby), 0, 'no counter move before the first claim');
my ($two_skews, $skew_ms) = two_skews($standby);
my ($floor1, $n1, $ms1) = claim_clocked($standby, 'postgres', 'new-worker', $new_jobs[0]);
cmp_ok($n1, '>', $max_seen1, "first token on timeline 2 ($n1) is above every token a client saw ($max_seen1)");
cmp_ok($n1, '>', $floor1 + $two_skews,
	"... and above the clock floor read before the claim ($floor1) plus twice fence.max_clock_skew ($skew_ms ms)");
cmp_ok($n1 >> 10, '<=', $ms1, "... and the claim returned only once the clock ($ms1 ms) had passed its token");
is(moved_lines($standby), 1, 'the move is logged');
is(counter_moves($standby), 1, 'the move is recorded (counter_move)');
like(last_move($standby), qr/^from $c_prom to @{[ $n1 - 1 ]} \| A new history of the counter begins \(/,
	'... from the replayed counter to just below the first token, as a new history');
my @n = ($n1, claim_all_db($standby, 'postgres', 'new-worker', @new_jobs[ 1 .. $#new_jobs ]));
is(scalar(grep { $_ <= $max_seen1 || $distinct1{$_} } @n), 0,
	"no token issued on timeline 2 is equal to or below a token seen ($n_new claims)");
is(moved_lines($standby), 1, '... the counter moved once');
my $would10 = reissued_by_10($c_prom, $n_new, @seen1);
push @report, "sync: tokens seen " . scalar(keys %distinct1)
  . " (acknowledged " . scalar(@$ack) . ", sync-cancelled $nb, open 1, plus row epochs);"
  . " above the promoted counter $c_prom: $lost1; fence 1.0 would reissue $would10 of them in"
  . " $n_new claims; plain_seq reissued $plain_re1; first token on timeline 2: $n1";

# the new holders write; every stale holder is refused
q1($standby, join("\n", map {
	"INSERT INTO results VALUES ('$new_jobs[$_]', 'new', $n[$_]);" } 0 .. $#new_jobs));
is(q1($standby, q{SELECT count(*) FROM results WHERE value = 'new'}), $n_new,
	'the new holders\' writes land');
my ($refused, $desc) = stale_refused($standby, 'postgres',
	sub { "UPDATE results SET value = 'stale', writer_epoch = $_[1] WHERE job = '$_[0]'" },
	(map { [ $b_jobs[$_], $b_tok[$_] ] } 0 .. $#b_jobs), [ 'job-open', $u_tok ]);
is($refused, $nb + 1,
	"every stale holder (sync wait cancelled, or never committed) is refused ($desc)");
is(q1($standby, q{SELECT count(*) FROM results WHERE value = 'stale'}), 0, 'no stale write landed');
is(sqlstate($standby, "INSERT INTO results VALUES ('ack-1-after', 'tl2', $ack->[0])"),
	'ok', "an acknowledged holder (token $ack->[0], still its job's claim) still writes");

# ---------------------------------------------------------------------------
# 4. the upgrade from 1.0, on timeline 2 (scenario 1's new primary)

for my $db ('v10', 'win')
{
	my $t = $v10{$db};
	is(q1($standby, q{SELECT extversion FROM pg_extension WHERE extname = 'fence'}, $db), '1.0',
		"$db: fence is at 1.0 on timeline 2");
	my $floor = clock_floor($standby, $db);
	cmp_ok(counter($standby, $db), '<', $floor,
		"$db: its counter is behind the clock floor ($floor): every token of 1.0's objects waited for the clock");
	is(q1($standby, q{SELECT to_regclass('fence_audit_log') IS NULL}, $db), 't',
		"$db: 1.0 has no fence_audit_log");
	is(sqlstate($standby, "UPDATE results SET value = 'tl2', writer_epoch = $t->{a} WHERE job = 'job-a'", $db),
		'ok', "$db (1.0): the current holder's token ($t->{a}) writes on timeline 2");
	is(sqlstate($standby, "UPDATE results SET value = 'stale', writer_epoch = $t->{s1} WHERE job = 'job-s'", $db),
		'5F001', "$db (1.0): the superseded token ($t->{s1}) is fenced");
}

# v10: no claim until the update
{
	my $db = 'v10';
	my $t = $v10{$db};
	my $c0 = counter($standby, $db);
	my ($out, $err) = ('', '');
	is($standby->psql($db, 'ALTER EXTENSION fence UPDATE', stdout => \$out, stderr => \$err),
		0, 'v10: ALTER EXTENSION fence UPDATE on timeline 2')
	  or diag($err);
	is(q1($standby, q{SELECT extversion FROM pg_extension WHERE extname = 'fence'}, $db), '1.1',
		'v10: extversion 1.1');
	is(counter($standby, $db), $c0, "v10: the update does not move the counter ($c0)");
	is(counter_moves($standby, $db), 0, 'v10: no counter_move yet');
	is(sqlstate($standby, "UPDATE results SET value = 'tl2-upd', writer_epoch = $t->{a} WHERE job = 'job-a'", $db),
		'ok', "v10 (1.1): the current holder's token still writes");
	is(sqlstate($standby, "UPDATE results SET value = 'stale', writer_epoch = $t->{s1} WHERE job = 'job-s'", $db),
		'5F001', 'v10 (1.1): the superseded token is still fenced');

	my $lines0 = moved_lines($standby);
	my ($fl, $v1, $ms) = claim_clocked($standby, $db, 'tl2-worker', 'job-new');
	cmp_ok($v1, '>', $c0 + $GAP, "v10: the first claim after the update ($v1) moved the counter at least a gap");
	cmp_ok($v1, '>', $fl + $two_skews, '... and above the clock floor read before it plus twice the skew');
	cmp_ok($v1 >> 10, '<=', $ms, '... and returned only once the clock had passed it');
	is(moved_lines($standby) - $lines0, 1, 'v10: the move is logged');
	is(counter_moves($standby, $db), 1, 'v10: the move is recorded (counter_move)');
	my $detail = q1($standby, q{SELECT detail FROM fence_audit_log WHERE action = 'counter_move'}, $db);
	is($detail, "from $c0 to " . ($v1 - 1), "v10: the audit row says from where to where ($detail)");
	like(last_move($standby, $db), qr/\| A new history of the counter begins \(none recorded/,
		'v10: ... as a history none recorded (the update from 1.0)');
	is(sqlstate($standby, "UPDATE results SET value = 'tl2-moved', writer_epoch = $t->{a} WHERE job = 'job-a'", $db),
		'ok', "v10: after the move, the token of a claim from timeline 1 ($t->{a}) still writes");
	is(sqlstate($standby, "UPDATE results SET value = 'tl2-moved', writer_epoch = $t->{s2} WHERE job = 'job-s'", $db),
		'ok', "v10: ... and so does the other current one ($t->{s2})");
	is(sqlstate($standby, "UPDATE results SET value = 'stale', writer_epoch = $t->{s1} WHERE job = 'job-s'", $db),
		'5F001', 'v10: the superseded token is still fenced');
	q1($standby, "SELECT fence_release('job-a', $t->{a})", $db);
	my ($a2) = claim_all_db($standby, $db, 'tl2-worker', 'job-a');
	cmp_ok($a2, '>', $v1, "v10: job-a claimed again ($a2)");
	is(sqlstate($standby, "UPDATE results SET value = 'stale', writer_epoch = $t->{a} WHERE job = 'job-a'", $db),
		'5F001', 'v10: ... and the token it superseded is fenced');
	is(sqlstate($standby, "UPDATE results SET value = 'tl2-a2', writer_epoch = $a2 WHERE job = 'job-a'", $db),
		'ok', '... and the new one writes');
	push @report, "upgrade (v10): counter $c0 on timeline 2 before and after ALTER EXTENSION UPDATE;"
	  . " first claim after it: $v1; audit '$detail'";
}

# win: a claim in the binary-first window, then the update
{
	my $db = 'win';
	my $t = $v10{$db};
	my $c0 = counter($standby, $db);
	my $lines0 = moved_lines($standby);
	my ($fl, $w1, $ms) = claim_clocked($standby, $db, 'tl2-worker', 'job-new');
	cmp_ok($w1, '>', $fl + $two_skews,
		"win: a claim in the binary-first window ($w1) is above the clock floor plus twice the skew: 1.1's library moved the counter");
	cmp_ok($w1 >> 10, '<=', $ms, '... and returned only once the clock had passed it');
	is(moved_lines($standby) - $lines0, 1, 'win: the move is logged');
	is(q1($standby, q{SELECT to_regclass('fence_audit_log') IS NULL}, $db), 't',
		'win: ... but there is no fence_audit_log to record it in');
	is(sqlstate($standby, "UPDATE results SET value = 'tl2-moved', writer_epoch = $t->{a} WHERE job = 'job-a'", $db),
		'ok', "win: after the move, the current holder's token ($t->{a}) writes");
	is(sqlstate($standby, "UPDATE results SET value = 'stale', writer_epoch = $t->{s1} WHERE job = 'job-s'", $db),
		'5F001', 'win: the superseded token is fenced');
	q1($standby, 'ALTER EXTENSION fence UPDATE', $db);
	is(counter($standby, $db), $w1, 'win: the update does not move the counter');
	is(counter_moves($standby, $db), 0,
		'win: after the update fence_audit_log has no counter_move: the window\'s move is in the server log only');
	my ($fl2, $w2, $ms2) = claim_clocked($standby, $db, 'tl2-worker', 'job-new2');
	cmp_ok($w2, '>', $w1 + $GAP, "win: the first claim after the update ($w2) moves the counter again: the update begins a new history");
	cmp_ok($w2, '>', $fl2 + $two_skews, '... above the clock floor plus twice the skew');
	cmp_ok($w2 >> 10, '<=', $ms2, '... and returned only once the clock had passed it');
	is(moved_lines($standby) - $lines0, 2, '... logged');
	is(counter_moves($standby, $db), 1, '... and, fence_audit_log existing now, recorded once');
	like(last_move($standby, $db), qr/^from $w1 to @{[ $w2 - 1 ]} \| A new history of the counter begins \(none recorded/,
		'... from the window\'s counter, as a history none recorded');
	my ($w3) = claim_all_db($standby, $db, 'tl2-worker', 'job-new3');
	is($w3, $w2 + 1, "win: the next claim continues ($w3)");
	is(moved_lines($standby) - $lines0, 2, '... with no third move');
	push @report, "upgrade (win): counter $c0; a claim in the binary-first window: $w1 (LOG only, no audit row); after the update: $w2";
}
$standby->stop;

# ---------------------------------------------------------------------------
# 2. PITR from an older base backup to a new timeline

my $src = PostgreSQL::Test::Cluster->new('pitr_source', port => $port + 20);
$src->init(allows_streaming => 1, has_archiving => 1);
$src->start;
q1($src, $results_sql . q{
CREATE EXTENSION fence;
SELECT fence_protect('results');
CREATE SEQUENCE plain_seq;
});
my @p_jobs = map { "p-$_" } 1 .. 20;

# phase 0, in the backup: each job claimed, its row written, released
my ($p0, $p0_plain) = claim_pairs($src, 'phase0', @p_jobs);
q1($src, join("\n", map { "INSERT INTO results VALUES ('$p_jobs[$_]', 'phase0', $p0->[$_]);" } 0 .. 19));
q1($src, join("\n", map { "SELECT fence_release('$p_jobs[$_]', $p0->[$_]);" } 0 .. 19));
$src->backup('early');

# phase 1, before the target: claimed again, written, released; p-20 held
my ($p1, $p1_plain) = claim_pairs($src, 'phase1', @p_jobs);
q1($src, join("\n", map {
	"UPDATE results SET value = 'phase1', writer_epoch = $p1->[$_] WHERE job = '$p_jobs[$_]';"
	  . "SELECT fence_release('$p_jobs[$_]', $p1->[$_]);" } 0 .. 18));
q1($src, q{SELECT pg_create_restore_point('mid')});

# phase 2, after the target: p-1..19 claimed and written, 25 new jobs
# claimed and inserted, a claim in a transaction left open
my ($p2, $p2_plain) = claim_pairs($src, 'phase2', @p_jobs[ 0 .. 18 ]);
q1($src, join("\n", map {
	"UPDATE results SET value = 'phase2', writer_epoch = $p2->[$_] WHERE job = '$p_jobs[$_]';" } 0 .. 18));
my @q_jobs = map { "q-$_" } 1 .. 25;
my ($q2, $q2_plain) = claim_pairs($src, 'phase2', @q_jobs);
q1($src, join("\n", map { "INSERT INTO results VALUES ('$q_jobs[$_]', 'phase2', $q2->[$_]);" } 0 .. $#q_jobs));
my $u2 = FenceTest::Client->new($src, 'U2');
my ($x_tok, $x_plain) = split / /, $u2->run_ok(
	"BEGIN;\nSELECT fence_claim('x-open', '1 hour', 'open') || ' ' || nextval('plain_seq');");
like($x_tok, qr/^\d+$/, "PITR source: a client saw token $x_tok inside an open transaction");

my @seen2 = (@$p0, @$p1, @$p2, @$q2, $x_tok, split /\n/, q1($src, 'SELECT writer_epoch FROM results'));
my @plain2 = (@$p0_plain, @$p1_plain, @$p2_plain, @$q2_plain, $x_plain);
my %distinct2 = map { $_ => 1 } @seen2;
my $max_seen2 = max_of(@seen2);

# archive everything up to here, then the source is gone
my $switch = q1($src, 'SELECT pg_switch_wal()');
my $walfile = q1($src, "SELECT pg_walfile_name('$switch')");
$src->poll_query_until('postgres',
	"SELECT last_archived_wal >= '$walfile' FROM pg_stat_archiver")
  or die "$walfile was never archived";
$src->stop('immediate');
$u2->quit;

my $pitr = PostgreSQL::Test::Cluster->new('pitr', port => $port + 30);
$pitr->init_from_backup($src, 'early', has_restoring => 1, standby => 0);
$pitr->append_conf('postgresql.conf', qq{
recovery_target_name = 'mid'
recovery_target_action = 'promote'
archive_mode = off
});
$pitr->start;
$pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the PITR never ended';
is(timeline($pitr), 2, 'PITR: the restored server is on timeline 2');
is(q1($pitr, 'SELECT count(*) FROM fence_claims WHERE token IN (' . join(',', @$p1) . ')'), 20,
	'PITR: the claims before the target are there');
is(q1($pitr, 'SELECT count(*) FROM fence_claims WHERE token IN ('
	  . join(',', @$p2, @$q2, $x_tok) . ')'),
	0, 'PITR: the claims after the target are not');
is(q1($pitr, q{SELECT count(*) FROM results WHERE value = 'phase2'}), 0, '... nor their rows');
my $c_pitr = counter($pitr);
cmp_ok($c_pitr, '<', $max_seen2,
	"PITR: its counter ($c_pitr) is below the largest token a client saw ($max_seen2)");
my $lost2 = grep { $_ > $c_pitr } keys %distinct2;

my @r_jobs = (@p_jobs[ 0 .. 18 ], @q_jobs, 'x-open');
my $n_r = scalar(@r_jobs);
my @plain_r = split /\n/, q1($pitr, "SELECT nextval('plain_seq') FROM generate_series(1, $n_r)");
my $plain_re2 = reissued(\@plain_r, \@plain2);
cmp_ok($plain_re2, '>', 0,
	"PITR twin: the plain sequence hands out $plain_re2 values clients saw, again");

my ($floor_p, $r1, $ms_p) = claim_clocked($pitr, 'postgres', 'pitr-worker', $r_jobs[0]);
cmp_ok($r1, '>', $max_seen2, "PITR: first token ($r1) is above every token a client saw, after the target too ($max_seen2)");
cmp_ok($r1, '>', $floor_p + $two_skews, '... and above the clock floor read before it plus twice the skew');
cmp_ok($r1 >> 10, '<=', $ms_p, '... and the claim returned only once the clock had passed it');
is(counter_moves($pitr), 1, 'PITR: the move is recorded');
is(moved_lines($pitr), 1, 'PITR: ... and logged once');
like(last_move($pitr), qr/^from $c_pitr to @{[ $r1 - 1 ]} \| A new history of the counter begins \(/,
	'PITR: ... from the restored counter, as a new history');
my @r = ($r1, claim_all_db($pitr, 'postgres', 'pitr-worker', @r_jobs[ 1 .. $#r_jobs ]));
is(scalar(grep { $_ <= $max_seen2 || $distinct2{$_} } @r), 0,
	"PITR: no token issued is equal to or below a token seen ($n_r claims)");
my $would10_2 = reissued_by_10($c_pitr, $n_r, @seen2);
push @report, 'PITR: tokens seen ' . scalar(keys %distinct2)
  . " (phase 0 20, before the target 20, after it " . (@$p2 + @$q2 + 1)
  . "); above the restored counter $c_pitr: $lost2; fence 1.0 would reissue $would10_2 in $n_r claims;"
  . " plain_seq reissued $plain_re2; first token on timeline 2: $r1";

q1($pitr, join("\n", map {
	"UPDATE results SET value = 'pitr', writer_epoch = $r[$_] WHERE job = '$p_jobs[$_]';" } 0 .. 18));
is(q1($pitr, q{SELECT count(*) FROM results WHERE value = 'pitr'}), 19, 'PITR: the new holders write');
($refused, $desc) = stale_refused($pitr, 'postgres',
	sub { "UPDATE results SET value = 'stale', writer_epoch = $_[1] WHERE job = '$_[0]'" },
	map { [ $p_jobs[$_], $p2->[$_] ] } 0 .. 18);
is($refused, 19, "PITR: every stale holder of a job claimed after the target is refused ($desc)");
($refused, $desc) = stale_refused($pitr, 'postgres',
	sub { "INSERT INTO results VALUES ('$_[0]', 'stale', $_[1])" },
	(map { [ $q_jobs[$_], $q2->[$_] ] } 0 .. $#q_jobs), [ 'x-open', $x_tok ]);
is($refused, @q_jobs + 1,
	"PITR: every stale holder of a job the restored server never saw is refused ($desc)");
is(q1($pitr, q{SELECT count(*) FROM results WHERE value = 'stale'}), 0, 'PITR: no stale write landed');
is(sqlstate($pitr, "UPDATE results SET value = 'held', writer_epoch = $p1->[19] WHERE job = 'p-20'"),
	'ok', "PITR: the holder of a claim from before the target ($p1->[19]) writes");

# ---------------------------------------------------------------------------
# 3. a disk snapshot restored on the same timeline

my @k_jobs = map { "k-$_" } 1 .. 30;
my @y_jobs = map { "y-$_" } 1 .. 30;
my (%pre, %pre_plain);
for my $db ('snapa', 'snapb')
{
	$pitr->safe_psql('postgres', "CREATE DATABASE $db");
	q1($pitr, $results_sql . q{
CREATE EXTENSION fence;
SELECT fence_protect('results');
CREATE SEQUENCE plain_seq;}, $db);
	my ($t, $pl) = claim_pairs_db($pitr, $db, 'pre', @k_jobs);
	q1($pitr, join("\n", map {
		"INSERT INTO results VALUES ('$k_jobs[$_]', 'pre', $t->[$_]);"
		  . "SELECT fence_release('$k_jobs[$_]', $t->[$_]);" } 0 .. $#k_jobs), $db);
	$pre{$db} = $t;
	$pre_plain{$db} = $pl;
}
my $tl_snap = timeline($pitr);

# the snapshot: the server stopped, its data directory copied
$pitr->stop;
$pitr->backup_fs_cold('snap');
$pitr->start;

# the original runs on: every job claimed and written again
my (%post, %post_plain, %seen3);
for my $db ('snapa', 'snapb')
{
	my ($t, $pl) = claim_pairs_db($pitr, $db, 'post', @k_jobs);
	q1($pitr, join("\n", map {
		"UPDATE results SET value = 'post', writer_epoch = $t->[$_] WHERE job = '$k_jobs[$_]';" } 0 .. $#k_jobs),
		$db);
	$post{$db} = $t;
	$post_plain{$db} = $pl;
	$seen3{$db} = [ @{ $pre{$db} }, @$t ];
}
$pitr->stop;

# the copy is started: same timeline, a new start of the postmaster
my $twin = PostgreSQL::Test::Cluster->new('snapshot', port => $port + 40);
$twin->init_from_backup($pitr, 'snap');
$twin->start;
is(timeline($twin), $tl_snap, "snapshot: the restored copy is on the same timeline ($tl_snap)");

# snapa: no fence_advance -- the copy's new history covers the original
{
	my $db = 'snapa';
	my $max_post = max_of(@{ $post{$db} });
	my $moves0 = counter_moves($twin, $db);
	my $c_copy = counter($twin, $db);
	cmp_ok($c_copy, '<', $post{$db}[0],
		"snapshot: the copy's counter ($c_copy) is below the original's first token after the snapshot ($post{$db}[0])");
	my ($fl, $y1, $ms) = claim_clocked($twin, $db, 'twin', $y_jobs[0]);
	my @y = ($y1, claim_all_db($twin, $db, 'twin', @y_jobs[ 1 .. $#y_jobs ]));
	my $re = reissued(\@y, $post{$db});
	is($re, 0, 'snapshot, no fence_advance: the copy hands out none of the tokens clients saw on the original');
	is(scalar(grep { $_ <= $max_post } @y), 0,
		"... every token it issues is above every token the original issued after the snapshot ($max_post)");
	cmp_ok($y1, '>', $fl + $two_skews, "... its first ($y1) above the clock floor read before it plus twice the skew");
	cmp_ok($y1 >> 10, '<=', $ms, '... and the claim returned only once the clock had passed it');
	is(counter_moves($twin, $db) - $moves0, 1, '... the copy\'s first claim moved the counter, recorded once (counter_move)');
	like(last_move($twin, $db), qr/^from $c_copy to @{[ $y1 - 1 ]} \| A new history of the counter begins \(/,
		'... as a new history, from the copy\'s counter');
	is(moved_lines($twin), 1, '... and logged once');
	($refused, $desc) = stale_refused($twin, $db,
		sub { "UPDATE results SET value = 'stale', writer_epoch = $_[1] WHERE job = '$_[0]'" },
		map { [ $k_jobs[$_], $post{$db}[$_] ] } 0 .. $#k_jobs);
	is($refused, scalar(@k_jobs),
		"snapshot, no fence_advance: every holder of a token the original issued after the snapshot is refused ($desc)");
	is(q1($twin, q{SELECT count(*) FROM results WHERE value = 'stale'}, $db), 0, '... no stale write landed');
	is(q1($twin, 'SELECT count(*) FROM fence_claims WHERE job LIKE \'k-%\' AND NOT released', $db), 0,
		'... (no k- job is claimed on the copy)');

	# the twin: a plain sequence, drawn with every claim on the original
	my @plain_copy = split /\n/, q1($twin,
		'SELECT nextval(\'plain_seq\') FROM generate_series(1, ' . scalar(@y_jobs) . ')', $db);
	my $plain_re3 = reissued(\@plain_copy, $post_plain{$db});
	is($plain_re3, scalar(@{ $post_plain{$db} }),
		"snapshot twin: the copy's plain sequence hands out again all $plain_re3 values the original handed out after the snapshot");
	push @report, 'snapshot (same timeline): tokens issued after the snapshot and seen: '
	  . scalar(@{ $post{$db} }) . "; without fence_advance the copy reissued $re of them in "
	  . scalar(@y) . " claims (first $y[0], the original's first after the snapshot $post{$db}[0]);"
	  . " plain_seq reissued $plain_re3";
}

# snapb: fence_advance() first
{
	my $db = 'snapb';
	my $max_seen3 = max_of(@{ $seen3{$db} });
	my $max_known = max_of(@{ $pre{$db} });
	my $highest = q1($twin, q{SELECT greatest((SELECT last_value FROM fence_token_seq),
	                                          (SELECT max(token) FROM fence_claims),
	                                          (SELECT max(writer_epoch) FROM results))}, $db);
	is($highest, $max_known, "snapshot: the largest token or epoch the copy knows is the last before the snapshot ($max_known)");
	my $moves0 = counter_moves($twin, $db);
	my $lines0 = moved_lines($twin);
	my $adv = q1($twin, 'SELECT fence_advance()', $db);
	is($adv, $max_known + $MARGIN,
		"snapshot, fence_advance(): the counter ($adv) is what the copy knows plus the default margin (2^20): the margin counts");
	cmp_ok($adv, '<', $max_seen3,
		"... which alone is still below what the original issued after the snapshot ($max_seen3): the history's move covers that");
	is(counter_moves($twin, $db) - $moves0, 1, '... recorded (counter_move)');
	my ($fl, $z1, $ms) = claim_clocked($twin, $db, 'twin', $y_jobs[0]);
	my @z = ($z1, claim_all_db($twin, $db, 'twin', @y_jobs[ 1 .. $#y_jobs ]));
	cmp_ok($z1, '>', $adv + $GAP, "snapshot, fence_advance(): the first claim ($z1) still moves the counter for the new history");
	cmp_ok($z1, '>', $fl + $two_skews, '... above the clock floor plus twice the skew');
	cmp_ok($z1 >> 10, '<=', $ms, '... and the claim returned only once the clock had passed it');
	is(counter_moves($twin, $db) - $moves0, 2, '... both moves recorded (fence_advance, then the history)');
	is(moved_lines($twin) - $lines0, 2, '... and logged');
	is(scalar(grep { $_ <= $max_seen3 } @z), 0,
		'snapshot, fence_advance(): no token issued is equal to or below a token seen (' . scalar(@z) . ' claims)');
	($refused, $desc) = stale_refused($twin, $db,
		sub { "UPDATE results SET value = 'stale', writer_epoch = $_[1] WHERE job = '$_[0]'" },
		map { [ $k_jobs[$_], $post{$db}[$_] ] } 0 .. $#k_jobs);
	is($refused, scalar(@k_jobs), "snapshot, fence_advance(): every stale holder is refused ($desc)");
	is(q1($twin, q{SELECT count(*) FROM results WHERE value = 'stale'}, $db), 0, '... no stale write landed');
	my @k_new = claim_all_db($twin, $db, 'twin', 'k-1');
	is(sqlstate($twin, "UPDATE results SET value = 'twin', writer_epoch = $k_new[0] WHERE job = 'k-1'", $db),
		'ok', 'snapshot, fence_advance(): a new holder writes');
	push @report, "snapshot, fence_advance(): counter $adv (the copy knew up to $max_known);"
	  . " first claim $z[0]; stale holders refused $refused of " . scalar(@k_jobs);
}
$twin->stop;

note("report: $_") for @report;
note(sprintf('runtime %.1f s', time - $t0));
done_testing();
