# Copyright (c) 2026, the fence authors

# Logical replication into protected tables.
#
# The publisher's guard arbitrates every write; the subscriber applies the
# publisher's changes as they arrive, their epochs the publisher's.  The
# guard lets a trusted logical-replication writer through at trigger depth
# 1 (the built-in apply worker and the table-sync worker, for a table of
# their subscription or a partition of one; a session with a replication
# origin set up), trusted when the subscription's owner (the origin
# session's user) is a superuser or fence_grant_replication trusts it with
# the table, and guards everything else.  A publisher and a subscriber, both
# with fence; the publisher's counter is first moved far ahead
# (fence_advance), so every replicated epoch lies above the subscriber's
# counter: a guard that checked or stamped the apply's rows would be seen.
#
# a. Both sides protected, same modes: acct (strict), stock (shared), ev
#    (repeat, partitioned, published via its root, so the apply's rows land
#    in partitions of a subscribed table; the subscriber guards it in the
#    after form), plain (not protected anywhere).
#    Rows written under fence_begin before CREATE SUBSCRIPTION arrive by
#    the initial copy (table-sync workers); later INSERT, UPDATE (under
#    fence_begin and with the epoch in the statement), DELETE, and a
#    TRUNCATE (the publisher's legitimate way: fence_unprotect, TRUNCATE,
#    fence_protect in one transaction) arrive by the apply worker.  Each
#    table equals the publisher's, epochs included, and the subscriber's
#    tables stay protected ('A' triggers, registry rows).
# b. ledger (repeat) is protected on the subscriber by a schema-only copy:
#    pg_dump --schema-only -t ledger of the publisher piped into psql.  The
#    dumped guard is canonical and ENABLE ALWAYS, the subscriber registers
#    it, and the replicated rows apply.
# c. On the subscriber, local writes without a token are refused: INSERT,
#    UPDATE, DELETE (5F003), TRUNCATE (5F005), also with
#    session_replication_role = replica.  Twin: the same local UPDATE of
#    the unprotected table lands, and the subscriber's copy no longer
#    matches the publisher's.
# d. A trigger on the subscriber, ENABLE ALWAYS, fires in the apply worker.
#    Writing an unprotected table it works (the twin: the trigger really
#    runs in the worker); writing another protected table without a token
#    it is refused (depth 2): the apply worker fails with 5F003 (server
#    log, apply_error_count), the change does not land, and after DROP
#    TRIGGER the same change applies and replication goes on.
# e. apply_error_count and sync_error_count are 0 after every good case.
# f. Without the exemption the apply would stall: an ordinary session on
#    the subscriber making the apply's own changes (the publisher's rows
#    with their epochs, an UPDATE, a DELETE, a TRUNCATE), also as replica,
#    is refused (5F003, 5G002: never issued here, 5F005); the publisher makes the same
#    changes and they apply.
# g. A superuser session that sets up a replication origin
#    (pg_replication_origin_session_setup, as pglogical's apply does)
#    writes a protected table without a token at depth 1, its epoch kept;
#    a trigger it fires that writes a protected table is still refused
#    (5F003); a plain role cannot set up an origin (42501), and its write
#    without a token is refused (5F003).  Granted the origin functions, the
#    plain role's origin session is guarded all the same (the trust is the
#    session user's); fence_grant_replication trusts it with the table (its
#    row lands with its epoch), fence_revoke_replication takes that back.
# i. (before h) fence_claims published: the subscriber's fence_current
#    answers for the publisher's jobs, its counter stays behind (sequences
#    are not replicated), and a local write with the publisher's current
#    token is refused (5F004: the subscriber's counter never issued it,
#    whatever the replicated row says; fence_audit reports the claims above
#    the counter); once the release has arrived, still 5F004 (the released
#    row lists it).
# h. Subscriber-local writes use the subscriber's counter: a fresh token
#    meets a replicated epoch "from the future" (5F002 naming
#    fence_advance); after fence_advance on the subscriber it writes.  The
#    apply does not compare epochs: the publisher's next write of that row
#    (a lower epoch) replaces the subscriber's local one.
#
# j. (last) A subscription a superuser does not own (16+: created by a role
#    with pg_create_subscription, run_as_owner = true, as the review did;
#    15: handed over to a role that is then demoted), from a publisher it
#    controls: its apply of a row with epoch 9000000000000000000 is refused
#    as any writer's would be (5G002 in the log, apply_error_count rises,
#    the row is absent).  Twin: after fence_grant_replication the retried
#    apply lands the row unchecked, as every subscription's did before.
#    After fence_revoke_replication the next change fails again; the audit
#    log has each call; mallory cannot grant itself (42501); DROP TABLE
#    forgets the table's grants.
#
# Waits poll the catalogs and statistics (wait_for_subscription_sync,
# wait_for_catchup, poll_query_until); no pass or fail depends on timing.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $t0 = time;

