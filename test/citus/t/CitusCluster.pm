
# Copyright (c) 2026, the fence authors

=pod

=head1 NAME

CitusCluster - a Citus cluster of throwaway nodes for fence's Citus suite

=head1 DESCRIPTION

=over

=item citus_cluster(name, [workers])

A coordinator and C<workers> (default 2) workers, each a started
PostgreSQL::Test::Cluster with C<shared_preload_libraries = 'citus,fence'>,
Citus created in database postgres, the workers added to the coordinator
(citus_add_node) by their unix socket directory.  Returns the coordinator
and the workers.  fence is not created: a test creates it on the
coordinator, and Citus propagates it to the workers.

=item citus_node(name)

One such node, started, with Citus created and not part of a cluster.

=item add_worker(coordinator, worker)

citus_add_node of the worker on the coordinator.

=item sqlstate_of(node, sql)

Runs the SQL with psql (C<VERBOSITY verbose>) and returns the SQLSTATE of
its first error and the error's message line, or C<('', '')> if there was
none.

=back

=cut

package CitusCluster;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our @EXPORT = qw(citus_cluster citus_node add_worker sqlstate_of);

sub citus_node
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf(
		'postgresql.conf', qq(
shared_preload_libraries = 'citus,fence'
citus.enable_statistics_collection = off
max_prepared_transactions = 20
max_connections = 60
lc_messages = 'C'
log_line_prefix = '%m [%p] %q%a '
));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION citus');
	return $node;
}

sub add_worker
{
	my ($coordinator, $worker) = @_;
	$coordinator->safe_psql('postgres',
		"SELECT citus_add_node('" . $worker->host . "', " . $worker->port . ")");
}

sub citus_cluster
{
	my ($name, $workers) = @_;
	$workers //= 2;
	my $coordinator = citus_node("${name}_coordinator");
	$coordinator->safe_psql('postgres',
		"SELECT citus_set_coordinator_host('" . $coordinator->host . "', " . $coordinator->port . ")");
	my @workers;
	for my $i (1 .. $workers)
	{
		my $w = citus_node("${name}_worker$i");
		add_worker($coordinator, $w);
		push @workers, $w;
	}
	return ($coordinator, @workers);
}

sub sqlstate_of
{
	my ($node, $sql) = @_;
	my ($stdout, $stderr) = ('', '');
	$node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		stdout => \$stdout, stderr => \$stderr);
	return ($1, $2) if $stderr =~ /ERROR:\s+([0-9A-Z]{5}):\s+([^\n]*)/;
	return ('', '');
}

1;
