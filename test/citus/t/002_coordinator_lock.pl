
# Copyright (c) 2026, the fence authors

# The coordinator's lock orders distributed writers and takeovers (issue
# 34; doc/scale-out.md 2.3, point 2).  fence's guard does not run on shards
# yet, so these are writes of an unprotected distributed table by workers
# that follow the protocol on the coordinator: claim, then BEGIN,
# fence_begin(job, token), the writes, COMMIT.  Each case has its twin,
# the same writers without fence_begin, losing the update.
#
#   1. Takeover first: A's lease runs out while it is paused between its
#      read and its write (a client idle outside a transaction, as after a
#      SIGSTOP); B takes the job over and writes.  A's fence_begin is
#      refused (5F001) and A writes nothing; B's value stands.  Twin: A's
#      write lands on top of B's.
#   2. Writer first, across both workers: A, under fence_begin, updates a
#      row on worker 1 and is paused with its transaction open; B's
#      fence_claim answers NULL although A's lease has expired; A wakes,
#      updates a row on worker 2 and commits through Citus's two-phase
#      commit (PREPARE TRANSACTION on each worker, seen with
#      citus.log_remote_commands); then B's claim succeeds with a newer
#      token, and B's write lands after A's.  Twin: B takes over while A's
#      transaction is open and writes the row on worker 2; A's later write
#      and commit replace B's value with its stale one.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Utils;
use Test::More;
use CitusCluster;

my ($coordinator, @workers) = citus_cluster('lock');
$coordinator->safe_psql(
	'postgres', q{
CREATE EXTENSION fence;
CREATE TABLE acct (id int PRIMARY KEY, v text NOT NULL);
SELECT create_distributed_table('acct', 'id', shard_count => 4);
INSERT INTO acct SELECT g, 'init' FROM generate_series(1, 20) g;
});

# Two ids whose shards lie on different workers.
my $ids = $coordinator->safe_psql(
	'postgres', q{
SELECT string_agg(g::text, ' ' ORDER BY nodeport) FROM (
	SELECT DISTINCT ON (p.nodeport) g, p.nodeport
	FROM generate_series(1, 20) g, pg_dist_shard_placement p
	WHERE p.shardid = get_shard_id_for_distribution_column('acct', g)
	ORDER BY p.nodeport, g) x;
});
my ($id1, $id2) = split ' ', $ids;
ok(defined $id2, "rows $id1 and $id2 lie on different workers");

sub value { $coordinator->safe_psql('postgres', "SELECT v FROM acct WHERE id = $_[0]") }

# ---- 1. takeover first
for my $fenced (1, 0)
{
	my $what = $fenced ? 'under fence_begin' : 'twin, without fence_begin';
	my $job = $fenced ? 'job-1' : 'job-1-twin';
	my $a = $coordinator->safe_psql('postgres', "SELECT public.fence_claim('$job', '1 second')");
	$coordinator->safe_psql('postgres', "UPDATE acct SET v = 'read' WHERE id = $id1");
	sleep 2;    # A is paused; its lease runs out
	my $b = $coordinator->safe_psql('postgres', "SELECT public.fence_claim('$job', '1 hour')");
	cmp_ok($b, '>', $a, "1 ($what): B takes the job over ($b > $a)");
	$coordinator->safe_psql('postgres',
		"BEGIN; SELECT public.fence_begin('$job', $b); UPDATE acct SET v = 'B' WHERE id = $id1; COMMIT;");
	my $begin = $fenced ? "SELECT public.fence_begin('$job', $a);" : '';
	my ($state) = sqlstate_of($coordinator,
		"BEGIN; $begin UPDATE acct SET v = 'A' WHERE id = $id1; COMMIT;");
	if ($fenced)
	{
		is($state, '5F001', "1 ($what): A's fence_begin is refused with 5F001");
		is(value($id1), 'B', "1 ($what): B's value stands");
	}
	else
	{
		is($state, '', "1 ($what): A's write is accepted");
		is(value($id1), 'A', "1 ($what): A's stale write replaced B's");
	}
}

# ---- 2. writer first, across both workers
for my $fenced (1, 0)
{
	my $what = $fenced ? 'under fence_begin' : 'twin, without fence_begin';
	my $job = $fenced ? 'job-2' : 'job-2-twin';
	$coordinator->safe_psql('postgres', "UPDATE acct SET v = 'init' WHERE id IN ($id1, $id2)");
	my $a = $coordinator->safe_psql('postgres', "SELECT public.fence_claim('$job', '1 second')");
	my $sa = $coordinator->background_psql('postgres', on_error_stop => 0);
	$sa->query_safe('BEGIN');
	$sa->query_safe("SELECT public.fence_begin('$job', $a)") if $fenced;
	$sa->query_safe("UPDATE acct SET v = 'A' WHERE id = $id1");
	sleep 2;    # A is paused with its transaction open; its lease runs out

	my $b = $coordinator->safe_psql('postgres', "SELECT public.fence_claim('$job', '1 hour')");
	if ($fenced)
	{
		is($b, '', "2 ($what): B's claim answers NULL while A's transaction is open");
	}
	else
	{
		cmp_ok($b, '>', $a, "2 ($what): B takes the job over while A's transaction is open");
		$coordinator->safe_psql('postgres',
			"BEGIN; SELECT public.fence_begin('$job', $b); UPDATE acct SET v = 'B' WHERE id = $id2; COMMIT;");
	}
	# A wakes: its second write, on the other worker, and its commit, with
	# Citus's remote commands shown (as NOTICEs, on stderr)
	$sa->query_safe("UPDATE acct SET v = 'A' WHERE id = $id2");
	$sa->query_safe('SET LOCAL log_statement = none');
	$sa->query('SET LOCAL citus.log_remote_commands = on');
	$sa->query('COMMIT');
	my $log = $sa->{stderr};
	$sa->quit;
	unlike($log, qr/ERROR/, "2 ($what): A's commit succeeds");
	my $prepares = () = $log =~ /PREPARE TRANSACTION/g;
	is($prepares, 2, "2 ($what): A's commit prepared a transaction on each worker (two-phase commit)");

	if ($fenced)
	{
		is(value($id1) . ' ' . value($id2), 'A A', "2 ($what): A's writes committed on both workers");
		$b = $coordinator->safe_psql('postgres', "SELECT public.fence_claim('$job', '1 hour')");
		cmp_ok($b, '>', $a, "2 ($what): after A's commit B takes the job over ($b > $a)");
		$coordinator->safe_psql('postgres',
			"BEGIN; SELECT public.fence_begin('$job', $b); UPDATE acct SET v = 'B' WHERE id = $id2; COMMIT;");
		is(value($id2), 'B', "2 ($what): B's write lands after A's and stands");
	}
	else
	{
		is(value($id2), 'A', "2 ($what): A's stale write, committed after B's takeover, replaced B's");
	}
}

done_testing();
