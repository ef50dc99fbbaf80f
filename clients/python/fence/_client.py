"""The client: claim(), Job, and the errors Held and Fenced.

The protocol is doc/fence.md's (sections 3, 9.1 and 9.2): fence_claim in a
transaction of its own; fence_begin after BEGIN, in the transaction that
writes; fence_once in that transaction; fence_renew at a third of the lease;
fence_release at the end.  A 5F SQLSTATE means "fenced: stop, do not retry".
"""

import contextlib
import datetime
import json
import os
import select
import socket
import threading
import time

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import make_conninfo

# The channel fence NOTIFYs when fence.notify_superseded is on in the
# session that supersedes a claim (doc/fence.md, section 9.2).  Channels
# belong to the database, not to a schema.
SUPERSEDED_CHANNEL = "fence_superseded"

_IDLE = pq.TransactionStatus.IDLE


class Error(Exception):
    """Base class of the errors this package raises itself."""


class Held(Error):
    """fence_claim returned NULL: the job is held (a live lease, or a
    transaction still writing with its token).  Not a failure: let the queue
    try the job again later."""

    def __init__(self, job):
        super().__init__(f"job {job!r} is held: try again later")
        self.job = job


class Fenced(Error):
    """fence refused this execution (SQLSTATE class 5F): a newer execution
    owns the job or the row.  Stop the handler; do not retry with the same
    token.  The psycopg error is __cause__."""

    def __init__(self, job, token, error):
        self.job = job
        self.token = token
        self.sqlstate = error.sqlstate
        message = error.diag.message_primary or str(error)
        super().__init__(f"job {job!r}, token {token}: fenced ({self.sqlstate}): {message}")


def _is_fenced(e):
    return isinstance(e, psycopg.Error) and (e.sqlstate or "").startswith("5F")


def _lease(lease):
    """A lease as a timedelta: a timedelta, or seconds (int or float)."""
    if isinstance(lease, datetime.timedelta):
        return lease
    if isinstance(lease, (int, float)) and not isinstance(lease, bool):
        return datetime.timedelta(seconds=lease)
    raise TypeError(f"lease must be a datetime.timedelta or a number of seconds, not {type(lease).__name__}")


def _connect_like(conn):
    """A new autocommit connection with conn's parameters (conn.info.dsn
    leaves the password out; conn.info.password has it)."""
    extra = {"application_name": "fence-python keeper"}
    if conn.info.password:
        extra["password"] = conn.info.password
    return psycopg.connect(make_conninfo(conn.info.dsn, **extra), autocommit=True)


def _extension_schema(conn):
    row = conn.execute(
        "SELECT n.nspname FROM pg_catalog.pg_extension e"
        " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace"
        " WHERE e.extname OPERATOR(pg_catalog.=) 'fence'"
    ).fetchone()
    if row is None:
        raise LookupError(f"extension fence is not installed in database {conn.info.dbname!r}")
    return row[0]


def _own_transaction(conn, what):
    """A context for one statement that must commit on its own: conn's
    autocommit, or BEGIN ... COMMIT when autocommit is off (without it,
    psycopg leaves the statement in a transaction that close() rolls back)."""
    if conn.info.transaction_status != _IDLE:
        raise psycopg.ProgrammingError(
            f"fence: {what} needs a connection outside a transaction (it is"
            f" {conn.info.transaction_status.name}): commit or roll back first"
        )
    if conn.autocommit:
        return contextlib.nullcontext()
    return conn.transaction()


@contextlib.contextmanager
def claim(conn, job, lease, *, holder=None, schema=None):
    """Claim `job` for `lease` (timedelta or seconds) on `conn`, as a context
    manager yielding a Job.  Raises Held when fence_claim returns NULL.

    While the block runs, a thread renews the lease every third of it on a
    connection of its own (conn's parameters, autocommit), and listens there
    on fence_superseded.  On exit the claim is released.  `schema` is where
    fence is installed; None looks it up in pg_extension."""
    lease = _lease(lease)
    if holder is None:
        holder = f"fence-python {socket.gethostname()}:{os.getpid()}"
    side = _connect_like(conn)
    try:
        if schema is None:
            schema = _extension_schema(side)
        # LISTEN before the claim, so that no takeover after it goes unheard
        side.execute(sql.SQL("LISTEN {}").format(sql.Identifier(SUPERSEDED_CHANNEL)))
        q = sql.SQL("SELECT {}.fence_claim(%s, %s, %s)").format(sql.Identifier(schema))
        with _own_transaction(conn, "fence.claim"):
            token = conn.execute(q, (job, lease, holder)).fetchone()[0]
    except BaseException:
        side.close()
        raise
    if token is None:
        side.close()
        raise Held(job)
    j = Job(conn, job, token, lease, schema, side)
    j._keeper.start()
    try:
        yield j
    except BaseException as e:
        try:
            j._finish()
        except Exception as release_error:
            # the block's exception is the one to see; a release that fails
            # (a broken connection, a claim already gone) is a note on it
            if hasattr(e, "add_note"):
                e.add_note(f"fence: releasing the claim failed too: {release_error!r}")
        raise
    else:
        j._finish()


