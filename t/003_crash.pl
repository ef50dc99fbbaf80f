
# Copyright (c) 2026, the fence authors

# Crashes.  Concurrent clients (test/chaos/fence_load.c, crash mode) claim
# jobs and make guarded writes; the server is stopped in immediate mode in
# the middle of it, restarted, and checked; several rounds.  Each client
# appends to a file every token it receives, the moment it receives it, and
# every commit the server acknowledged.  Client kinds:
#   c  claims in autocommit, synchronous_commit on
#   u  claims inside an open transaction: the token is seen before commit
#   a  synchronous_commit = off: the token is seen, the commit may be lost
# After each restart:
#   - no token issued is <= any token a client saw before the crash (a probe
#     claim at once, and every token of the next round);
#   - no acknowledged commit is lost (kinds c and u; kind a may lose commits
#     by PostgreSQL's definition, and that is only reported);
#   - counters and the ledger agree (each write commits both or neither);
#   - once the leases have run out, every job can be claimed again.
# Both forms of the guard (FenceTest::fence_forms) run in every round: the
# clients take turns, client 0, 2, ... writing counters and ledger (the
# default form), client 1, 3, ... counters_after and ledger_after (the after
# form, fence_load -a: its UPDATE writes the token into writer_epoch, as that
# form does not stamp).  Every kind of client thus writes both forms, and
# the jobs (one claim space) are shared between them; counters and ledger
# must agree in each form, and the after form's tables must have taken
# acknowledged commits.
#
# Every restart begins a new history of the counter (token.c, "Histories"):
# before its first token the counter moves to max(counter + 2^20,
# clock_floor(now + 2 * fence.max_clock_skew)), clock_floor(ms) being the
# milliseconds since 2000-01-01 shifted left by 10, and no token is handed
# out above clock_floor(now): the first claim waits for the clock to pass
# its token.  At the end, the move itself: a crash moves the counter at
# least a gap and at least to the clock floor plus twice the skew, logged
# once and recorded in fence_audit_log; with the counter put ahead of the
# clock by hand the count term dominates and the move is exactly the gap
# (and the claim warns that the counter is ahead of the clock); a clean
# restart moves the counter too, as fence cannot tell a clean restart from
# the start of a copy of the data directory; and a crash that the
# postmaster survives (a backend killed, restart_after_crash = on) must
# move the counter as well.
#
# FENCE_SOAK=1: many more rounds.  FENCE_FORMS=after (or before) runs one
# form only.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $rounds = $ENV{FENCE_CRASH_ROUNDS} // (soak() ? 60 : 8);
my $jobs = 40;
my $lease_ms = 500;
my @forms = fence_forms();
my %suffix = (before => '', after => '_after');
my $seed = $ENV{FENCE_SEED} // int(time) % 100000;
srand($seed);
note("seed $seed (set FENCE_SEED to repeat)");

my $bin = build_fence_load();
my $node = fence_node('crash', 3, qq{
log_statement = none
max_connections = 40
});
$node->safe_psql(
	'postgres', qq{
CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0,
                       writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE ledger (client int, seq bigint, job text NOT NULL,
                     token bigint NOT NULL, kind text NOT NULL,
                     writer_epoch bigint NOT NULL DEFAULT 0,
                     PRIMARY KEY (client, seq));
CREATE TABLE counters_after (LIKE counters INCLUDING ALL);
CREATE TABLE ledger_after (LIKE ledger INCLUDING ALL);
INSERT INTO counters (id) SELECT g FROM generate_series(1, $jobs) g;
INSERT INTO counters_after (id) SELECT g FROM generate_series(1, $jobs) g;
}
	  . join("\n", map {
			  (protect_sql("counters$suffix{$_}", $_),
			   protect_sql("ledger$suffix{$_}", $_, 'writer_epoch', 'repeat')) } @forms));
is($node->safe_psql('postgres',
		q{SELECT string_agg(format('%s %s %s', relation, mode, form), ', ' ORDER BY relation::text)
		    FROM fence_protected}),
	join(', ', sort map { ("counters$suffix{$_} strict $_", "ledger$suffix{$_} repeat $_") } @forms),
	'each protected table is registered in its form');

my $logdir = PostgreSQL::Test::Utils::tempdir('crash_logs');
my $max_seen = 0;          # greatest token seen by anyone before the last crash
my $max_seen_kind = '';
my %seen_token;            # token => "round/kind" (a token seen twice = reissued)
my (%count, %kind_tokens);
$count{$_} = 0 for qw(crashes tokens commits lost_commits in_doubt in_doubt_committed
  async_commits async_lost reissued below_max probes);
