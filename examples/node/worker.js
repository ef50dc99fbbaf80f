#!/usr/bin/env node
// examples/node/worker.js: a fence job worker with node-postgres (pg 8.16).
//
//   npm ci && node worker.js ID [LEASE_SECONDS [WORK_SECONDS]]
//
// The job "count:ID" adds one to the row ID of the protected table counters
// (examples/schema.sql). The loop: fence_claim the job (null: someone holds
// it, try again later); read the counter; work for WORK_SECONDS, renewing the
// lease with fence_renew every third of it; then, in one transaction,
// fence_begin and write the new value; then fence_release. An error whose
// SQLSTATE (err.code) is of class 5F means this execution was fenced: a newer
// one owns the job or the row. It ends the job at once, without a retry,
// because the same token would be fenced again. Any other error is retried
// from the claim, a few times.
//
// Tokens are bigint: node-postgres returns int8 as a string, and the worker
// passes that string back as is. Never turn a token into a Number (above 2^53
// it would be rounded to another token); the counter's arithmetic uses BigInt.
//
// Connection settings come from the environment (PGHOST, PGPORT, PGDATABASE,
// ...). Output is one line per step; exit status 0 done, 3 fenced, 1 gave up.
// FENCE_EXAMPLE_STOP_BEFORE_WRITE=1 makes the worker stop itself with SIGSTOP
// just before the write.
'use strict'

const major = Number(process.versions.node.split('.')[0])
if (major < 16) {
  console.log(`SKIP examples/node: node-postgres 8.16 needs Node.js 16 or later; this is ${process.version}`)
  process.exit(0)
}

const { Client } = require('pg')

const MAX_ATTEMPTS = 5 // attempts after an error that is retryable
const HELD_WAIT_MS = 60000 // how long to keep trying a held job

class Fenced extends Error {}
class NoCounter extends Error {}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const isFenced = (err) => Boolean(err) && typeof err.code === 'string' && err.code.startsWith('5F')

// One attempt. Resolves true when done, false when the job is held.
async function runJob (client, id, job, lease, work) {
  const claim = await client.query(
    'SELECT fence_claim($1, make_interval(secs => $2), $3) AS token', [job, lease, 'node-worker'])
  const token = claim.rows[0].token // a string, or null
  if (token === null) return false
  console.log(`claimed ${job} token ${token}`)
  try {
    const read = await client.query('SELECT value FROM counters WHERE id = $1', [id])
    if (read.rowCount !== 1) throw new NoCounter(`no counter ${id}`)
    const value = BigInt(read.rows[0].value)
    console.log(`read ${value}`)

    // the handler's work; a long one renews the lease every third of it
    const deadline = Date.now() + work * 1000
    while (Date.now() < deadline) {
      await sleep(Math.min((lease * 1000) / 3, Math.max(0, deadline - Date.now())))
      if (Date.now() >= deadline) break
      const r = await client.query(
        'SELECT fence_renew($1, $2, make_interval(secs => $3)) AS until', [job, token, lease])
      console.log(`renewed until ${r.rows[0].until.toISOString()}`)
    }

    if (process.env.FENCE_EXAMPLE_STOP_BEFORE_WRITE) {
      console.log('stopping before the write')
      process.kill(process.pid, 'SIGSTOP')
    }

    // the write: fence_begin binds the token, the guard checks every row
    await client.query('BEGIN')
    try {
      await client.query('SELECT fence_begin($1, $2)', [job, token])
      await client.query('UPDATE counters SET value = $1 WHERE id = $2', [(value + 1n).toString(), id])
      await client.query('COMMIT')
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {})
      throw err
    }
    console.log(`wrote ${value + 1n} token ${token}`)
  } catch (err) {
    if (isFenced(err)) throw new Fenced(`${err.code}: ${err.message}`)
    // give the claim back before the retry
    await client.query('SELECT fence_release($1, $2)', [job, token]).catch(() => {})
    throw err
  }

  try {
    const r = await client.query('SELECT fence_release($1, $2) AS released', [job, token])
    console.log(`released ${r.rows[0].released}`)
  } catch (err) {
    console.log(`release failed (the lease runs out by itself): ${err.message}`)
  }
  return true
}

async function main () {
  const [id, leaseArg = '30', workArg = '0.5'] = process.argv.slice(2)
  const lease = Number(leaseArg)
  const work = Number(workArg)
  if (!id || !(lease > 0) || !(work >= 0)) {
    console.error('usage: node worker.js ID [LEASE_SECONDS [WORK_SECONDS]]')
    return 2
  }
  const job = `count:${id}`
  console.log(`worker pid ${process.pid} job ${job} lease ${lease}s`)

  let attempts = 0
  let saidHeld = false
  const heldUntil = Date.now() + HELD_WAIT_MS
  let client = null
  for (;;) {
    try {
      if (client === null) {
        client = new Client({ application_name: 'fence-example-node' })
        client.on('error', () => { client = null }) // a dead connection: reconnect
        await client.connect()
      }
      if (await runJob(client, id, job, lease, work)) {
        await client.end()
        return 0
      }
      if (!saidHeld) console.log(`held: ${job} is claimed by another worker; trying again`)
      saidHeld = true
      if (Date.now() > heldUntil) {
        console.log(`gave up: ${job} stayed held`)
        return 1
      }
      await sleep(200)
      continue
    } catch (err) {
      if (err instanceof Fenced) {
        console.log(`fenced ${err.message}`)
        if (client !== null) await client.end().catch(() => {})
        return 3
      }
      if (err instanceof NoCounter) {
        console.log(err.message)
        return 1
      }
      console.log(`retryable ${err.code || '(no SQLSTATE)'}: ${err.message}`)
      if (client !== null && !err.code) { // no SQLSTATE: the connection is gone
        client.end().catch(() => {})
        client = null
      }
    }
    if (++attempts >= MAX_ATTEMPTS) {
      console.log(`gave up after ${attempts} attempts`)
      return 1
    }
    await sleep(500 * attempts)
  }
}

main().then((code) => { process.exitCode = code })
