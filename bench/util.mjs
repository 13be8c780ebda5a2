// Helpers shared by the Node benchmarks (tti.mjs, code_interpreter.mjs, templates.mjs).
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const BIN = process.env.AIRLOCK_BIN || join(here, '../build/airlock')
const STATE_DIR = process.env.AIRLOCK_STATE_DIR || '/var/lib/airlock'

// A free loopback TCP port (bound, read, released).
export const freePort = () => new Promise((res, rej) => {
  const s = createServer().once('error', rej)
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)) })
})

// The p-th percentile (nearest rank) of the values `v`.
export const pct = (v, p) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.ceil(p / 100 * s.length) - 1)] }

// `airlock serve` on a free port with its own registry and key; extra flags after ours.
export async function startDaemon(extra) {
  const tmp = mkdtempSync(join(tmpdir(), 'airlock-ci-bench-'))
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const daemon = spawn(BIN, ['--state-dir', STATE_DIR, 'serve', '--listen', `127.0.0.1:${port}`, '--db', join(tmp, 'airlock.db'),
    '--kill-on-exit', ...extra], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, AIRLOCK_LOG: 'warn' } })
  for (let i = 0; ; i++) {
    try { if ((await fetch(`${url}/health`)).ok) break } catch {}
    if (i > 200) throw new Error('daemon did not start')
    await new Promise((r) => setTimeout(r, 100))
  }
  const apiKey = readFileSync(join(tmp, 'cli.key'), 'utf8').trim()
  return {
    url,
    opts: { apiKey, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 300000 },
    async parked() { return this.metric('airlock_pool_parked') },
    // A counter or gauge of GET /metrics (0 when absent).
    async metric(name) {
      const text = await (await fetch(`${url}/metrics`, { headers: { 'X-API-Key': apiKey } })).text()
      return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? 0)
    },
    async stop() {
      daemon.kill('SIGTERM')
      await new Promise((r) => daemon.once('exit', r))
      rmSync(tmp, { recursive: true, force: true })
    },
  }
}

