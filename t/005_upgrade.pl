# Copyright (c) 2026, the fence authors

# Versions: the upgrade from 1.0 to 1.1, and the window before it.
#
# (a) CREATE EXTENSION fence on a new database installs 1.1, the default,
#     from fence--1.1.sql; 1.0 is still installable and ALTER EXTENSION has
#     a path 1.0 -> 1.1.
# (b) A database created at 1.0, with an ordinary protected table (strict)
#     and a protected partitioned table (repeat) whose partition is itself
#     partitioned, rows written through the guard and live claims.
#   The binary-first window: the new shared library is installed, the SQL
#   objects are still 1.0's.  Claims, renew, release, guarded writes with
#   fence_begin and with the epoch in the statement work; superseded and
#   released tokens are fenced (5F001), writes without a token refused
#   (5F003); TRUNCATE is refused (5F005); a partition created now gets both
#   triggers ENABLE ALWAYS.
#   A pg_dump of this 1.0 database restores (pg_restore
#   --single-transaction) without an error where 1.1 is installed: the
#   restored extension is 1.1, with the same triggers, claims and counter,
#   and it fences and covers new partitions.
#   ALTER EXTENSION fence UPDATE: extversion is 1.1; claims and the counter
#   are untouched; every guard and truncate trigger is still there and
#   ENABLE ALWAYS; a live lease still blocks a takeover; a token claimed
#   before the update still passes fence_begin, writes, renews and releases;
#   a stale one is fenced; new claims are above every old token and
#   supersede old ones; partitions created after the update (at both
#   levels) or attached are covered; fence_stats and fence_status cover the
#   claims made under 1.0, and fence_prune deletes the released ones while
#   fence_stats keeps counting them.  The tables protected under 1.0 are
#   registered in form 'before' (the restored 1.0 dump's too).  The after
#   form, new in 1.1, works in the upgraded database: fence_protect(...,
#   form => 'after') protects a new table and switches one protected under
#   1.0; both are registered in form 'after' with the after form's triggers;
#   a superseded token's UPDATE is fenced (5F001), also one superseded before
#   the update, while on an unprotected twin the same stale UPDATE lands; a
#   current token updates; an UPDATE under fence_begin that leaves the epoch
#   alone is refused (5F003: the form does not stamp).
# The upgraded database's fence objects equal those of a fresh CREATE
# EXTENSION at 1.1 (which runs fence--1.1.sql), as FenceTest's
# fence_catalog_sql describes them: members, functions with their
# signatures and attributes, tables, columns, constraints, indexes,
# sequences, views, triggers, event triggers, policies, owners and ACLs,
# the config-dump registration, comments, initial privileges; and the same
# tables protected by each end up with the same triggers.  So the update
# script and the install script cannot drift apart (t/010_install_script.pl
# compares them on new databases, with twins that show the comparison
# fails).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = fence_node('upgrade', 5);

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
# on stderr
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

# both triggers, ENABLE ALWAYS, on each of these relations
sub covered
{
	my ($db, @rels) = @_;
	my $list = join(', ', map { "'$_'" } @rels);
	return q1($db, qq{
SELECT string_agg(format('%s %s %s', r.rel, t.tgname, t.tgenabled), E'\n'
                  ORDER BY r.rel, t.tgname)
  FROM unnest(ARRAY[$list]) r(rel)
  LEFT JOIN pg_trigger t ON t.tgrelid = r.rel::regclass AND NOT t.tgisinternal});
}

sub expect_covered
{
	my (@rels) = @_;
	return join("\n",
		map { ("$_ zz_fence_guard A", "$_ zz_fence_truncate A") } sort @rels);
}

