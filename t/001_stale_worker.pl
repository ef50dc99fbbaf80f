
# Copyright (c) 2026, the fence authors

# The seed's failure with real processes: a worker (a psql process holding
# its token and what it read in psql variables) is frozen with SIGSTOP after
# reading a counter; its lease runs out; a second worker takes the job over
# and does its read-modify-write; the first is resumed with SIGCONT and
# writes.  On a protected table the late write must be fenced (5F001/5F002)
# and the counter must show exactly one increment per accepted execution.
# The twin runs the very same statements on an unprotected table and must
# lose an update, or the test would prove nothing.
#
# Variant: the worker is frozen inside an open transaction after
# fence_begin.  The takeover must return NULL while that transaction is
# open, succeed once idle_in_transaction_session_timeout ends it, and the
# frozen worker's writes must be rolled back.  With the timeout above the
# lease (4 s vs 1 s) the blocked window is visible; with the timeout below
# the lease, as doc/fence.md advises, the first takeover after the lease wins.
#
# Every scenario on a protected table runs against both forms of the guard
# (FenceTest::fence_forms): the default form on table counters, the after
# form on counters_after.  The after form does not stamp UPDATEs, so there
# the worker writes its token into writer_epoch in the SET list also under
# fence_begin, as doc/fence.md 4 tells it to.  The twins run once: the
# unprotected table has no form.
#
# FENCE_SOAK=1 repeats every scenario many times; FENCE_FORMS=after (or
# before) runs one form only.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $rounds = soak() ? 25 : 1;
my $lease = 1;          # seconds: the frozen worker's lease
my $idle_timeout = 4;   # seconds: idle_in_transaction_session_timeout, > lease

my @forms = fence_forms();
# the protected table of each form, and the form of each protected table
my %table_of = (before => 'counters', after => 'counters_after');
my %form_of = reverse %table_of;

my $node = fence_node('stale_worker', 1);
$node->safe_psql(
	'postgres', q{
CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0,
                       writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE counters_after (LIKE counters INCLUDING ALL);
CREATE TABLE counters_plain (LIKE counters INCLUDING ALL);
INSERT INTO counters (id) SELECT g FROM generate_series(1, 1000) g;
INSERT INTO counters_after (id) SELECT g FROM generate_series(1, 1000) g;
INSERT INTO counters_plain (id) SELECT g FROM generate_series(1, 1000) g;
-- one row per accepted execution, in the transaction of its write
CREATE TABLE accepted (tbl text, id int, worker text, token bigint,
                       n_read bigint, n_written bigint);
}
	  . join("\n", map { protect_sql($table_of{$_}, $_) } @forms));
is($node->safe_psql('postgres',
		q{SELECT string_agg(format('%s %s', relation, form), ', ' ORDER BY relation::text)
		    FROM fence_protected}),
	join(', ', map { "$table_of{$_} $_" } sort { $table_of{$a} cmp $table_of{$b} } @forms),
	'each protected table is registered in its form');

my $next_id = 0;
my %count = (lost => 0, takeovers => 0);
$count{"fenced $_"} = 0 for @forms;

# the name a check goes by: the form, for a protected table
sub label
{
	my ($tbl) = @_;
	return $form_of{$tbl} ? "$form_of{$tbl} form, $tbl" : $tbl;
}

# ", writer_epoch = :tok" when the write must carry its token in the SET
# list: always for the epoch style, and under fence_begin in the after form,
# which does not stamp an UPDATE (without it: 5F003)
sub epoch_set
{
	my ($tbl, $style) = @_;
	return ($style eq 'epoch' || ($form_of{$tbl} // '') eq 'after')
	  ? ', writer_epoch = :tok' : '';
}

# the worker's write, from psql variables :tok and :n_read
sub write_sql
{
	my ($tbl, $style, $worker, $id) = @_;
	my $sql = "BEGIN;\n";
	$sql .= "SELECT fence_begin('job-$id', :tok);\n" if $style eq 'begin';
	$sql .= "UPDATE $tbl SET n = :n_read + 1" . epoch_set($tbl, $style)
	  . " WHERE id = $id;\n";
	$sql .= "INSERT INTO accepted VALUES ('$tbl', $id, '$worker', :tok,"
	  . " :n_read, :n_read + 1);\n";
	$sql .= "COMMIT;";
	return $sql;
}

sub first_sqlstate
{
	my ($err) = @_;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : '';
}

sub backend_state
{
	my ($pid) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $pid), 'gone')");
}

# When the current claim of job ends, by the server's clock.
sub lease_end
{
	my ($job) = @_;
	return $node->safe_psql('postgres',
		"SELECT lease_expires_at FROM fence_claims WHERE job = '$job'");
}

