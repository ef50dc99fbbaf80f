#!/usr/bin/env node
// examples/node/notify_worker.js: a worker told at once that it was
// superseded, with fence's Node client and its AbortSignal.
//
//   npm ci && node notify_worker.js ID EFFECT_FILE [LEASE_SECONDS [WORK_SECONDS]]
//
// The job "notify:ID" works for up to WORK_SECONDS (default 8), then makes an
// external effect (here: appends a line to EFFECT_FILE; in real life
// fetch(url, { signal }), an e-mail, an upload, which fencing cannot reach)
// and then writes the counter ID in a fenced transaction (job.transaction()).
//
// claim() (clients/node) listens on fence_superseded, on its keeper's
// client, from before the claim. When a takeover or fence_release_any
// supersedes this worker's token, and the session that made it has
// fence.notify_superseded on (ALTER DATABASE ... SET, ALTER ROLE ... SET, or
// PGOPTIONS), the notification arrives when that change commits, and the
// client aborts job.signal. The handler's work is a timer given that signal
// (timers/promises): aborted, the wait ends at once, and the handler skips
// the effect and ends the job (exit 3). The effect itself is given the
// signal too, as fetch() would be.
//
// Anyone can NOTIFY any channel, so a notification is a reason to stop, not
// a proof: the fenced write is the real check. The worker uses both: the
// notification to stop early, fence_begin to be sure.
//
// Without the setting on the superseding side, nothing arrives (until the
// client's next renewal, at a third of the lease, fails), and the handler
// makes the effect a second time; its write is then fenced (5F001), too late
// for the effect. Connection settings come from the environment (PGHOST,
// PGPORT, PGDATABASE, ...). Output: one line a step; exit 0 done, 3
// superseded or fenced, 1 gave up.
'use strict'

const major = Number(process.versions.node.split('.')[0])
if (major < 20) {
  console.log(`SKIP examples/node: fence's Node client needs Node.js 20 or later; this is ${process.version}`)
  process.exit(0)
}

const fs = require('fs')
const timers = require('timers/promises')
const { Pool } = require('pg')
const { claim, HeldError, FencedError } = require('fence')

const HELD_WAIT_MS = 60000 // how long to keep trying a held job

// The handler: one claim of the job. Resolves to the exit status, 0 or 3.
async function handle (job, id, effectFile, seconds) {
  console.log(`claimed ${job.name} token ${job.token}`)
  console.log(`working up to ${seconds} s`)
  try {
    // The work, over early if the job is taken over meanwhile; then, before
    // an effect fencing cannot reach: was it?
    await timers.setTimeout(seconds * 1000, undefined, { signal: job.signal })
      .catch((err) => { if (!job.signal.aborted) throw err })
    if (job.signal.aborted) {
      console.log('superseded: skipping the external effect')
      return 3
    }
    try {
      await fs.promises.writeFile(effectFile, `effect of ${job.name} by token ${job.token}\n`,
        { flag: 'a', signal: job.signal })
    } catch (err) {
      if (!job.signal.aborted) throw err
      console.log('superseded: skipping the external effect')
      return 3
    }
    console.log('made the external effect')
    await job.transaction(async (client) => {
      await client.query('UPDATE counters SET value = value + 1 WHERE id = $1', [id])
    })
    console.log(`wrote token ${job.token}`)
    return 0
  } catch (err) {
    if (!(err instanceof FencedError)) throw err
    console.log(`fenced ${err.code}: ${err.cause ? err.cause.message : err.message}`)
    return 3
  }
}

async function main () {
  const [id, effectFile, leaseArg = '60', workArg = '8'] = process.argv.slice(2)
  const lease = Number(leaseArg)
  const seconds = Number(workArg)
  if (!id || !effectFile || !(lease > 0) || !(seconds >= 0)) {
    console.error('usage: node notify_worker.js ID EFFECT_FILE [LEASE_SECONDS [WORK_SECONDS]]')
    return 2
  }
  const name = `notify:${id}`
  console.log(`worker pid ${process.pid} job ${name} lease ${lease}s`)

  const pool = new Pool({ application_name: 'fence-example-notify' })
  pool.on('error', () => {}) // an idle client's lost connection: the pool makes a new one
  try {
    const deadline = Date.now() + HELD_WAIT_MS
    for (;;) {
      let claimed = null
      let rc
      try {
        rc = await claim(pool, name, { lease: lease * 1000, holder: `notify-worker ${process.pid}` },
          (job) => { claimed = job; return handle(job, id, effectFile, seconds) })
      } catch (err) {
        if (!(err instanceof HeldError)) throw err
        if (Date.now() > deadline) {
          console.log('gave up: the job stayed held')
          return 1
        }
        await timers.setTimeout(100)
        continue
      }
      // fence_release answered false when the claim had been superseded
      if (claimed.released !== null) console.log(`released ${claimed.released}`)
      return rc
    }
  } finally {
    await pool.end().catch(() => {})
  }
}

main()
  .then((code) => { process.exitCode = code })
  .catch((err) => { console.error(err); process.exitCode = 1 })
