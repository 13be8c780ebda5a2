// End-to-end: background commands re-attached after a long idle stream at
// once (or are envd's NotFound once their timeoutMs killed them), through
// the official e2b SDK (2.51.0, unmodified) against a real `airlock serve`. Nothing else talks to the daemon meanwhile, so every
// connection on the way (the SDK's keep-alive pool, the daemon's to the
// agent) has sat idle that long too. Its own suite (e2e_idle) because it is
// mostly waiting: the test schedule runs it beside two others
// (tests/schedule/schedule.cmake, "light").
// Also idle sleep (docs/snapshots.md "Sleep when idle"): a sandbox created
// with lifecycle.idleTimeout pauses when nothing reaches it for that long and
// wakes on the next request; an open stream keeps it awake.
// Env: AIRLOCK_BIN, AIRLOCK_STATE_DIR (see daemon.mjs); AIRLOCK_E2E_IDLE_S
// (default 150) for the long idle.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { e2b, skipReason, startDaemon, waitFor } from './daemon.mjs'

const { Sandbox } = e2b
const maybe = skipReason ? test.skip : test
let d

before(async () => {
  if (skipReason) return
  d = await startDaemon([])
})

after(async () => {
  if (d) await d.stop()
})

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// A create with airlock's lifecycle.idleTimeout (the SDK sends no such
// field: plain HTTP, then the SDK connects), and its state as the control
// plane tells it (which is no data-plane traffic: it does not wake it).
async function createIdle(idleTimeout) {
  const r = await fetch(`${d.url}/v2/sandboxes`, { method: 'POST', headers: { 'X-API-Key': d.apiKey, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 600, lifecycle: { idleTimeout } }) })
  const body = await r.json()
  assert.equal(r.status, 201, JSON.stringify(body))
  return Sandbox.connect(body.sandboxID, d.opts)
}
async function stateOf(id) {
  const r = await fetch(`${d.url}/sandboxes/${id}`, { headers: { 'X-API-Key': d.apiKey } })
  const body = await r.json()
  return { state: body.state, lifecycle: body.lifecycle }
}

maybe('idle sleep: idle past its interval it is paused with its memory, and the next commands.run wakes it with everything intact', { timeout: 300000 }, async () => {
  const sbx = await createIdle(4)
  try {
    assert.deepEqual((await stateOf(sbx.sandboxId)).lifecycle, { onTimeout: 'kill', autoResume: true, idleTimeout: 4, idleKeepsProcesses: false })
    // State on disk and in memory: a file, and a process that holds a secret only in its memory.
    await sbx.files.write('/home/user/state.txt', 'kept on disk\n')
    const bg = await sbx.commands.run('secret=$RANDOM$RANDOM; echo $secret > /tmp/secret; exec sleep 100000', { background: true, timeoutMs: 0 })
    await bg.disconnect()
    const secret = (await sbx.commands.run('cat /tmp/secret')).stdout.trim()
    assert.ok(await waitFor(async () => (await stateOf(sbx.sandboxId)).state === 'paused', 120000, 500), 'paused when idle')
    // The next data-plane request wakes it: the SDK sees only a slower call.
    const t0 = Date.now()
    const r = await sbx.commands.run(`cat /home/user/state.txt; kill -0 ${bg.pid} && echo alive; cat /tmp/secret`)
    console.log(`# woke and answered in ${Date.now() - t0} ms`)
    assert.equal(r.stdout, `kept on disk\nalive\n${secret}\n`)
    assert.equal((await stateOf(sbx.sandboxId)).state, 'running')
    const logs = await (await fetch(`${d.url}/v2/sandboxes/${sbx.sandboxId}/logs`, { headers: { 'X-API-Key': d.apiKey } })).json()
    assert.ok(JSON.stringify(logs).includes('idle sleep'), 'its log says why it paused')
  } finally {
    await sbx.kill()
  }
})

