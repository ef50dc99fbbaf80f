// examples/queues/fence.js: the fenced handler that graphile.js and pgboss.js
// run for each job of their queue.
//
// countJob(pool, id, { lease, work, holder }) does the job "count:ID": add one
// to the row ID of the protected table counters (examples/schema.sql).
//   - fence_claim(job, lease): null means another execution holds the job (a
//     live lease, or one still writing). It throws a plain Error, so the queue
//     retries this job later, with its own backoff.
//   - read the counter, then work for `work` seconds, renewing the lease with
//     fence_renew every third of it. The lease is short (seconds to a minute)
//     and renewed while the handler lives, so a frozen or dead handler loses
//     it quickly; the queue's own limit (pg-boss expireInSeconds, graphile's
//     4 hour lock) is longer and decides when the job is handed out again.
//   - in one transaction, fence_begin(job, token) and write the new value.
//   - fence_release.
// It resolves 'done', or 'fenced' when an error of SQLSTATE class 5F says
// that this execution was superseded: a newer execution owns the job (or a
// newer writer the row). The caller then ends the job WITHOUT a retry: the
// same token would be fenced again, and a retry with a new token would apply
// the increment twice. Any other error is thrown: the queue retries it.
//
// node-postgres returns bigint as a string: the token stays a string.
'use strict'

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const isFenced = (err) => Boolean(err) && typeof err.code === 'string' && err.code.startsWith('5F')

async function countJob (pool, id, { lease = 30, work = 0, holder = null, log = console.log } = {}) {
  const job = `count:${id}`
  const client = await pool.connect()
  let token = null
  try {
    const claim = await client.query(
      'SELECT fence_claim($1, make_interval(secs => $2), $3) AS token', [job, lease, holder])
    token = claim.rows[0].token
    if (token === null) throw new Error(`${job} is held by another execution; retry later`)
    log(`claimed ${job} token ${token}`)

    const read = await client.query('SELECT value FROM counters WHERE id = $1', [id])
    if (read.rowCount !== 1) throw new Error(`no counter ${id}`)
    const value = BigInt(read.rows[0].value)
    log(`read ${value}`)

    const deadline = Date.now() + work * 1000
    while (Date.now() < deadline) {
      await sleep(Math.min((lease * 1000) / 3, Math.max(0, deadline - Date.now())))
      if (Date.now() >= deadline) break
      const r = await client.query(
        'SELECT fence_renew($1, $2, make_interval(secs => $3)) AS until', [job, token, lease])
      log(`renewed until ${r.rows[0].until.toISOString()}`)
    }

    if (process.env.FENCE_EXAMPLE_STOP_BEFORE_WRITE) {
      log('stopping before the write')
      process.kill(process.pid, 'SIGSTOP')
    }

    await client.query('BEGIN')
    try {
      await client.query('SELECT fence_begin($1, $2)', [job, token])
      await client.query('UPDATE counters SET value = $1 WHERE id = $2', [(value + 1n).toString(), id])
      await client.query('COMMIT')
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {})
      throw err
    }
    log(`wrote ${value + 1n} token ${token}`)
  } catch (err) {
    if (isFenced(err)) {
      client.release()
      log(`fenced ${err.code}: ${err.message}`)
      return 'fenced'
    }
    // give the claim back so the queue's retry need not wait for the lease
    if (token !== null) await client.query('SELECT fence_release($1, $2)', [job, token]).catch(() => {})
    client.release(err.code ? undefined : err) // no SQLSTATE: a broken connection, drop it
    throw err
  }
  // committed: from here on, an error must not make the queue run the job again
  try {
    const r = await client.query('SELECT fence_release($1, $2) AS released', [job, token])
    log(`released ${r.rows[0].released}`)
  } catch (err) {
    log(`release failed (the lease runs out by itself): ${err.message}`)
  } finally {
    client.release()
  }
  return 'done'
}

module.exports = { countJob, isFenced }
