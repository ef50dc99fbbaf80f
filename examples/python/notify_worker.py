#!/usr/bin/python3
"""examples/python/notify_worker.py: a worker told at once that it was superseded.

    /usr/bin/python3 notify_worker.py ID EFFECT_FILE [LEASE_SECONDS [WORK_SECONDS]]

The job "notify:ID" works for up to WORK_SECONDS (default 8), then makes an
external effect (here: appends a line to EFFECT_FILE; in real life an
e-mail, an HTTP call, a file upload, which fencing cannot reach) and then
writes the counter ID in a fenced transaction (job.transaction()).

fence.claim() (clients/python) listens on fence_superseded from before the
claim.  When a takeover or fence_release_any supersedes this worker's token,
and the session that made it has fence.notify_superseded on (ALTER DATABASE
... SET, ALTER ROLE ... SET, or PGOPTIONS), the notification arrives when
that change commits, and the client sets job.superseded.  The handler waits
on that event while it works: set, it skips the effect and ends the job
(exit 3).

Anyone can NOTIFY any channel, so a notification is a reason to stop, not a
proof: a worker that wants proof asks fence_is_current(job, token), and its
fenced write is the real check.  The worker uses both: the notification to
stop early, fence_begin to be sure.

Without the setting on the superseding side, nothing arrives (until the
client's next renewal, at a third of the lease, fails), and the handler
makes the effect a second time; its write is then fenced (5F001), too late
for the effect.  Output: one line a step; exit 0 done, 3 superseded or
fenced, 1 gave up.
"""

import os
import sys
import time

import psycopg

import fence


def say(*words):
    print(*words, flush=True)


def handle(conn, job_name, ident, effect_file, lease, work):
    """One claim of the job: the handler.  Exit status 0 or 3."""
    with fence.claim(conn, job_name, lease, holder=f"notify-worker {os.getpid()}") as job:
        say("claimed", job_name, "token", job.token)
        say(f"working up to {work:g} s")
        try:
            # The work, over early if the job is taken over meanwhile; then,
            # before an effect fencing cannot reach: was it?
            if job.superseded.wait(work):
                say("superseded: skipping the external effect")
                rc = 3
            else:
                with open(effect_file, "a") as f:
                    f.write(f"effect of {job_name} by token {job.token}\n")
                say("made the external effect")
                with job.transaction():
                    conn.execute("UPDATE counters SET value = value + 1 WHERE id = %s", (ident,))
                say("wrote token", job.token)
                rc = 0
        except fence.Fenced as e:
            say("fenced", e.sqlstate)
            rc = 3
    say("released", "true" if job.released else "false")
    return rc


def main():
    if len(sys.argv) < 3:
        say("usage: notify_worker.py ID EFFECT_FILE [LEASE_SECONDS [WORK_SECONDS]]")
        return 2
    ident, effect_file = sys.argv[1], sys.argv[2]
    lease = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
    work = float(sys.argv[4]) if len(sys.argv) > 4 else 8.0
    job_name = f"notify:{ident}"
    say(f"worker pid {os.getpid()} job {job_name} lease {lease:g}s")

    conn = psycopg.connect(autocommit=True, application_name="fence-example-notify")
    deadline = time.monotonic() + 60
    while True:
        try:
            return handle(conn, job_name, ident, effect_file, lease, work)
        except fence.Held:
            if time.monotonic() > deadline:
                say("gave up: the job stayed held")
                return 1
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
