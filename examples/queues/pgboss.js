#!/usr/bin/env node
// examples/queues/pgboss.js: fence in a pg-boss 10 worker.
//
//   npm ci
//   node pgboss.js enqueue ID      send the job "count:ID" to the queue "count"
//   node pgboss.js work [N]        a worker; with N, it stops after N jobs
//
// Connection settings come from the environment (PGHOST, PGPORT, PGDATABASE,
// ...). FENCE_LEASE (seconds, default 30), FENCE_WORK (seconds of work per
// job, default 0), FENCE_EXPIRE (the queue's expireInSeconds, default 900)
// and FENCE_MAINTENANCE (pg-boss's maintenanceIntervalSeconds, default 60)
// tune it.
//
// The handler runs countJob (fence.js, over fence's Node client
// clients/node): claim, read, work while the client renews the lease, write
// in job.transaction() (BEGIN, fence_begin, COMMIT), release. When fence
// says the execution was superseded (the client's FencedError, SQLSTATE
// class 5F), countJob resolves 'fenced' and the handler logs it and
// resolves: pg-boss completes the job, with no retry. Throwing would make
// pg-boss fail it and retry it, and the retry, with a new token, would add
// one a second time. Any other error is thrown: pg-boss retries the job
// (retryLimit 5). "The job is held" (fence_claim returned null) is such an
// error: the retry comes when the holder has finished or its lease has run out.
//
// The lease and the queue's expiry. pg-boss hands an active job to another
// worker once it has been active for expireInSeconds (the supervisor moves
// it to retry at its next maintenance) and stops waiting for the handler
// then. So:
//   lease (renewed every lease/3)  <  expireInSeconds  >  the longest handler.
// A handler that froze stops renewing, its lease runs out within `lease`
// seconds, and by the time pg-boss re-delivers the job its fence_claim
// succeeds at once. When the frozen handler wakes up, its write is fenced
// (5F001) and it resolves. If it wakes up while the new execution is still
// running, pg-boss completes the job by id for it, early; the data is safe
// (only the new execution's write lands), only the queue's record is early.
// A handler that runs longer than expireInSeconds is a bug of the
// configuration: pg-boss retries the job while it still runs, and both
// executions do the work (the second once the first has released).
'use strict'

const major = Number(process.versions.node.split('.')[0])
if (major < 20) {
  console.log(`SKIP examples/queues/pgboss.js: pg-boss 10 needs Node.js 20 or later; this is ${process.version}`)
  process.exit(0)
}

const PgBoss = require('pg-boss')
const { Pool } = require('pg')
const { countJob } = require('./fence')

const lease = Number(process.env.FENCE_LEASE || 30)
const work = Number(process.env.FENCE_WORK || 0)
const expireInSeconds = Number(process.env.FENCE_EXPIRE || 900)
const maintenanceIntervalSeconds = Number(process.env.FENCE_MAINTENANCE || 60)
if (!(lease < expireInSeconds)) throw new Error('FENCE_LEASE must be shorter than FENCE_EXPIRE')

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function main () {
  const [cmd, arg] = process.argv.slice(2)
  console.log(`pg-boss pid ${process.pid} ${cmd || ''}`)
  // no connectionString: node-postgres takes PGHOST, PGPORT, ... from the environment
  const boss = new PgBoss({ application_name: 'fence-example-pg-boss', max: 2, maintenanceIntervalSeconds })
  boss.on('error', (err) => console.log(`pg-boss error: ${err.message}`))
  await boss.start()
  // createQueue keeps an existing queue's settings
  await boss.createQueue('count', { expireInSeconds, retryLimit: 5, retryDelay: 1 })

  if (cmd === 'enqueue' && arg) {
    const id = await boss.send('count', { id: arg })
    console.log(`enqueued pg-boss job ${id}`)
    await boss.stop({ graceful: true, wait: true })
    return 0
  }
  if (cmd !== 'work') {
    console.error('usage: node pgboss.js enqueue ID | work [N]')
    await boss.stop({ wait: true })
    return 2
  }

  const pool = new Pool({ application_name: 'fence-example-pg-boss', max: 2 })
  pool.on('error', (err) => console.log(`idle connection lost: ${err.message}`))
  const limit = arg ? Number(arg) : Infinity
  const handled = []
  await boss.work('count', { pollingIntervalSeconds: 0.5 }, async ([job]) => {
    const result = await countJob(pool, job.data.id, { lease, work, holder: `pg-boss job ${job.id}` })
    handled.push(job.id)
    if (result === 'fenced') {
      // superseded: a newer execution owns the job. Resolve: no retry.
      console.log(`pg-boss job ${job.id} was fenced; completing it without a retry`)
    }
    return { result }
  })

  const stop = new Promise((resolve) => {
    process.once('SIGINT', resolve)
    process.once('SIGTERM', resolve)
  })
  while (handled.length < limit) {
    if (await Promise.race([stop.then(() => true), sleep(200).then(() => false)])) break
  }
  // pg-boss records the outcome after the handler resolves: wait for it
  for (const id of handled) {
    for (let i = 0; i < 50; i++) {
      const j = await boss.getJobById('count', id)
      if (!j || j.state !== 'active') break
      await sleep(200)
    }
  }
  await boss.stop({ graceful: true, wait: true })
  await pool.end()
  return 0
}

main()
  .then((code) => { process.exitCode = code })
  .catch((err) => { console.error(err); process.exitCode = 1 })