$count{"commits $_"} = 0 for @forms;    # acknowledged, of every kind

sub q1 { return $node->safe_psql('postgres', $_[0]); }

# the clock's reading in milliseconds since 2000-01-01; its floor in tokens
# is that << 10 (token.c, clock_floor)
my $CLOCK_MS_SQL = q{(floor(extract(epoch from clock_timestamp() - timestamptz '2000-01-01 00:00:00+00') * 1000))::bigint};

# fence.max_clock_skew in milliseconds (the GUC exists once fence is loaded)
sub skew_ms
{
	return q1(q{LOAD 'fence'; SELECT (extract(epoch from current_setting('fence.max_clock_skew')::interval) * 1000)::bigint});
}

# one session: the clock floor, a claim, the clock after it returned;
# returns (floor before, token, ms after, stderr)
sub claim_clocked
{
	my ($job) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres',
		"SELECT $CLOCK_MS_SQL << 10;\nSELECT fence_claim('$job', '1 min');\nSELECT $CLOCK_MS_SQL;",
		stdout => \$out, stderr => \$err, on_error_die => 1);
	my @v = split /\n/, $out;
	die "claim of $job returned <$out> <$err>" unless @v == 3 && !grep { !/^\d+$/ } @v;
	return (@v, $err);
}

sub counter_moves { return q1(q{SELECT count(*) FROM fence_audit_log WHERE action = 'counter_move'}); }

# the last counter_move: (detail, reason)
sub last_move
{
	return split /\t/, q1(q{SELECT detail || E'\t' || reason FROM fence_audit_log
	                        WHERE action = 'counter_move' ORDER BY id DESC LIMIT 1});
}

# LOG lines "fence moved its token counter" in the log from $offset on
sub moved_lines
{
	my ($offset) = @_;
	return scalar(grep { /fence moved its token counter/ }
		  split /\n/, substr(slurp_file($node->logfile), $offset));
}

