#!/usr/bin/env node
// examples/queues/graphile.js: fence in a graphile-worker 0.17 task.
//
//   npm ci
//   node graphile.js enqueue ID     add the job "count:ID" (job key "count:ID")
//   node graphile.js run            a worker, until SIGINT/SIGTERM
//   node graphile.js once           a worker that exits when no job is left
//   node graphile.js rescue         re-add the jobs whose worker went stale
//
// Connection settings come from the environment (PGHOST, PGPORT, PGDATABASE,
// ...); FENCE_LEASE (seconds, default 30) and FENCE_WORK (seconds of work per
// job, default 0) tune the handler.
//
// The task "count" runs countJob (fence.js, over fence's Node client
// clients/node): claim, read, work while the client renews the lease, write
// in job.transaction() (BEGIN, fence_begin, COMMIT), release. When fence
// says the execution was superseded (the client's FencedError, SQLSTATE
// class 5F), countJob resolves 'fenced' and the task logs it and returns
// normally. graphile-worker then deletes this execution's job row: the job
// ends without a retry. Throwing would schedule a retry, and a retry, with a
// new token, would add one a second time.
//
// The stale worker. graphile-worker locks a job for 4 hours: a worker that
// freezes in a task keeps its job that long, and no other worker picks it up.
// fence's lease is short and renewed by the handler, so it runs out soon after
// the worker froze. `rescue` finds those jobs (still locked by graphile, lease
// expired in fence_claims) and adds each one again under the same job key.
// For a job key whose job is locked, add_job clears the key of the locked
// row, sets its attempts to max_attempts (no retry of it) and inserts a new
// row: another worker runs it, claims the job (the lease has expired) and
// does the work. When the frozen worker wakes up, its write is fenced
// (5F001), its task returns, and graphile-worker deletes its old row.
// Run rescue periodically (a graphile cron task or the system's cron) with a
// margin over the lease. graphile_worker.force_unlock_workers(ids) hands the
// same row to another worker instead; avoid it for running workers: in 0.17 a
// task that then returns deletes the row by id, the other worker's included.
'use strict'

const major = Number(process.versions.node.split('.')[0])
if (major < 20) {
  console.log(`SKIP examples/queues/graphile.js: fence's Node client needs Node.js 20 or later; this is ${process.version}`)
  process.exit(0)
}

const { run, runOnce, makeWorkerUtils } = require('graphile-worker')
const { Pool } = require('pg')
const { countJob } = require('./fence')

const lease = Number(process.env.FENCE_LEASE || 30)
const work = Number(process.env.FENCE_WORK || 0)
const pgPool = new Pool({ application_name: 'fence-example-graphile' })
pgPool.on('error', (err) => console.log(`idle connection lost: ${err.message}`))
pgPool.on('connect', (client) => client.on('error', (err) => console.log(`connection lost: ${err.message}`)))

const taskList = {
  count: async (payload, helpers) => {
    const result = await countJob(pgPool, payload.id, { lease, work, holder: `graphile-worker job ${helpers.job.id}` })
    if (result === 'fenced') {
      // superseded: a newer execution owns the job. End it, no retry.
      helpers.logger.warn(`job ${helpers.job.id} (${helpers.job.key}) was fenced; ending it without a retry`)
    }
  }
}

async function main () {
  const [cmd, id] = process.argv.slice(2)
  console.log(`graphile pid ${process.pid} ${cmd || ''}`)
  if (cmd === 'enqueue' && id) {
    const utils = await makeWorkerUtils({ pgPool })
    try {
      await utils.migrate()
      const job = await utils.addJob('count', { id }, { jobKey: `count:${id}`, maxAttempts: 5 })
      console.log(`enqueued graphile job ${job.id} key ${job.key}`)
    } finally {
      await utils.release()
    }
  } else if (cmd === 'rescue') {
    const utils = await makeWorkerUtils({ pgPool })
    try {
      await utils.migrate()
      // jobs graphile still holds locked whose fence lease has run out
      const { rows } = await pgPool.query(`
        SELECT j.key
          FROM graphile_worker.jobs j
          JOIN fence_claims c ON c.job = j.key
         WHERE j.task_identifier = 'count' AND j.key LIKE 'count:%' AND j.locked_at IS NOT NULL
           AND NOT c.released AND c.lease_expires_at < clock_timestamp()`)
      for (const r of rows) {
        const id = r.key.slice('count:'.length)
        const job = await utils.addJob('count', { id }, { jobKey: r.key, maxAttempts: 5 })
        console.log(`rescued ${r.key}: added again as graphile job ${job.id}`)
      }
      if (rows.length === 0) console.log('nothing to rescue')
    } finally {
      await utils.release()
    }
  } else if (cmd === 'once') {
    await runOnce({ pgPool, taskList, concurrency: 1 })
  } else if (cmd === 'run') {
    const runner = await run({ pgPool, taskList, concurrency: 4, pollInterval: 1000 })
    await runner.promise
  } else {
    console.error('usage: node graphile.js enqueue ID | run | once | rescue')
    return 2
  }
  return 0
}

main()
  .then((code) => { process.exitCode = code })
  .catch((err) => { console.error(err); process.exitCode = 1 })
  .finally(() => pgPool.end())
