
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

=item fence_catalog_sql()

A query that describes, one line per fact, every object of the extension
fence in the current database: the extension (version, schema, owner, and
each table or sequence pg_dump dumps with its condition); every member
(pg_depend 'e'); each member function's signature with argument names and
defaults, its result, language, kind, volatility, strictness, SECURITY
DEFINER, leakproofness, parallel safety, cost, rows, SET clauses, owner and
ACL, and its C symbol and library, or its body line by line; each member
relation's kind, persistence, owner, ACL, options and row security, and
with it its columns (position, type, NOT NULL, default, identity, generated,
collation, ACL), constraints, indexes, triggers, rules, policies, sequences
(its own, and those of its identity and serial columns) and view
definitions; every event trigger in the database (event, tags, enabled
state, function, owner); the comments and pg_init_privs rows of all of
these.  Each line starts with the object it is about, so a difference names
its object.  The lines are in a fixed order, and a function's or view's
body in its own.

=item catalog_diff(label_a, text_a, label_b, text_b)

The differences between two outputs of that query, as C<diff -u> prints
them ('' when they are equal).

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

our @EXPORT = qw(fence_node soak fence_forms protect_sql build_fence_load proc_state
  fence_catalog_sql catalog_diff worker_init_privs_re without_worker_init_privs);

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

