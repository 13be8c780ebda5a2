// End-to-end limits through the official e2b SDK (2.51.0, unmodified): a
// create over the per-key cap gets 429 + Retry-After, the SDK retries it by
// itself and succeeds once a slot frees; the SDK's timeoutMs kills a command
// tree that ignores SIGTERM; the audit trail holds the SDK's calls.
//
// Env: AIRLOCK_BIN (required), AIRLOCK_STATE_DIR (default /var/lib/airlock).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const BIN = process.env.AIRLOCK_BIN
const STATE_DIR = process.env.AIRLOCK_STATE_DIR || '/var/lib/airlock'
let skipReason = null
if (!BIN || !existsSync(BIN)) skipReason = 'AIRLOCK_BIN is not set to the airlock binary'
else if (process.getuid() !== 0) skipReason = 'needs root (microVMs, network namespaces)'
else if (!existsSync(join(STATE_DIR, 'images'))) skipReason = `no guest image in ${STATE_DIR} (run make image)`
let e2b = null
if (!skipReason) {
  try {
    e2b = await import('e2b')
  } catch (e) {
    skipReason = `the e2b SDK is not installed (run: npm ci in tests/e2e): ${e.message}`
  }
}
if (skipReason) console.log(`# SKIP e2e: ${skipReason}`)
const { Sandbox } = e2b ?? {}

let daemon, tmp, url, opts, apiKey

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

before(async () => {
  if (skipReason) return
  tmp = mkdtempSync(join(tmpdir(), 'airlock-e2e-limits-'))
  const port = await freePort()
  url = `http://127.0.0.1:${port}`
  daemon = spawn(BIN, ['--state-dir', STATE_DIR, 'serve', '--listen', `127.0.0.1:${port}`,
    '--db', join(tmp, 'airlock.db'), '--kill-on-exit', '--max-sandboxes-per-key', '1', '--queue-timeout', '1'],
  { stdio: ['ignore', 'inherit', 'inherit'] })
  const end = Date.now() + 20000
  while (Date.now() < end) {
    try { if ((await fetch(`${url}/health`)).status === 200) break } catch {}
    await new Promise((r) => setTimeout(r, 100))
  }
  apiKey = readFileSync(join(tmp, 'cli.key'), 'utf8').trim()
  opts = { apiKey, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 120000 }
})

after(async () => {
  if (daemon) {
    daemon.kill('SIGTERM')
    await new Promise((r) => daemon.once('exit', r))
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true })
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
    await new Promise((r) => setTimeout(r, 500))
    const ps = await b.commands.run("ps -eo args | grep -c '^airlock-orphan' || true")
    assert.equal(ps.stdout, '0\n')
    const audit = await (await fetch(`${url}/sandboxes/${b.sandboxId}/audit`, { headers: { 'X-API-Key': apiKey } })).json()
    assert.ok(audit.some((r) => r.action === 'exec' && r.cmd === '/bin/bash' && r.signal === 'killed'),
      JSON.stringify(audit).slice(0, 2000))
  } finally {
    await b.kill()
  }
})