for my $round (1 .. $rounds)
{
	my @kinds =
	    $round % 3 == 1 ? qw(c c u u a a)
	  : $round % 3 == 2 ? qw(a a a a)
	  :                   qw(u u u u);
	my (@h, @log, @out, @err, %form_of_client);
	my $connstr = $node->connstr('postgres') . ' connect_timeout=5';
	for my $i (0 .. $#kinds)
	{
		my $client = $round * 100 + $i;
		my $form = $forms[ $i % @forms ];
		$form_of_client{$client} = $form;
		$log[$i] = "$logdir/round$round-client$i.log";
		push @h, IPC::Run::start(
			[ $bin, 'crash', '-d', $connstr, '-w', $client, '-j', $jobs,
			  '-P', 'job-', '-t', 120, '-l', $lease_ms, '-k', $kinds[$i],
			  '-r', $seed + $round, '-o', $log[$i], '-s', $suffix{$form},
			  ($form eq 'after' ? ('-a') : ()) ],
			'>', \$out[$i], '2>', \$err[$i]);
	}

	# let them work, then crash the server under them
	sleep 1 + rand(2);
	$node->stop('immediate');
	$count{crashes}++;

	for my $h (@h)
	{
		my $deadline = time + 30;
		while ($h->pumpable && time < $deadline)
		{
			eval { $h->pump_nb; };
			sleep 0.05;
		}
		$h->kill_kill if $h->pumpable;
		$h->finish;
	}
	for my $i (0 .. $#kinds)
	{
		note("round $round client $i ($kinds[$i], $forms[$i % @forms] form): $out[$i] $err[$i]");
	}

	# what the clients saw before the crash
	my (@tokens, @commits, %pending);
	for my $file (@log)
	{
		next unless -e $file;
		for my $line (split /\n/, slurp_file($file))
		{
			my @f = split / /, $line;
			if ($f[0] eq 'T')
			{
				push @tokens, [ $f[1], $f[3] ];
			}
			elsif ($f[0] eq 'P')
			{
				$pending{"$f[1]/$f[2]"} = $f[3];
			}
			elsif ($f[0] eq 'C')
			{
				push @commits, [ $f[1], $f[2], $f[3] ];
				delete $pending{"$f[1]/$f[2]"};
			}
		}
	}

	$node->start;

	# tokens seen in this round must all be above what was seen before the
	# previous crash (and never seen before)
	my $min_round = undef;
	for my $t (@tokens)
	{
		my ($kind, $tok) = @$t;
		$count{tokens}++;
		$kind_tokens{$kind}++;
		if ($seen_token{$tok})
		{
			$count{reissued}++;
			diag("round $round: token $tok seen again (first: $seen_token{$tok}, now: $kind)");
		}
		$seen_token{$tok} = "$round/$kind";
		if ($tok <= $max_seen)
		{
			$count{below_max}++;
			diag("round $round: token $tok ($kind) <= $max_seen ($max_seen_kind) seen before the last crash");
		}
		$min_round = $tok if !defined $min_round || $tok < $min_round;
	}
	for my $t (@tokens)
	{
		($max_seen, $max_seen_kind) = ($t->[1], "$t->[0], round $round")
		  if $t->[1] > $max_seen;
	}
	cmp_ok(scalar(@tokens), '>', 0, "round $round: clients received tokens before the crash");

	# a claim right after the restart: above every token seen before the crash
	my $probe = q1("SELECT fence_claim('probe-$round', '1 min', 'probe')");
	$count{probes}++;
	cmp_ok($probe, '>', $max_seen,
		"round $round: first token after restart ($probe) > every token seen before the crash ($max_seen, $max_seen_kind)");
	($max_seen, $max_seen_kind) = ($probe, "probe, round $round");
	ok(q1('SELECT coalesce(max(token), 0) <= (SELECT last_value FROM fence_token_seq) FROM fence_claims') eq 't',
		"round $round: no claim holds a token above the counter");

	# acknowledged commits
	my %ledger = map { $_ => 1 } split /\n/, q1(join(' UNION ALL ',
			map { "SELECT client || '/' || seq FROM ledger$suffix{$_} WHERE client / 100 = $round" }
			  @forms));
	my ($lost, $async, $async_lost) = (0, 0, 0);
	for my $c (@commits)
	{
		my ($client, $seq, $kind) = @$c;
		$count{"commits $form_of_client{$client}"}++;
		if ($kind eq 'a')
		{
			$async++;
			$async_lost++ unless $ledger{"$client/$seq"};
			next;
		}
		$count{commits}++;
		next if $ledger{"$client/$seq"};
		$lost++;
		diag("round $round: acknowledged commit $client/$seq ($kind) is lost");
	}
	$count{lost_commits} += $lost;
	$count{async_commits} += $async;
	$count{async_lost} += $async_lost;
	$count{in_doubt} += keys %pending;
	$count{in_doubt_committed} += grep { $ledger{$_} } keys %pending;
	is($lost, 0, "round $round: no acknowledged commit lost (" . scalar(@commits) . " acknowledged)");
	for my $form (@forms)
	{
		my $sfx = $suffix{$form};
		is(q1(qq{SELECT count(*) FROM counters$sfx c
		          WHERE n <> (SELECT count(*) FROM ledger$sfx l WHERE l.job = 'job-' || c.id)}),
			0, "round $round: counters$sfx and ledger$sfx agree ($form form)");
	}

	# once the leases are over every job is free again
	sleep $lease_ms / 1000 + 0.3;
	is(q1(qq{SELECT count(*) FROM generate_series(1, $jobs) g
	          WHERE fence_claim('job-' || g, '1 min', 'probe') IS NULL}),
		0, "round $round: every job can be claimed after its lease ran out");
	is(q1(qq{SELECT count(*) FROM fence_claims
	          WHERE holder = 'probe' AND job LIKE 'job-%' AND NOT fence_release(job, token)}),
		0, "round $round: ... and released");
}

# The narrow case, made deterministic: right after a checkpoint the first
# nextval() writes a WAL record, which only a commit or a WAL write makes
# durable.  A client that claims inside a transaction sees its token before
# that commit; a crash then must not let the counter hand it out again.
# The client claims once before the checkpoint: a backend's first token is
# always flushed (token.c, crash gaps, rule 2: a backend starts knowing no
# token durable, and every token since a move is more than a gap above 0),
# so only a later one, unflushed, tests the move.
for my $i (1 .. (soak() ? 10 : 3))
{
	my $u = FenceTest::Client->new($node, 'U');
	$u->run_ok("SELECT fence_claim('open-first-$i', '1 min');");
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $tok = $u->run_ok("BEGIN;\nSELECT fence_claim('open-$i', '1 min');");
	$node->stop('immediate');
	$count{crashes}++;
	$u->quit;
	$node->start;
	my $next = q1("SELECT fence_claim('after-open-$i', '1 min')");
	cmp_ok($next, '>', $tok,
		"token seen in an open transaction ($tok) is not issued again after a crash ($next)")
	  or $count{below_max}++;
}

# The twin of the narrow case, without fence: a plain sequence read the
# same way hands the same value out again after the crash.  This is what
# the move at a new history (token.c) is there for: the token above was not
# flushed either, and the counter moved past it when the server came back.
$node->safe_psql('postgres', 'CREATE SEQUENCE plain_counter');
q1("SELECT nextval('plain_counter')");
for my $i (1 .. (soak() ? 10 : 3))
{
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $u = FenceTest::Client->new($node, 'U');
	my $val = $u->run_ok("BEGIN;\nSELECT nextval('plain_counter');");
	$node->stop('immediate');
	$count{crashes}++;
	$u->quit;
	$node->start;
	my $next = q1("SELECT nextval('plain_counter')");
	cmp_ok($next, '<=', $val,
		"twin: a plain sequence's value seen in an open transaction ($val) is handed out again after a crash ($next)");
}

# The move itself (token.c, "Histories").  A restart begins a new history:
# before its first token the counter moves to max(counter + 2^20,
# clock_floor(now + 2 * fence.max_clock_skew)), and no token leaves above
# clock_floor(now), so the first claim waits for the clock to pass it.
{
	my $gap = 2**20;
	my $skew = skew_ms();
	my $skew_tokens = (2 * $skew) << 10;    # twice the skew, in tokens

	# a crash: at least a gap, and at least the clock floor plus twice the
	# skew; logged once, recorded once
	my $before = q1("SELECT fence_claim('gap-probe-1', '1 min')");
	my $offset = -s $node->logfile;
	my $moves0 = counter_moves();
	$node->stop('immediate');
	$count{crashes}++;
	$node->start;
	my ($floor, $after, $ms_after) = claim_clocked('gap-probe-2');
	cmp_ok($after, '>', $before + $gap,
		"a crash moves the counter at least a gap up ($before, then $after)");
	cmp_ok($after, '>', $floor + $skew_tokens,
		"... and past the clock floor read before the claim ($floor) plus twice fence.max_clock_skew ($skew ms)");
	cmp_ok($after >> 10, '<=', $ms_after,
		"... and the claim returned only once the clock ($ms_after ms) had passed its token");
	is(moved_lines($offset), 1, '... the move is logged once ("fence moved its token counter")');
	ok($node->log_contains(qr/DETAIL:  A new history of the counter begins \(/, $offset),
		'... with its reason ("A new history of the counter begins (")');
	is(counter_moves() - $moves0, 1, '... and recorded once in fence_audit_log');
	my ($moved, $reason) = last_move();
	like($moved, qr/^from (\d+) to (\d+)$/, "... as 'from X to Y' ($moved)");
	my ($from, $to) = $moved =~ /^from (\d+) to (\d+)$/;
	cmp_ok($from // 0, '>=', $before, '... from the restored counter, at or above the last token before the crash');
	is($to, $after - 1, '... to just below the first token after it');
	like($reason, qr/^A new history of the counter begins \(/, "... its reason: $reason");
	my $more = q1("SELECT fence_claim('gap-probe-3', '1 min')");
	is($more, $after + 1, 'a second claim after the crash takes the next token');
	is(counter_moves() - $moves0, 1, '... and moves nothing');

	# a clean restart begins a new history too: fence cannot tell it from
	# the start of a copy of the data directory (a snapshot, a backup) whose
	# original may have issued past it
	$offset = -s $node->logfile;
	$moves0 = counter_moves();
	$node->restart;
	my ($floor_c, $clean, $ms_c) = claim_clocked('gap-probe-4');
	cmp_ok($clean, '>', $more + $gap,
		"a clean restart moves the counter at least a gap ($more, then $clean): fence cannot tell a clean restart from the start of a copy of the data directory");
	cmp_ok($clean, '>', $floor_c + $skew_tokens,
		"... and past the clock floor read before the claim ($floor_c) plus twice the skew");
	cmp_ok($clean >> 10, '<=', $ms_c, "... and the claim returned only once the clock ($ms_c ms) had passed its token");
	is(moved_lines($offset), 1, '... logged once');
	is(counter_moves() - $moves0, 1, '... and recorded once in fence_audit_log');
	($moved, $reason) = last_move();
	like($reason, qr/^A new history of the counter begins \(/, "... with its reason ($reason)");

	# the count term alone: the counter put ahead of the clock by hand (60 s),
	# then a crash.  The next token is exactly that + 2^20 + 1, and the claim,
	# too far ahead of the clock to wait for it, warns.
	my $ahead = q1("SELECT setval('fence_token_seq', ($CLOCK_MS_SQL + 60000) << 10)");
	$offset = -s $node->logfile;
	$moves0 = counter_moves();
	$node->stop('immediate');
	$count{crashes}++;
	$node->start;
	my ($floor_x, $exact, $ms_x, $err_x) = claim_clocked('gap-probe-5');
	is($exact, $ahead + $gap + 1,
		"with the counter ahead of the clock ($ahead), a crash moves it by exactly the gap ($exact)");
	like($err_x, qr/WARNING:.*fence's token counter is ahead of this server's clock/,
		'... and the claim warns that the counter is ahead of the clock');
	is(counter_moves() - $moves0, 1, '... recorded once');
	($moved, $reason) = last_move();
	is($moved, "from $ahead to " . ($ahead + $gap), "... from the counter to a gap above it ($moved)");
	like($reason, qr/a crash gap \(1048576\) above the counter/, '... and the reason says the gap decided');
	is(moved_lines($offset), 1, '... logged once');
}

ok(!$node->log_contains('terminated by signal'), 'no backend crashed on its own');

# A crash the postmaster survives: a backend dies (here: killed), and with
# restart_after_crash = on (PostgreSQL's default) the postmaster ends every
# other backend, runs crash recovery and accepts connections again, without
# a new start.  The WAL it had not written is lost as in any crash, so the
# counter must move before its next token as after a restart: the narrow
# case above, with the backend killed instead of the server stopped.
$node->append_conf('postgresql.conf', 'restart_after_crash = on');
$node->reload;
for my $i (1 .. (soak() ? 5 : 2))
{
	my $offset = -s $node->logfile;
	my $started = q1('SELECT pg_postmaster_start_time()');
	my $u = FenceTest::Client->new($node, 'K');
	my $pid = $u->run_ok('SELECT pg_backend_pid();');
	$u->run_ok("SELECT fence_claim('killed-first-$i', '1 min');");
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $tok = $u->run_ok("BEGIN;\nSELECT fence_claim('killed-open-$i', '1 min');");
	kill 'KILL', $pid;
	$count{crashes}++;
	$u->quit;
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'the server did not come back after the backend was killed';
	ok($node->log_contains('all server processes terminated; reinitializing', $offset),
		"backend killed ($i): the postmaster ran crash recovery");
	is(q1('SELECT pg_postmaster_start_time()'), $started, '... without a new start');
	my $next = q1("SELECT fence_claim('after-killed-$i', '1 min')");
	cmp_ok($next, '>', $tok,
		"... and the token seen in an open transaction ($tok) is not issued again after it ($next)")
	  or $count{below_max}++;
	is(moved_lines($offset), 1, '... the counter moved (logged once)');
}
for my $form (@forms)
{
	cmp_ok($count{"commits $form"}, '>', 0,
		"the $form form's tables took acknowledged commits (" . $count{"commits $form"} . ')');
	cmp_ok(q1("SELECT count(*) FROM ledger$suffix{$form}"), '>', 0,
		"... and their ledger$suffix{$form} holds rows");
}
is($count{reissued}, 0, 'no token was received twice');
is($count{below_max}, 0, 'no token went backwards across a crash');

my $summary = "crash rounds=$rounds (server stopped in immediate mode $count{crashes} times)"
  . " tokens_seen=$count{tokens} ("
  . join(' ', map { "$_=$kind_tokens{$_}" } sort keys %kind_tokens) . ")"
  . " acknowledged_commits=$count{commits} lost=$count{lost_commits}"
  . " in_doubt=$count{in_doubt} (committed: $count{in_doubt_committed})"
  . " async_commits=$count{async_commits} (lost by synchronous_commit=off: $count{async_lost})"
  . " tokens_below_max=$count{below_max} reissued=$count{reissued}"
  . "; acknowledged commits per form: "
  . join(' ', map { "$_=" . $count{"commits $_"} } @forms);
diag($summary);

$node->stop;
done_testing();