# Worker w tries to take job over while the lease ending at end is still
# valid by the server's clock, with a margin; the server decides both in
# one statement, so a slow client cannot turn the attempt into one made
# after the lease.  Returns '' (refused), a token, or 'skipped' when the
# lease was already (nearly) over.
sub claim_while_valid
{
	my ($w, $job, $end) = @_;
	return $w->run_ok(
		"SELECT CASE WHEN clock_timestamp() < '$end'::timestamptz - interval '0.2 s' "
		  . "THEN coalesce(fence_claim('$job', '1 min', 'B')::text, '') "
		  . "ELSE 'skipped' END;");
}

# Wait until the lease ending at end is over by the server's clock.
sub wait_lease_over
{
	my ($end) = @_;
	my $deadline = time + 60;
	sleep 0.05
	  while time < $deadline
	  && $node->safe_psql('postgres',
		"SELECT clock_timestamp() > '$end'::timestamptz + interval '0.1 s'") ne 't';
}

# claim as a worker, retrying until the lease of the previous holder is over
sub take_over
{
	my ($w, $job, $lease_text) = @_;
	my $deadline = time + 60;
	while (time < $deadline)
	{
		my $tok = $w->run_ok(
			"SELECT fence_claim('$job', '$lease_text', '$w->{name}') AS tok \\gset\n\\echo :tok");
		return $tok if $tok =~ /^\d+$/;
		sleep 0.1;
	}
	die "no takeover of $job within 60 s";
}

# The seed's scenario.  $order: 'b_first' = the new worker commits before the
# frozen one wakes; 'a_first' = the frozen one wakes and writes after the
# takeover but before the new worker writes (the row still holds an older
# epoch, so only the arbiter check can catch it).
sub stale_worker
{
	my ($tbl, $style, $order) = @_;
	my $id = ++$next_id;
	my $job = "job-$id";
	my $what = label($tbl) . "/$style/$order";
	my $protected = defined $form_of{$tbl};

	my $A = FenceTest::Client->new($node, 'A');
	my $B = FenceTest::Client->new($node, 'B');
	my $a_backend = $A->run_ok('SELECT pg_backend_pid();');

	my $tokA = $A->run_ok(
		"SELECT fence_claim('$job', '$lease s', 'A') AS tok \\gset\n\\echo :tok");
	like($tokA, qr/^\d+$/, "$what: A claims $job");
	my $a_end = lease_end($job);
	$A->run_ok("SELECT n AS n_read FROM $tbl WHERE id = $id \\gset");

	ok($A->freeze, "$what: A is frozen (SIGSTOP) after reading the counter");
	# A's continuation: the write, queued while A cannot run
	my $a_mark = $A->send(write_sql($tbl, $style, 'A', $id));
	is(backend_state($a_backend), 'idle', "$what: A's backend lives on while A is frozen");

	my $early = claim_while_valid($B, $job, $a_end);
	is($early, '', "$what: no takeover while A's lease is valid")
	  unless $early eq 'skipped';

	my $tokB = take_over($B, $job, '1 min');
	cmp_ok($tokB, '>', $tokA, "$what: B takes over with a greater token");
	$count{takeovers}++;
	$B->run_ok("SELECT n AS n_read FROM $tbl WHERE id = $id \\gset");

	my ($b_out, $b_err);
	($b_out, $b_err) = $B->run(write_sql($tbl, 'epoch', 'B', $id)) if $order eq 'b_first';
	is(FenceTest::proc_state($A->pid), 'T', "$what: A was frozen throughout");

	$A->thaw;
	my ($a_out, $a_err) = $A->wait_for($a_mark);
	($b_out, $b_err) = $B->run(write_sql($tbl, 'epoch', 'B', $id)) if $order eq 'a_first';
	is($b_err, '', "$what: B's write is accepted");

	my $state = first_sqlstate($a_err);
	my ($n, $acc) = split /\|/, $node->safe_psql('postgres',
		"SELECT (SELECT n FROM $tbl WHERE id = $id),"
		. " (SELECT count(*) FROM accepted WHERE tbl = '$tbl' AND id = $id)");
	if ($protected)
	{
		if ($order eq 'a_first')
		{
			is($state, '5F001', "$what: A's late write is fenced as superseded")
			  or diag($a_err);
		}
		else
		{
			like($state, qr/^5F00[12]$/, "$what: A's late write is fenced")
			  or diag($a_err);
		}
		$count{"fenced $form_of{$tbl}"}++ if $state =~ /^5F00[12]$/;
		is($n, $acc, "$what: one increment per accepted execution");
		is($acc, 1, "$what: only B's execution was accepted");
	}
	else
	{
		is($state, '', "$what (twin): A's late write is accepted");
		is($acc, 2, "$what (twin): both executions were accepted");
		cmp_ok($n, '<', $acc, "$what (twin): an update was lost (n=$n, accepted=$acc)");
		$count{lost} += $acc - $n;
	}
	$A->quit;
	$B->quit;
}

