#!/usr/bin/env node
// examples/node/notify_worker.js: a worker told at once that it was
// superseded, with node-postgres and an AbortController.
//
//   npm ci && node notify_worker.js ID EFFECT_FILE [LEASE_SECONDS]
//
// The job "notify:ID" makes an external effect (here: appends a line to
// EFFECT_FILE, with fs.promises.writeFile and the handler's AbortSignal; in
// real life fetch(url, { signal }), an e-mail, an upload) and then writes
// the counter ID in a fenced transaction.
//
// A second client LISTENs on fence_superseded.  When a takeover or
// fence_release_any supersedes this worker's token, and the session that
// made it has fence.notify_superseded on, the notification arrives when
// that change commits, and the listener aborts the handler's
// AbortController: every call given its signal stops, and the handler
// checks signal.aborted before each effect.  After a pause (a GC pause, a
// SIGSTOP), one round trip on the listening client delivers what arrived
// meanwhile.  Anyone can NOTIFY any channel: a notification is a reason to
// stop, and the fenced write stays the real check.
//
// Without the setting on the superseding side nothing arrives: the handler
// makes the effect again, and its write is fenced (5F001), too late for the
// effect.  FENCE_EXAMPLE_STOP_BEFORE_EFFECT=1 makes the worker stop itself
// with SIGSTOP just before the effect.  Exit 0 done, 3 superseded or
// fenced, 1 gave up.
'use strict'

const major = Number(process.versions.node.split('.')[0])
if (major < 16) {
  console.log(`SKIP examples/node: node-postgres 8.16 needs Node.js 16 or later; this is ${process.version}`)
  process.exit(0)
}

const fs = require('fs')
const { Client } = require('pg')

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function main () {
  const [id, effectFile, leaseArg] = process.argv.slice(2)
  if (!id || !effectFile) {
    console.error('usage: node notify_worker.js ID EFFECT_FILE [LEASE_SECONDS]')
    return 2
  }
  const lease = Number(leaseArg || 30)
  const job = `notify:${id}`
  console.log(`worker pid ${process.pid} job ${job} lease ${lease}s`)

  const client = new Client({ application_name: 'fence-example-notify' })
  const listener = new Client({ application_name: 'fence-example-notify-listener' })
  await client.connect()
  await listener.connect()
  const controller = new AbortController()
  let token = null
  listener.on('notification', (msg) => {
    let p
    try { p = JSON.parse(msg.payload) } catch { return }
    // tokens are compared as strings: node-postgres returns int8 as one
    if (token !== null && p.job === job && String(p.superseded_token) === token) {
      controller.abort(new Error(`superseded by token ${p.new_token}`))
    }
  })
  try {
    await listener.query('LISTEN fence_superseded')

    const deadline = Date.now() + 60000
    for (;;) {
      const r = await client.query(
        'SELECT fence_claim($1, make_interval(secs => $2), $3) AS token', [job, lease, `notify-worker ${process.pid}`])
      token = r.rows[0].token
      if (token !== null) break
      if (Date.now() > deadline) {
        console.log('gave up: the job stayed held')
        return 1
      }
      await sleep(100)
    }
    console.log(`claimed ${job} token ${token}`)

    if (process.env.FENCE_EXAMPLE_STOP_BEFORE_EFFECT) {
      console.log('stopping before the effect')
      process.kill(process.pid, 'SIGSTOP')
    }

    // Before an effect fencing cannot reach: anything heard while paused?
    await listener.query('SELECT 1')
    try {
      controller.signal.throwIfAborted()
      await fs.promises.writeFile(effectFile, `effect of ${job} by token ${token}\n`,
        { flag: 'a', signal: controller.signal })
    } catch (err) {
      if (controller.signal.aborted) {
        console.log(`${controller.signal.reason.message}: skipping the external effect`)
        return 3
      }
      throw err
    }
    console.log('made the external effect')

    try {
      await client.query('BEGIN')
      await client.query('SELECT fence_begin($1, $2)', [job, token])
      await client.query('UPDATE counters SET value = value + 1 WHERE id = $1', [id])
      await client.query('COMMIT')
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {})
      if (typeof err.code === 'string' && err.code.startsWith('5F')) {
        console.log(`fenced ${err.code}`)
        return 3
      }
      throw err
    }
    console.log(`wrote token ${token}`)
    const r = await client.query('SELECT fence_release($1, $2) AS released', [job, token])
    console.log(`released ${r.rows[0].released}`)
    return 0
  } finally {
    await listener.end().catch(() => {})
    await client.end().catch(() => {})
  }
}

main()
  .then((code) => { process.exitCode = code })
  .catch((err) => { console.error(err); process.exitCode = 1 })
