/*
 * index.js: fence's Node client, the worker's side of fence's protocol over
 * node-postgres (pg): claim(), the Job, and the errors HeldError and
 * FencedError.
 *
 * The protocol is doc/fence.md's (sections 3, 9.1 and 9.2): fence_claim in
 * a transaction of its own; fence_begin after BEGIN, in the transaction that
 * writes; fence_once in that transaction; fence_renew at a third of the
 * lease, on a connection of its own that also LISTENs on fence_superseded;
 * fence_release at the end.  A 5F SQLSTATE means "fenced: stop, do not
 * retry"; every other error stays node-postgres's own.  The same behaviour
 * as clients/python; see README.md.
 */

'use strict';

const os = require('os');

// The channel fence NOTIFYs when fence.notify_superseded is on in the
// session that supersedes a claim (doc/fence.md, section 9.2).  Channels
// belong to the database, not to a schema.
const SUPERSEDED_CHANNEL = 'fence_superseded';

const KEEPER_APPLICATION_NAME = 'fence-node keeper';

/** Base class of the errors this package makes itself. */
class FenceError extends Error {}
FenceError.prototype.name = 'FenceError';

/**
 * fence_claim returned NULL: the job is held (a live lease, or a
 * transaction still writing with its token).  Not a failure: let the queue
 * try the job again later.
 */
class HeldError extends FenceError {
  constructor(job) {
    super(`job ${JSON.stringify(job)} is held: try again later`);
    this.job = job;
  }
}
HeldError.prototype.name = 'HeldError';

/**
 * fence refused this execution (SQLSTATE class 5F): a newer execution owns
 * the job or the row.  Stop the handler; do not retry with the same token.
 * The pg error is .cause.
 */
class FencedError extends FenceError {
  constructor(job, token, error) {
    super(`job ${JSON.stringify(job)}, token ${token}: fenced (${error.code}): ${error.message}`,
      { cause: error });
    this.job = job;
    this.token = token;
    this.code = error.code;
    if (this.cause === undefined)
      this.cause = error;
  }
}
FencedError.prototype.name = 'FencedError';

function isFenced(e) {
  return e != null && typeof e.code === 'string' && e.code.startsWith('5F');
}