# The worker frozen inside its open transaction after fence_begin (or, for
# the twin, a plain transaction on the unprotected table).
sub frozen_in_transaction
{
	my ($tbl) = @_;
	my $id = ++$next_id;
	my $job = "job-$id";
	my $protected = defined $form_of{$tbl};
	my $what = "frozen in transaction/" . label($tbl);

	my $A = FenceTest::Client->new($node, 'A');
	my $B = FenceTest::Client->new($node, 'B');
	my $a_backend = $A->run_ok('SELECT pg_backend_pid();');
	my $n0 = $node->safe_psql('postgres', "SELECT n FROM $tbl WHERE id = $id");
	$A->run_ok("SET idle_in_transaction_session_timeout = '${idle_timeout}s';");
	my $log_offset = -s $node->logfile;

	my $tokA = $A->run_ok(
		"SELECT fence_claim('$job', '$lease s', 'A') AS tok \\gset\n\\echo :tok");
	like($tokA, qr/^\d+$/, "$what: A claims $job");
	my $begin = $protected ? "SELECT fence_begin('$job', :tok);" : '';
	$A->run_ok(
		"BEGIN;\n$begin\nSELECT n AS n_read FROM $tbl WHERE id = $id \\gset\n"
		  . "UPDATE $tbl SET n = :n_read + 1" . epoch_set($tbl, 'begin')
		  . " WHERE id = $id;\n"
		  . "INSERT INTO accepted VALUES ('$tbl', $id, 'A', :tok, :n_read, :n_read + 1);");
	my $t_idle = time;
	ok($A->freeze, "$what: A is frozen inside its transaction");
	my $a_mark = $A->send('COMMIT;');

	# wait until the lease is certainly over
	wait_lease_over(lease_end($job));
	is(backend_state($a_backend), 'idle in transaction',
		"$what: A's transaction is still open after its lease ran out");

	if ($protected)
	{
		# every takeover attempt while A's transaction is open returns NULL
		my ($nulls, $tokB, $t_won) = (0, '', 0);
		my $deadline = time + 60;
		while (time < $deadline)
		{
			my $alive = backend_state($a_backend) ne 'gone';
			my $t0 = time;
			my $r = $B->run_ok("SELECT fence_claim('$job', '1 min', 'B');");
			cmp_ok(time - $t0, '<', 1, "$what: fence_claim does not wait")
			  if $nulls == 0;
			if ($r eq '')
			{
				$nulls++;
				sleep 0.2;
				next;
			}
			($tokB, $t_won) = ($r, time);
			# A may have been ended between the look at its state and the
			# claim: then the server has logged why, before it let go of A's
			# locks (the FATAL is reported before the transaction aborts).
			ok(!$alive
				  || $node->log_contains(
					qr/\[$a_backend\] [^\n]*FATAL:  terminating connection due to idle-in-transaction timeout/,
					$log_offset),
				"$what: takeover succeeds only after A's transaction is gone");
			last;
		}
		cmp_ok($nulls, '>', 0, "$what: takeover returned NULL while A's transaction was open ($nulls times)");
		like($tokB, qr/^\d+$/, "$what: takeover succeeds once the server ended A's transaction");
		cmp_ok($t_won - $t_idle, '>=', $idle_timeout - 0.5,
			"$what: ... and not before idle_in_transaction_session_timeout");
		$count{takeovers}++;
		ok($node->log_contains(
				qr/\[$a_backend\] [^\n]*FATAL:  terminating connection due to idle-in-transaction timeout/,
				$log_offset),
			"$what: the server ended A's session");
		is($node->safe_psql('postgres', "SELECT n FROM $tbl WHERE id = $id"), $n0,
			"$what: A's write was rolled back");
		is($node->safe_psql('postgres', "SELECT count(*) FROM accepted WHERE tbl = '$tbl' AND id = $id"),
			0, "$what: A's log row was rolled back");

		$B->run_ok("\\set tok $tokB\nSELECT n AS n_read FROM $tbl WHERE id = $id \\gset");
		my ($b_out, $b_err) = $B->run(write_sql($tbl, 'epoch', 'B', $id));
		is($b_err, '', "$what: B's write is accepted");

		$A->thaw;
		my $a_err = $A->wait_exit;
		like($a_err, qr/terminat|server closed the connection|connection to server was lost/,
			"$what: A finds its session gone when it wakes");
		my ($n, $acc) = split /\|/, $node->safe_psql('postgres',
			"SELECT (SELECT n FROM $tbl WHERE id = $id),"
			. " (SELECT count(*) FROM accepted WHERE tbl = '$tbl' AND id = $id)");
		is($acc, 1, "$what: only B's execution was accepted");
		is($n, $n0 + 1, "$what: one increment per accepted execution");
	}
	else
	{
		# without fence_begin nothing holds the job: the takeover succeeds at
		# once although A's transaction is open, and A commits after it
		my $tokB = $B->run_ok("SELECT fence_claim('$job', '1 min', 'B');");
		like($tokB, qr/^\d+$/, "$what (twin): takeover succeeds while A's transaction is open");
		is(backend_state($a_backend), 'idle in transaction',
			"$what (twin): ... A's transaction was indeed still open");
		$A->thaw;
		my ($a_out, $a_err) = $A->wait_for($a_mark);
		is($a_err, '', "$what (twin): A, superseded, still commits its write");
		is($node->safe_psql('postgres', "SELECT n FROM $tbl WHERE id = $id"), $n0 + 1,
			"$what (twin): the superseded execution's write is in the table");
	}
	$A->quit;
	$B->quit;
}

