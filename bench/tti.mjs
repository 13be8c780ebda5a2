// Time to interactive through the official e2b SDK, the way public sandbox
// benchmarks measure it: Sandbox.create() then the first
// commands.run('echo hi') result, N times in sequence, from the warm pool
// (serve --pool 2) and with the pool off (each create restores the template
// snapshot, and once more with the template's RAM in the migration stream as
// before shared RAM); beside commands.run('echo hi') in a running sandbox and the
// exec round trip of `true` through the SDK and as raw HTTP (one Connect
// envelope, read to the end of the stream), all in the same run.
//
// Usage (root): node bench/tti.mjs [N]   (default 100; AIRLOCK_BIN, AIRLOCK_STATE_DIR)
// Run via `make bench-tti`. Starts its own daemon on a free port.
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '../tests/e2e/package.json'))
const { Sandbox } = require('e2b')
const N = Number(process.argv[2] || 100)
const EXECS = 50

const row = (name, v) => console.log(`| ${name.padEnd(50)} | ${pct(v, 50).toFixed(1).padStart(8)} | ${pct(v, 95).toFixed(1).padStart(8)} | ${pct(v, 99).toFixed(1).padStart(8)} | ${String(v.length).padStart(4)} |`)


async function metric(url, name) {
  const m = (await (await fetch(`${url}/metrics`)).text()).match(new RegExp(`^${name} (\\d+)`, 'm'))
  return m ? Number(m[1]) : 0
}

// N creates in sequence, each to its first commands.run('echo hi') result.
// pooled: before each create, wait (up to 10 s, as a user's think time) for a
// parked sandbox; a create that still found none is counted as a miss.
async function ttiLoop(d, n, pooled) {
  const tti = [], create = []
  let misses = 0
  for (let i = 0; i < n; i++) {
    if (pooled) {
      for (let t0 = Date.now(); Date.now() - t0 < 10000 && (await metric(d.url, 'airlock_pool_parked')) < 1; )
        await new Promise((r) => setTimeout(r, 50))
    }
    const h0 = pooled ? await metric(d.url, 'airlock_pool_hits_total') : 0
    const t0 = performance.now()
    const sb = await Sandbox.create('base', d.opts)
    const t1 = performance.now()
    const r = await sb.commands.run('echo hi')
    const t2 = performance.now()
    if (r.stdout !== 'hi\n') throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`)
    if (pooled && (await metric(d.url, 'airlock_pool_hits_total')) === h0) misses++
    create.push(t1 - t0)
    tti.push(t2 - t0)
    await sb.kill()
  }
  return { tti, create, misses }
}

// The warm pool (issue 14): creates that take a parked sandbox. Pool empty:
// the same creates restore the template snapshot (shared RAM) each time.
const pool = await startDaemon(['--pool', '2'])
let pooled, echo = []
const sdk = [], raw = []
try {
  await new Promise((r) => setTimeout(r, 100))
  for (let t0 = Date.now(); Date.now() - t0 < 60000 && (await metric(pool.url, 'airlock_pool_parked')) < 2; )
    await new Promise((r) => setTimeout(r, 200))
  pooled = await ttiLoop(pool, N, true)

  const sb = await Sandbox.create('base', pool.opts)
  const info = await sb.getInfo()
  const body = JSON.stringify({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'true'] }, stdin: false })
  const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), Buffer.from(body)])
  frame.writeUInt32BE(body.length, 1)
  for (let i = 0; i < EXECS; i++) {
    let t0 = performance.now()
    await sb.commands.run('echo hi')
    echo.push(performance.now() - t0)
    t0 = performance.now()
    await sb.commands.run('true')
    sdk.push(performance.now() - t0)
    t0 = performance.now()
    const res = await fetch(`${pool.url}/process.Process/Start`, {
      method: 'POST', body: frame,
      headers: { 'content-type': 'application/connect+json', 'connect-protocol-version': '1',
        'e2b-sandbox-id': sb.sandboxId, 'e2b-sandbox-port': '49983', 'x-access-token': sb.envdAccessToken ?? info.envdAccessToken ?? '' },
    })
    const bytes = Buffer.from(await res.arrayBuffer())
    if (res.status !== 200 || bytes.at(-7) !== 2) throw new Error(`raw exec failed: HTTP ${res.status}`)
    raw.push(performance.now() - t0)
  }
  await sb.kill()
} finally {
  await pool.stop()
}
const empty = await startDaemon(['--pool', '0'])
let cold
try {
  cold = await ttiLoop(empty, Math.min(N, 30), false)
} finally {
  await empty.stop()
}
// Today's snapshot create before shared RAM (issue 14's yardstick for the
// pool-empty create): the template's RAM in the migration stream, loaded
// into private memory by every create.
const stream = await startDaemon(['--pool', '0', '--template-ram-in-stream'])
let streamed
try {
  streamed = await ttiLoop(stream, Math.min(N, 30), false)
} finally {
  await stream.stop()
}

console.log(`\n| ${'measurement (ms)'.padEnd(50)} | ${'p50'.padStart(8)} | ${'p95'.padStart(8)} | ${'p99'.padStart(8)} | ${'n'.padStart(4)} |`)
console.log(`|${'-'.repeat(52)}|${'-'.repeat(10)}|${'-'.repeat(10)}|${'-'.repeat(10)}|${'-'.repeat(6)}|`)
row("TTI, pool hit: create → first commands.run('echo hi')", pooled.tti)
row('  of which Sandbox.create()', pooled.create)
row("TTI, pool empty (template snapshot restore)", cold.tti)
row('  of which Sandbox.create()', cold.create)
row("TTI, pool empty, template RAM in the stream (before)", streamed.tti)
row('  of which Sandbox.create()', streamed.create)
row("commands.run('echo hi') in a running sandbox", echo)
row('exec `true`: raw HTTP Connect stream (primitive)', raw)
row('exec `true`: SDK commands.run (bash -l -c)', sdk)
const p50 = (v) => pct(v, 50)
console.log(`\npool misses: ${pooled.misses} of ${pooled.tti.length}`)
console.log(`pool hit TTI p50 / echo round trip p50 = ${(p50(pooled.tti) / p50(echo)).toFixed(2)} (goal <= 1.3)`)
console.log(`pool empty TTI p50 / pool hit TTI p50 = ${(p50(cold.tti) / p50(pooled.tti)).toFixed(2)}`)
console.log(`pool empty TTI p50 / stream-template TTI p50 = ${(p50(cold.tti) / p50(streamed.tti)).toFixed(2)} (goal <= 0.5)`)
console.log(`pool empty create p50 / stream-template create p50 = ${(p50(cold.create) / p50(streamed.create)).toFixed(2)}`)
