
# Copyright (c) 2026, the fence authors

=pod

=head1 NAME

FenceTest - helpers shared by fence's fault tests in t/

=head1 DESCRIPTION

=over

=item fence_node(name, port_offset, conf)

A started throwaway cluster with fence created in database postgres.

=item soak()

True when FENCE_SOAK is set: the tests then run longer and harder.

=item fence_forms()

The forms of fence's guard a test runs its scenarios against: C<before>
(the default form, fence_guard before the row) and C<after> (UPDATEs checked
in the WHEN clause of an AFTER UPDATE trigger, doc/fence.md 4).
FENCE_FORMS=after (or before) limits a run to one of them.

=item protect_sql(table, form, [epoch_column, [mode]])

The SELECT fence_protect(...) that protects the table in that form (for
C<before>, the call without a form: the default).

=item build_fence_load()

Compiles test/chaos/fence_load.c with pg_config's libpq and returns the
binary's path.

=item FenceTest::Client

A psql process driven through pipes, which the test can freeze with SIGSTOP
and resume with SIGCONT.  It is the worker: it holds its token and what it
read in psql variables (\gset), so what runs after SIGCONT is the worker's
own continuation, queued while it was frozen.

=back

=cut

package FenceTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use File::Basename;
use File::Spec;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

our @EXPORT = qw(fence_node soak fence_forms protect_sql build_fence_load proc_state);

# fault-test ports, from /work/notes/CONVENTIONS.md: 54330-54339
my $port_base = $ENV{FENCE_TEST_PORT_BASE} // 54330;

sub soak
{
	return $ENV{FENCE_SOAK} ? 1 : 0;
}

sub fence_forms
{
	my @all = ('before', 'after');
	return @all unless $ENV{FENCE_FORMS};
	my %want = map { $_ => 1 } split /[\s,]+/, $ENV{FENCE_FORMS};
	my @forms = grep { $want{$_} } @all;
	die "FENCE_FORMS=$ENV{FENCE_FORMS} names no form (before, after)"
	  unless @forms;
	return @forms;
}

sub protect_sql
{
	my ($table, $form, $column, $mode) = @_;
	$column //= 'writer_epoch';
	$mode //= 'strict';
	die "unknown form $form" unless $form eq 'before' || $form eq 'after';
	# the before form is the default: its call stays the one without a form
	return "SELECT fence_protect('$table', '$column', '$mode'"
	  . ($form eq 'after' ? ", form => 'after'" : '') . ');';
}

sub fence_node
{
	my ($name, $port_offset, $conf) = @_;
	my $node =
	  PostgreSQL::Test::Cluster->new($name, port => $port_base + $port_offset);
	$node->init;
	$node->append_conf('postgresql.conf', $conf) if defined $conf;
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION fence');
	return $node;
}

sub build_fence_load
{
	my $src = File::Spec->rel2abs(
		dirname(__FILE__) . '/../test/chaos/fence_load.c');
	my $bin = "$PostgreSQL::Test::Utils::tmp_check/fence_load";
	my $inc = `pg_config --includedir`;
	my $lib = `pg_config --libdir`;
	chomp($inc, $lib);
	my $cc = $ENV{CC} // 'cc';
	my ($out, $err);
	IPC::Run::run([ $cc, '-O2', '-Wall', "-I$inc", '-o', $bin, $src,
			"-L$lib", '-lpq' ], '>', \$out, '2>', \$err)
	  or BAIL_OUT("cannot build $src: $err");
	return $bin;
}

# one-letter process state from /proc (R, S, T = stopped, Z, ...)
sub proc_state
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return '';
	my $stat = <$fh>;
	close $fh;
	return $stat =~ /^\d+ \(.*\) (\S)/ ? $1 : '';
}

package FenceTest::Client;

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use Test::More;
use Time::HiRes qw(time sleep);

sub new
{
	my ($class, $node, $name) = @_;
	my $self = bless { name => $name, in => '', out => '', err => '',
		mark => 0, outpos => 0, errpos => 0 }, $class;
	local %ENV = $node->_get_env();
	$self->{h} = IPC::Run::start(
		[ $node->installed_command('psql'), '-XAtq', '-d',
		  $node->connstr('postgres'), '-v', 'ON_ERROR_STOP=0',
		  '-v', 'VERBOSITY=verbose', '-f', '-' ],
		'<', \$self->{in}, '>', \$self->{out}, '2>', \$self->{err});
	$self->{pid} = $self->{h}{KIDS}[0]{PID};
	$self->run("\\set VERBOSITY verbose");
	return $self;
}

sub pid { return $_[0]->{pid}; }

# queue commands without waiting (the process may be frozen); returns a mark
sub send
{
	my ($self, $sql) = @_;
	my $mark = "__mark_" . ++$self->{mark} . "__";
	$self->{in} .= "$sql\n\\echo $mark\n";
	$self->{h}->pump_nb;
	return $mark;
}

# wait for a mark; returns (stdout, stderr) produced since the last wait
sub wait_for
{
	my ($self, $mark, $timeout) = @_;
	my $deadline = time + ($timeout // 60);
	while ($self->{out} !~ /^\Q$mark\E$/m)
	{
		die "$self->{name}: timed out waiting for $mark; stderr: $self->{err}"
		  if time > $deadline;
		die "$self->{name}: psql exited; stderr: $self->{err}"
		  unless $self->{h}->pumpable;
		$self->{h}->pump_nb;
		sleep 0.02;
	}
	my $out = substr($self->{out}, $self->{outpos});
	$out =~ s/^\Q$mark\E\n.*//ms;
	$self->{outpos} = index($self->{out}, "$mark\n") + length("$mark\n");
	my $err = substr($self->{err}, $self->{errpos});
	$self->{errpos} = length($self->{err});
	chomp $out;
	return ($out, $err);
}

sub run
{
	my ($self, $sql, $timeout) = @_;
	return $self->wait_for($self->send($sql), $timeout);
}

# like run, but a failure is a test failure; returns stdout
sub run_ok
{
	my ($self, $sql) = @_;
	my ($out, $err) = $self->run($sql);
	die "$self->{name}: unexpected error in <$sql>: $err" if $err =~ /ERROR/;
	return $out;
}

sub freeze
{
	my ($self) = @_;
	kill 'STOP', $self->{pid};
	my $deadline = time + 10;
	sleep 0.01 until FenceTest::proc_state($self->{pid}) eq 'T' || time > $deadline;
	return FenceTest::proc_state($self->{pid}) eq 'T';
}

sub thaw
{
	my ($self) = @_;
	kill 'CONT', $self->{pid};
}

# wait for psql to exit (after its connection was terminated); returns stderr
sub wait_exit
{
	my ($self, $timeout) = @_;
	my $deadline = time + ($timeout // 60);
	while ($self->{h}->pumpable)
	{
		die "$self->{name}: did not exit" if time > $deadline;
		eval { $self->{h}->pump_nb; };
		sleep 0.02;
	}
	$self->{h}->finish;
	my $err = substr($self->{err}, $self->{errpos});
	$self->{errpos} = length($self->{err});
	return $err;
}

sub quit
{
	my ($self) = @_;
	return unless $self->{h}->pumpable;
	kill 'CONT', $self->{pid};
	$self->{in} .= "\\q\n";
	$self->{h}->finish;
}

1;