/** "schema" as an SQL identifier. */
function ident(name) {
  return '"' + String(name).replace(/"/g, '""') + '"';
}

/** The lease in milliseconds, checked: a finite number, not a boolean. */
function leaseMillis(lease) {
  if (typeof lease !== 'number' || !Number.isFinite(lease))
    throw new TypeError(`fence: lease must be a finite number of milliseconds, not ${lease === null ? 'null' : typeof lease}`);
  return lease;
}

/** A new client for the keeper, with the pool's connection parameters. */
function keeperClient(pool) {
  const Client = pool.Client || require('pg').Client;
  const options = Object.assign({}, pool.options, { application_name: KEEPER_APPLICATION_NAME });
  return new Client(options);
}

async function extensionSchema(client) {
  const r = await client.query(
    'SELECT n.nspname FROM pg_catalog.pg_extension e' +
    ' JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace' +
    " WHERE e.extname OPERATOR(pg_catalog.=) 'fence'");
  if (r.rows.length === 0) {
    const db = (await client.query('SELECT pg_catalog.current_database() AS d')).rows[0].d;
    throw new FenceError(`fence: extension fence is not installed in database ${JSON.stringify(db)}`);
  }
  return r.rows[0].nspname;
}

/**
 * Claim `job` for options.lease milliseconds on `pool` (a pg.Pool), run
 * `fn(job)`, and release.  Rejects with HeldError when fence_claim returns
 * NULL (fn does not run).  While fn runs, a keeper renews the lease every
 * third of it on a client of its own (the pool's parameters, not one of
 * the pool's clients), and LISTENs there on fence_superseded.  Resolves to
 * what fn resolves to.  options.schema is where fence is installed (looked
 * up in pg_extension when not given); options.holder defaults to
 * "fence-node HOST:PID".
 */
async function claim(pool, job, options, fn) {
  if (typeof options === 'function' && fn === undefined) {
    fn = options;
    options = {};
  }
  options = options || {};
  if (typeof job !== 'string')
    throw new TypeError('fence: the job must be a string');
  if (typeof fn !== 'function')
    throw new TypeError('fence: claim(pool, job, { lease }, fn) needs a function fn');
  const lease = leaseMillis(options.lease);
  const holder = options.holder == null ? `fence-node ${os.hostname()}:${process.pid}` : String(options.holder);

  const keeper = new Keeper(pool);
  let j;
  try {
    await keeper.connect();
    const schema = options.schema == null ? await extensionSchema(keeper.client) : String(options.schema);
    // LISTEN before the claim, so that no takeover after it goes unheard
    await keeper.listen();
    const s = ident(schema);
    const r = await pool.query(
      `SELECT ${s}.fence_claim($1, pg_catalog.make_interval(secs => $2::float8 / 1000), $3) AS token`,
      [job, lease, holder]);
    const token = r.rows[0].token;
    if (token === null)
      throw new HeldError(job);
    j = new Job(pool, job, String(token), lease, schema, keeper);
  } catch (e) {
    await keeper.close();
    throw e;
  }

  keeper.start(j);
  let result;
  try {
    result = await fn(j);
  } catch (e) {
    let err = e;
    if (isFenced(e) && !(e instanceof FencedError))
      err = j._fenced(e);
    try {
      await j._finish();
    } catch (releaseError) {
      // fn's error is the one to see; a release that fails (a broken
      // connection, a claim already gone) is kept on the job
      j.releaseError = releaseError;
    }
    throw err;
  }
  await j._finish();
  return result;
}

/**
 * A claimed job: .name, .token (a string: a bigint as node-postgres
 * returns it), .lease (milliseconds), .schema, .signal (an AbortSignal
 * aborted on takeover), .released (null until the end, then what
 * fence_release answered), .renewedUntil (the last renewal's expiry, a
 * Date), .renewError (the last renewal's error, if any).
 */
class Job {
  constructor(pool, name, token, lease, schema, keeper) {
    this.pool = pool;
    this.name = name;
    this.token = token;
    this.lease = lease;
    this.schema = schema;
    this.released = null;
    this.releaseError = null;
    this.renewedUntil = null;
    this.renewError = null;
    this._controller = new AbortController();
    this.signal = this._controller.signal;
    this._clients = new WeakSet();   // clients inside this job's transaction()
    this._keeper = keeper;
    const s = ident(schema);
    this._qBegin = `SELECT ${s}.fence_begin($1, $2::bigint)`;
    this._qOnce = `SELECT ${s}.fence_once($1) AS once`;
    this._qRenew = `SELECT ${s}.fence_renew($1, $2::bigint, pg_catalog.make_interval(secs => $3::float8 / 1000)) AS until`;
    this._qRelease = `SELECT ${s}.fence_release($1, $2::bigint) AS released`;
  }

  toString() {
    return `[fence.Job ${JSON.stringify(this.name)} token ${this.token}]`;
  }

  /** Abort the signal (once) with reason. */
  _supersede(reason) {
    if (!this.signal.aborted)
      this._controller.abort(reason);
  }

  /** A FencedError for pg error e; the signal aborted. */
  _fenced(e) {
    const f = new FencedError(this.name, this.token, e);
    this._supersede(f);
    return f;
  }

  /**
   * BEGIN, fence_begin(job, token), fn(client), COMMIT (ROLLBACK if fn
   * throws), on one client checked out of the pool.  Resolves to what fn
   * resolves to.  A 5F error rejects with FencedError.
   */
  async transaction(fn) {
    if (typeof fn !== 'function')
      throw new TypeError('fence: job.transaction(fn) needs a function fn');
    const client = await this.pool.connect();
    let broken = null;
    try {
      await client.query('BEGIN');
      this._clients.add(client);
      try {
        await client.query(this._qBegin, [this.name, this.token]);
        const result = await fn(client);
        await client.query('COMMIT');
        return result;
      } catch (e) {
        try {
          await client.query('ROLLBACK');
        } catch (rollbackError) {
          broken = rollbackError;   // the client is not fit to go back
        }
        throw e;
      } finally {
        this._clients.delete(client);
      }
    } catch (e) {
      if (isFenced(e) && !(e instanceof FencedError))
        throw this._fenced(e);
      if (e instanceof FencedError)
        this._supersede(e);
      throw e;
    } finally {
      client.release(broken || undefined);
    }
  }

  /**
   * fence_once(key) in client's current transaction (inside
   * job.transaction()): true the first time a committed transaction
   * records key, false if one already has.  A 5F error rejects with
   * FencedError.
   */
  async once(key, client) {
    if (client == null || typeof client.query !== 'function')
      throw new TypeError('fence: job.once(key, client) needs the client job.transaction() gave');
    const status = typeof client.getTransactionStatus === 'function' ? client.getTransactionStatus() : null;
    if (!this._clients.has(client) || status === 'I')
      throw new Error('fence: job.once() belongs inside job.transaction(), on the client it gave');
    try {
      const r = await client.query(this._qOnce, [key]);
      return r.rows[0].once;
    } catch (e) {
      if (isFenced(e))
        throw this._fenced(e);
      throw e;
    }
  }

  /** Stop the keeper, release, close the keeper's client. */
  async _finish() {
    try {
      await this._keeper.stop();
      const r = await this.pool.query(this._qRelease, [this.name, this.token]);
      this.released = r.rows[0].released;
    } finally {
      await this._keeper.close();
    }
  }
}

/**
 * The claim's own client: renews the lease every third of it and hears
 * fence_superseded, until stop().  Its client is made again (and listens
 * again) if it breaks.
 */
class Keeper {
  constructor(pool) {
    this.pool = pool;
    this.client = null;
    this.broken = false;
    this.job = null;
    this.timer = null;
    this.running = null;      // the renewal in flight, a promise
    this.stopping = false;
    this._onNotification = (msg) => this.notification(msg);
  }

  async connect() {
    const c = keeperClient(this.pool);
    // an idle client that loses its connection emits 'error': without a
    // listener, that would end the process
    c.on('error', () => { this.broken = true; });
    c.on('notification', this._onNotification);
    this.client = c;
    this.broken = false;
    await c.connect();
  }

  async listen() {
    await this.client.query(`LISTEN ${ident(SUPERSEDED_CHANNEL)}`);
  }

  notification(msg) {
    const job = this.job;
    if (!job || msg.channel !== SUPERSEDED_CHANNEL)
      return;
    let p;
    try {
      p = JSON.parse(msg.payload);
    } catch (e) {
      return;
    }
    // the token as the payload spells it: JSON numbers above 2^53 lose
    // digits in JSON.parse
    const m = /"superseded_token"\s*:\s*(\d+)/.exec(msg.payload);
    if (p && typeof p === 'object' && p.job === job.name && m && m[1] === job.token) {
      const e = new FenceError(`job ${JSON.stringify(job.name)}, token ${job.token}: superseded` +
        ` (${SUPERSEDED_CHANNEL} notification, new token ${p.new_token == null ? 'none' : p.new_token})`);
      e.payload = p;
      job._supersede(e);
    }
  }

  start(job) {
    this.job = job;
    this.period = job.lease / 3;
    this.schedule(this.period);
  }

  schedule(ms) {
    if (this.stopping || this.job.signal.aborted)
      return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = this.renew().finally(() => { this.running = null; });
    }, Math.max(0, ms));
    this.timer.unref();
  }

  async renew() {
    const job = this.job;
    let next = this.period;
    try {
      if (this.broken || !this.client) {
        await this.closeClient();
        await this.connect();
        await this.listen();
      }
      const r = await this.client.query(job._qRenew, [job.name, job.token, job.lease]);
      job.renewedUntil = r.rows[0].until;
      job.renewError = null;
    } catch (e) {
      job.renewError = e;
      if (isFenced(e)) {
        // the claim is gone: superseded or released by others
        job._supersede(new FencedError(job.name, job.token, e));
        return;
      }
      // a broken connection: made again on the next turn
      this.broken = true;
      next = Math.min(this.period, 1000);
    }
    this.schedule(next);
  }

  async stop() {
    this.stopping = true;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.running) {
      // a renewal in flight: wait for it, 10 s at most (stuck in a lock
      // wait, it ends with the client in close())
      let t;
      await Promise.race([
        this.running.catch(() => {}),
        new Promise((resolve) => { t = setTimeout(resolve, 10000); }),
      ]);
      clearTimeout(t);
    }
  }

  async closeClient() {
    const c = this.client;
    this.client = null;
    if (c) {
      try {
        await c.end();
      } catch (e) {
        // already broken
      }
    }
  }

  async close() {
    this.stopping = true;
    await this.closeClient();
  }
}

module.exports = {
  claim,
  Job,
  FenceError,
  HeldError,
  FencedError,
  SUPERSEDED_CHANNEL,
};
