
# Copyright (c) 2026, the fence authors

# The successor chain with real worker processes and a real crash.  A job's
# final transaction applies its effect (one increment of a protected
# counter) and enqueues its successor (an INSERT into a plain jobs table,
# which fence does not protect), each under fence_once:
#
#   BEGIN; fence_begin(job, token);
#   IF fence_once(job || ':effect') THEN <the effect> END IF;
#   IF fence_once(job || ':next') THEN <enqueue the successor> END IF;
#   COMMIT; fence_release(job, token)
#
# Each worker is a psql process that decides in the client (\gset, \if).
#
#  1. Crash after commit: worker A commits its final transaction and is
#     killed with SIGKILL before fence_release.  The job comes back; worker B
#     claims it once A's lease has run out (a takeover), runs the same
#     transaction, and fence_once answers false twice: the counter went up
#     once and there is one successor.
#     Twin: the same crash with a handler without fence_once applies the
#     effect twice and enqueues two successors.
#  2. Frozen past the lease: worker C is stopped (SIGSTOP) before its final
#     transaction; D takes the job over and runs it; C, thawed, fails at
#     fence_begin with 5F001, and its transaction, enqueue included, rolls
#     back: one increment, one successor.
#  3. fence_stats counts the keys recorded and the repeats absorbed.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = fence_node('successor_chain', 11,
	"shared_preload_libraries = 'fence'\n");
$node->restart;
$node->safe_psql(
	'postgres', q{
CREATE TABLE counters (id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0,
                       writer_epoch bigint);
SELECT fence_protect('counters');
-- the queue's own table: fence does not protect it
CREATE TABLE jobs (id serial PRIMARY KEY, job text NOT NULL, enqueued_by text);
BEGIN;
SELECT fence_begin_fresh(NULL);
INSERT INTO counters (id) VALUES ('keyed'), ('twin'), ('frozen');
COMMIT;
});

my $lease = '1 second';

# The worker's final transaction, from psql variables :job and :tok.  Keyed:
# each step under fence_once, decided in the client.  Unkeyed: both always.
sub final_transaction
{
	my ($counter, $keyed) = @_;
	my $sql = "BEGIN;\nSELECT fence_begin(:'job', :tok);\n";
	if ($keyed)
	{
		$sql .= "SELECT fence_once(:'job' || ':effect') AS do_effect \\gset\n"
		  . "\\if :do_effect\n";
	}
	$sql .= "UPDATE counters SET n = n + 1 WHERE id = '$counter';\n";
	$sql .= "\\endif\nSELECT fence_once(:'job' || ':next') AS do_next \\gset\n\\if :do_next\n"
	  if $keyed;
	$sql .= "INSERT INTO jobs (job, enqueued_by) VALUES (:'job' || '-next', :'worker');\n";
	$sql .= "\\endif\n" if $keyed;
	$sql .= "COMMIT;\n";
	return $sql;
}

# a worker process that has claimed the job (waiting for the lease to run
# out if another execution holds it)
sub start_worker
{
	my ($name, $job) = @_;
	my $w = FenceTest::Client->new($node, $name);
	$w->run_ok("\\set job '$job'\n\\set worker '$name'");
	$w->{backend} = $w->run_ok('SELECT pg_backend_pid();');
	my $deadline = time + 60;
	while (1)
	{
		my $tok = $w->run_ok("SELECT fence_claim(:'job', '$lease', :'worker');");
		if ($tok ne '')
		{
			$w->run_ok("\\set tok $tok");
			$w->{token} = $tok;
			last;
		}
		die "$name could not claim $job: $w->{err}" if time > $deadline;
		sleep 0.1;
	}
	return $w;
}

# kill -9 the worker process; the server ends its session
sub crash
{
	my ($w) = @_;
	kill 'KILL', $w->pid;
	$w->{h}->finish;
	# the session is gone once its backend has exited
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $w->{backend}")
	  or die "the killed worker's backend did not exit";
}

sub counter
{
	my ($id) = @_;
	return $node->safe_psql('postgres', "SELECT n FROM counters WHERE id = '$id'");
}

sub successors
{
	my ($job) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM jobs WHERE job = '$job-next'");
}

my $stats_before = $node->safe_psql('postgres',
	'SELECT effects_recorded || \' \' || repeats_absorbed FROM fence_stats');

# --- 1. crash after commit, before fence_release
for my $case ([ 'keyed', 1 ], [ 'twin', 0 ])
{
	my ($counter, $keyed) = @$case;
	my $job = "chain:$counter";
	my $a = start_worker("A-$counter", $job);
	my ($out, $err) = $a->run(final_transaction($counter, $keyed));
	is($err, '', "$counter: worker A committed its final transaction");
	crash($a);
	is($node->safe_psql('postgres',
			"SELECT NOT released FROM fence_claims WHERE job = '$job'"),
		't', "$counter: killed before fence_release, A's claim is not released");

	my $b = start_worker("B-$counter", $job);
	cmp_ok($b->{token}, '>', $a->{token},
		"$counter: worker B took the job over after A's lease ran out");
	($out, $err) = $b->run(final_transaction($counter, $keyed)
		  . ($keyed ? "SELECT :'do_effect', :'do_next';" : ''));
	is($err, '', "$counter: worker B committed its final transaction");
	if ($keyed)
	{
		is((split /\n/, $out)[-1], 'f|f', 'keyed: fence_once answered false for the effect and for the successor');
	}
	is($b->run_ok("SELECT fence_release(:'job', :tok);"), 't',
		"$counter: worker B released the job");
	$b->quit;
	if ($keyed)
	{
		is(counter($counter), 1, 'keyed: the effect was applied once');
		is(successors($job), 1, 'keyed: one successor was enqueued');
	}
	else
	{
		is(counter($counter), 2,
			'twin without fence_once: the same crash applies the effect twice');
		is(successors($job), 2,
			'twin without fence_once: the same crash enqueues two successors');
	}
}

# --- 2. frozen past the lease
{
	my $job = 'chain:frozen';
	my $c = start_worker('C', $job);
	ok($c->freeze, 'worker C is frozen before its final transaction');
	my $mark = $c->send(final_transaction('frozen', 1));
	my $d = start_worker('D', $job);
	cmp_ok($d->{token}, '>', $c->{token}, 'worker D took the job over');
	my ($out, $err) = $d->run(final_transaction('frozen', 1));
	is($err, '', 'worker D committed its final transaction');
	is($d->run_ok("SELECT fence_release(:'job', :tok);"), 't', 'worker D released the job');
	$d->quit;
	$c->thaw;
	($out, $err) = $c->wait_for($mark);
	like($err, qr/ERROR:\s+5F001/, 'thawed worker C fails at fence_begin with 5F001');
	unlike($err, qr/fence_once/, 'C never reached fence_once');
	$c->quit;
	is(counter('frozen'), 1, 'frozen: the effect was applied once');
	is(successors($job), 1, 'frozen: one successor, D\'s');
	is($node->safe_psql('postgres',
			"SELECT enqueued_by FROM jobs WHERE job = '$job-next'"),
		'D', 'the successor is the one D enqueued: C\'s enqueue rolled back');
}

# --- 3. fence_stats: A-keyed recorded 2 keys and B-keyed absorbed 2
# repeats; D recorded 2; C none
is($stats_before, '0 0', 'fence_stats counted nothing before');
is($node->safe_psql('postgres',
		'SELECT effects_recorded || \' \' || repeats_absorbed FROM fence_stats'),
	'4 2', 'fence_stats: 4 keys recorded, 2 repeats absorbed');

done_testing();
