/*
 * test/worker.js: a handler using the client, run as its own process by
 * fence.test.js so that it can be frozen (SIGSTOP) and killed (SIGKILL).
 *
 *     node worker.js MODE TABLE ID LEASE_MS
 *
 * The job is "count:ID"; the connection comes from the environment (PGHOST,
 * ...).  The worker stops itself with SIGSTOP at a fixed point (the freeze
 * point is in the code, not a timing) and prints one line a step.
 *
 *   fenced  claim, read the counter ID of TABLE, stop; once continued, write
 *           value + 1 in job.transaction().  FencedError: prints "fenced
 *           CODE ..." and exits 3.
 *   plain   the same handler without fence: the claim is only a lease and
 *           the write goes through a plain BEGIN ... COMMIT, without
 *           fence_begin (the unprotected twin).
 *   kill    claim; in job.transaction(), once("count:ID:effect") gates value
 *           + 1 on TABLE, and TABLE_plain gets value + 1 whatever once says
 *           (the twin without fence_once); COMMIT; then stop before the
 *           release, to be killed there.
 *
 * Not a test file: fence.test.js runs it (package.json names the test files).
 */

'use strict';

const fs = require('fs');
const pg = require('pg');
const fence = require('..');

function say(...words) {
  fs.writeSync(1, words.join(' ') + '\n');
}

function ident(name) {
  return '"' + name.replace(/"/g, '""') + '"';
}

async function main() {
  const [mode, table, id, leaseArg] = process.argv.slice(2);
  const jobName = `count:${id}`;
  const pool = new pg.Pool({ application_name: `fence-test-worker ${mode}`, max: 4 });
  const t = ident(table);
  try {
    const out = await fence.claim(pool, jobName, { lease: Number(leaseArg) }, async (job) => {
      say('claimed', job.token);
      if (mode === 'kill') {
        await job.transaction(async (c) => {
          if (await job.once(`${jobName}:effect`, c))
            await c.query(`UPDATE ${t} SET value = value + 1 WHERE id = $1`, [id]);
          await c.query(`UPDATE ${ident(table + '_plain')} SET value = value + 1 WHERE id = $1`, [id]);
        });
        say('committed');
        process.kill(process.pid, 'SIGSTOP');
        say('not killed');
        return 1;
      }
      const value = Number((await pool.query(`SELECT value FROM ${t} WHERE id = $1`, [id])).rows[0].value);
      say('read', value);
      say('stopping');
      process.kill(process.pid, 'SIGSTOP');
      if (mode === 'plain') {
        const c = await pool.connect();
        try {
          await c.query('BEGIN');
          await c.query(`UPDATE ${t} SET value = $1 WHERE id = $2`, [value + 1, id]);
          await c.query('COMMIT');
        } finally {
          c.release();
        }
      } else {
        try {
          await job.transaction(async (c) => {
            await c.query(`UPDATE ${t} SET value = $1 WHERE id = $2`, [value + 1, id]);
          });
        } catch (e) {
          if (e instanceof fence.FencedError) {
            say(`fenced ${e.code} job ${e.job} token ${e.token}` +
              ` cause ${e.cause && e.cause.constructor.name} ${e.cause && e.cause.code}` +
              ` aborted ${job.signal.aborted}`);
            return 3;
          }
          throw e;
        }
      }
      say('wrote', value + 1);
      return job;
    });
    if (out === 3)
      return 3;
    say('released', out.released);
    return 0;
  } finally {
    await pool.end();
  }
}

main().then((rc) => { process.exitCode = rc; }, (e) => {
  say('error', e && e.code, e && e.message);
  process.exitCode = 2;
});