# fault-test ports: offset 8 (the subscriber: offset 18).  The nodes listen
# on unix sockets only, in this test's own directory.
my $port = ($ENV{FENCE_TEST_PORT_BASE} // 54330) + 8;

my $pub = PostgreSQL::Test::Cluster->new('publisher', port => $port);
$pub->init(allows_streaming => 'logical');
$pub->append_conf('postgresql.conf', "max_connections = 20\nlog_error_verbosity = verbose");
$pub->start;
$pub->safe_psql('postgres', 'CREATE EXTENSION fence');

my $sub = PostgreSQL::Test::Cluster->new('subscriber', port => $port + 10);
$sub->init;
$sub->append_conf('postgresql.conf', "log_error_verbosity = verbose");
$sub->start;
$sub->safe_psql('postgres', 'CREATE EXTENSION fence');

sub q1
{
	my ($node, $sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# ('ok', stderr) if $sql succeeds, else (SQLSTATE or the whole error, stderr)
sub try_sql
{
	my ($node, $sql, %opt) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose', @{ $opt{extra} // [] } ]);
	return ('ok', $err) if $rc == 0 && $err !~ /ERROR/;
	return ($1, $err) if $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ("rc=$rc: $err", $err);
}

sub sqlstate { return (try_sql(@_))[0]; }

sub counter { return q1($_[0], 'SELECT last_value FROM fence_token_seq'); }

my %order = (acct => 'id', stock => 'sku', ev => 'id, k', plain => 'id', ledger => 'id');
my %cols = (
	acct => 'id, v, writer_epoch',
	stock => 'sku, qty, writer_epoch',
	ev => 'id, k, v, writer_epoch',
	plain => 'id, v, writer_epoch',
	ledger => 'id, amount, writer_epoch');

sub rows
{
	my ($node, $t) = @_;
	return q1($node, "SELECT $cols{$t} FROM $t ORDER BY $order{$t}");
}

# each table's rows (epochs included) are the publisher's
sub same_as_publisher
{
	my ($what, @tables) = @_;
	for my $t (@tables)
	{
		my $p = rows($pub, $t);
		is(rows($sub, $t), $p, "$what: $t on the subscriber equals the publisher's, epochs included");
	}
}

# fence's triggers on the subscriber's table (and partitions): all 'A', and
# every relation of the tree registered with the mode
sub still_protected
{
	my ($t, $mode, $what) = @_;
	is(q1($sub, qq{
		SELECT string_agg(DISTINCT tgname || ':' || tgenabled::text, ' ' ORDER BY tgname || ':' || tgenabled::text)
		  FROM pg_trigger
		 WHERE tgrelid IN (SELECT '$t'::regclass UNION SELECT relid FROM pg_partition_tree('$t'))
		   AND tgname IN ('zz_fence_guard', 'zz_fence_truncate')}),
		'zz_fence_guard:A zz_fence_truncate:A',
		"$what: $t keeps zz_fence_guard and zz_fence_truncate, ENABLE ALWAYS");
	is(q1($sub, qq{
		SELECT count(*) = (SELECT count(*) FROM (SELECT '$t'::regclass UNION SELECT relid FROM pg_partition_tree('$t')) m)
		       AND bool_and(mode = '$mode')
		  FROM fence_protected
		 WHERE relation IN (SELECT '$t'::regclass UNION SELECT relid FROM pg_partition_tree('$t'))}),
		't', "$what: $t and its partitions are registered, mode $mode");
}

sub sub_errors
{
	# sync_error_count; 19 splits it into sync_table_error_count and
	# sync_seq_error_count: sum whichever columns the major has.
	return q1($sub, q{SELECT (j->>'apply_error_count') || ' ' ||
	                         (COALESCE((j->>'sync_error_count')::int, 0)
	                          + COALESCE((j->>'sync_table_error_count')::int, 0)
	                          + COALESCE((j->>'sync_seq_error_count')::int, 0))
	                    FROM (SELECT to_jsonb(s) AS j FROM pg_stat_subscription_stats s
	                           WHERE s.subname = 'sub') x});
}

# ---------------------------------------------------------------------------
# Schema and the rows the initial copy will carry

my $schema = q{
CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL,
                   writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('acct');
CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL,
                    writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('stock', mode => 'shared');
CREATE TABLE ev (id int, k int, v text, writer_epoch bigint NOT NULL DEFAULT 0,
                 PRIMARY KEY (id, k)) PARTITION BY LIST (k);
CREATE TABLE ev_1 PARTITION OF ev FOR VALUES IN (1);
CREATE TABLE ev_2 PARTITION OF ev FOR VALUES IN (2);
SELECT fence_protect('ev', mode => 'repeat');
CREATE TABLE plain (id int PRIMARY KEY, v int NOT NULL,
                    writer_epoch bigint NOT NULL DEFAULT 0);
};
q1($pub, $schema . q{
CREATE TABLE ledger (id int PRIMARY KEY, amount int NOT NULL,
                     writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('ledger', mode => 'repeat');
});
# The subscriber guards ev in the after form: its UPDATEs are
# checked in the WHEN clause of an AFTER trigger, evaluated at trigger depth
# 0 for the apply's own write, where the exemption must hold as well.
q1($sub, $schema =~ s/fence_protect\('ev', mode => 'repeat'\)/fence_protect('ev', mode => 'repeat', form => 'after')/r);
is(q1($sub, q{
	SELECT string_agg(p.relation::text || ':' || p.form || ':' ||
	                  coalesce((SELECT t.tgenabled::text FROM pg_trigger t
	                             WHERE t.tgrelid = p.relation AND t.tgname = 'zz_fence_guard_update'), '-'),
	                  ' ' ORDER BY p.relation::text)
	  FROM fence_protected p WHERE p.relation::text LIKE 'ev%'}),
	'ev:after:A ev_1:after:A ev_2:after:A',
	'the subscriber protects ev and its partitions in the after form, zz_fence_guard_update ENABLE ALWAYS');

# publisher tokens far above anything the subscriber will issue
q1($pub, 'SELECT fence_advance(1000000)');
my $t_load = q1($pub, q{SELECT fence_claim('load', '1 hour', 'loader')});
cmp_ok($t_load, '>', 1000000, "publisher's load token $t_load is above 10^6");
q1($pub, qq{
BEGIN;
SELECT fence_begin('load', $t_load);
INSERT INTO acct SELECT g, g * 10 FROM generate_series(1, 6) g;
INSERT INTO stock SELECT 'sku-' || g, 100 FROM generate_series(1, 4) g;
INSERT INTO ev SELECT g, 1 + g % 2, 'new' FROM generate_series(1, 6) g;
INSERT INTO ledger SELECT g, g FROM generate_series(1, 4) g;
INSERT INTO plain SELECT g, g FROM generate_series(1, 4) g;
COMMIT;
});
is(q1($pub, "SELECT count(*) FROM acct WHERE writer_epoch = $t_load"), 6,
	'publisher: the load rows carry the load token');

# b. the subscriber's ledger from a schema-only dump of the publisher's
{
	my ($dump, $err) = ('', '');
	IPC::Run::run(
		[ $pub->installed_command('pg_dump'), '-h', $pub->host, '-p', $pub->port,
		  '--schema-only', '-t', 'ledger', '-d', 'postgres' ],
		'<', \undef, '>', \$dump, '2>', \$err)
	  or die "pg_dump -t ledger: $err";
	like($dump, qr/CREATE TRIGGER zz_fence_guard BEFORE INSERT OR DELETE OR UPDATE ON public\.ledger FOR EACH ROW EXECUTE FUNCTION public\.fence_guard\('writer_epoch', 'repeat'\)/,
		'b: the schema-only dump has the canonical guard');
	like($dump, qr/ALTER TABLE public\.ledger ENABLE ALWAYS TRIGGER zz_fence_guard;/,
		'b: the dump sets the guard ENABLE ALWAYS');
	my ($out, $lerr) = ('', '');
	my $rc = $sub->psql('postgres', $dump, stdout => \$out, stderr => \$lerr,
		on_error_stop => 1);
	ok($rc == 0 && $lerr !~ /ERROR/, 'b: the dump loads into the subscriber') or diag($lerr);
}
still_protected('ledger', 'repeat', 'b: after the schema-only load');
is(sqlstate($sub, 'INSERT INTO ledger (id, amount) VALUES (100, 1)'), '5F003',
	'b: the loaded guard refuses a local write without a token');

# ---------------------------------------------------------------------------
# a. subscription, initial copy

q1($pub, q{CREATE PUBLICATION pub FOR TABLE acct, stock, ev, ledger, plain
           WITH (publish_via_partition_root = true)});
my $connstr = $pub->connstr . ' dbname=postgres';
q1($sub, "CREATE SUBSCRIPTION sub CONNECTION '$connstr' PUBLICATION pub");
$sub->wait_for_subscription_sync($pub, 'sub');

same_as_publisher('a: initial copy', qw(acct stock ev ledger plain));
is(q1($sub, "SELECT count(*) FROM acct WHERE writer_epoch = $t_load"), 6,
	"a: initial copy: the rows keep the publisher's epoch $t_load");
cmp_ok(counter($sub), '<', $t_load,
	"a: ... which is above the subscriber's counter (" . counter($sub) . ')');
is(q1($sub, q{SELECT string_agg(DISTINCT tableoid::regclass::text, ' ' ORDER BY tableoid::regclass::text) FROM ev}),
	'ev_1 ev_2', 'a: initial copy: ev rows landed in both partitions');
is(sub_errors(), '0 0', 'e: after the initial copy: apply_error_count 0, sync_error_count 0');

# ---------------------------------------------------------------------------
# a. INSERT, UPDATE, DELETE, TRUNCATE through the apply worker

my $t_w = q1($pub, q{SELECT fence_claim('w2', '1 hour', 'worker-2')});
q1($pub, qq{
BEGIN;
SELECT fence_begin('w2', $t_w);
INSERT INTO acct VALUES (7, 70), (8, 80);
UPDATE acct SET v = v + 1 WHERE id IN (1, 2);
DELETE FROM acct WHERE id = 3;
UPDATE stock SET qty = qty - 1 WHERE sku = 'sku-1';
DELETE FROM stock WHERE sku = 'sku-4';
UPDATE ev SET v = 'running' WHERE id IN (1, 2);
UPDATE ev SET v = 'done' WHERE id IN (1, 2);
UPDATE ev SET k = 2 WHERE id = 3;             -- moves to another partition
DELETE FROM ev WHERE id = 6;
UPDATE ledger SET amount = amount + 5 WHERE id = 1;
INSERT INTO ledger VALUES (5, 5);
UPDATE plain SET v = 0 WHERE id = 1;
COMMIT;
});
# the epoch rides on the write
my $t_w3 = q1($pub, q{SELECT fence_claim('w3', '1 hour', 'worker-3')});
q1($pub, "UPDATE acct SET v = 444, writer_epoch = $t_w3 WHERE id = 4");
$pub->wait_for_catchup('sub');
same_as_publisher('a: after INSERT, UPDATE, DELETE', qw(acct stock ev ledger plain));
is(q1($sub, "SELECT string_agg(id::text, ' ' ORDER BY id) FROM acct WHERE writer_epoch = $t_w"),
	'1 2 7 8', "a: the apply kept the publisher's epoch $t_w on the rows it wrote");
is(q1($sub, 'SELECT writer_epoch FROM acct WHERE id = 4'), $t_w3,
	"a: ... and the statement's epoch $t_w3");
is(q1($sub, q{SELECT tableoid::regclass FROM ev WHERE id = 3}), 'ev_2',
	'a: the row that moved partitions moved on the subscriber too');

# TRUNCATE: the publisher's legitimate way
q1($pub, q{
BEGIN;
SELECT fence_unprotect('stock', 'test 008: empty the stock');
TRUNCATE stock;
SELECT fence_protect('stock', mode => 'shared');
COMMIT;
});
is(sqlstate($pub, 'TRUNCATE stock'), '5F005', 'a: the publisher refuses a bare TRUNCATE (5F005)');
my $t_w4 = q1($pub, q{SELECT fence_claim('w4', '1 hour', 'worker-4')});
q1($pub, qq{BEGIN; SELECT fence_begin('w4', $t_w4);
            INSERT INTO stock VALUES ('sku-9', 9); COMMIT;});
$pub->wait_for_catchup('sub');
same_as_publisher('a: after TRUNCATE', qw(stock));
is(q1($sub, 'SELECT count(*) FROM stock'), 1, 'a: the replicated TRUNCATE emptied the subscriber\'s stock');
still_protected($_->[0], $_->[1], 'a: after the apply')
  for ([ 'acct', 'strict' ], [ 'stock', 'shared' ], [ 'ev', 'repeat' ], [ 'ledger', 'repeat' ]);
is(sub_errors(), '0 0', 'e: after INSERT, UPDATE, DELETE, TRUNCATE: apply_error_count 0, sync_error_count 0');

# ---------------------------------------------------------------------------
# c. local writes on the subscriber stay guarded

is(sqlstate($sub, 'INSERT INTO acct (id, v) VALUES (100, 1)'), '5F003', 'c: local INSERT without a token: 5F003');
is(sqlstate($sub, 'UPDATE acct SET v = v + 1 WHERE id = 1'), '5F003', 'c: local UPDATE without a token: 5F003');
is(sqlstate($sub, 'DELETE FROM acct WHERE id = 1'), '5F003', 'c: local DELETE without a token: 5F003');
is(sqlstate($sub, 'TRUNCATE acct'), '5F005', 'c: local TRUNCATE: 5F005');
is(sqlstate($sub, 'TRUNCATE ev_1'), '5F005', 'c: local TRUNCATE of a partition: 5F005');
is(sqlstate($sub, q{SET session_replication_role = replica; UPDATE acct SET v = v + 1 WHERE id = 1}),
	'5F003', 'c: session_replication_role = replica, local UPDATE without a token: 5F003');
is(sqlstate($sub, q{SET session_replication_role = replica; DELETE FROM ev WHERE id = 1}),
	'5F003', 'c: ... replica, DELETE on a partitioned table: 5F003');
is(sqlstate($sub, q{SET session_replication_role = replica; UPDATE ev SET v = 'local' WHERE id = 1}),
	'5F003', 'c: ... replica, UPDATE of the after form\'s table leaving the epoch as it was: 5F003');
is(sqlstate($sub, q{UPDATE ev SET v = 'local', writer_epoch = writer_epoch + 1 WHERE id = 1}),
	'5G002', 'c: ... and one writing an epoch the subscriber never issued: 5G002');
is(sqlstate($sub, q{SET session_replication_role = replica; TRUNCATE acct}),
	'5F005', 'c: ... replica, TRUNCATE: 5F005');
same_as_publisher('c: after the refused local writes', qw(acct ev));
# twin: the unprotected table takes the same local write
is(sqlstate($sub, 'UPDATE plain SET v = v + 1 WHERE id = 2'), 'ok',
	'c twin: the same local UPDATE of the unprotected table succeeds');
isnt(rows($sub, 'plain'), rows($pub, 'plain'),
	"c twin: ... and the subscriber's plain no longer matches the publisher's");

# ---------------------------------------------------------------------------
# d. a trigger firing in the apply worker (which runs with an empty
# search_path: the trigger qualifies its tables)

q1($sub, q{
CREATE TABLE acct_seen (acct_id int);
CREATE TABLE acct_log (id bigserial PRIMARY KEY, acct_id int,
                       writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('acct_log', mode => 'shared');
CREATE FUNCTION note_acct() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.acct_seen VALUES (NEW.id);
  RETURN NULL;
END $$;
CREATE TRIGGER acct_note AFTER INSERT ON acct FOR EACH ROW EXECUTE FUNCTION note_acct();
ALTER TABLE acct ENABLE ALWAYS TRIGGER acct_note;
});
my $t_w5 = q1($pub, q{SELECT fence_claim('w5', '1 hour', 'worker-5')});
q1($pub, "INSERT INTO acct VALUES (20, 1, $t_w5)");
$pub->wait_for_catchup('sub');
is(q1($sub, 'SELECT string_agg(acct_id::text, \' \') FROM acct_seen'), '20',
	'd twin: the ENABLE ALWAYS trigger fires in the apply worker (it wrote an unprotected table)');
is(sub_errors(), '0 0', 'e: after the trigger on an unprotected table: no errors');

my $log_offset = -s $sub->logfile;
q1($sub, q{
CREATE OR REPLACE FUNCTION note_acct() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.acct_seen VALUES (NEW.id);
  INSERT INTO public.acct_log (acct_id) VALUES (NEW.id);
  RETURN NULL;
END $$;
});
q1($pub, "INSERT INTO acct VALUES (21, 1, $t_w5)");
ok($sub->poll_query_until('postgres',
		q{SELECT apply_error_count > 0 FROM pg_stat_subscription_stats WHERE subname = 'sub'}),
	'd: the trigger writing a protected table without a token: the apply worker fails (apply_error_count > 0)');
$sub->wait_for_log(qr/ERROR:\s+5F003:/, $log_offset);
my $log = slurp_file($sub->logfile, $log_offset);
like($log, qr/ERROR:\s+5F003: write to "acct_log"[^\n]*\n(?:[^\n]*\n){0,6}?[^\n]*processing remote data for replication origin/,
	'd: the subscriber log shows the apply worker\'s 5F003 from the trigger\'s write to acct_log');
is(q1($sub, 'SELECT count(*) FROM acct WHERE id = 21'), 0, 'd: the change did not land');
is(q1($sub, 'SELECT count(*) FROM acct_log'), 0, 'd: nor did the trigger\'s write');
q1($sub, 'DROP TRIGGER acct_note ON acct');
$pub->wait_for_catchup('sub');
is(q1($sub, 'SELECT count(*) FROM acct WHERE id = 21'), 1, 'd: after DROP TRIGGER the change applies');
same_as_publisher('d: after the fix', qw(acct));
q1($sub, q{SELECT pg_stat_reset_subscription_stats(oid) FROM pg_subscription WHERE subname = 'sub'});
is(sub_errors(), '0 0', 'd: statistics reset');

# ---------------------------------------------------------------------------
# f. the twin of the exemption: the apply's changes made by a session

my %sess = (
	"INSERT INTO acct VALUES (30, 3, $t_w5)" => [ '5G002', 'a row with the publisher\'s epoch' ],
	'INSERT INTO acct (id, v) VALUES (30, 3)' => [ '5F003', 'the same row without an epoch' ],
	"UPDATE acct SET v = 5, writer_epoch = $t_w5 WHERE id = 5" => [ '5G002', 'an UPDATE with the publisher\'s epoch' ],
	'DELETE FROM acct WHERE id = 6' => [ '5F003', 'a DELETE' ],
	"INSERT INTO ev VALUES (30, 1, 'x', $t_w5)" => [ '5G002', 'a row of a partitioned table' ],
	'TRUNCATE ledger' => [ '5F005', 'a TRUNCATE' ]);
for my $sql (sort keys %sess)
{
	my ($want, $what) = @{ $sess{$sql} };
	is(sqlstate($sub, $sql), $want, "f: a subscriber session making the apply's change ($what): $want");
	is(sqlstate($sub, "SET session_replication_role = replica; $sql"), $want,
		"f: ... as replica: $want");
}
q1($pub, qq{
INSERT INTO acct VALUES (30, 3, $t_w5);
UPDATE acct SET v = 5, writer_epoch = $t_w5 WHERE id = 5;
BEGIN; SELECT fence_begin('w5', $t_w5); DELETE FROM acct WHERE id = 6; COMMIT;
INSERT INTO ev VALUES (30, 1, 'x', $t_w5);
BEGIN;
SELECT fence_unprotect('ledger', 'test 008: empty the ledger');
TRUNCATE ledger;
SELECT fence_protect('ledger', mode => 'repeat');
COMMIT;
});
$pub->wait_for_catchup('sub');
same_as_publisher('f: the same changes made on the publisher apply', qw(acct ev ledger));
is(q1($sub, 'SELECT count(*) FROM ledger'), 0, 'f: ... the TRUNCATE too');
is(sub_errors(), '0 0', 'e: after the twin: apply_error_count 0, sync_error_count 0');

# ---------------------------------------------------------------------------
# g. sessions with a replication origin

q1($sub, q{
CREATE TABLE local_only (id int PRIMARY KEY, v int NOT NULL,
                         writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('local_only');
CREATE TABLE origin_src (id int);
CREATE FUNCTION origin_src_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.acct_log (acct_id) VALUES (NEW.id);
  RETURN NULL;
END $$;
CREATE TRIGGER origin_src_log AFTER INSERT ON origin_src FOR EACH ROW EXECUTE FUNCTION origin_src_log();
SELECT pg_replication_origin_create('fence_t008');
CREATE ROLE fence_plain LOGIN;
GRANT INSERT, UPDATE, SELECT ON local_only TO fence_plain;
});
my $setup = q{SELECT pg_replication_origin_session_setup('fence_t008');};
is(sqlstate($sub, "$setup INSERT INTO local_only VALUES (1, 1, 777), (2, 2, 0);
                   UPDATE local_only SET v = 10 WHERE id = 1;
                   DELETE FROM local_only WHERE id = 2;"),
	'ok', 'g: a superuser session with a replication origin writes without a token');
is(q1($sub, 'SELECT id || \' \' || v || \' \' || writer_epoch FROM local_only'), '1 10 777',
	'g: ... its rows keep the epoch it wrote (no stamping)');
is(sqlstate($sub, "$setup INSERT INTO origin_src VALUES (1)"), '5F003',
	'g: ... but a trigger it fires that writes a protected table is refused (5F003)');
is(sqlstate($sub, "$setup TRUNCATE local_only"), 'ok', 'g: ... and it may TRUNCATE (as an apply would)');
is(sqlstate($sub, 'INSERT INTO local_only VALUES (3, 3)'), '5F003',
	'g twin: the same write without an origin: 5F003');
is(sqlstate($sub, $setup, extra => [ '-U', 'fence_plain' ]), '42501',
	'g: a plain role cannot set up a replication origin (42501)');
is(sqlstate($sub, 'INSERT INTO local_only VALUES (3, 3)', extra => [ '-U', 'fence_plain' ]), '5F003',
	'g: ... and its write without a token is refused (5F003)');
# The trust is the session user's, not the session's: a plain role granted
# the origin functions is guarded like any writer until
# fence_grant_replication trusts it with the table.
q1($sub, q{
DO $$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.proname = 'pg_replication_origin_session_setup'
              AND p.pronamespace = 'pg_catalog'::regnamespace LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO fence_plain', f);
  END LOOP;
END $$;
});
my $plain_origin = "$setup INSERT INTO local_only VALUES (4, 4, 888)";
is(sqlstate($sub, $setup, extra => [ '-U', 'fence_plain' ]), 'ok',
	'g: granted the origin functions, the plain role sets up an origin');
isnt(sqlstate($sub, $plain_origin, extra => [ '-U', 'fence_plain' ]), 'ok',
	'g: ... and its write with an origin, an epoch of its own and no token is guarded: refused');
is(q1($sub, 'SELECT count(*) FROM local_only WHERE id = 4'), '0', 'g: ... the row did not land');
q1($sub, q{SELECT fence_grant_replication('local_only', 'fence_plain')});
is(sqlstate($sub, $plain_origin, extra => [ '-U', 'fence_plain' ]), 'ok',
	'g twin: once fence_grant_replication trusts fence_plain with local_only, the same write lands');
is(q1($sub, 'SELECT writer_epoch FROM local_only WHERE id = 4'), '888',
	'g twin: ... unchecked, with the epoch it wrote');
q1($sub, q{SELECT fence_revoke_replication('local_only', 'fence_plain')});
isnt(sqlstate($sub, "$setup INSERT INTO local_only VALUES (5, 5, 889)", extra => [ '-U', 'fence_plain' ]), 'ok',
	'g: after fence_revoke_replication the next such write is refused again');

# ---------------------------------------------------------------------------
# i. publishing fence_claims: the claims, not the counter

q1($pub, 'ALTER PUBLICATION pub ADD TABLE fence_claims');
q1($sub, 'ALTER SUBSCRIPTION sub REFRESH PUBLICATION');
$sub->wait_for_subscription_sync($pub, 'sub');
is(q1($sub, q{SELECT fence_current('w5')}), $t_w5,
	"i: with fence_claims published, the subscriber's fence_current answers for the publisher's job ($t_w5)");
cmp_ok(counter($sub), '<', $t_w5, "i: ... but the subscriber's counter stays behind (sequences are not replicated)");
# the replicated registry says current, but the subscriber's counter never
# issued the token: not a claim here
is(sqlstate($sub, "BEGIN; SELECT fence_begin('w5', $t_w5); UPDATE local_only SET v = 11 WHERE id = 1; COMMIT;"),
	'5F004', "i: the publisher's current token is refused for a local write (5F004: never issued here)");
is(sqlstate($sub, "INSERT INTO local_only VALUES (9, 9, $t_w5)"),
	'5F004', "i: ... in the statement's epoch too");
is(q1($sub, q{SELECT count(*) > 0 FROM fence_audit() WHERE problem ~ 'is below the largest token in fence_claims'}), 't',
	"i: ... and fence_audit() on the subscriber reports claims above its counter");
q1($pub, q{SELECT fence_release('w5', } . $t_w5 . ')');
$pub->wait_for_catchup('sub');
is(sqlstate($sub, "BEGIN; SELECT fence_begin('w5', $t_w5); UPDATE local_only SET v = 12 WHERE id = 1; COMMIT;"),
	'5F004', 'i: once the release has replicated, the released row still lists a token never issued here (5F004)');
q1($pub, 'ALTER PUBLICATION pub DROP TABLE fence_claims');
q1($sub, 'ALTER SUBSCRIPTION sub REFRESH PUBLICATION');

# ---------------------------------------------------------------------------
# h. the subscriber's own counter

my $fresh = q{BEGIN; SELECT fence_begin_fresh('test 008: local fix'); UPDATE acct SET v = -1 WHERE id = 1; COMMIT;};
my ($code, $err) = try_sql($sub, $fresh);
is($code, '5F002', 'h: a local write with a fresh token meets a replicated epoch: 5F002');
like($err, qr/from the future.*fence_advance/s, 'h: ... "from the future", naming fence_advance') or diag($err);
q1($sub, 'SELECT fence_advance()');
is(sqlstate($sub, $fresh), 'ok', 'h: after fence_advance on the subscriber the local write succeeds');
my $local_epoch = q1($sub, 'SELECT writer_epoch FROM acct WHERE id = 1');
cmp_ok($local_epoch, '>', $t_w5, "h: the local write's epoch $local_epoch is the subscriber's token");
my $t_w6 = q1($pub, q{SELECT fence_claim('w6', '1 hour', 'worker-6')});
q1($pub, "UPDATE acct SET v = 600, writer_epoch = $t_w6 WHERE id = 1");
$pub->wait_for_catchup('sub');
is(q1($sub, 'SELECT v || \' \' || writer_epoch FROM acct WHERE id = 1'), "600 $t_w6",
	'h: the publisher\'s next write of the row (a lower epoch) replaces the local one: the apply does not compare');
same_as_publisher('h: in the end', qw(acct stock ev ledger));
is(sub_errors(), '0 0', 'e: in the end: apply_error_count 0, sync_error_count 0');

# ---------------------------------------------------------------------------
# j. a subscription a superuser does not own

my $major = int(q1($sub, 'SHOW server_version_num') / 10000);
$pub->safe_psql('postgres', 'CREATE DATABASE attack');
$pub->safe_psql('attack', q{
CREATE TABLE vault (id int PRIMARY KEY, v int NOT NULL,
                    writer_epoch bigint NOT NULL DEFAULT 0);
CREATE PUBLICATION pub_m FOR TABLE vault;
});
# On 16 and later the apply of a subscription a superuser does not own must
# authenticate with a password: the publisher asks for one in database attack.
my $pubuser = q1($pub, 'SELECT current_user');
q1($pub, "ALTER ROLE $pubuser PASSWORD 'fence-t008'");
{
	my $hba = $pub->data_dir . '/pg_hba.conf';
	my $old = slurp_file($hba);
	open(my $fh, '>', $hba) or die "$hba: $!";
	print $fh "local attack all scram-sha-256\n" . $old;
	close($fh);
	$pub->reload;
}
# this test's own connections to attack give it too (trust ignores it)
$ENV{PGPASSWORD} = 'fence-t008';
my $mconn = $pub->connstr . " dbname=attack user=$pubuser password=fence-t008";
q1($sub, q{
CREATE TABLE vault (id int PRIMARY KEY, v int NOT NULL,
                    writer_epoch bigint NOT NULL DEFAULT 0);
SELECT fence_protect('vault');
CREATE ROLE mallory LOGIN;
GRANT SELECT, INSERT, UPDATE ON vault TO mallory;
});
my $t_v = q1($sub, q{SELECT fence_claim('vault:1', '1 hour', 'worker')});
q1($sub, "BEGIN; SELECT fence_begin('vault:1', $t_v); INSERT INTO vault (id, v) VALUES (1, 100); COMMIT;");
is(sqlstate($sub, 'INSERT INTO vault (id, v) VALUES (2, 666)', extra => [ '-U', 'mallory' ]), '5F003',
	"j: mallory's own write without a token is refused (5F003)");
if ($major >= 16)
{
	# the review's way: pg_create_subscription, run_as_owner
	q1($sub, 'GRANT pg_create_subscription TO mallory; GRANT CREATE ON DATABASE postgres TO mallory;');
	$sub->safe_psql('postgres',
		"CREATE SUBSCRIPTION msub CONNECTION '$mconn' PUBLICATION pub_m WITH (copy_data = false, run_as_owner = true)",
		extra_params => [ '-U', 'mallory' ]);
}
else
{
	# 15 lets only superusers create or own a subscription: mallory is one
	# while it takes this one over, then is no longer
	q1($sub, 'ALTER ROLE mallory SUPERUSER');
	q1($sub, "CREATE SUBSCRIPTION msub CONNECTION '$mconn' PUBLICATION pub_m WITH (copy_data = false)");
	q1($sub, 'ALTER SUBSCRIPTION msub OWNER TO mallory');
	q1($sub, 'ALTER ROLE mallory NOSUPERUSER');
}
is(q1($sub, q{SELECT r.rolname || ' ' || r.rolsuper FROM pg_subscription s JOIN pg_roles r ON r.oid = s.subowner WHERE s.subname = 'msub'}),
	'mallory false', 'j: subscription msub is owned by mallory, not a superuser');
my $msub_errors = sub {
	return q1($sub, q{SELECT coalesce((SELECT apply_error_count FROM pg_stat_subscription_stats WHERE subname = 'msub'), 0)});
};
my $log_at = -s $sub->logfile;
$pub->safe_psql('attack', 'INSERT INTO vault VALUES (2, 666, 9000000000000000000)');
ok($sub->poll_query_until('postgres', q{SELECT apply_error_count > 0 FROM pg_stat_subscription_stats WHERE subname = 'msub'}),
	"j: mallory's apply of a row with no token of the subscriber's fails");
is(q1($sub, 'SELECT count(*) FROM vault WHERE id = 2'), '0',
	'j: ... and the row (epoch 9000000000000000000) did not land');
like(slurp_file($sub->logfile, $log_at), qr/ERROR:  5G002: .*9000000000000000000/,
	'j: ... refused as any writer would be: 5G002, a token fence never issued (server log)');
q1($sub, q{SELECT fence_grant_replication('vault', 'mallory')});
ok($sub->poll_query_until('postgres', 'SELECT count(*) = 1 FROM vault WHERE id = 2'),
	'j twin: once fence_grant_replication trusts mallory with vault, the retried apply lands the row');
is(q1($sub, 'SELECT v || \' \' || writer_epoch FROM vault WHERE id = 2'), '666 9000000000000000000',
	'j twin: ... unchecked, with the epoch the publisher wrote (what the review saw with no grant at all)');
q1($sub, q{SELECT fence_revoke_replication('vault', 'mallory')});
my $before = $msub_errors->();
$pub->safe_psql('attack', 'INSERT INTO vault VALUES (3, 667, 9000000000000000001)');
ok($sub->poll_query_until('postgres', "SELECT apply_error_count > $before FROM pg_stat_subscription_stats WHERE subname = 'msub'"),
	'j: after fence_revoke_replication the next such change fails again');
is(q1($sub, 'SELECT count(*) FROM vault WHERE id = 3'), '0', 'j: ... and does not land');
is(q1($sub, q{SELECT string_agg(action || ':' || relation, ' ' ORDER BY id) FROM fence_audit_log WHERE action ~ 'replication'}),
	'grant_replication:public.local_only revoke_replication:public.local_only grant_replication:public.vault revoke_replication:public.vault',
	'j: every grant and revoke is in fence_audit_log');
is(sqlstate($sub, q{SELECT fence_grant_replication('vault', 'mallory')}, extra => [ '-U', 'mallory' ]), '42501',
	"j: mallory cannot grant itself the table (42501: not its owner)");
q1($sub, 'DROP SUBSCRIPTION msub');
q1($sub, q{SELECT fence_grant_replication('vault', 'mallory')});
q1($sub, 'DROP TABLE vault');
is(q1($sub, q{SELECT count(*) FROM fence_replication_grants}), '0',
	'j: no grant outlives its table');

$sub->stop;
$pub->stop;
note(sprintf('runtime %.1f s', time - $t0));
done_testing();