# The facts are collected as (object, seq, line) rows and sorted by object,
# then by seq (a relation's columns in their order, then its constraints,
# indexes, ...; a body's or view's lines in theirs), then by line.
sub fence_catalog_sql
{
	return q{
WITH ext AS (
	SELECT e.* FROM pg_catalog.pg_extension e WHERE e.extname = 'fence'),
mem AS (
	SELECT d.classid, d.objid
	  FROM pg_catalog.pg_depend d, ext
	 WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
	   AND d.refobjid = ext.oid AND d.deptype = 'e'),
-- the member relations, and what belongs to them: indexes, the sequences
-- of identity and serial columns (toast tables are named by OID: left out)
rels AS (
	SELECT c.*
	  FROM pg_catalog.pg_class c
	 WHERE c.relkind <> 't'
	   AND (c.oid IN (SELECT objid FROM mem WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass)
			OR c.oid IN (SELECT d.objid FROM pg_catalog.pg_depend d
						  WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
							AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
							AND d.deptype IN ('a', 'i')
							AND d.refobjid IN (SELECT objid FROM mem
												WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass)))),
procs AS (
	SELECT p.*
	  FROM pg_catalog.pg_proc p
	 WHERE p.oid IN (SELECT objid FROM mem WHERE classid = 'pg_catalog.pg_proc'::pg_catalog.regclass)),
cons AS (
	SELECT k.* FROM pg_catalog.pg_constraint k WHERE k.conrelid IN (SELECT oid FROM rels)),
trigs AS (
	SELECT t.* FROM pg_catalog.pg_trigger t
	 WHERE t.tgrelid IN (SELECT oid FROM rels) AND NOT t.tgisinternal),
pols AS (
	SELECT y.* FROM pg_catalog.pg_policy y WHERE y.polrelid IN (SELECT oid FROM rels)),
rules AS (
	SELECT w.* FROM pg_catalog.pg_rewrite w
	 WHERE w.ev_class IN (SELECT oid FROM rels) AND w.rulename <> '_RETURN'),
-- every object described, for its comments and initial privileges
objs AS (
	SELECT classid, objid FROM mem
	UNION SELECT 'pg_catalog.pg_extension'::pg_catalog.regclass::pg_catalog.oid, oid FROM ext
	UNION SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, oid FROM rels
	UNION SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, oid FROM cons
	UNION SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, oid FROM trigs
	UNION SELECT 'pg_catalog.pg_policy'::pg_catalog.regclass, oid FROM pols
	UNION SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, oid FROM rules
	UNION SELECT 'pg_catalog.pg_event_trigger'::pg_catalog.regclass, oid FROM pg_catalog.pg_event_trigger),
facts (object, seq, line) AS (
	SELECT 'extension fence', 0,
		   pg_catalog.format('version %s; schema %s; relocatable %s; owner %s',
							 ext.extversion, ext.extnamespace::pg_catalog.regnamespace,
							 ext.extrelocatable, ext.extowner::pg_catalog.regrole)
	  FROM ext
	UNION ALL
	SELECT 'extension fence', 1,
		   pg_catalog.format('pg_dump dumps %s with condition %L', x.rel::pg_catalog.regclass, x.cond)
	  FROM ext, ROWS FROM (pg_catalog.unnest(ext.extconfig), pg_catalog.unnest(ext.extcondition)) x(rel, cond)
	UNION ALL
	SELECT 'extension fence', 2,
		   pg_catalog.format('member %s', pg_catalog.pg_describe_object(m.classid, m.objid, 0))
	  FROM mem m
	UNION ALL
	-- functions and procedures
	SELECT pg_catalog.format('function %s', p.oid::pg_catalog.regprocedure), 0,
		   pg_catalog.format('arguments (%s); result %s; language %s; kind %s; volatility %s; '
							 'strict %s; security definer %s; leakproof %s; parallel %s; '
							 'cost %s; rows %s; SET %s; support %s; owner %s; ACL %s',
							 pg_catalog.pg_get_function_arguments(p.oid),
							 pg_catalog.pg_get_function_result(p.oid), l.lanname, p.prokind,
							 p.provolatile, p.proisstrict, p.prosecdef, p.proleakproof,
							 p.proparallel, p.procost, p.prorows,
							 (SELECT pg_catalog.string_agg(c, ', ' ORDER BY c)
								FROM pg_catalog.unnest(p.proconfig) c),
							 p.prosupport, p.proowner::pg_catalog.regrole,
							 (SELECT pg_catalog.string_agg(a::pg_catalog.text, ', ' ORDER BY a::pg_catalog.text)
								FROM pg_catalog.unnest(p.proacl) a))
	  FROM procs p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
	UNION ALL
	SELECT pg_catalog.format('function %s', p.oid::pg_catalog.regprocedure), 1,
		   pg_catalog.format('C symbol %s in %s', p.prosrc, p.probin)
	  FROM procs p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
	 WHERE l.lanname = 'c'
	UNION ALL
	SELECT pg_catalog.format('function %s', p.oid::pg_catalog.regprocedure), 1 + b.n,
		   pg_catalog.format('body %s| %s', b.n, b.line)
	  FROM procs p JOIN pg_catalog.pg_language l ON l.oid = p.prolang,
		   pg_catalog.regexp_split_to_table(
			   COALESCE(pg_catalog.pg_get_function_sqlbody(p.oid), p.prosrc), E'\n')
			   WITH ORDINALITY b(line, n)
	 WHERE l.lanname NOT IN ('c', 'internal')
	UNION ALL
	-- relations
	SELECT pg_catalog.format('relation %s', c.oid::pg_catalog.regclass), 0,
		   pg_catalog.format('kind %s; persistence %s; owner %s; ACL %s; options %s; '
							 'row security %s, forced %s; replica identity %s; access method %s',
							 c.relkind, c.relpersistence, c.relowner::pg_catalog.regrole,
							 (SELECT pg_catalog.string_agg(a::pg_catalog.text, ', ' ORDER BY a::pg_catalog.text)
								FROM pg_catalog.unnest(c.relacl) a),
							 c.reloptions, c.relrowsecurity, c.relforcerowsecurity,
							 c.relreplident, am.amname)
	  FROM rels c LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
	UNION ALL
	SELECT pg_catalog.format('relation %s', c.oid::pg_catalog.regclass),
		   1000 + pg_catalog.row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum),
		   pg_catalog.format('column %s: position %s; type %s; not null %s; default %s; '
							 'identity %s; generated %s; collation %s; ACL %s',
							 pg_catalog.quote_ident(a.attname),
							 pg_catalog.row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum),
							 pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
							 pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), a.attidentity,
							 a.attgenerated, a.attcollation::pg_catalog.regcollation,
							 (SELECT pg_catalog.string_agg(x::pg_catalog.text, ', ' ORDER BY x::pg_catalog.text)
								FROM pg_catalog.unnest(a.attacl) x))
	  FROM rels c
	  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	  LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
	 WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
	UNION ALL
	SELECT pg_catalog.format('relation %s', k.conrelid::pg_catalog.regclass), 3000,
		   pg_catalog.format('constraint %s: %s; type %s; validated %s; local %s, inherited %s, no inherit %s; index %s',
							 pg_catalog.quote_ident(k.conname), pg_catalog.pg_get_constraintdef(k.oid),
							 k.contype, k.convalidated, k.conislocal, k.coninhcount, k.connoinherit,
							 NULLIF(k.conindid, 0)::pg_catalog.regclass)
	  FROM cons k
	UNION ALL
	SELECT pg_catalog.format('relation %s', i.indrelid::pg_catalog.regclass), 4000,
		   pg_catalog.format('index %s', pg_catalog.pg_get_indexdef(i.indexrelid))
	  FROM pg_catalog.pg_index i WHERE i.indrelid IN (SELECT oid FROM rels)
	UNION ALL
	SELECT pg_catalog.format('relation %s', t.tgrelid::pg_catalog.regclass), 5000,
		   pg_catalog.format('trigger %s; enabled %s', pg_catalog.pg_get_triggerdef(t.oid), t.tgenabled)
	  FROM trigs t
	UNION ALL
	SELECT pg_catalog.format('relation %s', w.ev_class::pg_catalog.regclass), 6000,
		   pg_catalog.format('rule %s; enabled %s', pg_catalog.pg_get_ruledef(w.oid), w.ev_enabled)
	  FROM rules w
	UNION ALL
	SELECT pg_catalog.format('relation %s', y.polrelid::pg_catalog.regclass), 7000,
		   pg_catalog.format('policy %s: command %s; permissive %s; roles %s; using %s; with check %s',
							 pg_catalog.quote_ident(y.polname), y.polcmd, y.polpermissive,
							 (SELECT pg_catalog.string_agg(CASE WHEN r = 0 THEN 'public'
																 ELSE r::pg_catalog.regrole::pg_catalog.text END,
														   ', ' ORDER BY r)
								FROM pg_catalog.unnest(y.polroles) r),
							 pg_catalog.pg_get_expr(y.polqual, y.polrelid),
							 pg_catalog.pg_get_expr(y.polwithcheck, y.polrelid))
	  FROM pols y
	UNION ALL
	SELECT pg_catalog.format('relation %s', s.seqrelid::pg_catalog.regclass), 8000,
		   pg_catalog.format('sequence: type %s; start %s; increment %s; min %s; max %s; cache %s; cycle %s; owned by %s',
							 s.seqtypid::pg_catalog.regtype, s.seqstart, s.seqincrement, s.seqmin,
							 s.seqmax, s.seqcache, s.seqcycle,
							 (SELECT pg_catalog.string_agg(pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), ', ')
								FROM pg_catalog.pg_depend d
							   WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
								 AND d.objid = s.seqrelid AND d.deptype IN ('a', 'i')))
	  FROM pg_catalog.pg_sequence s WHERE s.seqrelid IN (SELECT oid FROM rels)
	UNION ALL
	SELECT pg_catalog.format('relation %s', c.oid::pg_catalog.regclass), 9000 + v.n,
		   pg_catalog.format('view %s| %s', v.n, v.line)
	  FROM rels c,
		   pg_catalog.regexp_split_to_table(pg_catalog.pg_get_viewdef(c.oid), E'\n')
			   WITH ORDINALITY v(line, n)
	 WHERE c.relkind IN ('v', 'm')
	UNION ALL
	-- every event trigger in the database, fence's or not
	SELECT pg_catalog.format('event trigger %s', pg_catalog.quote_ident(e.evtname)), 0,
		   pg_catalog.format('on %s; tags %s; enabled %s; function %s; owner %s',
							 e.evtevent, e.evttags, e.evtenabled, e.evtfoid::pg_catalog.regprocedure,
							 e.evtowner::pg_catalog.regrole)
	  FROM pg_catalog.pg_event_trigger e
	UNION ALL
	-- other member objects (a type, an operator, ...): their membership
	-- line above names them; their owner here
	SELECT pg_catalog.format('type %s', t.oid::pg_catalog.regtype), 0,
		   pg_catalog.format('kind %s; owner %s; ACL %s', t.typtype, t.typowner::pg_catalog.regrole,
							 (SELECT pg_catalog.string_agg(a::pg_catalog.text, ', ' ORDER BY a::pg_catalog.text)
								FROM pg_catalog.unnest(t.typacl) a))
	  FROM pg_catalog.pg_type t
	 WHERE t.oid IN (SELECT objid FROM mem WHERE classid = 'pg_catalog.pg_type'::pg_catalog.regclass)
	UNION ALL
	SELECT 'comment', 0,
		   pg_catalog.format('on %s: %s', pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid),
							 d.description)
	  FROM pg_catalog.pg_description d
	 WHERE (d.classoid, d.objoid) IN (SELECT classid, objid FROM objs)
	UNION ALL
	SELECT 'initial privileges', 0,
		   pg_catalog.format('of %s (%s): %s', pg_catalog.pg_describe_object(i.classoid, i.objoid, i.objsubid),
							 i.privtype,
							 (SELECT pg_catalog.string_agg(a::pg_catalog.text, ', ' ORDER BY a::pg_catalog.text)
								FROM pg_catalog.unnest(i.initprivs) a))
	  FROM pg_catalog.pg_init_privs i
	 WHERE (i.classoid, i.objoid) IN (SELECT classid, objid FROM objs))
