// The code interpreter's numbers (issue 15), through the official
// @e2b/code-interpreter (2.8.0, unmodified), all in one run on one daemon:
//   - runCode('1+1') round trip beside commands.run('true') in the same
//     sandbox (the raw primitive; goal: runCode <= 1.5x);
//   - the first runCode('1+1') after Sandbox.create() beside later ones
//     (goal: no kernel start in it, <= 2x a later runCode);
//   - a ~1 MB PNG result (a PIL image of noise as the last expression): time
//     to arrive, beside the time the kernel took to make it.
//
// Usage (root): node bench/code_interpreter.mjs [N]   (default 30; AIRLOCK_BIN, AIRLOCK_STATE_DIR)
// Run via `make bench-interpreter`. Starts its own daemon on a free port.
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '../tests/e2e/package.json'))
const { Sandbox } = require('@e2b/code-interpreter')
const N = Number(process.argv[2] || 30)
const CREATES = Math.max(3, Math.min(10, Math.round(N / 3)))

const row = (name, v) => console.log(`| ${name.padEnd(56)} | ${pct(v, 50).toFixed(1).padStart(8)} | ${pct(v, 95).toFixed(1).padStart(8)} | ${String(v.length).padStart(4)} |`)

const time = async (f) => { const t0 = performance.now(); const v = await f(); return [performance.now() - t0, v] }
const create = [], first = [], later = [], cmd = [], png = [], pngKernel = []
const poolCreate = [], poolFirst = []
let poolHits = 0
let pngBytes = 0
let d = await startDaemon(['--pool', '0'])
const opts = d.opts
try {
  // The template snapshot is made at daemon start; one create first makes
  // sure every measured create restores it (not a cold boot).
  await (await Sandbox.create({ ...opts, timeoutMs: 600000 })).kill()
  for (let i = 0; i < CREATES; i++) {
    const [c, sb] = await time(() => Sandbox.create({ ...opts, timeoutMs: 600000 }))
    const [f, r] = await time(() => sb.runCode('1+1'))
    if (r.text !== '2') throw new Error(`first runCode gave ${JSON.stringify(r.text)} ${JSON.stringify(r.error)}`)
    create.push(c)
    first.push(f)
    if (i < CREATES - 1) await sb.kill()
    else {
      for (let j = 0; j < N; j++) {
        const [a, r1] = await time(() => sb.runCode('1+1'))
        if (r1.text !== '2') throw new Error('runCode failed')
        later.push(a)
        const [b, r2] = await time(() => sb.commands.run('true'))
        if (r2.exitCode !== 0) throw new Error('commands.run failed')
        cmd.push(b)
      }
      await sb.runCode('import numpy as np\nfrom PIL import Image\nimport io, time')
      for (let j = 0; j < Math.min(N, 10); j++) {
        const [t, r] = await time(() => sb.runCode(
          't0 = time.perf_counter()\nimg = Image.fromarray(np.random.randint(0, 256, (580, 580, 3), dtype=np.uint8))\n' +
          'img._repr_png_(); made_ms = (time.perf_counter() - t0) * 1000\nimg'))
        const res = r.results.find((x) => x.png)
        if (!res) throw new Error(`no png: ${JSON.stringify(r.error)}`)
        pngBytes = Buffer.from(res.png, 'base64').length
        png.push(t)
        pngKernel.push(Number((await sb.runCode('made_ms')).text))
      }
      await sb.kill()
    }
  }
} finally {
  await d.stop()
}

// The same with the warm pool on (serve's default): the pool learns the
// shape from a first create, then parks one; each measured create takes it
// once it is parked again (it has settled after its restore meanwhile).
d = await startDaemon(['--pool', '1'])
try {
  await (await Sandbox.create({ ...d.opts, timeoutMs: 600000 })).kill()
  for (let i = 0; i < CREATES; i++) {
    // base's parked sandbox (the daemon parks one at its start) and this
    // template's: only then does the create take a parked one.
    for (let w = 0; (await d.parked()) < 2; w++) {
      if (w > 1200) throw new Error('the warm pool parked nothing in 10 minutes')
      await new Promise((r) => setTimeout(r, 500))
    }
    const [c, sb] = await time(() => Sandbox.create({ ...d.opts, timeoutMs: 600000 }))
    const [f, r] = await time(() => sb.runCode('1+1'))
    if (r.text !== '2') throw new Error(`first runCode gave ${JSON.stringify(r.text)} ${JSON.stringify(r.error)}`)
    poolCreate.push(c)
    poolFirst.push(f)
    await sb.kill()
  }
  poolHits = await d.metric('airlock_pool_hits_total')
} finally {
  await d.stop()
}

console.log(`\n| ${'measurement (ms)'.padEnd(56)} | ${'p50'.padStart(8)} | ${'p95'.padStart(8)} | ${'n'.padStart(4)} |`)
console.log(`|${'-'.repeat(58)}|${'-'.repeat(10)}|${'-'.repeat(10)}|${'-'.repeat(6)}|`)
row("commands.run('true') (primitive, same sandbox)", cmd)
row("runCode('1+1'), warm context", later)
row("first runCode('1+1') after Sandbox.create()", first)
row('Sandbox.create() (code-interpreter-v1)', create)
row('warm pool on: Sandbox.create() (a parked sandbox)', poolCreate)
row('warm pool on: first runCode(\'1+1\') after it', poolFirst)
row(`runCode → PNG result of ${(pngBytes / 1048576).toFixed(2)} MiB, to arrive`, png)
row('  of which the kernel making it (encode included)', pngKernel)
const p50 = (v) => pct(v, 50)
console.log(`\nwarm pool hits: ${poolHits} of ${poolCreate.length} creates`)
console.log(`\nrunCode p50 / commands.run('true') p50 = ${(p50(later) / p50(cmd)).toFixed(2)} (goal <= 1.5)`)
console.log(`first runCode p50 / later runCode p50 = ${(p50(first) / p50(later)).toFixed(2)} (goal <= 2); ` +
  `with the warm pool ${(p50(poolFirst) / p50(later)).toFixed(2)}`)