my $tables_sql = q{
CREATE TABLE inventory (sku text PRIMARY KEY, quantity int NOT NULL,
                        writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE events (region text NOT NULL, id int NOT NULL, payload text,
                     writer_epoch bigint NOT NULL DEFAULT 0,
                     PRIMARY KEY (region, id)) PARTITION BY LIST (region);
CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu');
CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us')
  PARTITION BY RANGE (id);
CREATE TABLE events_us_low PARTITION OF events_us FOR VALUES FROM (MINVALUE) TO (1000);
SELECT fence_protect('inventory');
SELECT fence_protect('events', mode => 'repeat');
};
my $window_partition_sql =
  q{CREATE TABLE events_us_high PARTITION OF events_us FOR VALUES FROM (1000) TO (2000);};
my $late_partitions_sql = q{
CREATE TABLE events_ap PARTITION OF events FOR VALUES IN ('ap');
CREATE TABLE events_us_top PARTITION OF events_us FOR VALUES FROM (2000) TO (MAXVALUE);
CREATE TABLE events_sa (LIKE events);
ALTER TABLE events ATTACH PARTITION events_sa FOR VALUES IN ('sa');
};
my @initial = qw(events events_eu events_us events_us_low inventory);
my @late = qw(events_ap events_sa events_us_top);

# ---------------------------------------------------------------------------
# (a) a new database gets 1.1

is(q1('postgres', q{SELECT default_version FROM pg_available_extensions WHERE name = 'fence'}),
	'1.1', 'the default version is 1.1');
is(q1('postgres', q{SELECT string_agg(version, ',' ORDER BY version)
                      FROM pg_available_extension_versions WHERE name = 'fence'}),
	'1.0,1.1', 'versions 1.0 and 1.1 are installable');
is(q1('postgres', q{SELECT path FROM pg_extension_update_paths('fence')
                     WHERE source = '1.0' AND target = '1.1'}),
	'1.0--1.1', 'ALTER EXTENSION has a direct path from 1.0 to 1.1');

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
q1('fresh', 'CREATE EXTENSION fence');
is(q1('fresh', q{SELECT extversion FROM pg_extension WHERE extname = 'fence'}),
	'1.1', 'CREATE EXTENSION fence installs 1.1');
q1('fresh', $tables_sql . $window_partition_sql . $late_partitions_sql);

# ---------------------------------------------------------------------------
# (b) a database at 1.0

my $db = 'up';
$node->safe_psql('postgres', "CREATE DATABASE $db");
q1($db, q{CREATE EXTENSION fence VERSION '1.0'});
is(q1($db, q{SELECT extversion FROM pg_extension WHERE extname = 'fence'}),
	'1.0', 'CREATE EXTENSION fence VERSION 1.0 installs 1.0');
q1($db, $tables_sql);
is(covered($db, @initial), expect_covered(@initial),
	'1.0: the tables are protected, partitions included');

# --- the binary-first window: 1.1's library, 1.0's SQL objects -------------

my $w = 'binary-first window';

# job-b: claimed, renewed, released, claimed again
my $b1 = q1($db, q{SELECT fence_claim('job-b', '1 hour', 'w1')});
like($b1, qr/^\d+$/, "$w: fence_claim issues a token");
is(q1($db, qq{SELECT fence_renew('job-b', $b1, '2 hours') > now() + interval '90 minutes'}),
	't', "$w: fence_renew extends the lease");
is(q1($db, qq{SELECT fence_claim('job-b', '1 hour', 'intruder') IS NULL}),
	't', "$w: a live lease blocks a takeover");
is(q1($db, "SELECT fence_release('job-b', $b1)"), 't', "$w: fence_release acknowledges");
my $b2 = q1($db, q{SELECT fence_claim('job-b', '1 hour', 'w2')});
cmp_ok($b2, '>', $b1, "$w: the job is claimed again with a greater token");
is(q1($db, "SELECT fence_current('job-b')"), $b2, "$w: fence_current names the new token");
is(q1($db, "SELECT fence_is_current('job-b', $b1)"), 'f', "$w: the old token is not current");

# guarded writes, both ways, into every leaf
is(sqlstate($db, qq{BEGIN; SELECT fence_begin('job-b', $b2);
INSERT INTO inventory (sku, quantity) VALUES ('sku-1', 10), ('sku-2', 20);
INSERT INTO events (region, id, payload) VALUES ('eu', 1, 'a'), ('us', 5, 'b');
COMMIT;}), 'ok', "$w: writes inside a fence_begin transaction");
is(sqlstate($db, "UPDATE events SET payload = 'b+', writer_epoch = $b2 WHERE region = 'us'"),
	'ok', "$w: a write with the epoch in the statement");
is(q1($db, "SELECT count(*) FROM (SELECT writer_epoch FROM inventory UNION ALL"
	  . " SELECT writer_epoch FROM events) e WHERE writer_epoch = $b2"),
	4, "$w: the writes are stamped with their token");

# fenced
is(sqlstate($db, "UPDATE inventory SET quantity = 0, writer_epoch = $b1 WHERE sku = 'sku-1'"),
	'5F001', "$w: a superseded token is fenced");
is(sqlstate($db, "BEGIN; SELECT fence_begin('job-b', $b1); COMMIT;"),
	'5F001', "$w: fence_begin with a superseded token is fenced");
is(sqlstate($db, "UPDATE events SET payload = 'x' WHERE region = 'eu'"),
	'5F003', "$w: a write without a token is refused");
is(sqlstate($db, 'TRUNCATE inventory'), '5F005', "$w: TRUNCATE of the table is refused");
is(sqlstate($db, 'TRUNCATE events_us_low'), '5F005', "$w: TRUNCATE of a sub-partition is refused");

# a partition created in the window
q1($db, $window_partition_sql);
is(covered($db, 'events_us_high'), expect_covered('events_us_high'),
	"$w: a new partition gets both triggers, ENABLE ALWAYS");
is(sqlstate($db, 'TRUNCATE events_us_high'), '5F005', "$w: TRUNCATE of the new partition is refused");
is(sqlstate($db, "INSERT INTO events VALUES ('us', 1500, 'c', $b2)"),
	'ok', "$w: a write into the new partition with a current token");

# claims left for after the update: job-c held by a live lease; job-a claimed
# last, so its token is above every stored epoch
my $c1 = q1($db, q{SELECT fence_claim('job-c', '1 hour', 'w3')});
my $a1 = q1($db, q{SELECT fence_claim('job-a', '1 hour', 'w4')});
cmp_ok($a1, '>', $b2, "$w: tokens keep increasing");
my $old_max = q1($db, 'SELECT last_value FROM fence_token_seq');

# 1.0's columns (1.1 adds claimed_by, NULL for claims made before it)
my $claims_sql = q{SELECT string_agg(format('%s %s %s %s %s %s', t.job, t.token, t.holder, t.claimed_at, t.lease_expires_at, t.released), E'\n' ORDER BY t.job) FROM fence_claims t};
my $seq_sql = q{SELECT format('%s %s', last_value, is_called) FROM fence_token_seq};
my $claims_before = q1($db, $claims_sql);
my $seq_before = q1($db, $seq_sql);
my $triggers_sql = q{
SELECT string_agg(format('%s %s %s', t.tgrelid::regclass, t.tgenabled, pg_get_triggerdef(t.oid)),
                  E'\n' ORDER BY t.tgrelid::regclass::text, t.tgname)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal};
my $rows_sql = q{
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
SELECT format('%s %s', e.tableoid::regclass, e) x FROM events e
UNION ALL
SELECT format('%s %s', i.tableoid::regclass, i) FROM inventory i) s};

