// Sustained agent loops (issue 36, goal 3), through the official e2b SDK
// against `airlock serve` (its default warm pool), one run. A loop is what
// agent frameworks do per task: Sandbox.create(), files.write an input,
// commands.run python3 on it, files.read the artefact it wrote, kill().
// For C concurrent clients (default 1, 4, 8, 32), each level runs LOOPS
// loops in all (default 8 × C, at least 12), and prints loops/s beside the
// 1-client level's (goal: 4 clients ≥ 1.8 × 1 client), each loop's p50/p99,
// failures (goal: none), and the daemon's RSS before and after the level;
// after the last level, that no sandbox is left.
//
// Usage (root): node bench/loops.mjs [C,C,...] [LOOPS]   (AIRLOCK_BIN,
// AIRLOCK_STATE_DIR). Run via `make bench-loops`.
import { readFileSync } from 'node:fs'
import { execFileSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '../tests/e2e/package.json'))
const { Sandbox } = require('e2b')
const LEVELS = (process.argv[2] || '1,4,8,32').split(',').map(Number)
const LOOPS = process.argv[3] ? Number(process.argv[3]) : null

const SCRIPT = "import json; d = json.load(open('/home/user/in.json')); " +
  "open('/home/user/out.txt', 'w').write(str(sum(d['xs'])))"

async function loop(opts, i) {
  const t0 = performance.now()
  const sb = await Sandbox.create({ ...opts, timeoutMs: 300000 })
  try {
    const xs = Array.from({ length: 100 }, (_, k) => k + i)
    await sb.files.write('/home/user/in.json', JSON.stringify({ xs }))
    const r = await sb.commands.run(`python3 -c "${SCRIPT}"`)
    if (r.exitCode !== 0) throw new Error(`python3 exited ${r.exitCode}: ${r.stderr}`)
    const out = await sb.files.read('/home/user/out.txt')
    const want = String(xs.reduce((a, b) => a + b, 0))
    if (out !== want) throw new Error(`artefact ${JSON.stringify(out)}, expected ${want}`)
  } finally {
    await sb.kill()
  }
  return performance.now() - t0
}

function rssKib(pid) {
  return Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0)
}

const d = await startDaemon([])
const port = new URL(d.url).port
const pid = execFileSync('pgrep', ['-f', `serve --listen 127.0.0.1:${port} `]).toString().trim().split('\n')[0]
const rows = []
try {
  await (await Sandbox.create({ ...d.opts })).kill()  // the template snapshot and the pool's shape
  for (const c of LEVELS) {
    const total = LOOPS ?? Math.max(12, 8 * c)
    const rss0 = rssKib(pid)
    const times = []
    const errors = []
    let next = 0
    const t0 = performance.now()
    await Promise.all(Array.from({ length: c }, async () => {
      while (next < total) {
        const i = next++
        try {
          times.push(await loop(d.opts, i))
        } catch (e) {
          errors.push(e.message)
        }
      }
    }))
    const wall = (performance.now() - t0) / 1000
    for (const e of errors.slice(0, 3)) console.error(`${c} clients: ${e}`)
    rows.push({ c, total, wall, times, failed: errors.length, rss0, rss1: rssKib(pid) })
  }
  const left = (await Sandbox.list(d.opts).nextItems()).length
  const base = rows[0].times.length / rows[0].wall
  console.log(`\n| clients | loops | loops/s | × ${rows[0].c} client | loop p50 ms | loop p99 ms | failed | daemon RSS before → after (MiB) |`)
  console.log('|---|---|---|---|---|---|---|---|')
  for (const r of rows) {
    const rate = r.times.length / r.wall
    console.log(`| ${r.c} | ${r.total} | ${rate.toFixed(2)} | ${(rate / base).toFixed(2)} | ${pct(r.times, 50).toFixed(0)} | ` +
      `${pct(r.times, 99).toFixed(0)} | ${r.failed} | ${(r.rss0 / 1024).toFixed(1)} → ${(r.rss1 / 1024).toFixed(1)} |`)
  }
  console.log(`\nsandboxes left after the last level: ${left}`)
} finally {
  await d.stop()
}
