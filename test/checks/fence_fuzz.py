#!/usr/bin/env python3
"""fence_fuzz.py: a psql script of random calls into every fence entry point.

Used by test/checks/sqlsmith.sh against its database "fuzz" (tables
inventory, report, shared_counts, parted, child_ref, plain; role smith).
sqlsmith seldom builds a call of fence's functions with interesting
arguments, so this generator does: NULL, empty, 1 MB, negative, forged and
injection-shaped jobs, tokens, leases, tables, columns and modes; guarded
writes of every kind (UPDATE, INSERT, upsert, MERGE, COPY, DELETE with a
cascade, cross-partition UPDATE, TRUNCATE) with and without fence_begin,
inside savepoints, under the replica role, with PREPARE TRANSACTION; and DDL
that moves the guard around.  Errors are expected; crashes are not.

Each statement group starts with a "-- stmt N" line, so the caller can count.
"""
import argparse
import random

ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--count", type=int, default=1000)
args = ap.parse_args()
R = random.Random(args.seed)
session = args.seed % 1000


def pick(*xs):
    return R.choice(xs)


def job():
    return pick(
        "'job-%d'" % R.randint(1, 40), "'job-%d'" % R.randint(1, 40),
        "'short-%d'" % R.randint(1, 10), "'fz-%d'" % R.randint(1, 200),
        "NULL", "''", "repeat('j', 1024)", "repeat('j', 1025)",
        "repeat('x', 1048576)", "repeat('é', 512)",
        "$q$x'); DROP TABLE inventory; --$q$", "'%s%n%x'",
        "E'nul\\\\0\\ttab\\nnl'", "'\"quoted\"'", "'jöb-✓'",
        "(SELECT job FROM fence_claims ORDER BY random() LIMIT 1)")


def token():
    return pick(
        "NULL", "0", "-1", "-9223372036854775808", "9223372036854775807",
        str(R.randint(1, 400)), "fence_current(%s)" % job(),
        "fence_current('job-%d')" % R.randint(1, 40),
        "(SELECT last_value FROM fence_token_seq)",
        "(SELECT last_value FROM fence_token_seq) + 1",
        "(SELECT max(token) FROM fence_claims)",
        "(SELECT token FROM fence_claims ORDER BY random() LIMIT 1)")


def lease():
    return pick("NULL", "'0'", "'-1 s'", "'1 ms'", "'1 s'", "'1 hour'",
                "'100000000 years'", "'1 month -40 days'", "'5 minutes'",
                "interval '1 day' * 1000000")


def holder():
    return pick("NULL", "'w%d'" % session, "repeat('h', 1048576)", "''")


def table():
    return pick("'inventory'", "'report'", "'shared_counts'", "'parted'",
                "'parted_1'", "'child_ref'", "'plain'", "'pg_class'",
                "'nope'", "NULL", "0", "'\"inventory; drop\"'")


def col():
    return pick("'writer_epoch'", "'e'", "'qty'", "''", "NULL", "'xmin'",
                "'writer_epoch\"; --'", "repeat('c', 100)", "'note'")


def mode():
    return pick("'strict'", "'repeat'", "'shared'", "''", "NULL", "'STRICT'",
                "'x'", "repeat('m', 100000)")


def epoch_set(name="writer_epoch"):
    return pick("", "", ", %s = %s" % (name, token()))


def write():
    sku = R.randint(0, 60)
    return pick(
        "UPDATE inventory SET qty = qty + 1%s WHERE sku = %d;" % (epoch_set(), sku),
        "UPDATE inventory SET qty = qty + 1%s;" % epoch_set(),
        "INSERT INTO inventory VALUES (%d, 1, 'i', %s) ON CONFLICT (sku) DO UPDATE"
        " SET qty = excluded.qty%s;" % (sku, token(), pick("", ", writer_epoch = excluded.writer_epoch")),
        "INSERT INTO inventory VALUES (%d, 1, 'i', %s);" % (R.randint(100, 10000), token()),
        "DELETE FROM inventory WHERE sku = %d;" % sku,
        "UPDATE parted SET id = id + %d%s WHERE id = %d;" % (pick(1, 500, -500), epoch_set(), R.randint(0, 900)),
        "INSERT INTO parted VALUES (%d, %s, 'f');" % (R.randint(0, 999), token()),
        "DELETE FROM parted WHERE id < %d;" % R.randint(0, 50),
        "INSERT INTO report (job, line, writer_epoch) VALUES (%s, 'l', %s);" % (job(), token()),
        "UPDATE report SET line = 'u'%s WHERE id = %d;" % (epoch_set(), R.randint(1, 30)),
        "UPDATE shared_counts SET n = n + 1%s WHERE k = 'k%d';" % (epoch_set("e"), R.randint(1, 10)),
        "MERGE INTO inventory i USING (VALUES (%d, 5)) v(sku, q) ON i.sku = v.sku"
        " WHEN MATCHED THEN UPDATE SET qty = v.q%s"
        " WHEN NOT MATCHED THEN INSERT VALUES (v.sku, v.q, 'm', %s);" % (sku, epoch_set(), token()),
        "COPY inventory FROM STDIN;\n%d\t3\tcopied\t%s\n\\." % (R.randint(100, 10000), pick("0", "1", "\\N", "-3", str(R.randint(1, 400)))),
        "TRUNCATE %s;" % pick("inventory", "parted", "parted_2", "report", "child_ref"),
        "UPDATE plain SET qty = qty + 1 WHERE sku = %d;" % sku,
        "UPDATE child_ref SET sku = %d%s WHERE id = %d;" % (sku, epoch_set(), R.randint(1, 30)),
    )