maybe('idle sleep: an open stream keeps it awake (a command that runs longer than the interval)', { timeout: 300000 }, async () => {
  const sbx = await createIdle(3)
  try {
    // One command, its output streamed for 4 intervals, nothing else meanwhile.
    const r = await sbx.commands.run('for i in 1 2 3 4 5 6; do sleep 2; echo $i; done', { timeoutMs: 0 })
    assert.equal(r.stdout, '1\n2\n3\n4\n5\n6\n')
    assert.equal((await stateOf(sbx.sandboxId)).state, 'running', 'never paused while streaming')
    const logs = await (await fetch(`${d.url}/v2/sandboxes/${sbx.sandboxId}/logs`, { headers: { 'X-API-Key': d.apiKey } })).json()
    assert.ok(!JSON.stringify(logs).includes('idle sleep'), JSON.stringify(logs))
    // Then, left alone, it sleeps.
    assert.ok(await waitFor(async () => (await stateOf(sbx.sandboxId)).state === 'paused', 120000, 500), 'paused once idle')
  } finally {
    await sbx.kill()
  }
})

// Issue 34, item 5, as E2B users report it: three background commands in one
// sandbox, then a long idle, then commands.connect() to each.
//   - timeoutMs: 0, first handle disconnected: streams at once;
//   - timeoutMs: 0, first handle kept (its stream open all along): same;
//   - the SDK's defaults (the report's exact call): the SDK sends its default
//     timeoutMs (60 s) as Connect-Timeout-Ms also for a background command,
//     and envd kills the process at that deadline (services/process/start.go:
//     the process context has that timeout). So does airlock: the first
//     handle's stream ends with a deadline error at 60 s, and connect()
//     90 s after that end is envd's NotFound "process with pid N not found"
//     (envd keeps an end event 30 s; airlock used to keep the last 64 for
//     ever and answer a handle that never streamed: the report).
maybe('background commands re-attached after a long idle: stream at once, or not found once their timeoutMs killed them', { timeout: 600000 }, async () => {
  const idleS = Number(process.env.AIRLOCK_E2E_IDLE_S || 150)
  const sbx = await Sandbox.create({ ...d.opts, timeoutMs: (idleS + 120) * 1000 })
  try {
    const loop = 'for i in $(seq 1 400); do echo tick $i; sleep 1; done'
    const dropped = await sbx.commands.run(loop, { background: true, timeoutMs: 0 })
    await dropped.disconnect()
    // The highest tick each stream saw ("tick N" lines; a chunk may hold several).
    const lastTick = (s) => Math.max(0, ...[...s.matchAll(/tick (\d+)/g)].map((m) => Number(m[1])))
    let keptLast = 0
    const kept = await sbx.commands.run(loop, { background: true, timeoutMs: 0,
      onStdout: (s) => { keptLast = Math.max(keptLast, lastTick(s)) } })
    let defaultLast = 0
    const byDefault = await sbx.commands.run(loop, { background: true,
      onStdout: (s) => { defaultLast = Math.max(defaultLast, lastTick(s)) } })
    const defaultEnd = byDefault.wait().then(() => null, (e) => e)
    await sleep(idleS * 1000)
    const firstTick = {}
    for (const [name, h] of [['dropped', dropped], ['kept', kept]]) {
      const t0 = Date.now()
      let firstMs = null
      const h2 = await sbx.commands.connect(h.pid, {
        timeoutMs: 0,
        onStdout: (s) => {
          if (firstMs === null && /tick \d+/.test(s)) {
            firstMs = Date.now() - t0
            firstTick[name] = lastTick(s)
          }
        },
      })
      while (firstMs === null && Date.now() - t0 < 4000) await sleep(50)
      console.log(`# ${name}: after ${idleS} s idle, first output ${firstMs} ms after connect`)
      assert.ok(firstMs !== null && firstMs < 4000, `${name}: no output within 4 s of connect after ${idleS} s idle`)
      await h2.disconnect()
    }
    // The kept handle was live all along: it had seen the ticks up to the
    // moment of the re-attach (no count of seconds: a loaded host ticks slower).
    assert.ok(keptLast > 0 && keptLast >= firstTick.kept - 2,
      `the kept handle streamed all along (its last tick ${keptLast}, the re-attach's first ${firstTick.kept})`)
    const err = await defaultEnd
    assert.ok(err instanceof e2b.TimeoutError, `the default handle ended with the SDK's TimeoutError: ${err}`)
    assert.ok(defaultLast > 0 && defaultLast < 400, `the default command ran, and was killed before its end (tick ${defaultLast})`)
    await assert.rejects(sbx.commands.connect(byDefault.pid), (e) =>
      e instanceof e2b.NotFoundError && /process with pid \d+ not found/.test(e.message))
    await kept.kill()
    await dropped.kill()
  } finally {
    await sbx.kill()
  }
})
