# Copyright (c) 2026, the fence authors

# Refused writes counted by SQLSTATE, per database, with fence in
# shared_preload_libraries, and without it on 17 and later (stats.c).
#
# 1. A server started with shared_preload_libraries = 'fence'.  In database
#    one, one refusal of each kind: 5F001 (a superseded token in the
#    statement), 5F002 (a row newer than the token), 5F003 (no token),
#    5F004 (0 as the token), 5F005 (TRUNCATE), 5F006 (DROP TRIGGER of the
#    guard).  fence_stats shows refusals_counted and exactly one of each,
#    although every refused transaction rolled back.  A caller's bug (5G002,
#    a token never issued) is not a refusal, and is not counted.  A refusal
#    caught by a PL/pgSQL exception block is still a refusal: counted.
# 2. Per database: database two, which refused nothing, shows zeros while
#    database one shows its counts; two 5F003 there count there only.
# 3. The counts live in shared memory: other backends see them, and they
#    start again at zero after a restart.
# 4. The same server restarted without fence preloaded: on 15 and 16 it
#    counts nothing (refusals_counted false, NULL columns) after the same
#    refusal; on 17 and later the DSM registry holds the counts, and every
#    kind is counted as when preloaded.
# 5. Every query of doc/postgres_exporter.yml runs and returns the columns
#    its metrics name (the refusals query: six rows when preloaded).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = fence_node('stats', 9, "shared_preload_libraries = 'fence'\n");

sub q1 { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }

sub sqlstate
{
	my ($db, $sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : "no error: $err";
}

sub counts
{
	my ($db) = @_;
	return q1($db, "SELECT refusals_counted, refused_5f001, refused_5f002, refused_5f003,"
		  . " refused_5f004, refused_5f005, refused_5f006 FROM fence_stats");
}

q1('postgres', 'CREATE DATABASE two');
q1('two', 'CREATE EXTENSION fence');
for my $db ('postgres', 'two')
{
	q1($db, q{CREATE TABLE t (id int PRIMARY KEY, v text, writer_epoch bigint);
		INSERT INTO t VALUES (1, 'init', NULL), (2, 'init', NULL);
		SELECT fence_protect('t');});
}

is(counts('postgres'), 't|0|0|0|0|0|0', 'preloaded: counted, nothing refused yet');

# job J: A claimed, expired, B took over; B wrote row 1
my $a = q1('postgres', "SELECT fence_claim('J', '1 hour', 'A')");
q1('postgres', "UPDATE fence_claims SET lease_expires_at = now() - interval '1 s' WHERE job = 'J'");
my $b = q1('postgres', "SELECT fence_claim('J', '1 hour', 'B')");
q1('postgres', "UPDATE t SET v = 'b', writer_epoch = $b WHERE id = 1");
# job K, claimed before B: current, but older than row 1's epoch
my $k = q1('postgres', "SELECT fence_claim('K', '1 hour', 'K')");
q1('postgres', "UPDATE t SET v = 'k', writer_epoch = $k WHERE id = 2");
my $never = $k + 1000000;

my %refusal = (
	'5F001' => "UPDATE t SET v = 'a', writer_epoch = $a WHERE id = 2",
	'5F002' => "BEGIN; SELECT fence_begin('J', $b); UPDATE t SET v = 'x' WHERE id = 2; UPDATE t SET v = 'x' WHERE id = 2; COMMIT",
	'5F003' => "UPDATE t SET v = 'none' WHERE id = 1",
	'5F004' => "UPDATE t SET v = 'zero', writer_epoch = 0 WHERE id = 1",
	'5F005' => "TRUNCATE t",
	'5F006' => "DROP TRIGGER zz_fence_guard ON t",
);
is(sqlstate('postgres', $refusal{$_}), $_, "$_ refused") for sort keys %refusal;
is(counts('postgres'), 't|1|1|1|1|1|1', 'one refusal of each kind counted, though each transaction rolled back');

# the caller's bugs (class 5G) are not refusals: not counted
is(sqlstate('postgres', "UPDATE t SET v = 'forged', writer_epoch = $never WHERE id = 1"),
	'5G002', 'a token never issued: 5G002, the caller\'s bug');
is(counts('postgres'), 't|1|1|1|1|1|1', '... not counted as a refusal');

q1('postgres', q{DO $$ BEGIN UPDATE t SET v = 'caught' WHERE id = 1;
	EXCEPTION WHEN SQLSTATE '5F003' THEN NULL; END $$});
is(counts('postgres'), 't|1|1|2|1|1|1', 'a refusal caught by an exception block is counted');

is(counts('two'), 't|0|0|0|0|0|0', 'database two refused nothing: zeros');
is(sqlstate('two', $refusal{'5F003'}), '5F003', 'database two: 5F003') for 1 .. 2;
is(counts('two'), 't|0|0|2|0|0|0', 'database two counts its own');
is(counts('postgres'), 't|1|1|2|1|1|1', 'database one unchanged by database two');

# the postgres_exporter queries: each runs and returns its metrics' columns
my $yml = slurp_file("$FindBin::RealBin/../doc/postgres_exporter.yml");
my $nq = 0;
while ($yml =~ /^(\w+):\n  query: \|\n((?:    .*\n)+)  metrics:\n((?:    .*\n)+)/mg)
{
	my ($name, $query, $metrics) = ($1, $2, $3);
	my @cols = $metrics =~ /^    - (\w+):/mg;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "\\pset footer off\n$query", stdout => \$out, stderr => \$err,
		extra_params => [ '-A', '-F', ',', '-P', 'tuples_only=off' ]);
	my ($header, @rows) = split /\n/, $out;
	is($header // '', join(',', @cols), "postgres_exporter query $name returns its metrics' columns")
	  or diag($err);
	ok(@rows >= 1, "postgres_exporter query $name returns rows");
	is(scalar(@rows), 6, 'the refusals query: one row per SQLSTATE') if $name eq 'fence_refused';
	$nq++;
}
is($nq, 3, 'doc/postgres_exporter.yml: three queries found');

$node->restart;
is(counts('postgres'), 't|0|0|0|0|0|0', 'after a restart the counts start at zero');

$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "''");
$node->restart;
is(sqlstate('postgres', $refusal{'5F003'}), '5F003', 'not preloaded: still refused');
if ($node->safe_psql('postgres', 'SHOW server_version_num') >= 170000)
{
	# 17 and later: the backend that loads fence finds the counts in the DSM
	# registry, shared by every backend as the preloaded ones are.
	is(counts('postgres'), 't|0|0|1|0|0|0', 'not preloaded, 17 and later: counted (DSM registry)');
	is(sqlstate('postgres', $refusal{$_}), $_, "not preloaded: $_ refused") for sort keys %refusal;
	is(counts('postgres'), 't|1|1|2|1|1|1', 'not preloaded: each refusal counted, seen from another backend');
	is(counts('two'), 't|0|0|0|0|0|0', 'not preloaded: database two counts apart');
}
else
{
	is(counts('postgres'), 'f||||||', 'not preloaded, 15 and 16: nothing counted, the view says so');
}

$node->stop;
done_testing();
