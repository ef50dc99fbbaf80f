# Copyright (c) 2026, the fence authors

# The install script and the update script leave the same objects.
#
# fence 1.1 is reached two ways: CREATE EXTENSION fence runs fence--1.1.sql;
# a database created at 1.0 runs fence--1.0.sql, then ALTER EXTENSION fence
# UPDATE runs fence--1.0--1.1.sql.  One node, two databases, one made each
# way; FenceTest's fence_catalog_sql describes every object of the
# extension in each, one line per fact, and the two descriptions must be
# equal: the members; the functions' signatures with argument names and
# defaults, results, language, volatility, strictness, SECURITY DEFINER,
# parallel safety, SET clauses, C symbols and library, or bodies, owners
# and ACLs; the tables, sequences and views with their owners, ACLs,
# columns (position, type, NOT NULL, default, identity, generated),
# constraints, indexes, triggers, rules, policies, sequence parameters and
# view definitions; the event triggers (event, tags, enabled state); the
# tables pg_dump dumps, with their conditions; comments; pg_init_privs.
# Any difference is printed as a unified diff whose lines name the object.
#
# That CREATE EXTENSION ran fence--1.1.sql alone, not 1.0's script and the
# update: fence_claims' columns that 1.1 adds were created with the table
# (no column has a missing value), where the updated database's were added
# by ALTER TABLE (they have one).
#
# The comparison can fail: each twin below changes one object in the
# database created at 1.1, in a transaction that is rolled back, and the
# comparison must report that object, one twin for each kind of fact.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use FenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = fence_node('install_script', 10);
my $catalog_sql = fence_catalog_sql();
my ($fresh, $updated) = ('created_at_1_1', 'updated_from_1_0');
my ($fresh_label, $updated_label) =
  ('created at 1.1 (fence--1.1.sql)', 'created at 1.0, updated (fence--1.0--1.1.sql)');

sub q1
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql);
}

$node->safe_psql('postgres', "CREATE DATABASE $fresh");
$node->safe_psql('postgres', "CREATE DATABASE $updated");
# a role to hand an object to, for the ownership twin
$node->safe_psql('postgres', 'CREATE ROLE fence_other');

q1($fresh, 'CREATE EXTENSION fence');
is(q1($fresh, q{SELECT extversion FROM pg_extension WHERE extname = 'fence'}),
	'1.1', "$fresh: CREATE EXTENSION fence installs 1.1");
q1($updated, q{CREATE EXTENSION fence VERSION '1.0'});
is(q1($updated, q{SELECT extversion FROM pg_extension WHERE extname = 'fence'}),
	'1.0', "$updated: CREATE EXTENSION fence VERSION '1.0' installs 1.0");
my ($update_out, $update_err) = ('', '');
$node->psql($updated, q{ALTER EXTENSION fence UPDATE TO '1.1'},
	stdout => \$update_out, stderr => \$update_err, on_error_stop => 1);
is(q1($updated, q{SELECT extversion FROM pg_extension WHERE extname = 'fence'}),
	'1.1', "$updated: ALTER EXTENSION fence UPDATE TO '1.1' reaches 1.1");

# The one difference by design: the worker API (fence_worker_functions) is
# granted to no role by fence--1.1.sql, while the update keeps 1.0's grants
# to PUBLIC (fence_once, new in 1.1, included) and says in a WARNING how to
# move to the new default.  Once the WARNING's statement has run, the two
# databases differ only in pg_init_privs, which records what each script
# left: those lines are compared on their own.
my $public_may = q{
SELECT count(*) FROM fence_worker_functions() f
 WHERE has_function_privilege('fence_other', f, 'EXECUTE')};
is(q1($fresh, $public_may), '0', "$fresh: no EXECUTE for PUBLIC on the 5 worker functions");
is(q1($updated, $public_may), '5', "$updated: EXECUTE for PUBLIC on the 5 worker functions, kept");
like($update_err, qr/WARNING:  fence 1\.1 keeps EXECUTE on its worker functions granted to PUBLIC, as 1\.0 did/,
	"$updated: the update says so in a WARNING");
