// End-to-end limits through the official e2b SDK (2.51.0, unmodified): a
// create over the per-key cap gets 429 + Retry-After, the SDK retries it by
// itself and succeeds once a slot frees; the SDK's timeoutMs kills a command
// tree that ignores SIGTERM; the audit trail holds the SDK's calls.
//
// Env: AIRLOCK_BIN (required), AIRLOCK_STATE_DIR (default /var/lib/airlock).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { e2b, skipReason, startDaemon, waitFor } from './daemon.mjs'

const { Sandbox } = e2b

let d, url, opts, apiKey

before(async () => {
  if (skipReason) return
  d = await startDaemon(['--max-sandboxes-per-key', '1', '--queue-timeout', '1'])
  ;({ url, opts, apiKey } = d)
})

after(async () => {
  if (d) await d.stop()
})

const maybe = skipReason ? test.skip : test

maybe('429 + Retry-After is retried by the SDK; timeoutMs kills a SIGTERM-proof tree', { timeout: 300000 }, async () => {
  const a = await Sandbox.create('base', opts)
  let killedA = false
  // Over the per-key cap: the SDK gets 429 after the 1 s queue, sleeps Retry-After, retries.
  const pending = Sandbox.create('base', opts)
  setTimeout(async () => { await a.kill(); killedA = true }, 2500)
  const b = await pending
  assert.ok(killedA, 'the second create only succeeded after the first sandbox was killed')
  const metrics = await (await fetch(`${url}/metrics`)).text()
  assert.match(metrics, /airlock_admission_rejections_total\{reason="limit"\} [1-9]/)
  try {
    const t0 = Date.now()
    await assert.rejects(b.commands.run(
      "trap '' TERM; (trap '' TERM; exec -a airlock-orphan sleep 600) & setsid sh -c 'exec -a airlock-orphan sleep 600' & sleep 600",
      { timeoutMs: 2000 }))
    assert.ok(Date.now() - t0 < 30000)
    let ps
    await waitFor(async () => (ps = await b.commands.run("ps -eo args | grep -c '^airlock-orphan' || true")).stdout === '0\n',
      10000, 200)
    assert.equal(ps.stdout, '0\n')
    const audit = await (await fetch(`${url}/sandboxes/${b.sandboxId}/audit`, { headers: { 'X-API-Key': apiKey } })).json()
    assert.ok(audit.some((r) => r.action === 'exec' && r.cmd === '/bin/bash' && r.signal === 'killed'),
      JSON.stringify(audit).slice(0, 2000))
  } finally {
    await b.kill()
  }
})
