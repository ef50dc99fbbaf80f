#!/usr/bin/python3
"""examples/python/worker.py: a fence job worker with fence's Python client.

    /usr/bin/python3 worker.py ID [LEASE_SECONDS [WORK_SECONDS]]

The job "count:ID" adds one to the row ID of the protected table counters
(examples/schema.sql). The handler, with clients/python (package fence, over
psycopg 3): fence.claim() claims the job (fence.Held: someone holds it, try
again later) and renews the lease in the background while the block runs;
the handler reads the counter, works for WORK_SECONDS, then writes the new
value in job.transaction() (BEGIN, fence_begin, the UPDATE, COMMIT); the
claim is released on the way out. fence.Fenced (an error of SQLSTATE class
5F) means this execution was fenced: a newer one owns the job or the row. It
ends the job at once, without a retry, because the same token would be
fenced again. Any other error is psycopg's own, and is retried from the
claim, a few times.

Uses Debian's python3-psycopg (apt-get install python3-psycopg) and
clients/python on PYTHONPATH. Connection settings come from the environment
(PGHOST, PGPORT, PGDATABASE, ...). Output is one line per step; exit status
0 done, 3 fenced, 1 gave up.

--table counters_unprotected --lease-only runs the same handler the way a
worker without fencing would: the claim is only a lease, the write is a plain
conn.transaction() that carries no token, and on the unprotected twin nothing
checks it. test/checks/examples.sh uses it to show the update that fence
saves. FENCE_EXAMPLE_STOP_BEFORE_WRITE=1 makes the worker stop itself with
SIGSTOP just before the write.
"""

import argparse
import os
import signal
import sys
import time

import psycopg
from psycopg import sql

import fence

MAX_ATTEMPTS = 5  # attempts after an error that is retryable
HELD_WAIT_SECONDS = 60  # how long to keep trying a held job


def say(*words):
    print(*words, flush=True)


def work(job, seconds):
    """The handler's work: WORK_SECONDS, in steps of 100 ms, saying each
    renewal the client made meanwhile; over early when superseded."""
    seen = job.renewed_until
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not job.superseded.is_set():
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        if job.renewed_until != seen:
            seen = job.renewed_until
            say("renewed until", seen)


def run_job(conn, args, job_name):
    """One attempt: the claim, the handler, the release."""
    table = sql.Identifier(args.table)
    with fence.claim(conn, job_name, args.lease, holder="python-worker") as job:
        say("claimed", job_name, "token", job.token)
        row = conn.execute(
            sql.SQL("SELECT value FROM {} WHERE id = %s").format(table), (args.id,)
        ).fetchone()
        if row is None:
            raise LookupError(f"no counter {args.id}")
        value = row[0]
        say("read", value)

        work(job, args.work)

        if os.environ.get("FENCE_EXAMPLE_STOP_BEFORE_WRITE"):
            say("stopping before the write")
            os.kill(os.getpid(), signal.SIGSTOP)

        # the write: job.transaction() binds the token, the guard checks
        # every row; without fencing, a plain transaction
        with (conn.transaction() if args.lease_only else job.transaction()):
            conn.execute(
                sql.SQL("UPDATE {} SET value = %s WHERE id = %s").format(table),
                (value + 1, args.id),
            )
        say("wrote", value + 1, "token", job.token)
    say("released", "true" if job.released else "false")


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
            run_job(conn, args, job)
            return 0
        except fence.Held:
            if not said_held:
                say(f"held: {job} is claimed by another worker; trying again")
                said_held = True
            if time.monotonic() > held_until:
                say(f"gave up: {job} stayed held")
                return 1
            time.sleep(0.2)
            continue
        except fence.Fenced as e:
            say(f"fenced {e.sqlstate}: {e.__cause__.diag.message_primary}")
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
