// The e2e suites' fixture: the official e2b SDK (2.51.0, unmodified) and a
// real `airlock serve` on a free loopback port with a fresh registry (so a
// fresh API key) in a temp dir, and the real state dir for images.
//
// Env: AIRLOCK_BIN (the airlock binary, required), AIRLOCK_STATE_DIR
// (default /var/lib/airlock), AIRLOCK_RUNTIME (the daemon's --runtime,
// default qemu: the suites run once per runtime). `skipReason` says why a suite cannot run here
// (not root, no guest image, no SDK); the suites skip with it.
import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export const BIN = process.env.AIRLOCK_BIN
export const STATE_DIR = process.env.AIRLOCK_STATE_DIR || '/var/lib/airlock'
export const RUNTIME = process.env.AIRLOCK_RUNTIME || 'qemu'

export let skipReason = null
if (!BIN || !existsSync(BIN)) skipReason = 'AIRLOCK_BIN is not set to the airlock binary'
else if (process.getuid() !== 0) skipReason = 'needs root (microVMs, network namespaces)'
else if (!existsSync(join(STATE_DIR, 'images'))) skipReason = `no guest image in ${STATE_DIR} (run make image)`
export let e2b = {}
if (!skipReason) {
  try {
    e2b = await import('e2b')
  } catch (e) {
    skipReason = `the e2b SDK is not installed (run: npm ci in tests/e2e; scripts/setup does): ${e.message}`
  }
}
if (skipReason) console.log(`# SKIP e2e: ${skipReason}`)

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

async function waitHealthy(base, ms) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    try {
      const r = await fetch(`${base}/health`)
      if (r.status === 200) return
    } catch {}
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error('daemon did not answer /health')
}

// WaitFor(condition, deadline), as tests/wait_for.h: polls the (async)
// `cond` every `pollMs` until it returns a truthy value or `ms` pass; checks
// once more at the deadline. Returns the last value: assert on it.
export async function waitFor(cond, ms, pollMs = 100) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    const v = await cond()
    if (v) return v
    await new Promise((r) => setTimeout(r, Math.min(pollMs, Math.max(0, end - Date.now()))))
  }
  return cond()
}

// A non-admin key of `team` made with `airlock apikey` in registry `db`.
function createKeyIn(db, team) {
  const out = execFileSync(BIN, ['--state-dir', STATE_DIR, 'apikey', '--db', db, 'create', '--name', `e2e-${team}`,
    '--team', team], { encoding: 'utf8' })
  return out.split('\n')[0].trim()
}

// Starts `airlock serve --kill-on-exit` plus `extraArgs`; returns
// { url, apiKey (the admin cli.key), db, opts (for the SDK), createKey(team),
// stop(), kill9() }. createKey makes a non-admin key of `team` with
// `airlock apikey`. `reuse`: a previous daemon's { tmp } (its registry), for
// a restart after kill9() (which keeps the directory).
//
// AIRLOCK_E2E_TARGET_URL (+ _KEY, an admin key, and _DB, the registry
// `airlock apikey --db` writes to) points a suite at a running server
// instead, such as a cluster's front (multinode.test.mjs runs sdk.test.mjs
// so); extraArgs must then be empty and stop() leaves the server running.
export async function startDaemon(extraArgs = [], reuse = null) {
  const target = process.env.AIRLOCK_E2E_TARGET_URL
  if (target) {
    if (extraArgs.length) throw new Error(`a suite that starts its daemon with ${extraArgs.join(' ')} cannot run against ${target}`)
    const apiKey = process.env.AIRLOCK_E2E_TARGET_KEY
    const db = process.env.AIRLOCK_E2E_TARGET_DB
    return {
      url: target,
      apiKey,
      db,
      createKey: (team) => createKeyIn(db, team),
      opts: { apiKey, apiUrl: target, sandboxUrl: target, requestTimeoutMs: 120000 },
      async stop() {},
      async kill9() { throw new Error('kill9 of a server this suite did not start') },
    }
  }
  const tmp = reuse ? reuse.tmp : mkdtempSync(join(tmpdir(), 'airlock-e2e-'))
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const child = spawn(BIN, ['--state-dir', STATE_DIR, 'serve', '--runtime', RUNTIME, '--listen', `127.0.0.1:${port}`,
    '--db', join(tmp, 'airlock.db'), '--kill-on-exit',
    // No warm pool unless a test asks for one (pool.test.mjs): parked guests would share the CPU with every test.
    ...(extraArgs.includes('--pool') ? [] : ['--pool', '0']), ...extraArgs], { stdio: ['ignore', 'inherit', 'inherit'] })
  const exited = new Promise((r) => child.once('exit', r))
  try {
    await waitHealthy(url, 20000)
  } catch (e) {
    // A daemon that never answered is not left running (the suite's after()
    // has no handle on it).
    child.kill('SIGTERM')
    await exited
    throw e
  }
  const apiKey = readFileSync(join(tmp, 'cli.key'), 'utf8').trim()
  const db = join(tmp, 'airlock.db')
  return {
    url,
    apiKey,
    db,
    createKey: (team) => createKeyIn(db, team),
    opts: { apiKey, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 120000 },
    tmp,
    async stop() {
      child.kill('SIGTERM')
      await exited
      rmSync(tmp, { recursive: true, force: true })
    },
    async kill9() {
      child.kill('SIGKILL')
      await exited
    },
  }
}

// A CA and a wildcard certificate for `domain` (and the domain itself), made
// with openssl in a fresh temp dir, valid one day: what an operator gives
// serve --tls-cert/--tls-key. Returns { dir, caPath, certPath, keyPath, ca }.
export function makeDomainCert(domain) {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-tls-'))
  const ssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' })
  ssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', '/CN=airlock e2e CA', '-keyout', 'ca.key', '-out', 'ca.pem')
  ssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', `/CN=${domain}`,
    '-keyout', 'server.key', '-out', 'server.csr')
  writeFileSync(join(dir, 'ext.cnf'), `subjectAltName=DNS:*.${domain},DNS:${domain}\n`)
  ssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1',
    '-extfile', 'ext.cnf', '-out', 'server.pem')
  return { dir, caPath: join(dir, 'ca.pem'), certPath: join(dir, 'server.pem'), keyPath: join(dir, 'server.key'),
    ca: readFileSync(join(dir, 'ca.pem')) }
}

// A loopback address of this process's own (127.83.x.y), so port 443 is
// free on it for serve --tls-listen.
export function tlsAddress() {
  return `127.83.${1 + (process.pid % 250)}.${1 + Math.floor(Math.random() * 250)}`
}