# ---------------------------------------------------------------------------
# a dump of the database at 1.0, restored where 1.1 is installed: the
# restore's CREATE EXTENSION installs 1.1, and the dump's triggers go in
# without a conflict

my $dump = PostgreSQL::Test::Utils::tempdir . '/up-1.0.dump';
tool_ok('pg_dump -Fc of the 1.0 database', 'pg_dump', '-Fc', '-f', $dump, '-d', $db);
$node->safe_psql('postgres', 'CREATE DATABASE from10');
tool_ok('pg_restore --single-transaction of the 1.0 dump', 'pg_restore',
	'--single-transaction', '-d', 'from10', $dump);
my $r = 'the 1.0 dump restored';
is(q1('from10', q{SELECT extversion FROM pg_extension WHERE extname = 'fence'}),
	'1.1', "$r: the extension is 1.1");
is(q1('from10', $triggers_sql), q1($db, $triggers_sql), "$r: the triggers equal the 1.0 database's");
is(q1('from10', $claims_sql), $claims_before, "$r: fence_claims equals the 1.0 database's");
is(q1('from10', $seq_sql), $seq_before, "$r: the counter equals the 1.0 database's");
is(sqlstate('from10', "UPDATE inventory SET quantity = 0, writer_epoch = $b1 WHERE sku = 'sku-2'"),
	'5F001', "$r: a superseded token is fenced");
is(sqlstate('from10', 'TRUNCATE events_us_high'), '5F005', "$r: TRUNCATE of a partition is refused");
q1('from10', $late_partitions_sql);
is(covered('from10', @late), expect_covered(@late),
	"$r: partitions created or attached after the restore get both triggers ENABLE ALWAYS");
is(q1('from10', q{SELECT string_agg(format('%s %s', relation, form), ' ' ORDER BY relation::text)
                    FROM fence_protected}),
	join(' ', map { "$_ before" } sort(@initial, 'events_us_high', @late)),
	"$r: its protected tables are registered in form before");

