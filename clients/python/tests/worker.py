"""tests/worker.py: a handler using the client, run as its own process by
test_fence.py so that it can be frozen (SIGSTOP) and killed (SIGKILL).

    /usr/bin/python3 worker.py MODE TABLE ID LEASE_SECONDS

The job is "count:ID"; the connection comes from the environment (PGHOST,
...).  The worker stops itself with SIGSTOP at a fixed point and prints one
line a step.

  fenced  claim, read the counter ID of TABLE, stop; once continued, write
          value + 1 in job.transaction().  Fenced: prints "fenced SQLSTATE
          ..." and exits 3.
  plain   the same handler without fence: the claim is only a lease and the
          write goes through conn.transaction(), without fence_begin (the
          unprotected twin).
  kill    claim; in job.transaction(), once("count:ID:effect") gates value +
          1 on TABLE, and TABLE_plain gets value + 1 whatever once says (the
          twin without fence_once); COMMIT; then stop before the release, to
          be killed there.
"""

import os
import signal
import sys

import psycopg
from psycopg import sql

import fence


def say(*words):
    print(*words, flush=True)


def main():
    mode, table, ident, lease = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    job_name = f"count:{ident}"
    conn = psycopg.connect(autocommit=True, application_name=f"fence-test-worker {mode}")
    t = sql.Identifier(table)
    with fence.claim(conn, job_name, lease) as job:
        say("claimed", job.token)
        if mode == "kill":
            with job.transaction():
                if job.once(f"{job_name}:effect"):
                    conn.execute(sql.SQL("UPDATE {} SET value = value + 1 WHERE id = %s").format(t), (ident,))
                conn.execute(
                    sql.SQL("UPDATE {} SET value = value + 1 WHERE id = %s").format(sql.Identifier(table + "_plain")),
                    (ident,),
                )
            say("committed")
            os.kill(os.getpid(), signal.SIGSTOP)
            say("not killed")
            return 1

        value = conn.execute(sql.SQL("SELECT value FROM {} WHERE id = %s").format(t), (ident,)).fetchone()[0]
        say("read", value)
        say("stopping")
        os.kill(os.getpid(), signal.SIGSTOP)
        try:
            if mode == "plain":
                with conn.transaction():
                    conn.execute(sql.SQL("UPDATE {} SET value = %s WHERE id = %s").format(t), (value + 1, ident))
            else:
                with job.transaction():
                    conn.execute(sql.SQL("UPDATE {} SET value = %s WHERE id = %s").format(t), (value + 1, ident))
            say("wrote", value + 1)
        except fence.Fenced as e:
            say(
                f"fenced {e.sqlstate} job {e.job} token {e.token}"
                f" cause {type(e.__cause__).__name__} {e.__cause__.sqlstate}"
                f" superseded {job.superseded.is_set()}"
            )
            return 3
    say("released", job.released)
    return 0


if __name__ == "__main__":
    sys.exit(main())
