"""tests/test_fence.py: the client against a real server (no mocks).

    PGHOST=... PGPORT=... PGDATABASE=... PGUSER=<a superuser> \\
        PYTHONPATH=clients/python /usr/bin/python3 clients/python/tests/test_fence.py

The database must have fence installed (in any schema: the tests find it in
pg_extension, as the client does); the role must be a superuser (ALTER
DATABASE, fence_release_any).  The tests make their own tables, counters
(protected, strict) and counters_plain (its unprotected twin), in the
schema first on the search_path.  Prints one "ok ..." line per test
(its docstring), "FAILED ..." otherwise; exit status 0 only if all pass.
Time bounds are generous: nothing waits for less than it needs.
"""

import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import psycopg
from psycopg import pq

import fence

HERE = os.path.dirname(os.path.abspath(__file__))


def connect(**kw):
    kw.setdefault("autocommit", True)
    return psycopg.connect(application_name="fence-test", **kw)


def wait_for(pred, timeout, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def setUpModule():
    """The tables, once; and, for a run again on the same database, the jobs
    and effect keys of the last run deleted (a superuser may delete claims
    of finished jobs)."""
    db = connect()
    s = Base.find_schema(db)
    with db.transaction():
        if db.execute("SELECT to_regclass('counters')").fetchone()[0] is None:
            db.execute(
                "CREATE TABLE counters (id text PRIMARY KEY, value bigint NOT NULL DEFAULT 0,"
                " writer_epoch bigint NOT NULL DEFAULT 0)"
            )
            db.execute(f"SELECT {s}.fence_protect('counters')")
            db.execute("CREATE TABLE counters_plain (LIKE counters INCLUDING ALL)")
        db.execute(f"DELETE FROM {s}.fence_effects WHERE key LIKE 'count:%'")
        db.execute(f"DELETE FROM {s}.fence_claims WHERE job LIKE 'count:%'")
    db.close()


class Base(unittest.TestCase):
    @staticmethod
    def find_schema(db):
        """fence's schema, quoted."""
        schema = db.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
            " WHERE e.extname = 'fence'"
        ).fetchone()[0]
        return '"' + schema.replace('"', '""') + '"'

    @classmethod
    def setUpClass(cls):
        cls.db = connect()
        cls.s = cls.find_schema(cls.db)
        cls.schema = cls.s[1:-1].replace('""', '"')

    @classmethod
    def tearDownClass(cls):
        cls.db.close()

    def q(self, query, args=()):
        """The first column of the first row, on the test's own connection."""
        row = self.db.execute(query, args).fetchone()
        return None if row is None else row[0]

    def seed(self, ident, value=0):
        """counters and counters_plain get row ident = value (a fresh token)."""
        with self.db.transaction():
            self.db.execute(f"SELECT {self.s}.fence_begin_fresh()")
            for t in ("counters", "counters_plain"):
                self.db.execute(f"DELETE FROM {t} WHERE id = %s", (ident,))
                self.db.execute(f"INSERT INTO {t} (id, value) VALUES (%s, %s)", (ident, value))

    def claim_row(self, job):
        return self.db.execute(
            f"SELECT token, released FROM {self.s}.fence_claims WHERE job = %s", (job,)
        ).fetchone()


def claim_when_free(conn, job, lease, timeout=30):
    """fence.claim(conn, job, lease), tried until the job is free: a context
    manager already entered; the caller must exit it (use in a with via
    contextlib.ExitStack)."""
    end = time.monotonic() + timeout
    while True:
        cm = fence.claim(conn, job, lease)
        try:
            return cm, cm.__enter__()
        except fence.Held:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


