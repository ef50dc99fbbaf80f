// examples/queues/fence.js: the queues' adapter to fence's Node client
// (clients/node, the package "fence"), and the fenced handler that
// graphile.js and pgboss.js run for each job of their queue.
//
// runFenced(pool, name, { lease, holder, log }, fn) runs fn(job) under the
// fence job `name` (one run of the work: named after the queue's job) with
// claim() from the client, which claims, renews the lease in the background
// every third of it, and releases in the end. The lease is in seconds here,
// as in FENCE_LEASE; the client takes milliseconds. It resolves:
//   - 'done': fn resolved (it committed), "released true|false" is logged;
//   - 'fenced': an error of SQLSTATE class 5F (the client's FencedError)
//     says that this execution was superseded: a newer execution owns the
//     job (or a newer writer the row). The caller then ends the job WITHOUT
//     a retry: the same token would be fenced again, and a retry with a new
//     token would apply the effect twice.
// "The job is held" (the client's HeldError: fence_claim returned null, a
// live lease or an execution still writing) is thrown as a plain Error, so
// the queue retries this job later, with its own backoff. Any other error is
// thrown too (the queue retries it), except one of the release after fn has
// committed: that is logged, and the lease runs out by itself.
//
// countJob(pool, id, { lease, work, holder, log }) does the job "count:ID":
// add one to the row ID of the protected table counters (examples/schema.sql).
//   - read the counter, then work for `work` seconds (the client renews the
//     lease meanwhile; each renewal is logged). The lease is short (seconds
//     to a minute) and renewed while the handler lives, so a frozen or dead
//     handler loses it quickly; the queue's own limit (pg-boss
//     expireInSeconds, graphile's 4 hour lock) is longer and decides when
//     the job is handed out again.
//   - in job.transaction() (BEGIN, fence_begin(job, token), COMMIT), write
//     the new value.
//
// node-postgres returns bigint as a string: the token stays a string.
'use strict'

const { claim, HeldError, FencedError } = require('fence')

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function runFenced (pool, name, { lease = 30, holder = null, log = console.log } = {}, fn) {
  let job = null
  let committed = false
  try {
    await claim(pool, name, { lease: lease * 1000, holder }, async (j) => {
      job = j
      log(`claimed ${name} token ${j.token}`)
      await fn(j)
      committed = true
    })
  } catch (err) {
    if (err instanceof FencedError) {
      log(`fenced ${err.code}: ${err.cause ? err.cause.message : err.message}`)
      return 'fenced'
    }
    if (err instanceof HeldError) throw new Error(`${name} is held by another execution; retry later`)
    // committed: from here on, an error must not make the queue run the job again
    if (committed) {
      log(`release failed (the lease runs out by itself): ${err.message}`)
      return 'done'
    }
    throw err
  }
  log(`released ${job.released}`)
  return 'done'
}

async function countJob (pool, id, { lease = 30, work = 0, holder = null, log = console.log } = {}) {
  return runFenced(pool, `count:${id}`, { lease, holder, log }, async (job) => {
    const read = await pool.query('SELECT value FROM counters WHERE id = $1', [id])
    if (read.rowCount !== 1) throw new Error(`no counter ${id}`)
    const value = BigInt(read.rows[0].value)
    log(`read ${value}`)

    // the work; job.signal is aborted on a takeover: stop working then (the
    // fenced write below stops the rest)
    const deadline = Date.now() + work * 1000
    let renewed = job.renewedUntil
    while (Date.now() < deadline && !job.signal.aborted) {
      await sleep(Math.min(50, Math.max(0, deadline - Date.now())))
      if (job.renewedUntil && job.renewedUntil !== renewed) {
        renewed = job.renewedUntil
        log(`renewed until ${renewed.toISOString()}`)
      }
    }

    if (process.env.FENCE_EXAMPLE_STOP_BEFORE_WRITE) {
      log('stopping before the write')
      process.kill(process.pid, 'SIGSTOP')
    }

    await job.transaction((client) =>
      client.query('UPDATE counters SET value = $1 WHERE id = $2', [(value + 1n).toString(), id]))
    log(`wrote ${value + 1n} token ${job.token}`)
  })
}

module.exports = { runFenced, countJob }
