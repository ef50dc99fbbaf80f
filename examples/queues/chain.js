#!/usr/bin/env node
// examples/queues/chain.js: a graphile-worker 0.17 job that enqueues its
// successor, with both halves of fence: fencing and effect keys.
//
//   npm ci
//   node chain.js enqueue ID LAST   add step 1 of the chain "chain:ID"
//   node chain.js once              a worker that exits when no job is left
//   node chain.js rescue            re-add the chain jobs whose worker died
//
// Step S of chain ID is the fence job "chain:ID:S" (also its graphile job
// key).  Its effect adds one to the counter ID (the protected table counters
// of examples/schema.sql); unless S is LAST, it enqueues step S + 1 with
// graphile_worker.add_job.  Both happen in the step's final transaction,
// with fence's Node client (clients/node; runFenced in fence.js claims,
// renews and releases):
//
//   await job.transaction(async (client) => {        // BEGIN; fence_begin(job, token)
//     if (await job.once(`${job.name}:effect`, client)) <the effect>
//     if (await job.once(`${job.name}:next`, client)) <add_job: the successor>
//   })                                               // COMMIT
//                                                    // then fence_release(job, token)
//
// A stale execution (frozen past its lease) fails at fence_begin with 5F001:
// its transaction, enqueue included, rolls back.  An execution that commits
// and then dies before fence_release (FENCE_EXAMPLE_KILL_AFTER_COMMIT=1
// kills this process with SIGKILL at that point) leaves its graphile job
// locked; `rescue` adds it again once its fence lease has run out, the next
// execution takes the job over, and fence_once answers false for the effect
// and for the successor: neither happens twice.  With FENCE_EXAMPLE_NO_ONCE=1
// the handler skips fence_once (the twin): the same crash applies the
// effect twice and enqueues two successors.
//
// Connection settings come from the environment (PGHOST, PGPORT, ...);
// FENCE_LEASE (seconds, default 30).
'use strict'

const major = Number(process.versions.node.split('.')[0])
if (major < 20) {
  console.log(`SKIP examples/queues/chain.js: fence's Node client needs Node.js 20 or later; this is ${process.version}`)
  process.exit(0)
}

const { runOnce, makeWorkerUtils } = require('graphile-worker')
const { Pool } = require('pg')
const { runFenced } = require('./fence')

const lease = Number(process.env.FENCE_LEASE || 30)
const keyed = !process.env.FENCE_EXAMPLE_NO_ONCE
const pgPool = new Pool({ application_name: 'fence-example-chain' })
pgPool.on('error', (err) => console.log(`idle connection lost: ${err.message}`))
pgPool.on('connect', (client) => client.on('error', (err) => console.log(`connection lost: ${err.message}`)))

async function chainStep (payload, helpers) {
  const { id, step, last } = payload
  const name = `chain:${id}:${step}`
  // 'fenced' (superseded: its transaction, enqueue included, rolled back)
  // ends the job with no retry: the task returns
  await runFenced(pgPool, name, { lease, holder: `graphile-worker job ${helpers.job.id}` }, async (job) => {
    await job.transaction(async (client) => {
      const effect = keyed ? await job.once(`${name}:effect`, client) : true
      if (effect) {
        await client.query('UPDATE counters SET value = value + 1 WHERE id = $1', [id])
        console.log(`effect ${name}`)
      } else {
        console.log(`effect ${name} already applied: skipped`)
      }
      if (step < last) {
        const next = keyed ? await job.once(`${name}:next`, client) : true
        if (next) {
          // the queue's own table, in this transaction: it commits with the
          // effect.  A job key, so that rescue can replace the row if its
          // worker dies; one per enqueuing execution, so that graphile's own
          // key does not merge a second successor away (it would, but only
          // while the first is still pending: not a guarantee).
          await client.query("SELECT graphile_worker.add_job('chain', $1::json, job_key => $2)",
            [JSON.stringify({ id, step: step + 1, last }), `chain:${id}:${step + 1}:${job.token}`])
          console.log(`enqueued chain:${id}:${step + 1}`)
        } else {
          console.log(`successor of ${name} already enqueued: skipped`)
        }
      }
    })
    console.log(`committed ${name}`)
    if (process.env.FENCE_EXAMPLE_KILL_AFTER_COMMIT) {
      console.log('killed after commit, before fence_release')
      process.kill(process.pid, 'SIGKILL')
    }
  })
}

async function main () {
  const [cmd, id, last] = process.argv.slice(2)
  console.log(`chain pid ${process.pid} ${cmd || ''}${keyed ? '' : ' (without fence_once)'}`)
  if (cmd === 'enqueue' && id && last) {
    const utils = await makeWorkerUtils({ pgPool })
    try {
      await utils.migrate()
      const job = await utils.addJob('chain', { id, step: 1, last: Number(last) },
        { jobKey: `chain:${id}:1`, maxAttempts: 5 })
      console.log(`enqueued graphile job ${job.id} key ${job.key}`)
    } finally {
      await utils.release()
    }
  } else if (cmd === 'rescue') {
    const utils = await makeWorkerUtils({ pgPool })
    try {
      await utils.migrate()
      // chain jobs graphile still holds locked whose fence lease has run out
      const { rows } = await pgPool.query(`
        SELECT j.key, p.payload
          FROM graphile_worker.jobs j
          JOIN graphile_worker._private_jobs p USING (id) -- 0.17 keeps the payload there
          JOIN fence_claims c ON c.job = 'chain:' || (p.payload->>'id') || ':' || (p.payload->>'step')
         WHERE j.task_identifier = 'chain' AND j.locked_at IS NOT NULL
           AND NOT c.released AND c.lease_expires_at < clock_timestamp()`)
      for (const r of rows) {
        const job = await utils.addJob('chain', r.payload, { jobKey: r.key, maxAttempts: 5 })
        console.log(`rescued ${r.key}: added again as graphile job ${job.id}`)
      }
      if (rows.length === 0) console.log('nothing to rescue')
    } finally {
      await utils.release()
    }
  } else if (cmd === 'once') {
    await runOnce({ pgPool, taskList: { chain: chainStep }, concurrency: 1 })
  } else {
    console.error('usage: node chain.js enqueue ID LAST | once | rescue')
    return 2
  }
  return 0
}

main()
  .then((code) => { process.exitCode = code })
  .catch((err) => { console.error(err); process.exitCode = 1 })
  .finally(() => pgPool.end())