# ---------------------------------------------------------------------------
# the update

my $window_rels = [ @initial, 'events_us_high' ];
my $rows_before = q1($db, $rows_sql);
my ($out, $err) = ('', '');
is($node->psql($db, 'ALTER EXTENSION fence UPDATE', stdout => \$out, stderr => \$err),
	0, 'ALTER EXTENSION fence UPDATE succeeds')
  or diag($err);
is(q1($db, q{SELECT extversion FROM pg_extension WHERE extname = 'fence'}),
	'1.1', 'after the update: extversion is 1.1');

my $u = 'after the update';
is(q1($db, $claims_sql), $claims_before, "$u: fence_claims is unchanged");
is(q1($db, $seq_sql), $seq_before, "$u: the counter is unchanged");
is(q1($db, $rows_sql), $rows_before, "$u: the protected rows are unchanged");
is(covered($db, @$window_rels), expect_covered(@$window_rels),
	"$u: every guard and truncate trigger is there, ENABLE ALWAYS");
is(q1($db, q{SELECT string_agg(format('%s %s', relation, form), ' ' ORDER BY relation::text)
               FROM fence_protected}),
	join(' ', map { "$_ before" } sort @$window_rels),
	"$u: the tables protected under 1.0 are registered in form before");
is(q1($db, q{SELECT string_agg(relation::text, ' ' ORDER BY relation::text) FROM fence_protected}),
	q1($db, q{SELECT string_agg(DISTINCT tgrelid::regclass::text, ' ' ORDER BY tgrelid::regclass::text)
	            FROM pg_trigger WHERE tgfoid = 'fence_guard'::regproc}),
	"$u: fence_protected lists every relation that has a guard");
is(sqlstate($db, q{ALTER TABLE inventory DISABLE TRIGGER ALL}), '5F006',
	"$u: DDL that would disarm a protected table is refused");

# old claims and tokens
is(q1($db, q{SELECT fence_claim('job-c', '1 hour', 'intruder') IS NULL}),
	't', "$u: a lease taken before the update still blocks a takeover");
is(sqlstate($db, qq{BEGIN; SELECT fence_begin('job-a', $a1);
UPDATE inventory SET quantity = quantity + 1 WHERE sku = 'sku-1';
DELETE FROM events WHERE region = 'eu' AND id = 1;
COMMIT;}), 'ok', "$u: a token claimed before the update passes fence_begin and writes");
is(q1($db, "SELECT format('%s %s', quantity, writer_epoch) FROM inventory WHERE sku = 'sku-1'"),
	"11 $a1", "$u: ... its write is stamped with its token");
is(q1($db, "SELECT count(*) FROM events WHERE region = 'eu'"), 0,
	"$u: ... and its DELETE went through the guard");
is(sqlstate($db, "UPDATE inventory SET quantity = 0, writer_epoch = $b1 WHERE sku = 'sku-2'"),
	'5F001', "$u: a token superseded before the update is fenced");
is(sqlstate($db, "UPDATE events SET payload = 'x' WHERE region = 'us'"),
	'5F003', "$u: a write without a token is refused");
is(sqlstate($db, "SET session_replication_role = replica;"
	  . " UPDATE events SET payload = 'x' WHERE region = 'us'"),
	'5F003', "$u: ... also in replica mode");
is(q1($db, qq{SELECT fence_renew('job-b', $b2, '2 hours') > now() + interval '90 minutes'}),
	't', "$u: a token claimed before the update renews");
is(q1($db, "SELECT fence_release('job-b', $b2)"), 't', "$u: ... and releases");
is(sqlstate($db, "UPDATE events SET payload = 'y', writer_epoch = $b2 WHERE id = 1500"),
	'5F001', "$u: ... after which it is fenced");

# new claims
my $n1 = q1($db, q{SELECT fence_claim('job-new', '1 hour', 'w5')});
cmp_ok($n1, '>', $old_max, "$u: a new claim is above every token issued before the update");
is(q1($db, "SELECT fence_release('job-c', $c1)"), 't',
	"$u: the holder of a claim from before the update releases it");
my $c2 = q1($db, q{SELECT fence_claim('job-c', '1 hour', 'w6')});
cmp_ok($c2, '>', $n1, "$u: the job is claimed again with a greater token");
is(sqlstate($db, "INSERT INTO events VALUES ('us', 7, 'late', $c1)"),
	'5F001', "$u: the token it superseded is fenced");
