/*
 * test/fence.test.js: the Node client against a real server (no mocks).
 *
 *     PGHOST=... PGPORT=... PGDATABASE=... PGUSER=<a superuser> npm test
 *
 * The database must have fence installed (in any schema: the tests find it
 * in pg_extension, as the client does); the role must be a superuser (ALTER
 * DATABASE, fence_release_any).  The tests make their own tables, counters
 * (protected, strict) and counters_plain (its unprotected twin), in the
 * schema first on the search_path.  Each test's name says what it proves;
 * test/reporter.mjs prints it as an "ok ..." or "FAILED ..." line.  No
 * assertion is on a duration: the frozen workers stop themselves at fixed
 * points (test/worker.js), and waits poll with generous deadlines.
 */

'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const pg = require('pg');
const fence = require('..');

const WORKER = path.join(__dirname, 'worker.js');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

let db;       // the tests' own client, for setup and assertions
let pool;     // the pool the client under test claims on
let schema;   // fence's schema, as pg_extension names it
let s;        // the same, quoted

async function q(sql, args) {
  const r = await db.query({ text: sql, values: args, rowMode: 'array' });
  return r.rows.length === 0 ? null : r.rows[0][0];
}

async function waitFor(pred, timeoutMs, stepMs = 50) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const v = await pred();
    if (v)
      return v;
    await sleep(stepMs);
  }
  return pred();
}

async function claimRow(job) {
  const r = await db.query(`SELECT token, released FROM ${s}.fence_claims WHERE job = $1`, [job]);
  return r.rows.length === 0 ? null : [r.rows[0].token, r.rows[0].released];
}

/** counters and counters_plain get row id = value (under a fresh token). */
async function seed(id, value = 0) {
  await db.query('BEGIN');
  await db.query(`SELECT ${s}.fence_begin_fresh()`);
  for (const t of ['counters', 'counters_plain']) {
    await db.query(`DELETE FROM ${t} WHERE id = $1`, [id]);
    await db.query(`INSERT INTO ${t} (id, value) VALUES ($1, $2)`, [id, value]);
  }
  await db.query('COMMIT');
}

/** fence.claim, tried again while HeldError, for 30 s at most. */
async function claimWhenFree(p, job, options, fn) {
  const end = Date.now() + 30000;
  for (;;) {
    try {
      return await fence.claim(p, job, options, fn);
    } catch (e) {
      if (!(e instanceof fence.HeldError) || Date.now() > end)
        throw e;
      await sleep(100);
    }
  }
}

