#!/usr/bin/python3
"""examples/python/notify_worker.py: a worker told at once that it was superseded.

    /usr/bin/python3 notify_worker.py ID EFFECT_FILE [LEASE_SECONDS]

The job "notify:ID" makes an external effect (here: appends a line to
EFFECT_FILE; in real life an e-mail, an HTTP call, a file upload, which
fencing cannot reach) and then writes the counter ID in a fenced transaction.

A second connection LISTENs on fence_superseded.  When a takeover or
fence_release_any supersedes this worker's token, and the session that made
it has fence.notify_superseded on (ALTER DATABASE ... SET, ALTER ROLE ...
SET, or PGOPTIONS), the notification arrives when that change commits.  The
handler checks it before each external effect: one round trip on the
listening connection delivers whatever arrived while the worker was paused
(a GC pause, a SIGSTOP, a VM migration).  If the notification names this
job and token, the handler skips the effect and ends the job: exit 3.

Anyone can NOTIFY any channel, so a notification is a reason to stop, not a
proof: a worker that wants proof asks fence_is_current(job, token), and its
fenced write is the real check.  The worker uses both: the notification to
stop early, fence_begin to be sure.

Without the setting on the superseding side, nothing arrives, and the
handler makes the effect a second time; its write is then fenced (5F001),
too late for the effect.  FENCE_EXAMPLE_STOP_BEFORE_EFFECT=1 makes the
worker stop itself with SIGSTOP just before the effect.  Output: one line a
step; exit 0 done, 3 superseded or fenced, 1 gave up.
"""

import json
import os
import signal
import sys
import time

import psycopg


def say(*words):
    print(*words, flush=True)


class Superseded:
    """What the listener heard about this worker's token."""

    def __init__(self, job):
        self.job = job
        self.token = None
        self.new_token = None
        self.heard = False

    def on_notify(self, n):
        try:
            p = json.loads(n.payload)
        except ValueError:
            return
        if p.get("job") == self.job and p.get("superseded_token") == self.token:
            self.heard = True
            self.new_token = p.get("new_token")


def main():
    if len(sys.argv) < 3:
        say("usage: notify_worker.py ID EFFECT_FILE [LEASE_SECONDS]")
        return 2
    ident, effect_file = sys.argv[1], sys.argv[2]
    lease = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    job = f"notify:{ident}"
    say(f"worker pid {os.getpid()} job {job} lease {lease:g}s")

    conn = psycopg.connect(autocommit=True, application_name="fence-example-notify")
    listener = psycopg.connect(autocommit=True, application_name="fence-example-notify-listener")
    state = Superseded(job)
    listener.add_notify_handler(state.on_notify)
    listener.execute("LISTEN fence_superseded")

    deadline = time.monotonic() + 60
    while True:
        token = conn.execute(
            "SELECT fence_claim(%s, make_interval(secs => %s), %s)",
            (job, lease, f"notify-worker {os.getpid()}"),
        ).fetchone()[0]
        if token is not None:
            break
        if time.monotonic() > deadline:
            say("gave up: the job stayed held")
            return 1
        time.sleep(0.1)
    state.token = token
    say("claimed", job, "token", token)

    if os.environ.get("FENCE_EXAMPLE_STOP_BEFORE_EFFECT"):
        say("stopping before the effect")
        os.kill(os.getpid(), signal.SIGSTOP)

    # Before an effect fencing cannot reach: anything heard while paused?
    # (A query on the listening connection delivers what has arrived.)
    listener.execute("SELECT 1")
    if state.heard:
        say(f"superseded by token {state.new_token}: skipping the external effect")
        return 3
    with open(effect_file, "a") as f:
        f.write(f"effect of {job} by token {token}\n")
    say("made the external effect")

    try:
        with conn.transaction():
            conn.execute("SELECT fence_begin(%s, %s)", (job, token))
            conn.execute("UPDATE counters SET value = value + 1 WHERE id = %s", (ident,))
        say("wrote token", token)
    except psycopg.Error as e:
        if (e.sqlstate or "").startswith("5F"):
            say("fenced", e.sqlstate)
            return 3
        raise
    say("released", conn.execute("SELECT fence_release(%s, %s)", (job, token)).fetchone()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
