
# Copyright (c) 2026, the fence authors

# Chaos under load.  Eight or more worker processes (test/chaos/fence_load.c,
# libpq) claim a few hundred jobs with short leases, read a job's counter,
# think, and write counter+1 plus a report line with their token, logging
# every accepted write in the same transaction.  Meanwhile this script
# freezes random workers with SIGSTOP and resumes them with SIGCONT, so
# leases run out under live workers and jobs are taken over all the time.
#
# Invariants on the protected tables:
#   - no lost update: every counter equals its number of accepted increments;
#   - no append (and no counter write) from a superseded execution: no
#     accepted row committed after a claim of its job with a greater token
#     committed (commit timestamps, track_commit_timestamp = on);
#   - no row's epoch moved backwards (an AFTER trigger logs every change);
#   - the run provoked takeovers and fenced writes.
# The control run does the same against unprotected copies and must lose
# updates, or the test proves nothing.
#
# FENCE_SOAK=1: 16 workers, minutes instead of seconds.

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

my $workers = soak() ? 16 : 8;
my $jobs = 300;
my $lease_ms = 300;
my $protected_seconds = $ENV{FENCE_CHAOS_SECONDS} // (soak() ? 600 : 35);
my $control_seconds = $ENV{FENCE_CHAOS_CONTROL_SECONDS} // (soak() ? 120 : 20);
my $seed = $ENV{FENCE_SEED} // int(time) % 100000;
srand($seed);
note("seed $seed (set FENCE_SEED to repeat)");

my $bin = build_fence_load();
my $node = fence_node('chaos', 2, qq{
track_commit_timestamp = on
log_statement = none
max_connections = 60
});

