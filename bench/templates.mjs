// Custom templates (issue 16), through the official e2b SDK (2.51.0,
// unmodified), all in one run on one daemon (a fresh registry, so nothing
// is cached at first):
//   - a 3-step template (a RUN as root, a COPY, a RUN as user) built cold,
//     then again with nothing changed (all cached: the final snapshot only);
//   - time to interactive of Sandbox.create('<that template>') beside
//     Sandbox.create('base') (the raw primitive: the built-in template),
//     alternating, same machine shape (1 vCPU, 512 MiB). Goal: <= 1.1x.
//     Time to interactive: create returned and a first commands.run('true')
//     answered.
//
// Usage (root): node bench/templates.mjs [N]   (default 20; AIRLOCK_BIN, AIRLOCK_STATE_DIR)
// Run via `make bench-templates`. Starts its own daemon on a free port.
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '../tests/e2e/package.json'))
const { Sandbox, Template } = require('e2b')
const N = Number(process.argv[2] || 20)

const row = (name, v) => console.log(`| ${name.padEnd(56)} | ${pct(v, 50).toFixed(1).padStart(9)} | ${pct(v, 95).toFixed(1).padStart(9)} | ${String(v.length).padStart(4)} |`)
const time = async (f) => { const t0 = performance.now(); const v = await f(); return [performance.now() - t0, v] }

const ctx = mkdtempSync(join(tmpdir(), 'airlock-bench-tpl-'))
mkdirSync(join(ctx, 'app'))
writeFileSync(join(ctx, 'app/main.py'), 'print("bench")\n')
const d = await startDaemon(['--pool', '0'])
const opts = { ...d.opts, timeoutMs: 600000 }
const cold = [], cached = [], ttiBase = [], ttiBuilt = []
try {
  const template = () => Template({ fileContextPath: ctx })
    .fromBaseImage()
    .runCmd('mkdir -p /opt/bench && echo ready > /opt/bench/state', { user: 'root' })
    .copy('app', '/home/user/app/')
    .runCmd('python3 /home/user/app/main.py > /home/user/app/out.txt')
  const [c] = await time(() => Template.build(template(), 'bench-tpl', { ...opts, cpuCount: 1, memoryMB: 512 }))
  cold.push(c)
  for (let i = 0; i < 3; i++) {
    const [t] = await time(() => Template.build(template(), 'bench-tpl', { ...opts, cpuCount: 1, memoryMB: 512 }))
    cached.push(t)
  }
  const tti = async (name) => {
    const [t, sb] = await time(async () => {
      const s = await Sandbox.create(name, opts)
      const r = await s.commands.run('true')
      if (r.exitCode !== 0) throw new Error('commands.run failed')
      return s
    })
    await sb.kill()
    return t
  }
  // Both templates' snapshots exist before anything is measured.
  await tti('base')
  await tti('bench-tpl')
  for (let i = 0; i < N; i++) {
    ttiBase.push(await tti('base'))
    ttiBuilt.push(await tti('bench-tpl'))
  }
} finally {
  await d.stop()
  rmSync(ctx, { recursive: true, force: true })
}

console.log(`\n| ${'measurement (ms)'.padEnd(56)} | ${'p50'.padStart(9)} | ${'p95'.padStart(9)} | ${'n'.padStart(4)} |`)
console.log(`|${'-'.repeat(58)}|${'-'.repeat(11)}|${'-'.repeat(11)}|${'-'.repeat(6)}|`)
row('3-step template build, cold (nothing cached)', cold)
row('the same build again, all cached', cached)
row("Sandbox.create('base') + first command (primitive)", ttiBase)
row("Sandbox.create('bench-tpl') + first command", ttiBuilt)
console.log(`\ncold / cached build = ${(pct(cold, 50) / pct(cached, 50)).toFixed(1)}x; ` +
  `TTI built / base (p50) = ${(pct(ttiBuilt, 50) / pct(ttiBase, 50)).toFixed(2)} (goal <= 1.1)`)