is(sqlstate($db, "INSERT INTO events VALUES ('us', 7, 'new', $c2)"),
	'ok', "$u: the new token writes");

# 1.1's metrics and prune over claim rows made under 1.0 (their counters
# start at one claim)
my $njobs = q1($db, 'SELECT count(*) FROM fence_claims');
is(q1($db, "SELECT jobs = $njobs AND claims >= jobs FROM fence_stats"), 't',
	"$u: fence_stats counts every claim row, those from 1.0 included");
is(q1($db, q{SELECT count(*) FROM fence_status
             WHERE state IN ('held', 'released', 'expired_claimable', 'expired_blocked')}), $njobs,
	"$u: fence_status gives every claim a state");
cmp_ok(q1($db, 'SELECT count(*) FROM fence_claims WHERE released'), '>', 0,
	"$u: released claims exist to prune");
my $claims_counted = q1($db, 'SELECT claims FROM fence_stats');
q1($db, q{CALL fence_prune('1 day')});
is(q1($db, 'SELECT count(*) FROM fence_claims WHERE released'), 0,
	"$u: fence_prune deletes the released claims");
is(q1($db, 'SELECT claims FROM fence_stats'), $claims_counted,
	"$u: ... and fence_stats still counts their claims");

# TRUNCATE and partitions created after the update
is(sqlstate($db, 'TRUNCATE inventory'), '5F005', "$u: TRUNCATE of the table is refused");
is(sqlstate($db, 'TRUNCATE events'), '5F005', "$u: TRUNCATE of the partitioned table is refused");
is(sqlstate($db, 'SET session_replication_role = replica; TRUNCATE events_us_high'),
	'5F005', "$u: TRUNCATE of the window's partition is refused, also in replica mode");
q1($db, $late_partitions_sql);
is(covered($db, @late), expect_covered(@late),
	"$u: partitions created now (at both levels) or attached get both triggers ENABLE ALWAYS");
is(sqlstate($db, 'TRUNCATE events_sa'), '5F005', "$u: TRUNCATE of an attached partition is refused");
is(sqlstate($db, 'TRUNCATE events_ap'), '5F005', "$u: TRUNCATE of a new partition is refused");
is(sqlstate($db, 'TRUNCATE events_us_top'), '5F005', "$u: TRUNCATE of a new sub-partition is refused");
is(sqlstate($db, "INSERT INTO events VALUES ('ap', 1, 'no token', 0)"),
	'5F003', "$u: a write without a token into a new partition is refused");
is(sqlstate($db, "INSERT INTO events VALUES ('us', 2500, 'new', $c2)"),
	'ok', "$u: a current token writes into a new sub-partition");