# The rule doc/fence.md gives: idle_in_transaction_session_timeout below the
# lease.  Then the frozen worker's transaction is over before its lease is,
# and the first takeover attempt after the lease succeeds.
sub timeout_below_lease
{
	my ($tbl) = @_;
	my $id = ++$next_id;
	my $job = "job-$id";
	my ($lease2, $idle2) = (2, 1);
	my $what = "timeout ${idle2}s below lease ${lease2}s/" . label($tbl);

	my $A = FenceTest::Client->new($node, 'A');
	my $B = FenceTest::Client->new($node, 'B');
	my $a_backend = $A->run_ok('SELECT pg_backend_pid();');
	my $n0 = $node->safe_psql('postgres', "SELECT n FROM $tbl WHERE id = $id");
	$A->run_ok("SET idle_in_transaction_session_timeout = '${idle2}s';");
	$A->run_ok("SELECT fence_claim('$job', '$lease2 s', 'A') AS tok \\gset");
	my $a_end = lease_end($job);
	$A->run_ok(
		"BEGIN;\nSELECT fence_begin('$job', :tok);\n"
		  . "SELECT n AS n_read FROM $tbl WHERE id = $id \\gset\n"
		  . "UPDATE $tbl SET n = :n_read + 1" . epoch_set($tbl, 'begin') . " WHERE id = $id;");
	ok($A->freeze, "$what: A is frozen inside its transaction");
	$A->send('COMMIT;');

	# the server ends A's idle transaction, and with it A's session
	my $gone_by = time + 60;
	sleep 0.05 while time < $gone_by && backend_state($a_backend) ne 'gone';
	is(backend_state($a_backend), 'gone', "$what: the server ended A's session");
	my $early = claim_while_valid($B, $job, $a_end);
	is($early, '', "$what: no takeover while A's lease is valid")
	  unless $early eq 'skipped';
	wait_lease_over($a_end);
	my $tokB = $B->run_ok("SELECT fence_claim('$job', '1 min', 'B');");
	like($tokB, qr/^\d+$/, "$what: the first takeover attempt after the lease succeeds");
	$count{takeovers}++ if $tokB =~ /^\d+$/;
	is($node->safe_psql('postgres', "SELECT n FROM $tbl WHERE id = $id"), $n0,
		"$what: A's write was rolled back");
	$A->thaw;
	$A->wait_exit;
	$B->quit;
}

for my $round (1 .. $rounds)
{
	for my $order ('b_first', 'a_first')
	{
		for my $form (@forms)
		{
			stale_worker($table_of{$form}, 'epoch', $order);
			stale_worker($table_of{$form}, 'begin', $order);
		}
		stale_worker('counters_plain', 'epoch', $order);
	}
	frozen_in_transaction($table_of{$_}) for @forms;
	frozen_in_transaction('counters_plain');
	timeout_below_lease($table_of{$_}) for @forms;
}

diag("stale-worker rounds: $rounds; forms: @forms; takeovers: $count{takeovers};"
	  . " fenced late writes: "
	  . join(', ', map { "$_ form " . $count{"fenced $_"} } @forms)
	  . "; lost updates in twins: $count{lost}");
$node->stop;
done_testing();