/** test/worker.js as its own process; its stdout a line at a time. */
class Worker {
  constructor(...args) {
    this.p = spawn(process.execPath, [WORKER, ...args.map(String)], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.lines = [];
    this.waiters = [];
    let buf = '';
    const take = (chunk) => {
      buf += chunk;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        this.lines.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
      this.waiters = this.waiters.filter((w) => !w());
    };
    this.p.stdout.setEncoding('utf8').on('data', take);
    this.p.stderr.setEncoding('utf8').on('data', take);
    this.exited = new Promise((resolve) => this.p.on('exit', (code, sig) => resolve(code === null ? sig : code)));
  }

  /** The first line starting with prefix, waited for up to 60 s. */
  expect(prefix, timeoutMs = 60000) {
    return new Promise((resolve, reject) => {
      const check = () => {
        const line = this.lines.find((l) => l.startsWith(prefix));
        if (line !== undefined) {
          clearTimeout(t);
          resolve(line);
          return true;
        }
        return false;
      };
      const t = setTimeout(() => reject(new Error(`worker never printed ${JSON.stringify(prefix)}; it printed ${JSON.stringify(this.lines)}`)), timeoutMs);
      if (!check())
        this.waiters.push(check);
    });
  }

  stopped() {
    try {
      return fs.readFileSync(`/proc/${this.p.pid}/stat`, 'utf8').split(')').pop().trim().split(' ')[0] === 'T';
    } catch (e) {
      return false;
    }
  }

  async waitStopped() {
    if (!await waitFor(() => this.stopped(), 60000))
      throw new Error(`worker ${this.p.pid} did not stop; it printed ${JSON.stringify(this.lines)}`);
  }

  /** The exit status (or the signal's name), waited for up to 60 s. */
  async finish() {
    let t;
    const rc = await Promise.race([this.exited, new Promise((resolve) => { t = setTimeout(() => resolve('timeout'), 60000); })]);
    clearTimeout(t);
    return rc;
  }

  async kill() {
    if (this.p.exitCode === null && this.p.signalCode === null) {
      this.p.kill('SIGCONT');
      this.p.kill('SIGKILL');
      await this.exited;
    }
  }
}

before(async () => {
  db = new pg.Client({ application_name: 'fence-test' });
  await db.connect();
  schema = (await db.query(
    'SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace' +
    " WHERE e.extname = 'fence'")).rows[0].nspname;
  s = '"' + schema.replace(/"/g, '""') + '"';
  pool = new pg.Pool({ application_name: 'fence-test', max: 10 });
  // the tables once; for a run again on the same database, the last run's
  // jobs and effect keys deleted (a superuser may delete finished claims)
  await db.query('BEGIN');
  if (await q("SELECT to_regclass('counters') IS NULL")) {
    await db.query('CREATE TABLE counters (id text PRIMARY KEY, value bigint NOT NULL DEFAULT 0,' +
      ' writer_epoch bigint NOT NULL DEFAULT 0)');
    await db.query(`SELECT ${s}.fence_protect('counters')`);
    await db.query('CREATE TABLE counters_plain (LIKE counters INCLUDING ALL)');
  }
  await db.query(`DELETE FROM ${s}.fence_effects WHERE key LIKE 'count:%' OR key LIKE 'bug:%'`);
  await db.query(`DELETE FROM ${s}.fence_claims WHERE job LIKE 'count:%' OR job LIKE 'bug:%'`);
  await db.query('COMMIT');
});

after(async () => {
  if (pool)
    await pool.end();
  if (db)
    await db.end();
});

test('claim, transaction (BEGIN, fence_begin, COMMIT), once (true, then false), release: the write carries the token (a string), the claim is released, claim resolves to the callback\'s value, the keeper\'s connection is gone', async () => {
  await seed('happy');
  let seen;
  const out = await fence.claim(pool, 'count:happy', { lease: 30000 }, async (job) => {
    seen = job;
    assert.equal(typeof job.token, 'string');
    assert.match(job.token, /^[1-9][0-9]*$/);
    assert.equal(job.schema, schema);
    assert.equal(job.name, 'count:happy');
    assert.deepEqual(await claimRow('count:happy'), [job.token, false]);
    assert.equal(await q("SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'fence-node keeper'"), 1);
    const r = await job.transaction(async (c) => {
      assert.equal(c.getTransactionStatus(), 'T');
      assert.equal(await job.once('count:happy:effect', c), true);
      await c.query("UPDATE counters SET value = value + 1 WHERE id = 'happy'");
      return 'from the transaction';
    });
    assert.equal(r, 'from the transaction');
    await job.transaction(async (c) => {
      assert.equal(await job.once('count:happy:effect', c), false);
    });
    assert.equal(job.signal.aborted, false);
    return 'from the callback';
  });
  assert.equal(out, 'from the callback');
  assert.equal(seen.released, true);
  assert.deepEqual(await claimRow('count:happy'), [seen.token, true]);
  const row = (await db.query("SELECT value::int, writer_epoch::text FROM counters WHERE id = 'happy'")).rows[0];
  assert.deepEqual([row.value, row.writer_epoch], [1, seen.token]);
  assert.ok(await waitFor(async () =>
    await q("SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'fence-node keeper'") === 0, 30000),
  "the keeper's connection was closed");
});

test('options: schema names fence\'s schema explicitly, holder is stored, a lease of 45000 ms is an interval of 45 s; the ESM entry point gives the same functions and classes', async () => {
  let seen;
  await fence.claim(pool, 'count:schema', { lease: 45000, schema, holder: 'me' }, async (job) => {
    seen = job;
    const r = (await db.query(
      `SELECT extract(epoch FROM lease_expires_at - claimed_at)::float8 AS secs, holder FROM ${s}.fence_claims WHERE job = $1`,
      [job.name])).rows[0];
    assert.deepEqual([r.secs, r.holder], [45, 'me']);
  });
  assert.equal(seen.released, true);
  const esm = await import('../index.mjs');
  assert.equal(esm.claim, fence.claim);
  assert.equal(esm.FencedError, fence.FencedError);
  assert.equal(esm.HeldError, fence.HeldError);
  assert.equal(esm.default, fence);
});

test('a second claim of a held job rejects with HeldError (fence_claim returned NULL), its callback does not run, and the first claim stays as it was', async () => {
  let seen;
  await fence.claim(pool, 'count:held', { lease: 30000 }, async (job) => {
    seen = job;
    let ran = false;
    await assert.rejects(fence.claim(pool, 'count:held', { lease: 30000 }, async () => { ran = true; }),
      (e) => e instanceof fence.HeldError && e instanceof fence.FenceError && e.job === 'count:held');
    assert.equal(ran, false);
    assert.deepEqual(await claimRow('count:held'), [job.token, false]);
  });
  assert.equal(seen.released, true);
});

test('a worker SIGSTOPped past its lease while another takes the job over and writes: continued, its write rejects with FencedError (5F, the pg error as .cause), its job.signal is aborted, the row holds the successor\'s write', async () => {
  await seed('stale', 10);
  const w = new Worker('fenced', 'counters', 'stale', 1000);
  try {
    const tokenA = (await w.expect('claimed ')).split(' ')[1];
    assert.equal(await w.expect('read '), 'read 10');
    await w.waitStopped();
    let jobB;
    await claimWhenFree(pool, 'count:stale', { lease: 30000 }, async (job) => {
      jobB = job;
      assert.ok(BigInt(job.token) > BigInt(tokenA));
      await job.transaction(async (c) => {
        await c.query("UPDATE counters SET value = value + 1 WHERE id = 'stale'");
      });
    });
    assert.equal(jobB.released, true);
    w.p.kill('SIGCONT');
    const rc = await w.finish();
    assert.equal(rc, 3, JSON.stringify(w.lines));
    const fenced = w.lines.filter((l) => l.startsWith('fenced '));
    assert.equal(fenced.length, 1, JSON.stringify(w.lines));
    const f = fenced[0].split(' ');
    assert.match(f[1], /^5F/);
    assert.deepEqual(f.slice(2, 8), ['job', 'count:stale', 'token', tokenA, 'cause', 'DatabaseError'], fenced[0]);
    assert.match(f[8], /^5F/);
    assert.deepEqual(f.slice(9), ['aborted', 'true'], fenced[0]);
    const row = (await db.query("SELECT value::int, writer_epoch::text FROM counters WHERE id = 'stale'")).rows[0];
    assert.deepEqual([row.value, row.writer_epoch], [11, jobB.token]);
  } finally {
    await w.kill();
  }
});

test('twin: the same handler on counters_plain, without fence (the claim only a lease, no fence_begin): the frozen worker\'s write lands after the successor\'s, and one of the two increments is lost (11, not 12)', async () => {
  await seed('stale-twin', 10);
  const w = new Worker('plain', 'counters_plain', 'stale-twin', 1000);
  try {
    await w.expect('claimed ');
    assert.equal(await w.expect('read '), 'read 10');
    await w.waitStopped();
    await claimWhenFree(pool, 'count:stale-twin', { lease: 30000 }, async () => {
      await pool.query("UPDATE counters_plain SET value = value + 1 WHERE id = 'stale-twin'");
    });
    w.p.kill('SIGCONT');
    const rc = await w.finish();
    assert.equal(rc, 0, JSON.stringify(w.lines));
    assert.ok(w.lines.includes('wrote 11'), JSON.stringify(w.lines));
    assert.equal(await q("SELECT value::int FROM counters_plain WHERE id = 'stale-twin'"), 11);
  } finally {
    await w.kill();
  }
});

test('a worker SIGKILLed after COMMIT and before release: the successor\'s job.once(key) answers false and the effect stays applied once (1); the twin without fence_once applies it twice (2)', async () => {
  await seed('killed', 0);
  const w = new Worker('kill', 'counters', 'killed', 1000);
  try {
    const tokenA = (await w.expect('claimed ')).split(' ')[1];
    await w.expect('committed');
    await w.waitStopped();
    w.p.kill('SIGKILL');
    await w.exited;
    assert.deepEqual(await claimRow('count:killed'), [tokenA, false]);
    let answer;
    await claimWhenFree(pool, 'count:killed', { lease: 30000 }, async (job) => {
      await job.transaction(async (c) => {
        answer = await job.once('count:killed:effect', c);
        if (answer)
          await c.query("UPDATE counters SET value = value + 1 WHERE id = 'killed'");
        await c.query("UPDATE counters_plain SET value = value + 1 WHERE id = 'killed'");
      });
    });
    assert.equal(answer, false);
    assert.equal(await q("SELECT value::int FROM counters WHERE id = 'killed'"), 1);
    assert.equal(await q("SELECT value::int FROM counters_plain WHERE id = 'killed'"), 2);
  } finally {
    await w.kill();
  }
});

test('a token taken over (fence_release_any, then a new claim) makes job.transaction() reject with FencedError: .job, .token, .code 5F001, .cause the pg error; the callback does not run; the signal is aborted with it as reason; the release answers false', async () => {
  let seen, tokenB;
  await fence.claim(pool, 'count:inproc', { lease: 300000 }, async (job) => {
    seen = job;
    assert.equal(await q(`SELECT ${s}.fence_release_any('count:inproc')`), true);
    tokenB = await q(`SELECT ${s}.fence_claim('count:inproc', '30 s')`);
    let ran = false;
    let err;
    await assert.rejects(job.transaction(async () => { ran = true; }), (e) => { err = e; return true; });
    assert.equal(ran, false);
    assert.ok(err instanceof fence.FencedError, String(err));
    assert.deepEqual([err.job, err.token, err.code], ['count:inproc', job.token, '5F001']);
    assert.ok(err.cause instanceof pg.DatabaseError);
    assert.equal(err.cause.code, '5F001');
    assert.equal(job.signal.aborted, true);
    assert.equal(job.signal.reason, err);
  });
  assert.equal(seen.released, false);
  assert.deepEqual(await claimRow('count:inproc'), [tokenB, false]);
});

test('the caller\'s bugs (class 5G) stay ordinary pg errors, not FencedError, and leave the signal alone: a second write of a row in strict mode (5G003), a token under another job\'s name (5G001), a token fence never issued (5G002)', async () => {
  let seen;
  await fence.claim(pool, 'bug:twice', { lease: 300000 }, async (job) => {
    seen = job;
    await assert.rejects(job.transaction(async (c) => {
      await c.query("INSERT INTO counters (id, value) VALUES ('bug:twice', 1)");
      await c.query("UPDATE counters SET value = 2 WHERE id = 'bug:twice'");
    }), (e) => e instanceof pg.DatabaseError && !(e instanceof fence.FencedError) && e.code === '5G003');
    assert.equal(job.signal.aborted, false);
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await assert.rejects(c.query(`SELECT ${s}.fence_begin('bug:twice-misspelt', $1)`, [job.token]),
        (e) => e instanceof pg.DatabaseError && !(e instanceof fence.FencedError) && e.code === '5G001');
      await c.query('ROLLBACK');
      const next = String(BigInt(job.token) + 1000000n);
      await c.query('BEGIN');
      await assert.rejects(c.query(`SELECT ${s}.fence_begin('bug:never-claimed', $1)`, [next]),
        (e) => e instanceof pg.DatabaseError && !(e instanceof fence.FencedError) && e.code === '5G002');
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    assert.equal(job.signal.aborted, false);
  });
  assert.equal(seen.released, true);
});

test('the keeper renews a 2000 ms lease at a third of it through a 5 s callback: a competing fence_claim returns NULL throughout, renewedUntil is set, no renewal error', async () => {
  const rival = new pg.Client({ application_name: 'fence-test rival' });
  await rival.connect();
  const answers = [];
  let seen;
  try {
    await fence.claim(pool, 'count:renew', { lease: 2000 }, async (job) => {
      seen = job;
      const end = Date.now() + 5000;
      while (Date.now() < end) {
        answers.push((await rival.query(`SELECT ${s}.fence_claim('count:renew', '2 s') AS t`)).rows[0].t);
        await sleep(200);
      }
      assert.equal(job.renewError, null);
      assert.ok(job.renewedUntil instanceof Date);
      assert.equal(job.signal.aborted, false);
    });
  } finally {
    await rival.end();
  }
  assert.ok(answers.length > 10, `${answers.length} competing claims`);
  assert.deepEqual([...new Set(answers)], [null]);
  assert.equal(seen.released, true);
});

test('twin: the same 2 s claim made with fence_claim alone and not renewed: a competing fence_claim gets a token once the lease has run out', async () => {
  assert.notEqual(await q(`SELECT ${s}.fence_claim('count:no-renew', '2 s')`), null);
  const rival = new pg.Client({ application_name: 'fence-test rival' });
  await rival.connect();
  try {
    const got = await waitFor(async () =>
      (await rival.query(`SELECT ${s}.fence_claim('count:no-renew', '2 s') AS t`)).rows[0].t, 30000, 200);
    assert.notEqual(got, null);
  } finally {
    await rival.end();
  }
});

test('fence.notify_superseded on (ALTER DATABASE): a fence_release_any in another session aborts job.signal through the fence_superseded notification, before any renewal; twin with the setting off in that session: nothing arrives (3 s), the signal stays clear', async () => {
  const dbname = await q('SELECT current_database()');
  const qdb = '"' + dbname.replace(/"/g, '""') + '"';
  await db.query(`ALTER DATABASE ${qdb} SET fence.notify_superseded = on`);
  const sup = new pg.Client({ application_name: 'fence-test superseder' });
  try {
    await sup.connect();   // after the ALTER: the setting is on
    assert.equal((await sup.query("SELECT current_setting('fence.notify_superseded') AS v")).rows[0].v, 'on');
    let seen;
    await fence.claim(pool, 'count:notify', { lease: 300000 }, async (job) => {   // first renewal after 100 s
      seen = job;
      assert.equal((await sup.query(`SELECT ${s}.fence_release_any('count:notify') AS r`)).rows[0].r, true);
      assert.ok(await waitFor(() => job.signal.aborted, 30000), 'the signal aborted by the notification');
      assert.ok(job.signal.reason instanceof fence.FenceError);
      assert.equal(job.signal.reason.payload.job, 'count:notify');
      assert.equal(job.renewedUntil, null);   // no renewal ran: the notification did it
    });
    assert.equal(seen.released, false);
    // the twin
    await sup.query('SET fence.notify_superseded = off');
    await fence.claim(pool, 'count:notify-off', { lease: 300000 }, async (job) => {
      seen = job;
      assert.equal((await sup.query(`SELECT ${s}.fence_release_any('count:notify-off') AS r`)).rows[0].r, true);
      assert.equal(await waitFor(() => job.signal.aborted, 3000), false);
    });
    assert.equal(seen.released, false);
  } finally {
    await sup.end();
    await db.query(`ALTER DATABASE ${qdb} RESET fence.notify_superseded`);
  }
});

test('programmer errors are not FencedError: a text, boolean, null or missing lease (TypeError, no claim made), a zero lease (22023), an unknown schema (a pg error), a database without fence (FenceError), once() outside job.transaction(), an error in the transaction\'s callback (22012: rolled back, signal clear)', async () => {
  for (const bad of ['30 seconds', true, null, undefined]) {
    await assert.rejects(fence.claim(pool, 'count:bad', { lease: bad }, async () => {}), TypeError);
  }
  assert.equal(await claimRow('count:bad'), null);
  await assert.rejects(fence.claim(pool, 'count:bad', { lease: 0 }, async () => {}),
    (e) => e instanceof pg.DatabaseError && !(e instanceof fence.FencedError) && e.code === '22023');
  await assert.rejects(fence.claim(pool, 'count:bad', { lease: 30000, schema: 'no_such_schema' }, async () => {}),
    (e) => e instanceof pg.DatabaseError && !(e instanceof fence.FencedError) && !e.code.startsWith('5F'));
  const elsewhere = new pg.Pool({ database: 'postgres', max: 2 });   // fence is not installed there
  try {
    await assert.rejects(fence.claim(elsewhere, 'count:bad', { lease: 30000 }, async () => {}),
      (e) => e instanceof fence.FenceError && !(e instanceof fence.FencedError) && /not installed/.test(e.message));
  } finally {
    await elsewhere.end();
  }
  await seed('bad');
  let seen;
  await fence.claim(pool, 'count:bad', { lease: 30000 }, async (job) => {
    seen = job;
    const c = await pool.connect();
    try {
      await assert.rejects(job.once('count:bad:x', c), (e) => !(e instanceof fence.FencedError) && /inside job.transaction/.test(e.message));
    } finally {
      c.release();
    }
    let kept;
    await job.transaction(async (t) => { kept = t; });
    await assert.rejects(job.once('count:bad:x', kept), (e) => !(e instanceof fence.FencedError));
    await assert.rejects(job.once('count:bad:x'), TypeError);
    await assert.rejects(job.transaction(async (t) => {
      await t.query("UPDATE counters SET value = value + 1 WHERE id = 'bad'");
      await t.query('SELECT 1 / 0');
    }), (e) => e instanceof pg.DatabaseError && e.code === '22012');
    assert.equal(job.signal.aborted, false);
    assert.equal(await q("SELECT value::int FROM counters WHERE id = 'bad'"), 0);
    await job.transaction(async (t) => {
      await t.query("UPDATE counters SET value = value + 1 WHERE id = 'bad'");
    });
  });
  assert.equal(seen.released, true);
  assert.equal(await q("SELECT value::int FROM counters WHERE id = 'bad'"), 1);
  assert.ok(await waitFor(async () =>
    await q("SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'fence-node keeper'") === 0, 30000),
  "the keepers' connections were closed");
});