class Job:
    """A claimed job: .name, .token (int), .lease (timedelta), .schema,
    .superseded (threading.Event), .released (None until the exit, then
    what fence_release returned), .renewed_until (the last renewal's expiry),
    .renew_error (the last renewal's error, if any)."""

    def __init__(self, conn, name, token, lease, schema, side):
        self.conn = conn
        self.name = name
        self.token = token
        self.lease = lease
        self.schema = schema
        self.superseded = threading.Event()
        self.released = None
        self.renewed_until = None
        self.renew_error = None
        s = sql.Identifier(schema)
        self._q_begin = sql.SQL("SELECT {}.fence_begin(%s, %s)").format(s)
        self._q_once = sql.SQL("SELECT {}.fence_once(%s)").format(s)
        self._q_renew = sql.SQL("SELECT {}.fence_renew(%s, %s, %s)").format(s)
        self._q_release = sql.SQL("SELECT {}.fence_release(%s, %s)").format(s)
        self._keeper = _Keeper(self, side)

    def __repr__(self):
        return f"<fence.Job {self.name!r} token {self.token}>"

    def _fenced(self, e):
        self.superseded.set()
        return Fenced(self.name, self.token, e)

    @contextlib.contextmanager
    def transaction(self):
        """BEGIN, fence_begin(job, token), the block, COMMIT (ROLLBACK if the
        block raises), on the claiming connection, whatever its autocommit.
        Yields the connection.  A 5F error raises Fenced."""
        conn = self.conn
        if conn.info.transaction_status != _IDLE:
            raise psycopg.ProgrammingError(
                "fence: job.transaction() begins a transaction of its own, and the"
                f" connection is {conn.info.transaction_status.name}: commit or roll back first"
            )
        try:
            with conn.transaction():
                conn.execute(self._q_begin, (self.name, self.token))
                yield conn
        except psycopg.Error as e:
            if _is_fenced(e):
                raise self._fenced(e) from e
            raise

    def once(self, key):
        """fence_once(key) in the current transaction (inside
        job.transaction()): True the first time a committed transaction
        records key, False if one already has.  A 5F error raises Fenced."""
        conn = self.conn
        if conn.info.transaction_status == _IDLE:
            raise psycopg.ProgrammingError("fence: job.once() belongs inside job.transaction()")
        try:
            return conn.execute(self._q_once, (key,)).fetchone()[0]
        except psycopg.Error as e:
            if _is_fenced(e):
                raise self._fenced(e) from e
            raise

    def _finish(self):
        """Stop the keeper, release, close the keeper's connection."""
        try:
            self._keeper.stop()
            self.released = self._release()
        finally:
            self._keeper.close()

    def _release(self):
        conn = self.conn
        args = (self.name, self.token)
        if not conn.closed and not conn.broken and conn.info.transaction_status == _IDLE:
            with _own_transaction(conn, "fence_release"):
                return conn.execute(self._q_release, args).fetchone()[0]
        # The block left conn inside a transaction (or broke it): release on
        # the keeper's connection instead, so that the caller's transaction
        # is neither committed nor rolled back here.
        return self._keeper.execute(self._q_release, args)


class _Keeper(threading.Thread):
    """The claim's own connection: renews the lease every third of it and
    hears fence_superseded, in a thread, until stop()."""

    def __init__(self, job, side):
        super().__init__(name=f"fence keeper {job.name}", daemon=True)
        self.job = job
        self.side = side
        self.period = job.lease.total_seconds() / 3
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._lock = threading.Lock()  # the thread's use of side against execute()
        side.add_notify_handler(self._on_notify)

    def _on_notify(self, n):
        if n.channel != SUPERSEDED_CHANNEL:
            return
        try:
            p = json.loads(n.payload)
        except ValueError:
            return
        if isinstance(p, dict) and p.get("job") == self.job.name and p.get("superseded_token") == self.job.token:
            self.job.superseded.set()

    def _connection(self):
        """side, made again (and listening again) if it broke."""
        if self.side.closed or self.side.broken:
            self.side.close()
            self.side = _connect_like(self.job.conn)
            self.side.add_notify_handler(self._on_notify)
            self.side.execute(sql.SQL("LISTEN {}").format(sql.Identifier(SUPERSEDED_CHANNEL)))
        return self.side

    def execute(self, query, args):
        """One query on the keeper's connection, its first column."""
        with self._lock:
            return self._connection().execute(query, args).fetchone()[0]

    def run(self):
        deadline = _now() + self.period
        while not self._stopping.is_set() and not self.job.superseded.is_set():
            try:
                fd = self._connection().pgconn.socket
                ready, _, _ = select.select([fd, self._wake_r], [], [], max(0.0, deadline - _now()))
                if self._stopping.is_set():
                    break
                with self._lock:
                    if fd in ready:
                        # what arrived while idle: notifications
                        pgconn = self.side.pgconn
                        pgconn.consume_input()
                        while (n := pgconn.notifies()) is not None:
                            if pgconn.notify_handler:
                                pgconn.notify_handler(n)
                    if _now() >= deadline:
                        deadline = _now() + self.period
                        self.job.renewed_until = self.side.execute(
                            self.job._q_renew, (self.job.name, self.job.token, self.job.lease)
                        ).fetchone()[0]
                        self.job.renew_error = None
            except psycopg.Error as e:
                self.job.renew_error = e
                if _is_fenced(e):
                    # the claim is gone: superseded or released by others
                    self.job.superseded.set()
                    break
                # a broken connection: made again on the next turn
                deadline = min(deadline, _now() + min(self.period, 1.0))
                self._stopping.wait(min(self.period, 1.0))
            except OSError as e:
                self.job.renew_error = e
                self._stopping.wait(min(self.period, 1.0))

    def stop(self):
        self._stopping.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self.is_alive():
            self.join(10)
            if self.is_alive():
                # stuck in a statement (a lock wait): cancel it
                self.side.cancel()
                self.join(10)

    def close(self):
        self.side.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


_now = time.monotonic
