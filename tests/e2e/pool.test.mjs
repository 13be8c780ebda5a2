// The warm pool (issue 14 item 2) through the official e2b SDK (unmodified):
// creates take sandboxes parked ahead of demand, and a pooled sandbox is
// indistinguishable from a fresh one. Nothing a previous user left (files,
// processes, entropy, token) reaches the next one.
//
// Env: AIRLOCK_BIN (required), AIRLOCK_STATE_DIR (default /var/lib/airlock).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { e2b, skipReason, startDaemon, waitFor } from './daemon.mjs'

const { Sandbox } = e2b

let d, url, opts

before(async () => {
  if (skipReason) return
  d = await startDaemon(['--pool', '2'])
  ;({ url, opts } = d)
})

after(async () => {
  if (d) await d.stop()
})

const maybe = skipReason ? test.skip : test

async function metric(name) {
  const text = await (await fetch(`${url}/metrics`)).text()
  const m = text.match(new RegExp(`^${name} (\\d+)`, 'm'))
  return m ? Number(m[1]) : -1
}

// What a user sees of the machine: home, non-root processes, entropy, clock, hostname.
const LOOK = [
  'ls -A /home/user | grep -v "^\\." ; echo ---',
  'ps -eo user=,comm= | grep -v "^root " | grep -v " ps$" | grep -v " sh$" | grep -v " grep$" | grep -v " bash$" ; echo ---',
  'head -c 16 /dev/urandom | od -An -tx1 | tr -d " \\n"; echo',
  'date +%s',
  'hostname',
].join('; ')

maybe('20 creates in a row from the pool: each clean, its own entropy, the right clock', { timeout: 600000 }, async () => {
  assert.ok(await waitFor(async () => (await metric('airlock_pool_parked')) >= 1, 60000), 'the pool never filled')
  const hits0 = await metric('airlock_pool_hits_total')
  const seen = new Set()
  const ids = new Set()
  for (let i = 0; i < 20; i++) {
    // Give the filler its chance, as a user pausing between tasks would.
    await waitFor(async () => (await metric('airlock_pool_parked')) >= 1, 10000)
    const sbx = await Sandbox.create('base', opts)
    try {
      assert.ok(!ids.has(sbx.sandboxId), 'an id handed out twice')
      ids.add(sbx.sandboxId)
      const r = await sbx.commands.run(LOOK)
      const [home, procs, rest] = r.stdout.split('---\n')
      assert.equal(home.trim(), '', `sandbox ${i}: home holds ${home}`)
      assert.equal(procs.trim(), '', `sandbox ${i}: processes of a previous user: ${procs}`)
      const [rand, clock, host] = rest.trim().split('\n')
      assert.match(rand, /^[0-9a-f]{32}$/)
      assert.ok(!seen.has(rand), `sandbox ${i}: /dev/urandom repeats another sandbox's output`)
      seen.add(rand)
      assert.ok(Math.abs(Number(clock) - Date.now() / 1000) < 5, `sandbox ${i}: guest clock ${clock}`)
      assert.equal(host, sbx.sandboxId, 'the hostname is the sandbox id')
      // Leave traces for the next user to (not) find.
      await sbx.files.write('/home/user/left-behind.txt', `secret of sandbox ${i}`)
      await sbx.commands.run('sleep 600', { background: true })
    } finally {
      await sbx.kill()
    }
  }
  const hits = (await metric('airlock_pool_hits_total')) - hits0
  assert.ok(hits >= 10, `only ${hits} of 20 creates came from the pool`)
})

maybe('a pooled sandbox used and killed never comes back', { timeout: 300000 }, async () => {
  assert.ok(await waitFor(async () => (await metric('airlock_pool_parked')) >= 1, 60000))
  const a = await Sandbox.create('base', opts)
  const detail = await (await fetch(`${url}/sandboxes/${a.sandboxId}`, { headers: { 'X-API-Key': opts.apiKey } })).json()
  const token = detail.envdAccessToken
  await a.files.write('/home/user/only-mine.txt', 'a')
  await a.kill()
  // Its id and token open nothing any more.
  const r = await fetch(`${url}/envs`, { headers: { 'E2b-Sandbox-Id': a.sandboxId, 'X-Access-Token': token } })
  assert.equal(r.status, 502)
  await assert.rejects(Sandbox.connect(a.sandboxId, opts))
  for (let i = 0; i < 5; i++) {
    await waitFor(async () => (await metric('airlock_pool_parked')) >= 1, 10000)
    const b = await Sandbox.create('base', opts)
    try {
      assert.notEqual(b.sandboxId, a.sandboxId)
      assert.equal(await b.files.exists('/home/user/only-mine.txt'), false)
      const other = await fetch(`${url}/envs`, { headers: { 'E2b-Sandbox-Id': b.sandboxId, 'X-Access-Token': token } })
      assert.equal(other.status, 401, "the dead sandbox's token opens the next one")
    } finally {
      await b.kill()
    }
  }
})

maybe('the pool is invisible in the API and never counts against a key', { timeout: 120000 }, async () => {
  assert.ok(await waitFor(async () => (await metric('airlock_pool_parked')) >= 2, 60000))
  const list = await Sandbox.list(opts).nextItems()
  assert.equal(list.length, 0, 'parked sandboxes are listed')
  const m = await (await fetch(`${url}/metrics`)).text()
  assert.match(m, /airlock_sandboxes\{state="running"\} 0/)
})
