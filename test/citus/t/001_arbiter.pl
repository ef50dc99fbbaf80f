
# Copyright (c) 2026, the fence authors

# One arbiter on a Citus cluster (issue 34, item 1).  A coordinator and two
# workers (CitusCluster.pm); CREATE EXTENSION fence on the coordinator,
# which Citus propagates to the workers.
#   - The coordinator claims, renews, binds, records an effect key, takes a
#     fresh token and releases, as a single server does.
#   - On each worker every function that issues, holds or binds a token
#     (fence_claim, fence_renew, fence_renew_any, fence_release,
#     fence_release_any, fence_begin, fence_begin_fresh, fence_once) is
#     refused with 5G004 naming the function and the coordinator, and the
#     worker's counter does not move.
#   - The twin: a node with Citus and fence that Citus has not added (group
#     0) claims from its own counter, and its first token is no greater than
#     one the coordinator already issued: the collision the refusal
#     prevents.  Once citus_add_node adds it, it refuses like the others.
#   - fence_protect of a distributed and of a reference table is refused
#     with 0A000 (fence's guard does not run on shards yet), on the
#     coordinator and on a worker, and registers nothing; a table the
#     coordinator keeps local is protected and refuses a stale token
#     (5F001), while its unprotected twin takes the same stale write.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Utils;
use Test::More;
use CitusCluster;

my ($coordinator, @workers) = citus_cluster('arbiter');
my $lone = citus_node('arbiter_lone');

$coordinator->safe_psql('postgres', 'CREATE EXTENSION fence');
for my $i (0 .. $#workers)
{
	is($workers[$i]->safe_psql('postgres',
			"SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'fence'"),
		'1.1', "Citus propagated CREATE EXTENSION fence to worker " . ($i + 1));
}

# The coordinator arbitrates as a single server does.
my $t1 = $coordinator->safe_psql('postgres', "SELECT public.fence_claim('job-1', '1 hour')");
like($t1, qr/^[0-9]+$/, "the coordinator issues a token ($t1)");
my $flow = $coordinator->safe_psql(
	'postgres', qq{
SELECT public.fence_renew('job-1', $t1, '1 hour') IS NOT NULL;
BEGIN;
SELECT public.fence_begin('job-1', $t1);
SELECT public.fence_once('effect-1');
COMMIT;
SELECT public.fence_renew_any('job-1', '1 hour') IS NOT NULL;
BEGIN;
SELECT public.fence_begin_fresh() > $t1;
COMMIT;
SELECT public.fence_release('job-1', $t1);
SELECT public.fence_release_any('job-1') IS NULL OR true;
});
is($flow, "t\n\nt\nt\nt\nt\nt",
	'the coordinator renews, binds, records an effect key, takes a fresh token, releases');

my %calls = (
	fence_claim => "SELECT public.fence_claim('job-2')",
	fence_renew => "SELECT public.fence_renew('job-1', $t1, '1 hour')",
	fence_renew_any => "SELECT public.fence_renew_any('job-1', '1 hour')",
	fence_release => "SELECT public.fence_release('job-1', $t1)",
	fence_release_any => "SELECT public.fence_release_any('job-1')",
	fence_begin => "BEGIN; SELECT public.fence_begin('job-1', $t1)",
	fence_begin_fresh => "BEGIN; SELECT public.fence_begin_fresh()",
	fence_once => "BEGIN; SELECT public.fence_once('effect-2')");

my $counter_sql =
  "SELECT last_value || ' ' || is_called FROM public.fence_token_seq";
for my $i (0 .. $#workers)
{
	my $w = $workers[$i];
	my $n = $i + 1;
	my $before = $w->safe_psql('postgres', $counter_sql);
	for my $fn (sort keys %calls)
	{
		my ($state, $msg) = sqlstate_of($w, $calls{$fn});
		is("$state $msg", "5G004 $fn must be called on the Citus coordinator",
			"worker $n refuses $fn with 5G004");
	}
	is($w->safe_psql('postgres', $counter_sql), $before,
		"worker $n: its counter did not move");
	is($w->safe_psql('postgres', 'SELECT count(*) FROM public.fence_claims'),
		'0', "worker $n: its registry holds no claim");
}

# The twin: a node Citus has not added claims from a counter of its own.
$lone->safe_psql('postgres', 'CREATE EXTENSION fence');
my $last = $coordinator->safe_psql('postgres', 'SELECT max(token) FROM public.fence_claims');
my $lone_token = $lone->safe_psql('postgres', "SELECT public.fence_claim('job-3')");
cmp_ok($lone_token, '<=', $last,
	"twin: a node outside the cluster issues token $lone_token, not above the coordinator's $last");
add_worker($coordinator, $lone);
my ($state, $msg) = sqlstate_of($lone, "SELECT public.fence_claim('job-4')");
is("$state $msg", '5G004 fence_claim must be called on the Citus coordinator',
	'once added to the cluster, the same node refuses fence_claim');

# Citus's tables are refused; a table the coordinator keeps local works.
$coordinator->safe_psql(
	'postgres', q{
CREATE TABLE dist (id int PRIMARY KEY, v int, writer_epoch bigint NOT NULL DEFAULT 0);
SELECT create_distributed_table('dist', 'id');
CREATE TABLE ref (id int PRIMARY KEY, v int, writer_epoch bigint NOT NULL DEFAULT 0);
SELECT create_reference_table('ref');
CREATE TABLE loc (id int PRIMARY KEY, v int, writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE loc_twin (id int PRIMARY KEY, v int, writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO loc VALUES (1, 0, 0);
INSERT INTO loc_twin VALUES (1, 0, 0);
});
for my $t (qw(dist ref))
{
	($state, $msg) = sqlstate_of($coordinator, "SELECT public.fence_protect('$t')");
	is("$state $msg", "0A000 table public.$t is a Citus table",
		"the coordinator refuses fence_protect of the Citus table $t");
}
($state, $msg) = sqlstate_of($workers[0], "SELECT public.fence_protect('dist')");
is("$state $msg", '0A000 table public.dist is a Citus table',
	'a worker refuses fence_protect of the distributed table\'s shell');
is($coordinator->safe_psql('postgres', 'SELECT count(*) FROM public.fence_protected'),
	'0', 'the refusals registered nothing');

$coordinator->safe_psql('postgres', "SELECT public.fence_protect('loc')");
my $old = $coordinator->safe_psql('postgres', "SELECT public.fence_claim('job-5', '1 second')");
sleep 2;
my $new = $coordinator->safe_psql('postgres', "SELECT public.fence_claim('job-5', '1 hour')");
cmp_ok($new, '>', $old, "a takeover on the coordinator issues a newer token ($new > $old)");
$coordinator->safe_psql('postgres',
	"UPDATE loc SET v = 2, writer_epoch = $new WHERE id = 1; UPDATE loc_twin SET v = 2, writer_epoch = $new WHERE id = 1");
($state, $msg) = sqlstate_of($coordinator,
	"UPDATE loc SET v = 1, writer_epoch = $old WHERE id = 1");
is($state, '5F001', 'a local protected table on the coordinator refuses the stale token (5F001)');
$coordinator->safe_psql('postgres',
	"UPDATE loc_twin SET v = 1, writer_epoch = $old WHERE id = 1");
is($coordinator->safe_psql('postgres',
		'SELECT (SELECT v FROM loc) || \' \' || (SELECT v FROM loc_twin)'),
	'2 1', 'twin: the unprotected local table took the stale write over the newer one');

done_testing();