my ($move) = $update_err =~ /then (REVOKE EXECUTE ON FUNCTION .* FROM PUBLIC);/;
ok(defined $move, "$updated: ... whose hint names the REVOKE that moves to the new default")
  or diag($update_err);
q1($updated, "SELECT fence_grant_worker('fence_other'); $move");
is(q1($updated, $public_may), '5', "$updated: after the move, a granted worker role may call all 5");
q1($updated, "SELECT fence_revoke_worker('fence_other')");
is(q1($updated, $public_may), '0', "$updated: ... and after its revoke, none: PUBLIC has them no more");

my $worker_init_privs = worker_init_privs_re($node, $fresh);
sub comparable { return without_worker_init_privs($worker_init_privs, $_[0]); }

my $fresh_catalog = q1($fresh, $catalog_sql);
my $updated_catalog = q1($updated, $catalog_sql);
is(scalar(grep { $_ =~ $worker_init_privs && !/(: |, )=X\// } split /\n/, $fresh_catalog), 5,
	"$fresh: pg_init_privs records the 5 worker functions with no grant to PUBLIC");
is(scalar(grep { $_ =~ $worker_init_privs } split /\n/, $updated_catalog), 0,
	"$updated: and records none for them (PostgreSQL's default, EXECUTE for PUBLIC)");
$fresh_catalog = comparable($fresh_catalog);
$updated_catalog = comparable($updated_catalog);

# The description covers what it claims to: a line of each kind.
my @kinds = (
	[ 'the extension', qr/^extension fence: version 1\.1; schema public; relocatable f; owner \S+$/ ],
	[ 'a table pg_dump dumps', qr/^extension fence: pg_dump dumps fence_claims with condition ''$/ ],
	[ 'a member', qr/^extension fence: member function fence_claim\(text,interval,text\)$/ ],
	[ 'a function\'s attributes',
		qr/^function fence_claim\(text,interval,text\): arguments \(job text, lease interval DEFAULT '00:05:00'::interval, holder text DEFAULT NULL::text\); result bigint; language c; kind f; volatility v; strict f; security definer f; leakproof f; parallel u; cost 1; rows 0; SET ; support -; owner \S+; ACL [^=]+=X\/\S+$/ ],
	[ 'a C function\'s symbol', qr/^function fence_claim\(text,interval,text\): C symbol fence_claim in \$libdir\/fence$/ ],
	[ 'a function\'s ACL', qr/^function fence_advance\(bigint\): .*; ACL [^=]+=X\/\S+$/ ],
	[ 'a function\'s SET clause', qr/^function fence_audit\(boolean\): .*; SET search_path=pg_catalog, pg_temp; / ],
	[ 'a body\'s line', qr/^function fence_prune\(interval,integer\): body \d+\| \s*COMMIT;$/ ],
	[ 'a table', qr/^relation fence_claims: kind r; persistence p; owner \S+; ACL =r\/\S+, \S+=arwdDxtm?\/\S+; / ],
	[ 'a column', qr/^relation fence_claims: column n_releases: position 11; type bigint; not null t; default 0; identity ; generated ; / ],
	[ 'an identity column', qr/^relation fence_audit_log: column id: position 1; type bigint; not null t; default ; identity a; / ],
	[ 'a constraint', qr/^relation fence_claims: constraint fence_claims_token_check: CHECK \(\(token > 0\)\); / ],
	[ 'an index', qr/^relation fence_claims: index CREATE UNIQUE INDEX fence_claims_pkey ON public\.fence_claims USING btree \(job\)$/ ],
	[ 'a sequence', qr/^relation fence_audit_log_id_seq: sequence: type bigint; .*; owned by column id of table fence_audit_log$/ ],
	[ 'a view\'s line', qr/^relation fence_status: view \d+\| .*\bfence_claims c\b/ ],
	[ 'an event trigger', qr/^event trigger fence_ddl_command_start: on ddl_command_start; tags ; enabled A; function fence_ddl_command_start\(\); owner \S+$/ ],
	[ 'a comment', qr/^comment: on extension fence: fencing tokens/ ],
	[ 'initial privileges', qr/^initial privileges: of table fence_claims \(e\): =r\/\S+, / ]);
for my $kind (@kinds)
{
	my ($what, $re) = @$kind;
	ok((grep { $_ =~ $re } split /\n/, $fresh_catalog),
		"the description of $fresh has a line for $what");
}

is(catalog_diff($fresh_label, $fresh_catalog, $updated_label, $updated_catalog), '',
	'a database created at 1.1 and one updated from 1.0 hold the same objects')
  or diag(catalog_diff($fresh_label, $fresh_catalog, $updated_label, $updated_catalog));
note(sprintf('%d lines of description each', scalar(split /\n/, $fresh_catalog)));

# ---------------------------------------------------------------------------
# The twins: one change in the database created at 1.1, in a transaction
# rolled back after the description is taken; the comparison reports it, on
# a line about the object changed.

my @twins = (
	[ 'a grant on a function',
		q{GRANT EXECUTE ON FUNCTION fence_advance(bigint) TO PUBLIC},
		qr/^function fence_advance\(bigint\): arguments/ ],
	[ 'a function\'s volatility',
		q{ALTER FUNCTION fence_current(text) STABLE},
		qr/^function fence_current\(text\): .*volatility s;/ ],
	[ 'a function\'s strictness',
		q{ALTER FUNCTION fence_claim(text, interval, text) STRICT},
		qr/^function fence_claim\(text,interval,text\): .*strict t;/ ],
	[ 'a function\'s SECURITY DEFINER',
		q{ALTER FUNCTION fence_is_current(text, bigint) SECURITY DEFINER},
		qr/^function fence_is_current\(text,bigint\): .*security definer t;/ ],
	[ 'a function\'s parallel safety',
		q{ALTER FUNCTION fence_refusal_counts() PARALLEL UNSAFE},
		qr/^function fence_refusal_counts\(\): .*parallel u;/ ],
	[ 'a function\'s SET clause',
		q{ALTER FUNCTION fence_audit(boolean) SET work_mem = '1MB'},
		qr/^function fence_audit\(boolean\): .*SET search_path=pg_catalog, pg_temp, work_mem=1MB;/ ],
	[ 'an argument\'s default',
		q{CREATE OR REPLACE FUNCTION fence_begin_fresh(reason text DEFAULT 'changed') RETURNS bigint
		  AS '$libdir/fence', 'fence_begin_fresh' LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE},
		qr/^function fence_begin_fresh\(text\): arguments \(reason text DEFAULT 'changed'/ ],
	[ 'a C function\'s symbol',
		q{UPDATE pg_catalog.pg_proc SET prosrc = 'fence_current'
		   WHERE oid = 'fence_is_current(text, bigint)'::regprocedure},
		qr/^function fence_is_current\(text,bigint\): C symbol fence_current in / ],
	[ 'a PL/pgSQL body',
		q{UPDATE pg_catalog.pg_proc SET prosrc = replace(prosrc, 'COMMIT;', 'COMMIT;  -- changed')
		   WHERE oid = 'fence_prune(interval, integer)'::regprocedure},
		qr/^function fence_prune\(interval,integer\): body \d+\| .*-- changed$/ ],
	[ 'a table\'s grant',
		q{GRANT INSERT ON fence_claims TO PUBLIC},
		qr/^relation fence_claims: kind r; .*ACL =ar\// ],
	[ 'a table\'s owner',
		q{ALTER TABLE fence_pruned OWNER TO fence_other},
		qr/^relation fence_pruned: kind r; persistence p; owner fence_other;/ ],
	[ 'a column\'s default',
		q{ALTER TABLE fence_claims ALTER COLUMN n_claims SET DEFAULT 2},
		qr/^relation fence_claims: column n_claims: .*; default 2;/ ],
	[ 'a column\'s NOT NULL',
		q{ALTER TABLE fence_audit_log ALTER COLUMN detail SET NOT NULL},
		qr/^relation fence_audit_log: column detail: .*; not null t;/ ],
	[ 'a column\'s identity',
		q{ALTER TABLE fence_audit_log ALTER COLUMN id SET GENERATED BY DEFAULT},
		qr/^relation fence_audit_log: column id: .*; identity d;/ ],
	[ 'a generated column',
		q{ALTER TABLE fence_pruned ADD COLUMN changed int GENERATED ALWAYS AS (1) STORED},
		qr/^relation fence_pruned: column changed: position \d+; .*; generated s;/ ],
	[ 'a constraint',
		q{ALTER TABLE fence_pruned ADD CONSTRAINT fence_pruned_pruned_check CHECK (pruned >= 0)},
		qr/^relation fence_pruned: constraint fence_pruned_pruned_check: CHECK/ ],
	[ 'an index',
		q{CREATE INDEX fence_claims_holder_idx ON fence_claims (holder)},
		qr/^relation fence_claims: index CREATE INDEX fence_claims_holder_idx / ],
	[ 'a sequence\'s parameters',
		q{ALTER SEQUENCE fence_audit_log_id_seq CACHE 10},
		qr/^relation fence_audit_log_id_seq: sequence: .*; cache 10;/ ],
	[ 'a view\'s definition',
		q{DO $$ BEGIN EXECUTE 'CREATE OR REPLACE VIEW fence_stats AS '
		  || rtrim(pg_get_viewdef('fence_stats'::regclass), ';') || ' LIMIT 1'; END $$},
		qr/^relation fence_stats: view \d+\| .*LIMIT 1/ ],
	[ 'a trigger',
		q{CREATE TRIGGER fence_pruned_same BEFORE UPDATE ON fence_pruned
		  FOR EACH ROW EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger()},
		qr/^relation fence_pruned: trigger CREATE TRIGGER fence_pruned_same / ],
	[ 'a policy',
		q{CREATE POLICY fence_claims_any ON fence_claims USING (true)},
		qr/^relation fence_claims: policy fence_claims_any: / ],
	[ 'an event trigger\'s enabled state',
		q{ALTER EVENT TRIGGER fence_sql_drop ENABLE},
		qr/^event trigger fence_sql_drop: on sql_drop; tags ; enabled O;/ ],
	[ 'an event trigger\'s tags',
		q{UPDATE pg_catalog.pg_event_trigger SET evttags = '{"ALTER TABLE"}'
		   WHERE evtname = 'fence_table_rewrite'},
		qr/^event trigger fence_table_rewrite: on table_rewrite; tags \{"ALTER TABLE"\};/ ],
	[ 'extension membership',
		q{ALTER EXTENSION fence DROP FUNCTION fence_refusal_counts()},
		qr/^extension fence: member function fence_refusal_counts\(\)$/ ],
	[ 'a config-dump condition',
		q{UPDATE pg_catalog.pg_extension
		     SET extcondition = array_replace(extcondition, '', 'WHERE false')
		   WHERE extname = 'fence'},
		qr/^extension fence: pg_dump dumps fence_claims with condition 'WHERE false'$/ ],
	[ 'a comment',
		q{COMMENT ON FUNCTION fence_claim(text, interval, text) IS 'changed'},
		qr/^comment: on function fence_claim\(text,interval,text\): changed$/ ],
	[ 'initial privileges',
		q{DELETE FROM pg_catalog.pg_init_privs
		   WHERE classoid = 'pg_catalog.pg_proc'::regclass
		     AND objoid = 'fence_advance(bigint)'::regprocedure},
		qr/^initial privileges: of function fence_advance\(bigint\) \(e\): / ]);

for my $twin (@twins)
{
	my ($what, $change, $object) = @$twin;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($fresh, "BEGIN;\n$change;\n$catalog_sql\nROLLBACK;",
		stdout => \$out, stderr => \$err, on_error_stop => 1);
	$out = comparable($out);
	if ($rc != 0)
	{
		fail("twin, $what: the change applies") or diag($err);
		next;
	}
	my $diff = catalog_diff($fresh_label, $out, $updated_label, $updated_catalog);
	my @changed = grep { /^[-+](?![-+]{2} )/ } split /\n/, $diff;
	ok((grep { substr($_, 1) =~ $object } @changed),
		"twin, $what: the comparison reports it, naming the object")
	  or diag("the change: $change\nthe differences:\n$diff");
}

is(catalog_diff($fresh_label, comparable(q1($fresh, $catalog_sql)), $updated_label, $updated_catalog),
	'', 'after the twins (rolled back), the two databases are equal again');

$node->stop;
done_testing();
