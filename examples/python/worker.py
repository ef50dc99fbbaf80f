#!/usr/bin/python3
"""examples/python/worker.py: a fence job worker with psycopg 3.

    /usr/bin/python3 worker.py ID [LEASE_SECONDS [WORK_SECONDS]]

The job "count:ID" adds one to the row ID of the protected table counters
(examples/schema.sql). The loop: fence_claim the job (None: someone holds it,
try again later); read the counter; work for WORK_SECONDS, renewing the lease
with fence_renew every third of it; then, in one transaction
(`with conn.transaction()`), fence_begin and write the new value; then
fence_release. An error of SQLSTATE class 5F means this execution was fenced:
a newer one owns the job or the row. It ends the job at once, without a retry,
because the same token would be fenced again. Any other error is retried from
the claim, a few times.

psycopg knows no exception class for fence's SQLSTATEs: it raises a plain
psycopg.DatabaseError whose .sqlstate is "5F001" and so on, so the test is
e.sqlstate.startswith("5F").

Uses Debian's python3-psycopg (apt-get install python3-psycopg). Connection
settings come from the environment (PGHOST, PGPORT, PGDATABASE, ...). Output
is one line per step; exit status 0 done, 3 fenced, 1 gave up.

--table counters_unprotected --lease-only runs the same handler the way a
worker without fencing would: the claim is only a lease, the write carries no
token, and on the unprotected twin nothing checks it. test/checks/examples.sh
uses it to show the update that fence saves. FENCE_EXAMPLE_STOP_BEFORE_WRITE=1
makes the worker stop itself with SIGSTOP just before the write.
"""

import argparse
import os
import signal
import sys
import time

import psycopg
from psycopg import sql

MAX_ATTEMPTS = 5  # attempts after an error that is retryable
HELD_WAIT_SECONDS = 60  # how long to keep trying a held job


class Fenced(Exception):
    """This execution was fenced: end the job, do not retry."""


def say(*words):
    print(*words, flush=True)


def is_fenced(e):
    return (getattr(e, "sqlstate", None) or "").startswith("5F")


def run_job(conn, args, job):
    """One attempt. Returns True when done, False when the job is held."""
    token = conn.execute(
        "SELECT fence_claim(%s, make_interval(secs => %s), %s)",
        (job, args.lease, "python-worker"),
    ).fetchone()[0]
    if token is None:
        return False
    say("claimed", job, "token", token)
    table = sql.Identifier(args.table)
    try:
        row = conn.execute(
            sql.SQL("SELECT value FROM {} WHERE id = %s").format(table), (args.id,)
        ).fetchone()
        if row is None:
            raise LookupError(f"no counter {args.id}")
        value = row[0]
        say("read", value)

        # the handler's work; a long one renews the lease every third of it
        deadline = time.monotonic() + args.work
        while time.monotonic() < deadline:
            time.sleep(min(args.lease / 3, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                break
            until = conn.execute(
                "SELECT fence_renew(%s, %s, make_interval(secs => %s))",
                (job, token, args.lease),
            ).fetchone()[0]
            say("renewed until", until)

        if os.environ.get("FENCE_EXAMPLE_STOP_BEFORE_WRITE"):
            say("stopping before the write")
            os.kill(os.getpid(), signal.SIGSTOP)

        # the write: fence_begin binds the token, the guard checks every row
        with conn.transaction():
            if not args.lease_only:
                conn.execute("SELECT fence_begin(%s, %s)", (job, token))
            conn.execute(
                sql.SQL("UPDATE {} SET value = %s WHERE id = %s").format(table),
                (value + 1, args.id),
            )
        say("wrote", value + 1, "token", token)
    except psycopg.Error as e:
        if is_fenced(e):
            raise Fenced(f"{e.sqlstate}: {e.diag.message_primary}") from e
        release(conn, job, token)  # give the claim back before the retry
        raise
    except LookupError:
        release(conn, job, token)
        raise

    try:
        released = conn.execute("SELECT fence_release(%s, %s)", (job, token)).fetchone()[0]
        say("released", "true" if released else "false")
    except psycopg.Error as e:
        say("release failed (the lease runs out by itself):", e)
    return True


def release(conn, job, token):
    try:
        if not conn.closed:
            conn.execute("SELECT fence_release(%s, %s)", (job, token))
    except psycopg.Error:
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("id")
    p.add_argument("lease", nargs="?", type=float, default=30.0)
    p.add_argument("work", nargs="?", type=float, default=0.5)
    p.add_argument("--table", default="counters")
    p.add_argument("--lease-only", action="store_true",
                   help="no fence_begin: what a worker without fencing does")
    args = p.parse_args()
    job = f"count:{args.id}"
    say(f"worker pid {os.getpid()} job {job} lease {args.lease:g}s")

    attempts = 0
    said_held = False
    held_until = time.monotonic() + HELD_WAIT_SECONDS
    conn = None
    while True:
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(autocommit=True, application_name="fence-example-python")
            if run_job(conn, args, job):
                return 0
            if not said_held:
                say(f"held: {job} is claimed by another worker; trying again")
                said_held = True
            if time.monotonic() > held_until:
                say(f"gave up: {job} stayed held")
                return 1
            time.sleep(0.2)
            continue
        except Fenced as e:
            say("fenced", e)
            return 3
        except LookupError as e:
            say(e)
            return 1
        except psycopg.Error as e:
            say("retryable", getattr(e, "sqlstate", None) or "(no SQLSTATE)", str(e).strip())
            if conn is not None and conn.broken:
                conn = None
        attempts += 1
        if attempts >= MAX_ATTEMPTS:
            say(f"gave up after {attempts} attempts")
            return 1
        time.sleep(0.5 * attempts)


if __name__ == "__main__":
    sys.exit(main())