SELECT pg_catalog.format('%s: %s', f.object, f.line)
  FROM facts f
 ORDER BY f.object COLLATE "C", f.seq, f.line COLLATE "C";
};
}

sub catalog_diff
{
	my ($label_a, $a, $label_b, $b) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir;
	my @files;
	for my $text ($a, $b)
	{
		my $f = "$dir/catalog" . scalar(@files);
		PostgreSQL::Test::Utils::append_to_file($f, "$text\n");
		push @files, $f;
	}
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'diff', '-u', '--label', $label_a, '--label', $label_b, @files ],
		'>', \$out, '2>', \$err);
	my $rc = $? >> 8;
	die "diff failed (exit $rc): $err" if $rc > 1;
	return $out;
}

# The one difference between a database created at 1.1 and one updated
# from 1.0 that is there by design: fence--1.1.sql grants the worker API
# (fence_worker_functions()) to no role, which pg_init_privs records, while
# the update keeps PostgreSQL's default, EXECUTE for PUBLIC, and records
# nothing.  A regex for those lines of a description, the names read from
# the database; and a description without them.
sub worker_init_privs_re
{
	my ($node, $db) = @_;
	my $names = $node->safe_psql($db, q{
SELECT string_agg(DISTINCT p.proname, '|')
  FROM fence_worker_functions() f JOIN pg_proc p ON p.oid = f});
	return qr/^initial privileges: of function ($names)\(/;
}

sub without_worker_init_privs
{
	my ($re, $catalog) = @_;
	return join("\n", grep { $_ !~ $re } split /\n/, $catalog);
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