$node->safe_psql(
	'postgres', qq{
CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0,
                       writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE report (id bigserial PRIMARY KEY, job text NOT NULL,
                     token bigint NOT NULL, worker int, line bigint,
                     writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE acc_log (id bigserial PRIMARY KEY, job text, counter int,
                      n_read bigint, n_written bigint, token bigint,
                      worker int, style int);
CREATE TABLE counters_ctl (LIKE counters INCLUDING ALL);
CREATE TABLE report_ctl (id bigserial PRIMARY KEY, job text NOT NULL,
                         token bigint NOT NULL, worker int, line bigint,
                         writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE acc_log_ctl (id bigserial PRIMARY KEY, job text, counter int,
                          n_read bigint, n_written bigint, token bigint,
                          worker int, style int);
-- the instrumentation: claims and releases commit with their log rows
CREATE TABLE claim_log (job text NOT NULL, token bigint PRIMARY KEY, worker int);
CREATE TABLE release_log (job text NOT NULL, token bigint PRIMARY KEY);
CREATE TABLE fenced_log (job text, token bigint, worker int, sqlstate text);
CREATE TABLE epoch_log (id bigserial PRIMARY KEY, tbl text, row_id int,
                        old_epoch bigint, new_epoch bigint);
CREATE FUNCTION log_epoch() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  INSERT INTO epoch_log (tbl, row_id, old_epoch, new_epoch)
  VALUES (TG_TABLE_NAME, NEW.id, OLD.writer_epoch, NEW.writer_epoch);
  RETURN NULL;
END \$\$;
CREATE TRIGGER log_epoch AFTER UPDATE ON counters
  FOR EACH ROW EXECUTE FUNCTION log_epoch();
CREATE TRIGGER log_epoch AFTER UPDATE ON counters_ctl
  FOR EACH ROW EXECUTE FUNCTION log_epoch();
INSERT INTO counters (id) SELECT g FROM generate_series(1, $jobs) g;
INSERT INTO counters_ctl (id) SELECT g FROM generate_series(1, $jobs) g;
SELECT fence_protect('counters');
SELECT fence_protect('report');
});

# Run the workers for $seconds while freezing random ones; returns the sum
# of the workers' STATS and the number of freezes.
sub chaos_run
{
	my ($prefix, $suffix, $unprotected, $seconds) = @_;
	my $connstr = $node->connstr('postgres')
	  . " options='-c idle_in_transaction_session_timeout=1000"
	  . " -c statement_timeout=30000'";
	my (@h, @out, @err, @pid);
	# the workers stop by themselves after $seconds; so does the monkey
	my $end = time + $seconds;
	for my $w (1 .. $workers)
	{
		($out[$w], $err[$w]) = ('', '');
		my @cmd = ($bin, 'chaos', '-d', $connstr, '-w', $w, '-j', $jobs,
			'-P', $prefix, '-s', $suffix, '-t', $seconds, '-l', $lease_ms,
			'-r', $seed);
		push @cmd, '-u' if $unprotected;
		$h[$w] = IPC::Run::start(\@cmd, '>', \$out[$w], '2>', \$err[$w]);
		$pid[$w] = $h[$w]{KIDS}[0]{PID};
	}

	# the chaos monkey: freeze random workers for 50 ms .. 4 leases
	my %frozen;    # worker => resume time
	my $freezes = 0;
	while (time < $end)
	{
		for my $w (keys %frozen)
		{
			next if $frozen{$w} > time;
			kill 'CONT', $pid[$w];
			delete $frozen{$w};
		}
		if (rand() < 0.25 && keys(%frozen) < $workers / 2)
		{
			my $w = 1 + int(rand($workers));
			if (!$frozen{$w})
			{
				kill 'STOP', $pid[$w];
				$frozen{$w} = time + 0.05 + rand(4 * $lease_ms / 1000);
				$freezes++;
			}
		}
		# a worker may finish a moment early: pump only the running ones
		for (@h[ 1 .. $workers ])
		{
			eval { $_->pump_nb if $_->pumpable; };
		}
		sleep 0.02;
	}
	kill 'CONT', $pid[$_] for keys %frozen;

	my %sum;
	for my $w (1 .. $workers)
	{
		my $deadline = time + 60;
		while ($h[$w]->pumpable && time < $deadline)
		{
			eval { $h[$w]->pump_nb; };
			sleep 0.05;
		}
		$h[$w]->kill_kill if $h[$w]->pumpable;
		$h[$w]->finish or diag("worker $w exited with $?");
		note("worker $w: $err[$w]") if $err[$w] ne '';
		if ($out[$w] =~ /^STATS (.*)$/m)
		{
			for (split / /, $1)
			{
				my ($k, $v) = split /=/;
				$sum{$k} += $v unless $k eq 'worker';
			}
		}
		else
		{
			fail("worker $w printed its STATS");
		}
	}
	$sum{freezes} = $freezes;
	return \%sum;
}

sub q1
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# the invariant queries, for one set of tables
sub lost_updates
{
	my ($suffix) = @_;
	return q1(qq{
SELECT coalesce(sum(a.cnt - c.n), 0)
  FROM counters$suffix c
  JOIN (SELECT counter, count(*) AS cnt FROM acc_log$suffix GROUP BY counter) a
    ON a.counter = c.id});
}

sub counters_off
{
	my ($suffix) = @_;
	return q1(qq{
SELECT count(*) FROM counters$suffix c
 WHERE c.n <> (SELECT count(*) FROM acc_log$suffix a WHERE a.counter = c.id)});
}

sub stale_rows
{
	my ($table) = @_;
	return q1(qq{
SELECT count(*) FROM $table r
 WHERE EXISTS (SELECT 1 FROM claim_log c
                WHERE c.job = r.job AND c.token > r.token
                  AND pg_xact_commit_timestamp(c.xmin) < pg_xact_commit_timestamp(r.xmin))});
}

sub epoch_moves
{
	my ($tbl) = @_;
	return split /\|/, q1(qq{
SELECT count(*) FILTER (WHERE new_epoch < old_epoch),
       count(*) FILTER (WHERE new_epoch = old_epoch),
       count(*)
  FROM epoch_log WHERE tbl = '$tbl'});
}

sub takeovers
{
	my ($prefix) = @_;
	return q1(qq{
WITH c AS (SELECT token, lag(token) OVER (PARTITION BY job ORDER BY token) AS prev
             FROM claim_log WHERE job LIKE '$prefix%')
SELECT count(*) FROM c
 WHERE prev IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM release_log r WHERE r.token = c.prev)});
}

# --- the protected run ---
my $p = chaos_run('p-', '', 0, $protected_seconds);
note(join ' ', map { "$_=$p->{$_}" } sort keys %$p);

my $p_takeovers = takeovers('p-');
my $p_fenced = q1("SELECT count(*) FROM fenced_log WHERE job LIKE 'p-%'");
my $p_writes = q1('SELECT count(*) FROM acc_log');
my $p_lost = lost_updates('');
my $p_stale = stale_rows('report');
my $p_stale_acc = stale_rows('acc_log');
my ($p_back, $p_same, $p_epoch_changes) = epoch_moves('counters');

cmp_ok($p->{writes}, '>', 0, 'protected run: workers made accepted writes');
is($p_writes, $p->{writes}, 'protected run: every acknowledged write is logged');
is($p_lost, 0, 'protected run: no lost update');
is(counters_off(''), 0, 'protected run: every counter equals its accepted increments');
is(q1('SELECT count(*) - count(DISTINCT (counter, n_read)) FROM acc_log'), 0,
	'protected run: no two accepted writes of a counter read the same value');
is($p_stale, 0, 'protected run: no report line from a superseded execution');
is($p_stale_acc, 0, 'protected run: no counter write from a superseded execution');
is(q1('SELECT count(*) FROM report WHERE writer_epoch <> token'), 0,
	'protected run: report lines are stamped with their token');
is(q1('SELECT count(*) FROM report WHERE token NOT IN (SELECT token FROM claim_log)'), 0,
	'protected run: report lines carry only issued tokens');
is($p_back, 0, 'protected run: no counter epoch moved backwards');
is($p_same, 0, 'protected run: no counter was written twice with one token (strict)');
is($p_epoch_changes, $p_writes, 'protected run: every change of a counter is an accepted write');
cmp_ok($p_takeovers, '>', 0, "protected run: takeovers happened ($p_takeovers)");
# a worker whose session was ended right after a fenced write cannot log it
# to fenced_log, so the workers' own count is the reference
cmp_ok($p->{fenced}, '>', 0, "protected run: writes were fenced ($p->{fenced})");
cmp_ok($p_fenced, '>', 0, "protected run: fenced writes were logged ($p_fenced)");
cmp_ok($p_fenced, '<=', $p->{fenced}, 'protected run: no fenced write logged that the workers did not see');
is($p->{fother}, 0, 'protected run: no fenced error other than 5F001/5F002');
ok(!$node->log_contains('terminated by signal'), 'protected run: no backend crashed');

# --- the control run: same workload, unprotected copies, no token ---
my $c = chaos_run('c-', '_ctl', 1, $control_seconds);
note(join ' ', map { "$_=$c->{$_}" } sort keys %$c);
my $c_takeovers = takeovers('c-');
my $c_lost = lost_updates('_ctl');
my $c_stale = stale_rows('report_ctl');
my ($c_back, $c_same) = epoch_moves('counters_ctl');
cmp_ok($c_takeovers, '>', 0, "control run: takeovers happened ($c_takeovers)");
cmp_ok($c_lost, '>', 0, "control run: updates were lost ($c_lost)");

my $summary =
	"chaos seed=$seed workers=$workers jobs=$jobs lease=${lease_ms}ms\n"
  . "protected ${protected_seconds}s: claims=$p->{claims} freezes=$p->{freezes}"
  . " takeovers=$p_takeovers accepted_writes=$p_writes fenced=$p->{fenced} (5F001=$p->{f5F001} 5F002=$p->{f5F002})"
  . " pauses=$p->{pauses} reconnects=$p->{reconnects} other_errors=$p->{other}"
  . " lost_updates=$p_lost stale_appends=$p_stale stale_counter_writes=$p_stale_acc epoch_backwards=$p_back\n"
  . "control ${control_seconds}s: claims=$c->{claims} freezes=$c->{freezes}"
  . " takeovers=$c_takeovers accepted_writes=$c->{writes} lost_updates=$c_lost"
  . " stale_appends=$c_stale epoch_backwards=$c_back";
diag($summary);

$node->stop;
done_testing();