class Worker:
    """tests/worker.py as its own process; its stdout a line at a time."""

    def __init__(self, *args):
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), *map(str, args)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        self.lines = []

    def expect(self, prefix, timeout=60):
        """Read lines until one starts with prefix; return it."""
        result = {}

        def read():
            for line in self.p.stdout:
                self.lines.append(line.rstrip("\n"))
                if line.startswith(prefix):
                    result["line"] = line.rstrip("\n")
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if "line" not in result:
            raise AssertionError(f"worker never printed {prefix!r}; it printed {self.lines!r}")
        return result["line"]

    def stopped(self):
        with open(f"/proc/{self.p.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"

    def wait_stopped(self, timeout=60):
        if not wait_for(self.stopped, timeout):
            raise AssertionError(f"worker {self.p.pid} did not stop; it printed {self.lines!r}")

    def finish(self, timeout=60):
        rest, _ = self.p.communicate(timeout=timeout)
        self.lines.extend(rest.splitlines())
        return self.p.returncode

    def kill(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGCONT)
            self.p.kill()
            self.p.wait()


class HappyPath(Base):
    def test_claim_transaction_once_release(self):
        """claim, transaction (BEGIN, fence_begin, COMMIT), once (true, then false), release: the write carries the token, the claim is released, the keeper's connection is gone"""
        self.seed("happy")
        conn = connect()
        with fence.claim(conn, "count:happy", 30) as job:
            self.assertIsInstance(job.token, int)
            self.assertEqual(job.schema, self.schema)
            self.assertEqual(self.claim_row("count:happy"), (job.token, False))
            with job.transaction() as c:
                self.assertIs(c, conn)
                self.assertEqual(conn.info.transaction_status, pq.TransactionStatus.INTRANS)
                self.assertTrue(job.once("count:happy:effect"))
                conn.execute("UPDATE counters SET value = value + 1 WHERE id = 'happy'")
            self.assertEqual(conn.info.transaction_status, pq.TransactionStatus.IDLE)
            with job.transaction():
                self.assertFalse(job.once("count:happy:effect"))
            self.assertFalse(job.superseded.is_set())
        self.assertIs(job.released, True)
        self.assertEqual(self.claim_row("count:happy"), (job.token, True))
        self.assertEqual(
            self.db.execute("SELECT value, writer_epoch FROM counters WHERE id = 'happy'").fetchone(), (1, job.token)
        )
        self.assertTrue(
            wait_for(lambda: self.q("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fence-python keeper'") == 0, 30),
            "the keeper's connection was closed",
        )
        conn.close()

    def test_explicit_schema_and_timedelta(self):
        """schema= names fence's schema explicitly; a timedelta lease is passed as an interval (lease_expires_at - claimed_at = 45 s)"""
        import datetime

        conn = connect()
        with fence.claim(conn, "count:schema", datetime.timedelta(seconds=45), schema=self.schema, holder="me") as job:
            self.assertEqual(
                self.db.execute(
                    f"SELECT lease_expires_at - claimed_at, holder FROM {self.s}.fence_claims WHERE job = %s",
                    (job.name,),
                ).fetchone(),
                (datetime.timedelta(seconds=45), "me"),
            )
        self.assertTrue(job.released)
        conn.close()

    def test_held(self):
        """a second claim of a held job raises fence.Held (fence_claim returned NULL), and leaves the first claim as it was"""
        a, b = connect(), connect()
        with fence.claim(a, "count:held", 30) as job:
            with self.assertRaises(fence.Held) as cm:
                with fence.claim(b, "count:held", 30):
                    self.fail("the block ran on a held job")
            self.assertEqual(cm.exception.job, "count:held")
            self.assertEqual(self.claim_row("count:held"), (job.token, False))
        self.assertTrue(job.released)
        a.close()
        b.close()


class AutocommitOff(Base):
    def test_claim_and_release_persist(self):
        """autocommit off: the claim is committed at once (another session sees it), the write commits, the release is committed, and all of it survives close()"""
        self.seed("ac-off")
        conn = connect(autocommit=False)
        with fence.claim(conn, "count:ac-off", 30) as job:
            self.assertEqual(conn.info.transaction_status, pq.TransactionStatus.IDLE)
            self.assertEqual(self.claim_row("count:ac-off"), (job.token, False))
            with job.transaction():
                conn.execute("UPDATE counters SET value = value + 1 WHERE id = 'ac-off'")
            self.assertEqual(conn.info.transaction_status, pq.TransactionStatus.IDLE)
        self.assertIs(job.released, True)
        conn.close()
        self.assertEqual(self.claim_row("count:ac-off"), (job.token, True))
        self.assertEqual(
            self.db.execute("SELECT value, writer_epoch FROM counters WHERE id = 'ac-off'").fetchone(), (1, job.token)
        )

    def test_block_leaves_a_transaction_open(self):
        """autocommit off, the block leaves a transaction open: the release is made on the keeper's connection and committed; the caller's transaction is left open, neither committed nor rolled back"""
        conn = connect(autocommit=False)
        with fence.claim(conn, "count:ac-open", 30) as job:
            conn.execute("CREATE TEMP TABLE left_open (x int)")
        self.assertIs(job.released, True)
        self.assertEqual(self.claim_row("count:ac-open"), (job.token, True))
        self.assertEqual(conn.info.transaction_status, pq.TransactionStatus.INTRANS)
        self.assertEqual(conn.execute("SELECT count(*) FROM left_open").fetchone()[0], 0)
        conn.rollback()
        conn.close()

    def test_twin_raw_psycopg_loses_claim_and_release(self):
        """twin: raw psycopg without autocommit: fence_claim then close() rolls the claim back, and fence_release then close() leaves the claim unreleased"""
        conn = connect(autocommit=False)
        token = conn.execute(f"SELECT {self.s}.fence_claim('count:raw-claim', '30 s')").fetchone()[0]
        self.assertIsNotNone(token)
        conn.close()
        self.assertIsNone(self.claim_row("count:raw-claim"))
        token = self.q(f"SELECT {self.s}.fence_claim('count:raw-release', '30 s')")
        conn = connect(autocommit=False)
        self.assertTrue(conn.execute(f"SELECT {self.s}.fence_release('count:raw-release', %s)", (token,)).fetchone()[0])
        conn.close()
        self.assertEqual(self.claim_row("count:raw-release"), (token, False))


class StaleWorker(Base):
    def test_frozen_worker_is_fenced(self):
        """a worker SIGSTOPped past its lease while another takes the job over and writes: continued, its write raises fence.Fenced (5F, psycopg error as __cause__), its job.superseded is set, the row holds the successor's write"""
        self.seed("stale", 10)
        w = Worker("fenced", "counters", "stale", 1)
        try:
            token_a = int(w.expect("claimed").split()[1])
            self.assertEqual(w.expect("read"), "read 10")
            w.wait_stopped()
            b = connect()
            cm, job_b = claim_when_free(b, "count:stale", 30)
            try:
                self.assertGreater(job_b.token, token_a)
                with job_b.transaction():
                    b.execute("UPDATE counters SET value = value + 1 WHERE id = 'stale'")
            finally:
                cm.__exit__(None, None, None)
            self.assertTrue(job_b.released)
            w.p.send_signal(signal.SIGCONT)
            rc = w.finish()
            fenced = [l for l in w.lines if l.startswith("fenced ")]
            self.assertEqual(rc, 3, w.lines)
            self.assertEqual(len(fenced), 1, w.lines)
            f = fenced[0].split()
            self.assertTrue(f[1].startswith("5F"), fenced[0])
            self.assertEqual(f[1:7], [f[1], "job", "count:stale", "token", str(token_a), "cause"], fenced[0])
            self.assertTrue(f[8].startswith("5F"), fenced[0])
            self.assertEqual(f[9:], ["superseded", "True"], fenced[0])
            self.assertEqual(
                self.db.execute("SELECT value, writer_epoch FROM counters WHERE id = 'stale'").fetchone(),
                (11, job_b.token),
            )
            b.close()
        finally:
            w.kill()

    def test_twin_unprotected_loses_the_update(self):
        """twin: the same handler on counters_plain, without fence (the claim only a lease, no fence_begin): the frozen worker's write lands after the successor's, and one of the two increments is lost (11, not 12)"""
        self.seed("stale-twin", 10)
        w = Worker("plain", "counters_plain", "stale-twin", 1)
        try:
            w.expect("claimed")
            self.assertEqual(w.expect("read"), "read 10")
            w.wait_stopped()
            b = connect()
            cm, job_b = claim_when_free(b, "count:stale-twin", 30)
            try:
                with b.transaction():
                    b.execute("UPDATE counters_plain SET value = value + 1 WHERE id = 'stale-twin'")
            finally:
                cm.__exit__(None, None, None)
            w.p.send_signal(signal.SIGCONT)
            rc = w.finish()
            self.assertEqual(rc, 0, w.lines)
            self.assertIn("wrote 11", w.lines)
            self.assertEqual(self.q("SELECT value FROM counters_plain WHERE id = 'stale-twin'"), 11)
            b.close()
        finally:
            w.kill()

    def test_killed_after_commit_once_answers_false(self):
        """a worker killed (SIGKILL) after COMMIT and before release: the successor's job.once(key) answers False and the effect stays applied once (1); the twin without fence_once applies it twice (2)"""
        self.seed("killed", 0)
        w = Worker("kill", "counters", "killed", 1)
        try:
            token_a = int(w.expect("claimed").split()[1])
            w.expect("committed")
            w.wait_stopped()
            w.p.kill()
            w.p.wait()
            self.assertEqual(self.claim_row("count:killed"), (token_a, False))
            b = connect()
            cm, job_b = claim_when_free(b, "count:killed", 30)
            try:
                with job_b.transaction():
                    answer = job_b.once("count:killed:effect")
                    if answer:
                        b.execute("UPDATE counters SET value = value + 1 WHERE id = 'killed'")
                    b.execute("UPDATE counters_plain SET value = value + 1 WHERE id = 'killed'")
            finally:
                cm.__exit__(None, None, None)
            self.assertIs(answer, False)
            self.assertEqual(self.q("SELECT value FROM counters WHERE id = 'killed'"), 1)
            self.assertEqual(self.q("SELECT value FROM counters_plain WHERE id = 'killed'"), 2)
            b.close()
        finally:
            w.kill()

    def test_fenced_in_process(self):
        """a token taken over (fence_release_any, then a new claim) makes job.transaction() raise fence.Fenced: .job, .token, .sqlstate 5F001, __cause__ the psycopg error; superseded set; the release answers False"""
        conn, other = connect(), connect()
        with fence.claim(conn, "count:inproc", 300) as job:
            self.assertTrue(self.q(f"SELECT {self.s}.fence_release_any('count:inproc')"))
            token_b = other.execute(f"SELECT {self.s}.fence_claim('count:inproc', '30 s')").fetchone()[0]
            with self.assertRaises(fence.Fenced) as cm:
                with job.transaction():
                    self.fail("the block ran after a takeover")
            e = cm.exception
            self.assertEqual((e.job, e.token, e.sqlstate), ("count:inproc", job.token, "5F001"))
            self.assertIsInstance(e.__cause__, psycopg.Error)
            self.assertEqual(e.__cause__.sqlstate, "5F001")
            self.assertTrue(job.superseded.is_set())
            self.assertEqual(conn.info.transaction_status, pq.TransactionStatus.IDLE)
        self.assertIs(job.released, False)
        self.assertEqual(self.claim_row("count:inproc"), (token_b, False))
        conn.close()
        other.close()


    def test_callers_bug_is_not_fenced(self):
        """the caller's bugs (class 5G) stay ordinary psycopg errors: a second write of a row by one execution in strict mode (5G003) and a token used under another job's name (5G001) raise psycopg.Error, not fence.Fenced, and leave superseded unset; the twin, a real takeover, is Fenced (test_fenced_in_process)"""
        conn = connect()
        with fence.claim(conn, "bug:twice", 300) as job:
            with self.assertRaises(psycopg.Error) as cm:
                with job.transaction():
                    conn.execute("INSERT INTO counters (id, value) VALUES ('bug:twice', 1)")
                    conn.execute("UPDATE counters SET value = 2 WHERE id = 'bug:twice'")
            self.assertNotIsInstance(cm.exception, fence.Fenced)
            self.assertEqual(cm.exception.sqlstate, "5G003")
            self.assertFalse(job.superseded.is_set())
            with self.assertRaises(psycopg.Error) as cm:
                with conn.transaction():
                    conn.execute(f"SELECT {self.s}.fence_begin('bug:twice-misspelt', %s)", (job.token,))
            self.assertNotIsInstance(cm.exception, fence.Fenced)
            self.assertEqual(cm.exception.sqlstate, "5G001")
            self.assertFalse(job.superseded.is_set())
        self.assertIs(job.released, True)
        conn.close()


class Background(Base):
    def test_renewal_keeps_the_claim(self):
        """a 2 s lease, a block that runs 5 s: the keeper renews at a third of the lease, and a competing fence_claim returns NULL throughout"""
        conn, rival = connect(), connect()
        answers = []
        with fence.claim(conn, "count:renew", 2) as job:
            end = time.monotonic() + 5
            while time.monotonic() < end:
                answers.append(rival.execute(f"SELECT {self.s}.fence_claim('count:renew', '2 s')").fetchone()[0])
                time.sleep(0.2)
            self.assertIsNone(job.renew_error)
            self.assertIsNotNone(job.renewed_until)
            self.assertFalse(job.superseded.is_set())
        self.assertGreater(len(answers), 10)
        self.assertEqual(set(answers), {None})
        self.assertIs(job.released, True)
        conn.close()
        rival.close()

    def test_twin_without_renewal_the_claim_is_lost(self):
        """twin: the same 2 s claim made with fence_claim alone and not renewed: a competing fence_claim gets a token once the lease has run out"""
        rival = connect()
        self.assertIsNotNone(self.q(f"SELECT {self.s}.fence_claim('count:no-renew', '2 s')"))
        got = wait_for(
            lambda: rival.execute(f"SELECT {self.s}.fence_claim('count:no-renew', '2 s')").fetchone()[0], 30, 0.2
        )
        self.assertIsNotNone(got)
        rival.close()

    def test_superseded_by_notification(self):
        """fence.notify_superseded on (ALTER DATABASE): a fence_release_any in another session sets job.superseded through fence_superseded, long before the first renewal; twin with the setting off in that session: nothing arrives (3 s), superseded stays clear"""
        db = self.q("SELECT current_database()")
        self.db.execute(f'ALTER DATABASE "{db}" SET fence.notify_superseded = on')
        try:
            conn = connect()
            sup = connect()  # connected after the ALTER: the setting is on
            self.assertEqual(sup.execute("SHOW fence.notify_superseded").fetchone()[0], "on")
            with fence.claim(conn, "count:notify", 300) as job:  # first renewal after 100 s
                t0 = time.monotonic()
                self.assertTrue(sup.execute(f"SELECT {self.s}.fence_release_any('count:notify')").fetchone()[0])
                self.assertTrue(job.superseded.wait(30), "superseded set by the notification")
                self.assertLess(time.monotonic() - t0, 90)
                self.assertIsNone(job.renewed_until)  # no renewal ran: the notification did it
            self.assertIs(job.released, False)
            # the twin
            sup.execute("SET fence.notify_superseded = off")
            with fence.claim(conn, "count:notify-off", 300) as job:
                self.assertTrue(sup.execute(f"SELECT {self.s}.fence_release_any('count:notify-off')").fetchone()[0])
                self.assertFalse(job.superseded.wait(3))
            self.assertIs(job.released, False)
            conn.close()
            sup.close()
        finally:
            self.db.execute(f'ALTER DATABASE "{db}" RESET fence.notify_superseded')


class ProgrammerErrors(Base):
    def test_not_fenced(self):
        """programmer errors are not Fenced: a text or bool lease (TypeError, no claim made), a zero lease (22023), an unknown schema (psycopg error), a database without fence (LookupError), once() outside job.transaction(), claim() and transaction() inside an open transaction (ProgrammingError), an error in the block (22012: rolled back, superseded clear)"""
        conn = connect()
        for bad in ("30 seconds", True, None):
            with self.assertRaises(TypeError):
                with fence.claim(conn, "count:bad", bad):
                    pass
        self.assertIsNone(self.claim_row("count:bad"))
        with self.assertRaises(psycopg.Error) as cm:
            with fence.claim(conn, "count:bad", 0):
                pass
        self.assertNotIsInstance(cm.exception, fence.Fenced)
        self.assertEqual(cm.exception.sqlstate, "22023")
        with self.assertRaises(psycopg.Error) as cm:
            with fence.claim(conn, "count:bad", 30, schema="no_such_schema"):
                pass
        self.assertFalse((cm.exception.sqlstate or "").startswith("5F"))
        elsewhere = connect(dbname="postgres")  # fence is not installed there
        with self.assertRaises(LookupError):
            with fence.claim(elsewhere, "count:bad", 30):
                pass
        elsewhere.close()
        self.seed("bad")
        with fence.claim(conn, "count:bad", 30) as job:
            with self.assertRaises(psycopg.ProgrammingError):
                job.once("count:bad:x")
            off = connect(autocommit=False)
            off.execute("SELECT 1")
            job2_cm = fence.claim(off, "count:bad2", 30)
            with self.assertRaises(psycopg.ProgrammingError):
                job2_cm.__enter__()
            off.rollback()
            off.close()
            conn.execute("BEGIN")
            with self.assertRaises(psycopg.ProgrammingError):
                with job.transaction():
                    self.fail("job.transaction() ran inside an open transaction")
            conn.execute("ROLLBACK")
            with self.assertRaises(psycopg.errors.DivisionByZero):
                with job.transaction():
                    conn.execute("UPDATE counters SET value = value + 1 WHERE id = 'bad'")
                    conn.execute("SELECT 1 / 0")
            self.assertEqual(conn.info.transaction_status, pq.TransactionStatus.IDLE)
            self.assertFalse(job.superseded.is_set())
            self.assertEqual(self.q("SELECT value FROM counters WHERE id = 'bad'"), 0)
            with job.transaction():
                conn.execute("UPDATE counters SET value = value + 1 WHERE id = 'bad'")
        self.assertIs(job.released, True)
        self.assertEqual(self.q("SELECT value FROM counters WHERE id = 'bad'"), 1)
        conn.close()


class _Result(unittest.TextTestResult):
    """One line a test: "ok     <docstring>" or "FAILED <docstring>"."""

    def _say(self, word, test):
        self.stream.write(f"{word:<6} {test.shortDescription() or test.id()}\n")
        self.stream.flush()

    def addSuccess(self, test):
        unittest.TestResult.addSuccess(self, test)
        self._say("ok", test)

    def addFailure(self, test, err):
        unittest.TestResult.addFailure(self, test, err)
        self._say("FAILED", test)

    def addError(self, test, err):
        unittest.TestResult.addError(self, test, err)
        self._say("FAILED", test)


if __name__ == "__main__":
    runner = unittest.TextTestRunner(stream=sys.stdout, resultclass=_Result, verbosity=0)
    result = unittest.main(testRunner=runner, exit=False).result
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