# the after form, new in 1.1: a new table, and a table protected under 1.0
# switched to it (the same in the fresh database, for the comparison below)
my $after_sql = q{
CREATE TABLE tally (name text PRIMARY KEY, n int NOT NULL,
                    writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE tally_plain (LIKE tally INCLUDING ALL);    -- the twin, unprotected
SELECT fence_protect('tally', form => 'after');
SELECT fence_protect('inventory', form => 'after');
};
is(sqlstate($db, $after_sql), 'ok', "$u: fence_protect(..., form => 'after') works");
q1('fresh', $after_sql);
is(q1($db, q{SELECT string_agg(format('%s %s %s', relation, mode, form), ' ' ORDER BY relation::text)
               FROM fence_protected WHERE relation IN ('tally'::regclass, 'inventory'::regclass)}),
	'inventory strict after tally strict after', "$u: both are registered in form after");
is(q1($db, q{SELECT string_agg(format('%s %s %s', tgrelid::regclass, tgname, tgenabled), ' '
                               ORDER BY tgrelid::regclass::text, tgname)
               FROM pg_trigger WHERE tgrelid IN ('tally'::regclass, 'inventory'::regclass)
                AND NOT tgisinternal}),
	join(' ', map { ("$_ zz_fence_guard A", "$_ zz_fence_guard_update A", "$_ zz_fence_truncate A") }
	  qw(inventory tally)),
	"$u: ... with the after form's three triggers, ENABLE ALWAYS");
is(q1($db, q{SELECT count(*) FROM fence_audit() WHERE severity = 'error'}), 0,
	"$u: fence_audit reports no error");
my $t1 = q1($db, q{SELECT fence_claim('job-t', '1 hour', 'w7')});
q1($db, qq{INSERT INTO tally VALUES ('a', 1, $t1), ('b', 2, $t1);
INSERT INTO tally_plain SELECT * FROM tally;
SELECT fence_release('job-t', $t1);});
my $t2 = q1($db, q{SELECT fence_claim('job-t', '1 hour', 'w8')});
is(sqlstate($db, "UPDATE tally SET n = 10, writer_epoch = $t2 WHERE name = 'a'"),
	'ok', "$u: after form: a current token updates with its token in the SET list");
q1($db, "UPDATE tally_plain SET n = 10, writer_epoch = $t2 WHERE name = 'a'");
is(sqlstate($db, "UPDATE tally SET n = 2, writer_epoch = $t1 WHERE name = 'a'"),
	'5F001', "$u: after form: a stale UPDATE (its token superseded) is fenced");
is(sqlstate($db, "UPDATE tally_plain SET n = 2, writer_epoch = $t1 WHERE name = 'a'"),
	'ok', "$u: after form (twin): the same stale UPDATE of the unprotected table goes through");
is(q1($db, q{SELECT format('%s %s', t.n, p.n) FROM tally t JOIN tally_plain p USING (name)
              WHERE name = 'a'}),
	'10 2', "$u: after form: the protected row keeps the newer write; the twin lost it");
is(sqlstate($db, "UPDATE tally SET n = 0, writer_epoch = $b1 WHERE name = 'b'"),
	'5F001', "$u: after form: a token superseded before the update is fenced");
is(sqlstate($db, "UPDATE inventory SET quantity = 0, writer_epoch = $b1 WHERE sku = 'sku-2'"),
	'5F001', "$u: after form, on the table protected under 1.0: a superseded token is fenced");
is(sqlstate($db, "BEGIN; SELECT fence_begin('job-t', $t2);"
	  . " UPDATE inventory SET quantity = quantity + 1 WHERE sku = 'sku-2'; COMMIT;"),
	'5F003', "$u: after form: an UPDATE under fence_begin that leaves the epoch alone is refused");
is(sqlstate($db, "BEGIN; SELECT fence_begin('job-t', $t2);"
	  . " UPDATE inventory SET quantity = quantity + 1, writer_epoch = $t2 WHERE sku = 'sku-2'; COMMIT;"),
	'ok', "$u: after form: ... and passes with the bound token in its SET list");

# ---------------------------------------------------------------------------
# the upgraded database against a fresh 1.1

# fence's objects, described by FenceTest's fence_catalog_sql (the same
# comparison as t/010_install_script.pl's, here after a life of claims,
# protected tables and a binary-first window), and the tables each database
# protects, with their triggers
my $catalog_sql = fence_catalog_sql();
my $protected_sql = q{
SELECT string_agg(format('%s %s %s', t.tgrelid::regclass, t.tgenabled, pg_get_triggerdef(t.oid)),
                  E'\n' ORDER BY t.tgrelid::regclass::text, t.tgname)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
   AND c.relname NOT LIKE 'fence%'};

my $fresh_catalog = q1('fresh', $catalog_sql);
like($fresh_catalog, qr/^extension fence: member function fence_claim\(text,interval,text\)$/m,
	'fresh 1.1: the description is not empty (it names fence_claim)');
like(q1('fresh', $protected_sql), qr/^events_us_top A CREATE TRIGGER zz_fence_truncate/m,
	'fresh 1.1: the trigger list is not empty');
# The worker API: the update kept PUBLIC's EXECUTE; once moved to the new
# default (t/010_install_script.pl tests the move the update's WARNING
# names), the two differ only in pg_init_privs, by design.
q1($db, q{DO $$ DECLARE f regprocedure; BEGIN
  FOR f IN SELECT * FROM fence_worker_functions() LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
  END LOOP; END $$});
my $worker_init_privs = worker_init_privs_re($node, 'fresh');
my $diff = catalog_diff('fresh 1.1', without_worker_init_privs($worker_init_privs, $fresh_catalog),
	'updated 1.0 -> 1.1', without_worker_init_privs($worker_init_privs, q1($db, $catalog_sql)));
is($diff, '', 'upgraded 1.0 -> 1.1 equals a fresh 1.1: fence\'s objects') or diag($diff);
is(q1($db, $protected_sql), q1('fresh', $protected_sql),
	'upgraded 1.0 -> 1.1 equals a fresh 1.1: the protected tables and their triggers');

$node->stop;
done_testing();
