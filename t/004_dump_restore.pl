# Copyright (c) 2026, the fence authors

# A whole-database pg_dump of a database with protected tables restores
# without a single error, in every way an operator restores one, and the
# restored database is fenced exactly as the source was.
#
# The source has an ordinary protected table (strict), a protected
# partitioned table (repeat) with a partition that is itself partitioned,
# and a protected table whose schema, name and epoch column need quoting
# (shared); in the after form of the guard (zz_fence_guard for INSERT OR
# DELETE, zz_fence_guard_update AFTER UPDATE with fence's WHEN clause), an
# ordinary table (strict) with an unprotected twin and a partitioned table
# (shared) with a partition that is itself partitioned; rows written through
# the guard with tokens, live claims, a released claim, a superseded token
# and a token issued by a claim that rolled back (so the counter is above
# every token stored in fence_claims).
#
# Restores, each into a fresh database, each must exit 0 with nothing on
# stderr:
#   plain format through psql -v ON_ERROR_STOP=1;
#   custom format through pg_restore --exit-on-error;
#   custom format through pg_restore --single-transaction;
#   directory format (dumped with -j 2) through pg_restore -j 2, in the two
#   passes doc/fence.md gives for protected partitioned tables: pre-data
#   and data, then post-data.  (In one pass, pg_restore may create a
#   partitioned table's triggers before its partitions' data, and their
#   clones then fire on the COPY: PostgreSQL's own behaviour, with any row
#   trigger.)  The post-data pass runs fence's trigger replacements beside
#   the restore's ALTER INDEX ... ATTACH PARTITION (specs/restore-replace
#   holds that interleaving still).
# In 1.0 each of them failed: the dump's ALTER TABLE ... ENABLE ALWAYS
# TRIGGER zz_fence_guard fired fence's event trigger, which created
# zz_fence_truncate before the dump's own CREATE TRIGGER zz_fence_truncate
# (42710, trigger already exists).  A restore stopped there left the tables
# after it without their guard; under -j 2 the event trigger could also
# deadlock a partition's COPY, losing its rows.
#
# After each restore: pg_dump --schema-only of it equals the source's; the
# set of (relation, trigger, tgenabled, definition) equals the source's, and
# every member of the partition trees has zz_fence_guard and
# zz_fence_truncate ENABLE ALWAYS; the protected tables' rows (and the
# partition holding each), fence_claims and the counter equal the source's;
# fence_effects' keys equal the source's, and fence_once of one answers
# false; the next token is above every token issued before the dump (the largest
# in fence_claims and the counter's last value); superseded and released
# tokens are fenced (5F001), a write without a token is refused even in
# replica mode (5F003), current tokens (an old live claim and a new one)
# write and stamp their rows; TRUNCATE of the tables, the partitioned parent
# and partitions is refused (5F005), also in replica mode; partitions
# created (at both levels, and in another schema) or attached after the
# restore get both triggers ENABLE ALWAYS and refuse TRUNCATE.
# The after form, after each restore: fence_protected, rebuilt from the
# dump's triggers, registers every member of its tables in form 'after' with
# its mode; each has zz_fence_guard, zz_fence_guard_update and
# zz_fence_truncate ENABLE ALWAYS; fence_audit() reports no error; a
# superseded or released token's UPDATE is fenced (5F001) on both tables,
# while on the twin the same stale UPDATE lands and sends the epoch
# backwards; current tokens update (through the statement, and under
# fence_begin into both levels of partitions and across partitions); an
# UPDATE under fence_begin that leaves the epoch alone is refused (5F003:
# the after form does not stamp, which the default form would); a
# partition created after the restore gets the after form's three triggers.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = fence_node('dump_restore', 4);
my $dumpdir = PostgreSQL::Test::Utils::tempdir;

sub q1
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql);
}

