// Bursts of creates and the control plane under them (issue 36, goals 2 and
// 6), through the official e2b SDK against `airlock serve`, one run:
//   - the raw primitive: pool-empty time to interactive measured alone
//     (Sandbox.create() then the first commands.run('echo hi'), one at a
//     time, serve --pool 0), and its ratio's yardstick, the cores;
//   - a burst of B creates at once (each then `echo hi`), serve's default
//     warm pool: wall time beside the bound 1.25 × B × (pool-empty TTI) /
//     cores, each create's TTI p50/p99, failures (none allowed);
//   - while the burst runs: GET /sandboxes/{id} of a sandbox made before it
//     (every 20 ms) and GET /sandboxes (every 100 ms), p50/p99 in ms
//     (goal: p99 ≤ 10 ms and ≤ 50 ms).
//
// Usage (root): node bench/burst.mjs [B,B,...]   (default 16,32; AIRLOCK_BIN,
// AIRLOCK_STATE_DIR). Run via `make bench-burst`. Starts its own daemons on
// free ports; every sandbox is killed before the next burst.
import { spawn } from 'node:child_process'
import { readFileSync, rmSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '../tests/e2e/package.json'))
const { Sandbox } = require('e2b')
const BURSTS = (process.argv[2] || '16,32').split(',').map(Number)
const ALONE = 5
const CORES = cpus().length

const ms = (t0) => performance.now() - t0
const f1 = (v) => v.toFixed(1)

async function tti(opts) {
  const t0 = performance.now()
  const sb = await Sandbox.create({ ...opts, timeoutMs: 600000 })
  const r = await sb.commands.run('echo hi')
  if (r.stdout !== 'hi\n') throw new Error(`echo hi gave ${JSON.stringify(r.stdout)}`)
  return [ms(t0), sb]
}

// Polls `path` every `everyMs` from a process of its own (bench/poll.mjs)
// until stop(); `lat` then holds the latencies.
function poller(d, path, everyMs) {
  const out = join(tmpdir(), `airlock-burst-poll-${process.pid}-${Math.random().toString(36).slice(2)}.json`)
  const p = spawn(process.execPath, [join(here, 'poll.mjs'), d.url, d.opts.apiKey, path, String(everyMs), out], { stdio: 'inherit' })
  const exited = new Promise((r) => p.once('exit', r))
  const lat = []
  return {
    lat,
    async stop() {
      p.kill('SIGTERM')
      if ((await exited) !== 0) throw new Error(`poller of ${path} failed`)
      lat.push(...JSON.parse(readFileSync(out, 'utf8')))
      rmSync(out, { force: true })
    },
  }
}

// The raw primitive: pool-empty TTI, one create at a time.
let alone = []
{
  const d = await startDaemon(['--pool', '0'])
  try {
    await (await Sandbox.create({ ...d.opts })).kill()  // the template snapshot is made
    for (let i = 0; i < ALONE; i++) {
      const [t, sb] = await tti(d.opts)
      alone.push(t)
      await sb.kill()
    }
  } finally {
    await d.stop()
  }
}
const aloneP50 = pct(alone, 50)

const rows = []
for (const B of BURSTS) {
  const d = await startDaemon([])
  try {
    const probe = await Sandbox.create({ ...d.opts, timeoutMs: 600000 })
    const get = poller(d, `/sandboxes/${probe.sandboxId}`, 20)
    const list = poller(d, '/sandboxes', 100)
    const t0 = performance.now()
    const results = await Promise.allSettled(Array.from({ length: B }, () => tti(d.opts)))
    const wall = ms(t0)
    await get.stop()
    await list.stop()
    const ok = results.filter((r) => r.status === 'fulfilled')
    const failed = results.filter((r) => r.status === 'rejected')
    for (const f of failed.slice(0, 3)) console.error(`burst ${B}: ${f.reason?.message ?? f.reason}`)
    const ttis = ok.map((r) => r.value[0])
    await Promise.allSettled([probe, ...ok.map((r) => r.value[1])].map((sb) => sb.kill()))
    const bound = 1.25 * B * aloneP50 / CORES
    rows.push({ B, wall, bound, ttis, failed: failed.length, get: get.lat, list: list.lat })
  } finally {
    await d.stop()
  }
}

console.log(`\n${CORES} cores; pool-empty TTI alone (create + echo hi, n=${ALONE}): p50 ${f1(aloneP50)} ms, p95 ${f1(pct(alone, 95))} ms\n`)
console.log('| burst | wall ms | bound 1.25·B·TTI/cores | wall / bound | TTI p50 | TTI p99 | failed | GET /sandboxes/{id} p50 / p99 | GET /sandboxes p50 / p99 |')
console.log('|---|---|---|---|---|---|---|---|---|')
for (const r of rows) {
  console.log(`| ${r.B} | ${f1(r.wall)} | ${f1(r.bound)} | ${(r.wall / r.bound).toFixed(2)} | ${f1(pct(r.ttis, 50))} | ${f1(pct(r.ttis, 99))} | ${r.failed} | ` +
    `${f1(pct(r.get, 50))} / ${f1(pct(r.get, 99))} (n=${r.get.length}) | ${f1(pct(r.list, 50))} / ${f1(pct(r.list, 99))} (n=${r.list.length}) |`)
}
