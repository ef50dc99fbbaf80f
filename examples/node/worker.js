#!/usr/bin/env node
// examples/node/worker.js: a fence job worker with fence's Node client.
//
//   npm ci && node worker.js ID [LEASE_SECONDS [WORK_SECONDS]]
//
// The job "count:ID" adds one to the row ID of the protected table counters
// (examples/schema.sql). The handler, with clients/node (package fence, over
// node-postgres): claim() claims the job (HeldError: someone holds it, try
// again later) and renews the lease in the background while the handler
// runs; the handler reads the counter, works for WORK_SECONDS, then writes
// the new value; the read and the write each run in job.transaction()
// (BEGIN, fence_begin, the statement, COMMIT), and the claim is released on
// the way out. FencedError (an error of SQLSTATE class 5F) means this
// execution was fenced: a newer one owns the job or the row. It ends the job
// at once, without a retry, because the same token would be fenced again.
// Any other error is node-postgres's own, and is retried from the claim, a
// few times.
//
// Tokens are bigint: node-postgres returns int8 as a string (job.token), and
// the client passes that string back as is. Never turn a token into a Number
// (above 2^53 it would be rounded to another token); the counter's
// arithmetic uses BigInt.
//
// The work is split into steps of 100 ms: after each, the worker says when
// the client has renewed the lease meanwhile (job.renewedUntil), and it stops
// early once job.signal is aborted (the claim was taken over).
//
// Connection settings come from the environment (PGHOST, PGPORT, PGDATABASE,
// ...). Output is one line per step; exit status 0 done, 3 fenced, 1 gave up.
// FENCE_EXAMPLE_STOP_BEFORE_WRITE=1 makes the worker stop itself with SIGSTOP
// just before the write.
'use strict'

const major = Number(process.versions.node.split('.')[0])
if (major < 20) {
  console.log(`SKIP examples/node: fence's Node client needs Node.js 20 or later; this is ${process.version}`)
  process.exit(0)
}

const { Pool } = require('pg')
const { claim, HeldError, FencedError } = require('fence')

const MAX_ATTEMPTS = 5 // attempts after an error that is retryable
const HELD_WAIT_MS = 60000 // how long to keep trying a held job

class NoCounter extends Error {}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// The handler's work: `seconds`, in steps of 100 ms, saying each renewal the
// client made meanwhile; over early when the claim was taken over.
async function work (job, seconds) {
  let seen = job.renewedUntil
  const deadline = Date.now() + seconds * 1000
  while (Date.now() < deadline && !job.signal.aborted) {
    await sleep(Math.min(100, Math.max(0, deadline - Date.now())))
    const until = job.renewedUntil
    if (until !== null && (seen === null || until.getTime() !== seen.getTime())) {
      seen = until
      console.log(`renewed until ${until.toISOString()}`)
    }
  }
}

// The release's outcome, as the client left it on the job.
function sayReleased (job) {
  if (job.released !== null) console.log(`released ${job.released}`)
  else if (job.releaseError) console.log(`release failed (the lease runs out by itself): ${job.releaseError.message}`)
}

// One attempt: the claim, the handler, the release. Resolves to the exit
// status, 0 done or 3 fenced; rejects with HeldError when the job is held,
// and with any other error of the handler (the claim released).
async function runJob (pool, id, name, lease, seconds) {
  let claimed = null
  let wrote = false
  try {
    await claim(pool, name, { lease: lease * 1000, holder: 'node-worker' }, async (job) => {
      claimed = job
      console.log(`claimed ${name} token ${job.token}`)
      const value = await job.transaction(async (client) => {
        const r = await client.query('SELECT value FROM counters WHERE id = $1', [id])
        if (r.rowCount !== 1) throw new NoCounter(`no counter ${id}`)
        return BigInt(r.rows[0].value)
      })
      console.log(`read ${value}`)

      await work(job, seconds)

      if (process.env.FENCE_EXAMPLE_STOP_BEFORE_WRITE) {
        console.log('stopping before the write')
        process.kill(process.pid, 'SIGSTOP')
      }

      // the write: job.transaction() binds the token, the guard checks every row
      await job.transaction(async (client) => {
        await client.query('UPDATE counters SET value = $1 WHERE id = $2', [(value + 1n).toString(), id])
      })
      console.log(`wrote ${value + 1n} token ${job.token}`)
      wrote = true
    })
  } catch (err) {
    if (wrote) {
      // the handler is done: only the release failed (the lease runs out by itself)
      console.log(`release failed (the lease runs out by itself): ${err.message}`)
      return 0
    }
    if (!(err instanceof FencedError)) throw err
    // stale: stop, no retry (the claim was released on the way out)
    console.log(`fenced ${err.code}: ${err.cause ? err.cause.message : err.message}`)
    sayReleased(claimed)
    return 3
  }
  sayReleased(claimed)
  return 0
}

async function main () {
  const [id, leaseArg = '30', workArg = '0.5'] = process.argv.slice(2)
  const lease = Number(leaseArg)
  const seconds = Number(workArg)
  if (!id || !(lease > 0) || !(seconds >= 0)) {
    console.error('usage: node worker.js ID [LEASE_SECONDS [WORK_SECONDS]]')
    return 2
  }
  const name = `count:${id}`
  console.log(`worker pid ${process.pid} job ${name} lease ${lease}s`)

  const pool = new Pool({ application_name: 'fence-example-node' })
  // an idle client that loses its connection: the pool drops it and makes a
  // new one; without a listener, the error would end the process
  pool.on('error', () => {})
  try {
    let attempts = 0
    let saidHeld = false
    const heldUntil = Date.now() + HELD_WAIT_MS
    for (;;) {
      try {
        return await runJob(pool, id, name, lease, seconds)
      } catch (err) {
        if (err instanceof HeldError) {
          if (!saidHeld) console.log(`held: ${name} is claimed by another worker; trying again`)
          saidHeld = true
          if (Date.now() > heldUntil) {
            console.log(`gave up: ${name} stayed held`)
            return 1
          }
          await sleep(200)
          continue
        }
        if (err instanceof NoCounter) {
          console.log(err.message)
          return 1
        }
        console.log(`retryable ${err.code || '(no SQLSTATE)'}: ${err.message}`)
      }
      if (++attempts >= MAX_ATTEMPTS) {
        console.log(`gave up after ${attempts} attempts`)
        return 1
      }
      await sleep(500 * attempts)
    }
  } finally {
    await pool.end().catch(() => {})
  }
}

main()
  .then((code) => { process.exitCode = code })
  .catch((err) => { console.error(err); process.exitCode = 1 })
