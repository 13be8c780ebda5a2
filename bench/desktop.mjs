// Computer use and containers (issue 37), through the official SDKs
// (@e2b/desktop 2.4.0 and e2b 2.51.0, unmodified), all in one run on one
// daemon without the warm pool (every create restores its template's
// snapshot):
//   - @e2b/desktop's Sandbox.create() to its first screenshot, beside a
//     `base` create to its first commands.run('echo hi') (the raw primitive);
//   - screenshot() round trip in a running desktop, beside
//     commands.run('true') in the same sandbox;
//   - the docker template: create to `docker info`, and `docker run --rm` of
//     a one-binary image (imported from a tarball in the guest) the first and
//     the second time in a sandbox.
//
// Usage (root): node bench/desktop.mjs [N]   (default 5; AIRLOCK_BIN, AIRLOCK_STATE_DIR)
// Run via `make bench-desktop`. Starts its own daemon on a free port.
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '../tests/e2e/package.json'))
const { Sandbox } = require('e2b')
const Desktop = require('@e2b/desktop').Sandbox
const N = Number(process.argv[2] || 5)

const rows = []
const row = (name, v) => rows.push(`| ${name.padEnd(62)} | ${pct(v, 50).toFixed(0).padStart(7)} | ${pct(v, 95).toFixed(0).padStart(7)} | ${String(v.length).padStart(3)} |`)
const time = async (f) => { const t0 = performance.now(); const v = await f(); return [performance.now() - t0, v] }

const d = await startDaemon(['--pool', '0'])
const opts = { ...d.opts, timeoutMs: 600000 }
const base = [], desk = [], deskCreate = [], shot = [], cmd = [], dockerReady = [], runFirst = [], runSecond = []
try {
  // One create of each first: every measured create then restores a snapshot.
  await (await Sandbox.create('base', opts)).kill()
  await (await Desktop.create(opts)).kill()
  await (await Sandbox.create('docker', opts)).kill()
  for (let i = 0; i < N; i++) {
    const [b, sb] = await time(async () => {
      const s = await Sandbox.create('base', opts)
      await s.commands.run('echo hi')
      return s
    })
    base.push(b)
    await sb.kill()
    const t0 = performance.now()
    const dt = await Desktop.create(opts)
    deskCreate.push(performance.now() - t0)
    await dt.screenshot()
    desk.push(performance.now() - t0)
    if (i === N - 1) {
      for (let j = 0; j < 3 * N; j++) {
        shot.push((await time(() => dt.screenshot()))[0])
        cmd.push((await time(() => dt.commands.run('true')))[0])
      }
    }
    await dt.kill()

    const [r, dk] = await time(async () => {
      const s = await Sandbox.create('docker', opts)
      await s.commands.run('docker info >/dev/null')
      return s
    })
    dockerReady.push(r)
    await dk.commands.run('mkdir -p /tmp/img/bin && cp /bin/busybox /tmp/img/bin/ && ln -s busybox /tmp/img/bin/echo && ' +
      'tar -C /tmp/img -c . | docker import - tiny:1 >/dev/null', { timeoutMs: 300000 })
    runFirst.push((await time(() => dk.commands.run('docker run --rm tiny:1 echo hi', { timeoutMs: 300000 })))[0])
    runSecond.push((await time(() => dk.commands.run('docker run --rm tiny:1 echo hi', { timeoutMs: 300000 })))[0])
    await dk.kill()
  }
} finally {
  await d.stop()
}
row('base: create -> first commands.run("echo hi") (primitive)', base)
row('@e2b/desktop: Sandbox.create()', deskCreate)
row('@e2b/desktop: Sandbox.create() -> first screenshot()', desk)
row('screenshot() round trip, running desktop', shot)
row('commands.run("true") in the same sandbox (primitive)', cmd)
row('docker: create -> first "docker info"', dockerReady)
row('docker run --rm of a one-binary image, first in a sandbox', runFirst)
row('docker run --rm of the same image, second', runSecond)
console.log(`| ${'ms'.padEnd(62)} | ${'p50'.padStart(7)} | ${'p95'.padStart(7)} | ${'n'.padStart(3)} |`)
console.log(`|${'-'.repeat(64)}|${'-'.repeat(9)}|${'-'.repeat(9)}|${'-'.repeat(5)}|`)
for (const r of rows) console.log(r)
console.log(`desktop create -> first screenshot / base TTI: ${(pct(desk, 50) / pct(base, 50)).toFixed(2)} x; ` +
  `screenshot / commands.run: ${(pct(shot, 50) / pct(cmd, 50)).toFixed(2)} x`)