# 'ok' if $sql succeeds, else its SQLSTATE (or the whole error)
sub sqlstate
{
	my ($db, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db, $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return 'ok' if $rc == 0 && $err !~ /ERROR/;
	return $1 if $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return "rc=$rc: $err";
}

# run a client program against the node; it must exit 0 and print nothing
# on stderr (pg_restore reports ignored errors there, psql every ERROR)
sub tool_ok
{
	my ($what, $prog, @args) = @_;
	my @cmd = ($node->installed_command($prog), '-h', $node->host, '-p',
		$node->port, @args);
	my ($out, $err) = ('', '');
	note("running: @cmd");
	IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	my $rc = $? >> 8;
	is($rc, 0, "$what: exit status 0") or diag("stderr of $prog:\n$err");
	is($err, '', "$what: nothing on stderr");
	return $rc == 0;
}

# the schema as pg_dump --schema-only prints it
sub schema_of
{
	my ($db) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $node->installed_command('pg_dump'), '-h', $node->host,
			'-p', $node->port, '--schema-only', '-d', $db ],
		'<', \undef, '>', \$out, '2>', \$err);
	die "pg_dump --schema-only $db failed: $err" if $? != 0;
	# \restrict and \unrestrict carry a random key, new in each dump
	$out =~ s/^\\(un)?restrict .*\n//mg;
	return $out;
}

