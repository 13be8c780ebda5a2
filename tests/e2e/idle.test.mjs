// End-to-end: background commands re-attached after a long idle stream at
// once (or are envd's NotFound once their timeoutMs killed them), through
// the official e2b SDK (2.51.0, unmodified) against a real `airlock serve`. Nothing else talks to the daemon meanwhile, so every
// connection on the way (the SDK's keep-alive pool, the daemon's to the
// agent) has sat idle that long too. Its own suite (e2e_idle) because it is
// mostly waiting: the test schedule runs it beside two others
// (tests/schedule/schedule.cmake, "light").
// Env: AIRLOCK_BIN, AIRLOCK_STATE_DIR (see daemon.mjs); AIRLOCK_E2E_IDLE_S
// (default 150) for the long idle.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { e2b, skipReason, startDaemon } from './daemon.mjs'

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
    let keptTicks = 0
    const kept = await sbx.commands.run(loop, { background: true, timeoutMs: 0, onStdout: () => keptTicks++ })
    let defaultTicks = 0
    const byDefault = await sbx.commands.run(loop, { background: true, onStdout: () => defaultTicks++ })
    const defaultEnd = byDefault.wait().then(() => null, (e) => e)
    await sleep(idleS * 1000)
    for (const [name, h] of [['dropped', dropped], ['kept', kept]]) {
      const t0 = Date.now()
      let firstMs = null
      const h2 = await sbx.commands.connect(h.pid, {
        timeoutMs: 0,
        onStdout: (s) => { if (firstMs === null && /tick \d+/.test(s)) firstMs = Date.now() - t0 },
      })
      while (firstMs === null && Date.now() - t0 < 4000) await sleep(50)
      console.log(`# ${name}: after ${idleS} s idle, first output ${firstMs} ms after connect`)
      assert.ok(firstMs !== null && firstMs < 4000, `${name}: no output within 4 s of connect after ${idleS} s idle`)
      await h2.disconnect()
    }
    assert.ok(keptTicks > idleS - 20, `the kept handle streamed all along (${keptTicks} ticks)`)
    const err = await defaultEnd
    assert.ok(err instanceof e2b.TimeoutError, `the default handle ended with the SDK's TimeoutError: ${err}`)
    assert.ok(defaultTicks > 40 && defaultTicks < 75, `the default command ran its 60 s (${defaultTicks} ticks)`)
    await assert.rejects(sbx.commands.connect(byDefault.pid), (e) =>
      e instanceof e2b.NotFoundError && /process with pid \d+ not found/.test(e.message))
    await kept.kill()
    await dropped.kill()
  } finally {
    await sbx.kill()
  }
})