def call():
    return pick(
        "SELECT fence_claim(%s, %s, %s);" % (job(), lease(), holder()),
        "SELECT fence_claim(%s);" % job(),
        "SELECT fence_claim(%s, %s);" % (job(), lease()),
        "SELECT fence_renew(%s, %s, %s);" % (job(), token(), lease()),
        "SELECT fence_release(%s, %s);" % (job(), token()),
        "SELECT fence_current(%s);" % job(),
        "SELECT fence_is_current(%s, %s);" % (job(), token()),
        "SELECT fence_begin(%s, %s);" % (job(), token()),
        "SELECT fence_claim('job-' || g, %s) FROM generate_series(1, 40) g;" % lease(),
        "SELECT fence_guard();",
        "SELECT fence_refuse_truncate();",
        "SELECT * FROM fence_guard();",
        "SELECT fence_ddl_command_end();",
        "SELECT * FROM fence_ddl_command_end();",
    )


def ddl():
    n = R.randint(1, 5)
    return pick(
        "SELECT fence_protect(%s, %s, %s);" % (table(), col(), mode()),
        "SELECT fence_protect(%s);" % table(),
        "SELECT fence_unprotect(%s);" % table(),
        "SELECT fence_protect('inventory');",
        "SELECT fence_protect('parted');",
        "ALTER TABLE inventory DISABLE TRIGGER zz_fence_guard;",
        "ALTER TABLE inventory ENABLE ALWAYS TRIGGER zz_fence_guard;",
        "ALTER TABLE inventory ENABLE TRIGGER ALL;",
        "CREATE TABLE parted_x%d PARTITION OF parted FOR VALUES FROM (%d) TO (%d);" % (n, 1000 * n, 1000 * n + 1000),
        "ALTER TABLE parted DETACH PARTITION parted_x%d;" % n,
        "ALTER TABLE parted ATTACH PARTITION parted_x%d FOR VALUES FROM (%d) TO (%d);" % (n, 1000 * n, 1000 * n + 1000),
        "DROP TABLE parted_x%d;" % n,
        "CREATE TRIGGER zzz_after BEFORE UPDATE ON inventory FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();",
        "DROP TRIGGER IF EXISTS zzz_after ON inventory;",
    )


def block():
    """One transaction with a bound token, savepoints and an ending."""
    out = []
    fresh = R.random() < 0.6
    if fresh:
        # a job of our own, so the binding is valid and the writes get as
        # far as the guard's comparisons and stamping
        j = "'fzb-%d-%d'" % (session, R.randint(0, 10 ** 9))
        out.append("SELECT fence_claim(%s, '1 min') AS fztok \\gset" % j)
    out.append("BEGIN;")
    if R.random() < 0.3:
        out.append("SET LOCAL TRANSACTION ISOLATION LEVEL %s;" % pick("REPEATABLE READ", "SERIALIZABLE"))
    if fresh:
        out.append("SELECT fence_begin(%s, :fztok);" % j)
    else:
        j = "'job-%d'" % R.randint(1, 40)
        out.append("SELECT fence_begin(%s, %s);" % (j, pick("fence_current(%s)" % j, token())))
    for _ in range(R.randint(1, 5)):
        r = R.random()
        if r < 0.5:
            # a savepoint around it: an error does not end the block
            out.append("SAVEPOINT s;")
            out.append(pick(write(), write(), call()))
            out.append(pick("ROLLBACK TO SAVEPOINT s;", "RELEASE SAVEPOINT s;"))
        elif r < 0.3:
            out.append(call())
        else:
            out.append(write())
    end = R.random()
    if end < 0.5:
        out.append("COMMIT;")
    elif end < 0.8:
        out.append("ROLLBACK;")
    else:
        gid = "fz_%d_%d" % (session, R.randint(0, 10 ** 9))
        out.append("PREPARE TRANSACTION '%s';" % gid)
        out.append("ROLLBACK;")      # in case PREPARE failed inside the block
        out.append("ROLLBACK PREPARED '%s';" % gid)
    return "\n".join(out)


print("\\set VERBOSITY sqlstate")
print("SET statement_timeout = '5s';")
print("SET lock_timeout = '1s';")
for i in range(args.count):
    print("-- stmt %d" % i)
    r = R.random()
    if r < 0.07:
        print(pick("SET ROLE smith;", "RESET ROLE;"))
    elif r < 0.10:
        print("SET session_replication_role = replica;\n%s\nRESET session_replication_role;" % write())
    elif r < 0.35:
        print(block())
    elif r < 0.62:
        print(call())
    elif r < 0.92:
        print(write())
    else:
        print(ddl())
print("RESET ROLE;")