# the two texts are equal; if not, show the lines only one of them has
sub same_lines
{
	my ($got, $expected, $name) = @_;
	return pass($name) if $got eq $expected;
	my (%g, %e);
	$g{$_}++ for split /\n/, $got;
	$e{$_}++ for split /\n/, $expected;
	my @missing = grep { ($e{$_} // 0) > ($g{$_} // 0) } sort keys %e;
	my @extra = grep { ($g{$_} // 0) > ($e{$_} // 0) } sort keys %g;
	fail($name);
	diag('the same lines, in a different order') unless @missing || @extra;
	diag(join("\n", 'missing:', @missing)) if @missing;
	diag(join("\n", 'unexpected:', @extra)) if @extra;
	return 0;
}

# ---------------------------------------------------------------------------
# the source database

$node->safe_psql('postgres', 'CREATE DATABASE src');
q1('src', q{
CREATE EXTENSION fence;
CREATE TABLE inventory (sku text PRIMARY KEY, quantity int NOT NULL,
                        writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE events (region text NOT NULL, id int NOT NULL, payload text,
                     writer_epoch bigint NOT NULL DEFAULT 0,
                     PRIMARY KEY (region, id)) PARTITION BY LIST (region);
CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu');
CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us')
  PARTITION BY RANGE (id);
CREATE TABLE events_us_low PARTITION OF events_us FOR VALUES FROM (MINVALUE) TO (1000);
CREATE TABLE events_us_high PARTITION OF events_us FOR VALUES FROM (1000) TO (2000);
SELECT fence_protect('inventory');
SELECT fence_protect('events', mode => 'repeat');
-- names that must be quoted, outside the search_path
CREATE SCHEMA "Ops";
CREATE TABLE "Ops"."Stock Levels" (site text PRIMARY KEY, level int NOT NULL,
                                   "Epoch" bigint NOT NULL DEFAULT 0);
SELECT fence_protect('"Ops"."Stock Levels"', 'Epoch', 'shared');
-- the after form: UPDATEs checked in an AFTER UPDATE trigger's WHEN clause
CREATE TABLE tally (name text PRIMARY KEY, n int NOT NULL,
                    writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE tally_plain (LIKE tally INCLUDING ALL);    -- the twin, unprotected
CREATE TABLE shipments (region text NOT NULL, id int NOT NULL, state text,
                        writer_epoch bigint NOT NULL DEFAULT 0,
                        PRIMARY KEY (region, id)) PARTITION BY LIST (region);
CREATE TABLE shipments_eu PARTITION OF shipments FOR VALUES IN ('eu');
CREATE TABLE shipments_us PARTITION OF shipments FOR VALUES IN ('us')
  PARTITION BY RANGE (id);
CREATE TABLE shipments_us_low PARTITION OF shipments_us FOR VALUES FROM (MINVALUE) TO (1000);
CREATE TABLE shipments_us_high PARTITION OF shipments_us FOR VALUES FROM (1000) TO (MAXVALUE);
SELECT fence_protect('tally', form => 'after');
SELECT fence_protect('shipments', mode => 'shared', form => 'after');
});

my @protected = ('"Ops"."Stock Levels"',
	qw(events events_eu events_us events_us_high events_us_low inventory));
my @protected_after =
  qw(shipments shipments_eu shipments_us shipments_us_high shipments_us_low tally);
# what fence_protected must hold for the after form's tables
my $after_registry = join("\n",
	(map { "$_ writer_epoch shared after" } grep { /^shipments/ } @protected_after),
	'tally writer_epoch strict after');
my $after_registry_sql = q{
SELECT string_agg(format('%s %s %s %s', relation, epoch_column, mode, form), E'\n'
                  ORDER BY relation::text)
  FROM fence_protected WHERE relation::text LIKE ANY (ARRAY['tally%', 'shipments%'])};
my $after_triggers_sql = q{
SELECT string_agg(format('%s %s %s', tgrelid::regclass, tgname, tgenabled), E'\n'
                  ORDER BY tgrelid::regclass::text, tgname)
  FROM pg_trigger
 WHERE tgrelid::regclass::text LIKE ANY (ARRAY['tally%', 'shipments%']) AND NOT tgisinternal};
my $after_triggers = join("\n",
	map { ("$_ zz_fence_guard A", "$_ zz_fence_guard_update A", "$_ zz_fence_truncate A") }
	  @protected_after);
my $audit_errors_sql = q{
SELECT coalesce(string_agg(format('%s %s: %s', severity, relation, problem), E'\n'), 'none')
  FROM fence_audit() WHERE severity = 'error'};

# inventory and stock levels: loaded inside a fence_begin transaction; the
# claim stays live
my $t_inv = q1('src', q{SELECT fence_claim('load:inventory', '1 hour', 'loader')});
q1('src', qq{
BEGIN;
SELECT fence_begin('load:inventory', $t_inv);
INSERT INTO inventory (sku, quantity) VALUES ('sku-1', 10), ('sku-2', 20), ('sku-3', 30);
INSERT INTO "Ops"."Stock Levels" (site, level) VALUES ('north', 1), ('south', 2);
INSERT INTO tally (name, n) VALUES ('a', 1), ('b', 2);
COMMIT;
INSERT INTO tally_plain SELECT * FROM tally;
});

# events: the epoch rides on the write, into every leaf partition; the claim
# is then released
my $t_ev = q1('src', q{SELECT fence_claim('load:events', '1 hour', 'loader')});
q1('src', qq{
INSERT INTO events (region, id, payload, writer_epoch) VALUES
  ('eu', 1, 'a', $t_ev), ('eu', 2, 'b', $t_ev),
  ('us', 5, 'c', $t_ev), ('us', 1500, 'd', $t_ev);
INSERT INTO shipments (region, id, state, writer_epoch) VALUES
  ('eu', 1, 'packed', $t_ev), ('eu', 2, 'packed', $t_ev),
  ('us', 5, 'packed', $t_ev), ('us', 1500, 'packed', $t_ev);
});
is(q1('src', "SELECT fence_release('load:events', $t_ev)"), 't',
	'source: the events loader releases its claim');

# enrich: a repeat-mode handler writing the same rows twice; stays live
my $t_en = q1('src', q{SELECT fence_claim('enrich', '1 hour', 'enricher')});
q1('src', qq{
BEGIN;
SELECT fence_begin('enrich', $t_en);
UPDATE events SET payload = payload || '+' WHERE region = 'us';
UPDATE events SET payload = payload || '+' WHERE id = 1500;
-- the after form does not stamp: the token goes into the SET list
UPDATE shipments SET state = state || '+', writer_epoch = $t_en WHERE region = 'us';
COMMIT;
});

# job-s: claimed, released and claimed again: its first token is superseded
my $s1 = q1('src', q{SELECT fence_claim('job-s', '1 hour', 'w1')});
q1('src', "SELECT fence_release('job-s', $s1)");
my $s2 = q1('src', q{SELECT fence_claim('job-s', '1 hour', 'w2')});
q1('src', qq{UPDATE inventory SET quantity = 11, writer_epoch = $s2 WHERE sku = 'sku-1'});
q1('src', qq{UPDATE tally SET n = 11, writer_epoch = $s2 WHERE name = 'a'});
q1('src', qq{UPDATE tally_plain SET n = 11, writer_epoch = $s2 WHERE name = 'a'});

# restock: the newest live claim, used by the restored databases
my $t_re = q1('src', q{SELECT fence_claim('restock', '1 hour', 'w3')});

# an effect key recorded by restock's execution: the restores keep it
q1('src', qq{BEGIN; SELECT fence_begin('restock', $t_re); SELECT fence_once('restock:effect'); COMMIT;});

# a token issued by a claim that rolled back: above every stored token
q1('src', q{BEGIN; SELECT fence_claim('rolled-back', '1 hour'); ROLLBACK;});

is(sqlstate('src', "UPDATE inventory SET quantity = 0, writer_epoch = $s1 WHERE sku = 'sku-2'"),
	'5F001', 'source: a superseded token is fenced');
is(sqlstate('src', "UPDATE tally SET n = 0, writer_epoch = $s1 WHERE name = 'a'"),
	'5F001', 'source: a superseded token is fenced on the after form\'s table');
is(q1('src', $after_registry_sql), $after_registry,
	'source: fence_protected registers the after form\'s tables in form after');
is(q1('src', $after_triggers_sql), $after_triggers,
	'source: the after form\'s tables have its three triggers, ENABLE ALWAYS');
is(q1('src', $audit_errors_sql), 'none', 'source: fence_audit reports no error');

# what every restore must reproduce
# (sorted in Perl: the expected list below is too)
my $triggers_sql = q{
SELECT format('%s %s %s', t.tgrelid::regclass, t.tgname, t.tgenabled)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace IN ('public'::regnamespace, '"Ops"'::regnamespace)
   AND NOT t.tgisinternal};
my $triggerdefs_sql = q{
SELECT pg_get_triggerdef(t.oid)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace IN ('public'::regnamespace, '"Ops"'::regnamespace)
   AND NOT t.tgisinternal};

sub sorted_lines
{
	my ($db, $sql) = @_;
	return join("\n", sort split(/\n/, q1($db, $sql)));
}
my %content_sql = (
	inventory => q{SELECT string_agg(t::text, E'\n' ORDER BY t.sku) FROM inventory t},
	stock_levels => q{SELECT string_agg(t::text, E'\n' ORDER BY t.site) FROM "Ops"."Stock Levels" t},
	events => q{SELECT string_agg(format('%s %s', t.tableoid::regclass, t), E'\n'
	                             ORDER BY t.region, t.id) FROM events t},
	tally => q{SELECT string_agg(t::text, E'\n' ORDER BY t.name) FROM tally t},
	tally_plain => q{SELECT string_agg(t::text, E'\n' ORDER BY t.name) FROM tally_plain t},
	shipments => q{SELECT string_agg(format('%s %s', t.tableoid::regclass, t), E'\n'
	                                ORDER BY t.region, t.id) FROM shipments t},
	fence_claims => q{SELECT string_agg(t::text, E'\n' ORDER BY t.job) FROM fence_claims t},
	fence_token_seq => q{SELECT format('%s %s', last_value, is_called) FROM fence_token_seq},
	fence_effects => q{SELECT string_agg(format('%s %s %s %s', key, job, token, recorded_at), E'\n'
	                             ORDER BY key) FROM fence_effects},
	# the registry of protected relations is not dumped: the guards the
	# restore creates rebuild it, every partition included
	fence_protected => q{SELECT string_agg(format('%s %s %s %s', relation, epoch_column, mode, form), E'\n'
	                                ORDER BY relation::text) FROM fence_protected},
);

my %src;
$src{triggers} = sorted_lines('src', $triggers_sql);
$src{triggerdefs} = sorted_lines('src', $triggerdefs_sql);
$src{$_} = q1('src', $content_sql{$_}) for keys %content_sql;
$src{schema} = schema_of('src');
my $src_max_token = q1('src', 'SELECT max(token) FROM fence_claims');
my $src_last = q1('src', 'SELECT last_value FROM fence_token_seq');

is($src{triggers},
	join("\n", sort((map { ("$_ zz_fence_guard A", "$_ zz_fence_truncate A") } @protected),
			(map { ("$_ zz_fence_guard A", "$_ zz_fence_guard_update A", "$_ zz_fence_truncate A") }
				@protected_after))),
	'source: every member of the trees has its form\'s triggers, ENABLE ALWAYS');
cmp_ok($src_last, '>', $src_max_token,
	'source: the counter is above every token stored in fence_claims');
is(q1('src', 'SELECT count(*) FROM fence_claims WHERE released'), 1,
	'source: one released claim');
is(q1('src', 'SELECT count(*) FROM fence_claims WHERE NOT released'), 4,
	'source: four live claims');

# ---------------------------------------------------------------------------
# dumps

my $plain = "$dumpdir/src.sql";
my $custom = "$dumpdir/src.dump";
my $directory = "$dumpdir/src.dir";
tool_ok('pg_dump -Fp', 'pg_dump', '-Fp', '-f', $plain, '-d', 'src');
tool_ok('pg_dump -Fc', 'pg_dump', '-Fc', '-f', $custom, '-d', 'src');
tool_ok('pg_dump -Fd -j 2', 'pg_dump', '-Fd', '-j', '2', '-f', $directory, '-d', 'src');

# the round trip the dump must survive: the dump sets the guard ENABLE
# ALWAYS (an ALTER TABLE, which fires fence's event trigger) and then
# creates zz_fence_truncate itself
my $plain_text = slurp_file($plain);
like($plain_text, qr/^ALTER TABLE public\.inventory ENABLE ALWAYS TRIGGER zz_fence_guard;$/m,
	'the plain dump sets the guard ENABLE ALWAYS with ALTER TABLE');
like($plain_text, qr/^CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON public\.inventory /m,
	'the plain dump creates zz_fence_truncate itself');

# ---------------------------------------------------------------------------
# restores

sub check_restored
{
	my ($db, $what) = @_;

	same_lines(schema_of($db), $src{schema},
		"$what: pg_dump --schema-only of the restored database equals the source's");
	is(sorted_lines($db, $triggers_sql), $src{triggers},
		"$what: triggers and their tgenabled equal the source's");
	is(sorted_lines($db, $triggerdefs_sql), $src{triggerdefs},
		"$what: trigger definitions equal the source's");
	for my $name (sort keys %content_sql)
	{
		is(q1($db, $content_sql{$name}), $src{$name}, "$what: $name equals the source");
	}

	is(q1($db, qq{BEGIN; SELECT fence_begin('restock', $t_re); SELECT fence_once('restock:effect'); COMMIT;}),
		"\nf", "$what: the effect key recorded before the dump answers false (a repeat)");

	my $next = q1($db, q{SELECT fence_claim('after-restore', '1 hour', 'w9')});
	like($next, qr/^\d+$/, "$what: a new job can be claimed");
	cmp_ok($next, '>', $src_max_token,
		"$what: the new token is above every token in the source's fence_claims");
	cmp_ok($next, '>', $src_last,
		"$what: the new token is above the source's counter (a rolled-back claim's token)");

	# stale and released tokens, through the statement and through fence_begin
	is(sqlstate($db, "UPDATE inventory SET quantity = 0, writer_epoch = $s1 WHERE sku = 'sku-2'"),
		'5F001', "$what: a superseded token is fenced");
	is(sqlstate($db, qq{UPDATE "Ops"."Stock Levels" SET level = 0, "Epoch" = $s1}),
		'5F001', "$what: a superseded token is fenced on the table with quoted names");
	is(sqlstate($db, "INSERT INTO events VALUES ('eu', 3, 'late', $t_ev)"),
		'5F001', "$what: the released claim's token is fenced on a partition");
	is(sqlstate($db, "BEGIN; SELECT fence_begin('job-s', $s1);"
		  . " DELETE FROM events_us_low WHERE id = 5; COMMIT;"),
		'5F001', "$what: fence_begin with a superseded token is fenced");
	is(sqlstate($db, "SET session_replication_role = replica;"
		  . " UPDATE events SET payload = 'x' WHERE region = 'eu'"),
		'5F003', "$what: a write without a token is refused, also in replica mode");

	# current tokens: a live claim from before the dump, and the new one
	is(sqlstate($db, "UPDATE inventory SET quantity = quantity - 1, writer_epoch = $t_re"
		  . " WHERE sku = 'sku-1'"),
		'ok', "$what: the live claim from before the dump writes");
	is(q1($db, "SELECT format('%s %s', quantity, writer_epoch) FROM inventory WHERE sku = 'sku-1'"),
		"10 $t_re", "$what: ... and its write is stamped with its token");
	is(sqlstate($db, "BEGIN; SELECT fence_begin('after-restore', $next);"
		  . " UPDATE events SET payload = 'new' WHERE region = 'us' AND id = 1500;"
		  . " INSERT INTO events VALUES ('eu', 4, 'new', 0); COMMIT;"),
		'ok', "$what: the new claim writes to both levels of partitions");
	is(q1($db, "SELECT string_agg(writer_epoch::text, ',' ORDER BY id) FROM events"
		  . " WHERE payload = 'new'"),
		"$next,$next", "$what: ... and its rows are stamped with its token");

	is(sqlstate($db, 'TRUNCATE inventory'), '5F005', "$what: TRUNCATE of the table is refused");
	is(sqlstate($db, 'TRUNCATE events'), '5F005', "$what: TRUNCATE of the partitioned table is refused");
	is(sqlstate($db, 'TRUNCATE events_eu'), '5F005', "$what: TRUNCATE of a partition is refused");
	is(sqlstate($db, 'TRUNCATE "Ops"."Stock Levels"'), '5F005',
		"$what: TRUNCATE of the table with quoted names is refused");
	is(sqlstate($db, 'SET session_replication_role = replica; TRUNCATE events_us_low'),
		'5F005', "$what: TRUNCATE of a sub-partition is refused in replica mode");
	is(q1($db, 'SELECT count(*) FROM events'), 5, "$what: no row was lost to a TRUNCATE");

	# the after form
	is(q1($db, $after_registry_sql), $after_registry,
		"$what: fence_protected registers the after form's tables in form after, with their modes");
	is(q1($db, $after_triggers_sql), $after_triggers,
		"$what: the after form's tables have zz_fence_guard, zz_fence_guard_update and zz_fence_truncate, ENABLE ALWAYS");
	is(q1($db, $audit_errors_sql), 'none', "$what: fence_audit reports no error");
	is(sqlstate($db, "UPDATE tally SET n = 0, writer_epoch = $s1 WHERE name = 'a'"),
		'5F001', "$what: after form: a superseded token's UPDATE is fenced");
	is(sqlstate($db, "UPDATE tally_plain SET n = 0, writer_epoch = $s1 WHERE name = 'a'"),
		'ok', "$what: after form (twin): the same stale UPDATE of the unprotected table goes through");
	is(q1($db, "SELECT format('%s %s', n, writer_epoch) FROM tally_plain WHERE name = 'a'"),
		"0 $s1", "$what: after form (twin): ... overwriting the newer execution's write, epoch backwards");
	is(q1($db, "SELECT format('%s %s', n, writer_epoch) FROM tally WHERE name = 'a'"),
		"11 $s2", "$what: after form: the protected row keeps the newer execution's write");
	is(sqlstate($db, "UPDATE tally SET n = n + 1, writer_epoch = $t_re WHERE name = 'a'"),
		'ok', "$what: after form: the live claim from before the dump updates with its token");
	is(q1($db, "SELECT format('%s %s', n, writer_epoch) FROM tally WHERE name = 'a'"),
		"12 $t_re", "$what: after form: ... and the row holds its write and token");
	is(sqlstate($db, "BEGIN; SELECT fence_begin('restock', $t_re);"
		  . " UPDATE tally SET n = n + 1 WHERE name = 'b'; COMMIT;"),
		'5F003', "$what: after form: an UPDATE under fence_begin that leaves the epoch alone is refused (no stamping)");
	# (on rows enrich wrote: where the row still holds the very token, the
	# WHEN clause sees an unchanged epoch, which is no token, 5F003)
	is(sqlstate($db, "UPDATE shipments SET state = 'late', writer_epoch = $t_ev WHERE region = 'us'"),
		'5F001', "$what: after form: the released claim's token is fenced on a partition");
	is(sqlstate($db, "UPDATE shipments_us_low SET state = 'late', writer_epoch = $s1"),
		'5F001', "$what: after form: a superseded token is fenced on a sub-partition");
	is(sqlstate($db, "SET session_replication_role = replica;"
		  . " UPDATE shipments SET state = 'x' WHERE region = 'eu'"),
		'5F003', "$what: after form: an UPDATE without a token is refused, also in replica mode");
	is(sqlstate($db, "BEGIN; SELECT fence_begin('after-restore', $next);"
		  . " UPDATE shipments SET state = 'sent', writer_epoch = $next WHERE id IN (1, 1500);"
		  . " UPDATE shipments SET region = 'us', writer_epoch = $next WHERE region = 'eu' AND id = 2;"
		  . " COMMIT;"),
		'ok', "$what: after form: the new claim updates both levels of partitions and moves a row across them");
	is(q1($db, "SELECT string_agg(format('%s %s %s', tableoid::regclass, id, state), ',' ORDER BY region, id)"
		  . " FROM shipments WHERE writer_epoch = $next"),
		'shipments_eu 1 sent,shipments_us_low 2 packed,shipments_us_high 1500 sent',
		"$what: after form: ... and its rows hold its token");

	# partitions created after the restore
	q1($db, q{
CREATE TABLE "Ops"."Events AP" PARTITION OF events FOR VALUES IN ('ap');
CREATE TABLE events_us_top PARTITION OF events_us FOR VALUES FROM (2000) TO (MAXVALUE);
CREATE TABLE events_sa (LIKE events);
ALTER TABLE events ATTACH PARTITION events_sa FOR VALUES IN ('sa');
});
	for my $part ('"Ops"."Events AP"', 'events_us_top', 'events_sa')
	{
		is(q1($db, "SELECT string_agg(format('%s %s', tgname, tgenabled), ', ' ORDER BY tgname)"
			  . " FROM pg_trigger WHERE tgrelid = '$part'::regclass AND NOT tgisinternal"),
			'zz_fence_guard A, zz_fence_truncate A',
			"$what: $part, created after the restore, has both triggers ENABLE ALWAYS");
		is(sqlstate($db, "TRUNCATE $part"), '5F005', "$what: TRUNCATE of $part is refused");
	}
	is(sqlstate($db, "INSERT INTO events VALUES ('ap', 1, 'no token', 0)"),
		'5F003', "$what: a write without a token into the new partition is refused");

	q1($db, q{CREATE TABLE shipments_ap PARTITION OF shipments FOR VALUES IN ('ap')});
	is(q1($db, "SELECT string_agg(format('%s %s', tgname, tgenabled), ', ' ORDER BY tgname)"
		  . " FROM pg_trigger WHERE tgrelid = 'shipments_ap'::regclass AND NOT tgisinternal"),
		'zz_fence_guard A, zz_fence_guard_update A, zz_fence_truncate A',
		"$what: after form: a partition created after the restore has the three triggers ENABLE ALWAYS");
	is(q1($db, q{SELECT format('%s %s', mode, form) FROM fence_protected
	              WHERE relation = 'shipments_ap'::regclass}),
		'shared after', "$what: after form: ... and is registered in form after");
	is(sqlstate($db, "BEGIN; SELECT fence_begin('after-restore', $next);"
		  . " INSERT INTO shipments VALUES ('ap', 1, 'packed', 0); COMMIT;"),
		'ok', "$what: after form: the new claim writes into the new partition");
	is(sqlstate($db, "UPDATE shipments SET state = 'late', writer_epoch = $s1 WHERE region = 'ap'"),
		'5F001', "$what: after form: a superseded token's UPDATE of the new partition is fenced");
	is(sqlstate($db, "BEGIN; SELECT fence_begin('restock', $t_re);"
		  . " UPDATE shipments SET state = 'sent' WHERE region = 'ap'; COMMIT;"),
		'5F003', "$what: after form: an UPDATE of the new partition that leaves the epoch alone is refused");
}

# each restore: what, the database, and its command or commands
my @restores = (
	[ 'plain format, psql -v ON_ERROR_STOP=1', 'r_plain',
	  [ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', $plain, '-d', 'r_plain' ] ],
	[ 'custom format, pg_restore --exit-on-error', 'r_custom',
	  [ 'pg_restore', '--exit-on-error', '-d', 'r_custom', $custom ] ],
	[ 'custom format, pg_restore --single-transaction', 'r_single',
	  [ 'pg_restore', '--single-transaction', '-d', 'r_single', $custom ] ],
	[ 'directory format, pg_restore -j 2 in two passes', 'r_parallel',
	  [ 'pg_restore', '-j', '2', '--section=pre-data', '--section=data',
		'-d', 'r_parallel', $directory ],
	  [ 'pg_restore', '-j', '2', '--section=post-data', '-d', 'r_parallel',
		$directory ] ],
);

for my $r (@restores)
{
	my ($what, $db, @cmds) = @$r;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	for my $n (1 .. @cmds)
	{
		tool_ok(@cmds > 1 ? "restore, $what, pass $n" : "restore, $what",
			@{ $cmds[ $n - 1 ] });
	}
	# a restore that failed can leave too little behind for the checks
	eval { check_restored($db, $what); 1 }
	  or fail("$what: the checks of the restored database died: $@");
}

$node->stop;
done_testing();
