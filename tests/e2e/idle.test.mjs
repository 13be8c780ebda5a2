// End-to-end: a background command re-attached after a long idle streams at
// once, through the official e2b SDK (2.51.0, unmodified) against a real
// `airlock serve`. Nothing else talks to the daemon meanwhile, so every
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

maybe('a background command re-attached after a long idle streams at once', { timeout: 600000 }, async () => {
  const idleS = Number(process.env.AIRLOCK_E2E_IDLE_S || 150)
  const sbx = await Sandbox.create({ ...d.opts, timeoutMs: (idleS + 120) * 1000 })
  try {
    const h = await sbx.commands.run('i=0; while true; do echo line$i; i=$((i+1)); sleep 1; done', { background: true, timeoutMs: 0 })
    await h.disconnect()
    await sleep(idleS * 1000)
    const t0 = Date.now()
    let firstMs = null
    const h2 = await sbx.commands.connect(h.pid, {
      timeoutMs: 0,
      onStdout: (s) => { if (firstMs === null && /line\d+/.test(s)) firstMs = Date.now() - t0 },
    })
    while (firstMs === null && Date.now() - t0 < 4000) await sleep(50)
    console.log(`# after ${idleS} s idle: first output ${firstMs} ms after connect`)
    assert.ok(firstMs !== null && firstMs < 4000, `no output within 4 s of connect after ${idleS} s idle`)
    await h2.kill()
  } finally {
    await sbx.kill()
  }
})
