
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
# The protected run is made once per form of the guard (FenceTest::
# fence_forms), each on its own tables and jobs, and the protected time is
# split between them: the default form on counters and report (jobs pb-*),
# the after form on counters_after and report_after (jobs pa-*).  There the
# workers run with fence_load -a: the after form does not stamp UPDATEs, so
# the fence_begin style writes its token into writer_epoch too.  The
# invariants hold for each form; the control run is made once.
#
# FENCE_SOAK=1: 16 workers, minutes instead of seconds.  FENCE_CHAOS_SECONDS
# is the protected time of all forms together; FENCE_FORMS=after (or before)
# runs one form only, for all of it.

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
my @forms = fence_forms();
my $form_seconds = int(($protected_seconds + @forms - 1) / @forms);
# each form's tables (counters$suffix, report$suffix, acc_log$suffix) and
# job names (prefix)
my %run = (
	before => { prefix => 'pb-', suffix => '' },
	after => { prefix => 'pa-', suffix => '_after' });
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
CREATE TABLE counters_after (LIKE counters INCLUDING ALL);
CREATE TABLE report_after (LIKE report INCLUDING ALL);
CREATE TABLE acc_log_after (LIKE acc_log INCLUDING ALL);
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
CREATE TRIGGER log_epoch AFTER UPDATE ON counters_after
  FOR EACH ROW EXECUTE FUNCTION log_epoch();
CREATE TRIGGER log_epoch AFTER UPDATE ON counters_ctl
  FOR EACH ROW EXECUTE FUNCTION log_epoch();
INSERT INTO counters (id) SELECT g FROM generate_series(1, $jobs) g;
INSERT INTO counters_after (id) SELECT g FROM generate_series(1, $jobs) g;
INSERT INTO counters_ctl (id) SELECT g FROM generate_series(1, $jobs) g;
}
	  . join("\n", map {
			  (protect_sql("counters$run{$_}{suffix}", $_),
			   protect_sql("report$run{$_}{suffix}", $_)) } @forms));
is($node->safe_psql('postgres',
		q{SELECT string_agg(format('%s %s', relation, form), ', ' ORDER BY relation::text)
		    FROM fence_protected}),
	join(', ', sort map { ("counters$run{$_}{suffix} $_", "report$run{$_}{suffix} $_") } @forms),
	'each protected table is registered in its form');

# Run the workers for $seconds while freezing random ones; returns the sum
# of the workers' STATS and the number of freezes.
sub chaos_run
{
	my ($prefix, $suffix, $unprotected, $seconds, $after_form) = @_;
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
		push @cmd, '-a' if $after_form;
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

# --- the protected runs, one per form ---
my @summary;
for my $form (@forms)
{
	my ($prefix, $sfx) = @{ $run{$form} }{qw(prefix suffix)};
	my $r = "protected run, $form form";
	my $log_offset = -s $node->logfile;
	my $p = chaos_run($prefix, $sfx, 0, $form_seconds, $form eq 'after');
	note("$r: " . join ' ', map { "$_=$p->{$_}" } sort keys %$p);

	my $p_takeovers = takeovers($prefix);
	my $p_fenced = q1("SELECT count(*) FROM fenced_log WHERE job LIKE '$prefix%'");
	my $p_writes = q1("SELECT count(*) FROM acc_log$sfx");
	my $p_lost = lost_updates($sfx);
	my $p_stale = stale_rows("report$sfx");
	my $p_stale_acc = stale_rows("acc_log$sfx");
	my ($p_back, $p_same, $p_epoch_changes) = epoch_moves("counters$sfx");

	cmp_ok($p->{writes}, '>', 0, "$r: workers made accepted writes");
	is($p_writes, $p->{writes}, "$r: every acknowledged write is logged");
	is($p_lost, 0, "$r: no lost update");
	is(counters_off($sfx), 0, "$r: every counter equals its accepted increments");
	is(q1("SELECT count(*) - count(DISTINCT (counter, n_read)) FROM acc_log$sfx"), 0,
		"$r: no two accepted writes of a counter read the same value");
	is($p_stale, 0, "$r: no report line from a superseded execution");
	is($p_stale_acc, 0, "$r: no counter write from a superseded execution");
	is(q1("SELECT count(*) FROM report$sfx WHERE writer_epoch <> token"), 0,
		"$r: report lines are stamped with their token");
	is(q1("SELECT count(*) FROM report$sfx WHERE token NOT IN (SELECT token FROM claim_log)"), 0,
		"$r: report lines carry only issued tokens");
	is($p_back, 0, "$r: no counter epoch moved backwards");
	is($p_same, 0, "$r: no counter was written twice with one token (strict)");
	is($p_epoch_changes, $p_writes, "$r: every change of a counter is an accepted write");
	cmp_ok($p_takeovers, '>', 0, "$r: takeovers happened ($p_takeovers)");
	# a worker whose session was ended right after a fenced write cannot log
	# it to fenced_log, so the workers' own count is the reference
	cmp_ok($p->{fenced}, '>', 0, "$r: writes were fenced ($p->{fenced})");
	cmp_ok($p_fenced, '>', 0, "$r: fenced writes were logged ($p_fenced)");
	cmp_ok($p_fenced, '<=', $p->{fenced}, "$r: no fenced write logged that the workers did not see");
	# in the after form, an UPDATE under fence_begin without the token in
	# its SET list would be 5F003 here
	is($p->{fother}, 0, "$r: no fenced error other than 5F001/5F002");
	ok(!$node->log_contains('terminated by signal', $log_offset), "$r: no backend crashed");

	push @summary, "protected, $form form, ${form_seconds}s: claims=$p->{claims} freezes=$p->{freezes}"
	  . " takeovers=$p_takeovers accepted_writes=$p_writes fenced=$p->{fenced} (5F001=$p->{f5F001} 5F002=$p->{f5F002})"
	  . " pauses=$p->{pauses} reconnects=$p->{reconnects} other_errors=$p->{other}"
	  . " lost_updates=$p_lost stale_appends=$p_stale stale_counter_writes=$p_stale_acc epoch_backwards=$p_back";
}

# --- the control run: same workload, unprotected copies, no token ---
my $c = chaos_run('c-', '_ctl', 1, $control_seconds, 0);
note(join ' ', map { "$_=$c->{$_}" } sort keys %$c);
my $c_takeovers = takeovers('c-');
my $c_lost = lost_updates('_ctl');
my $c_stale = stale_rows('report_ctl');
my ($c_back, $c_same) = epoch_moves('counters_ctl');
cmp_ok($c_takeovers, '>', 0, "control run: takeovers happened ($c_takeovers)");
cmp_ok($c_lost, '>', 0, "control run: updates were lost ($c_lost)");

my $summary =
	"chaos seed=$seed workers=$workers jobs=$jobs lease=${lease_ms}ms\n"
  . join('', map { "$_\n" } @summary)
  . "control ${control_seconds}s: claims=$c->{claims} freezes=$c->{freezes}"
  . " takeovers=$c_takeovers accepted_writes=$c->{writes} lost_updates=$c_lost"
  . " stale_appends=$c_stale epoch_backwards=$c_back";
diag($summary);

$node->stop;
done_testing();
