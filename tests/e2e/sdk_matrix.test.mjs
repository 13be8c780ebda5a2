// The SDK release matrix (issue 34): one compact scenario set
// (sdk-matrix/scenarios.mjs: create, run, stream, stdin, files, URLs,
// watch, metrics, list with filters, fork, snapshot, pause/resume, a
// sandbox's timeout, template exists and a one-step build, runCode, kill)
// run by every pinned release of the official JS packages, each unmodified
// from tests/e2e/sdk-matrix/<dir> (its own package-lock.json; scripts/setup
// installs them), each in a Node process of its own, all against one daemon.
//
// The releases that know only E2B_DOMAIN (e2b 1.x and 2.0, the code
// interpreter before 2.8's use of E2B_SANDBOX_URL) talk to
// https://api.<domain> and https://<port>-<id>.<domain>: the daemon serves
// TLS (--tls-listen, a wildcard certificate of a CA made here) on a loopback
// address of its own, port 443, and the process resolves the domain to it
// (domain_resolver.mjs); the rest get E2B_API_URL and E2B_SANDBOX_URL, as
// their users set them. e2b 2.51 runs both ways.
//
// docs/compatibility.md's "SDK matrix" section is this run's table; the test
// fails when they differ (AIRLOCK_UPDATE_DOCS=1 rewrites the section), so
// the published matrix is what CI saw. A scenario that uses a method a
// release lacks is skipped for it by name; any failure fails the test.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import tls from 'node:tls'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { makeDomainCert, skipReason, startDaemon, tlsAddress } from './daemon.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const matrixDir = join(here, 'sdk-matrix')
const docPath = join(here, '..', '..', 'docs', 'compatibility.md')
const domain = 'sandboxes.e2e.test'

// dir: tests/e2e/sdk-matrix/<dir>; how: 'url' (E2B_API_URL + E2B_SANDBOX_URL)
// or 'domain' (E2B_DOMAIN only, over TLS).
const ROWS = [
  { dir: 'e2b-1.13', how: 'domain' },
  { dir: 'e2b-2.0', how: 'domain' },
  { dir: 'e2b-2.10', how: 'url' },
  { dir: 'e2b-2.20', how: 'url' },
  { dir: 'e2b-2.30', how: 'url' },
  { dir: 'e2b-2.39', how: 'url' },
  { dir: 'e2b-2.45', how: 'url' },
  { dir: 'e2b-2.51', how: 'url' },
  { dir: 'e2b-2.51', how: 'domain' },
  { dir: 'code-interpreter-1.5', how: 'domain', pkg: '@e2b/code-interpreter' },
  { dir: 'code-interpreter-2.0', how: 'domain', pkg: '@e2b/code-interpreter' },
  { dir: 'code-interpreter-2.8', how: 'url', pkg: '@e2b/code-interpreter' },
]

let skip = skipReason
if (!skip) {
  const missing = ROWS.filter((r) => !existsSync(join(matrixDir, r.dir, 'node_modules', r.pkg || 'e2b', 'package.json')))
  if (missing.length) skip = `the SDK matrix is not installed (scripts/setup does): ${missing.map((r) => r.dir).join(', ')}`
}
if (skip && skip !== skipReason) console.log(`# SKIP e2e: ${skip}`)
const maybe = skip ? test.skip : test

let d = null
let cert = null
let addr = null
before(async () => {
  if (skip) return
  cert = makeDomainCert(domain)
  addr = tlsAddress()
  d = await startDaemon(['--domain', domain, '--tls-listen', `${addr}:443`, '--tls-cert', cert.certPath,
    '--tls-key', cert.keyPath])
})
after(async () => {
  if (d) await d.stop()
})

function version(row) {
  const req = (p) => JSON.parse(readFileSync(join(matrixDir, row.dir, 'node_modules', p, 'package.json'), 'utf8')).version
  const e2b = req('e2b')
  return row.pkg ? `@e2b/code-interpreter ${req(row.pkg)} (e2b ${e2b})` : `e2b ${e2b}`
}

// Runs scenarios.mjs for `row`; resolves to its parsed lines.
function runRow(row, tag) {
  const env = { ...process.env, MATRIX_DIR: join(matrixDir, row.dir), MATRIX_PACKAGE: row.pkg || 'e2b', MATRIX_TAG: tag,
    E2B_API_KEY: d.apiKey }
  for (const k of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_DOMAIN', 'E2B_DEBUG', 'E2B_ACCESS_TOKEN']) delete env[k]
  const args = [join(matrixDir, 'scenarios.mjs')]
  if (row.how === 'url') {
    env.E2B_API_URL = d.url
    env.E2B_SANDBOX_URL = d.url
  } else {
    Object.assign(env, { E2B_DOMAIN: domain, NODE_EXTRA_CA_CERTS: cert.caPath, AIRLOCK_TLS_ADDR: addr })
    args.unshift('--import', join(here, 'domain_resolver.mjs'))
  }
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: join(matrixDir, row.dir), env, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (b) => (out += b))
    child.stderr.on('data', (b) => (err += b))
    const timer = setTimeout(() => child.kill('SIGKILL'), 300000)
    child.once('exit', (code, signal) => {
      clearTimeout(timer)
      const lines = out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
      if (code !== 0) return reject(new Error(`${row.dir} (${row.how}) exited ${code ?? signal}: ${err.slice(-2000)}`))
      resolve(lines)
    })
  })
}

const results = []

maybe('the daemon offers HTTP/1.1 by ALPN and no connection without its CA', async () => {
  const probe = tls.connect({ host: addr, port: 443, servername: `api.${domain}`, ca: cert.ca, ALPNProtocols: ['h2', 'http/1.1'] })
  await new Promise((r, j) => { probe.once('secureConnect', r); probe.once('error', j) })
  assert.equal(probe.alpnProtocol, 'http/1.1')
  probe.destroy()
  const untrusted = tls.connect({ host: addr, port: 443, servername: `api.${domain}` })
  await assert.rejects(new Promise((r, j) => { untrusted.once('secureConnect', r); untrusted.once('error', j) }))
})

for (const row of ROWS) {
  maybe(`${row.dir} (${row.how === 'url' ? 'E2B_API_URL' : 'E2B_DOMAIN over TLS'}): every scenario passes or is skipped by name`,
    { timeout: 320000 }, async () => {
      const tag = `${row.dir.replace(/\./g, '-')}-${row.how}`
      const t0 = Date.now()
      const lines = await runRow(row, tag)
      results.push({ row, version: version(row), lines })
      const summary = lines.map((l) => `${l.scenario}:${l.result}${l.result === 'pass' ? ` ${l.ms}ms` : ''}`).join(' ')
      console.log(`# ${version(row)} ${row.how}: ${Date.now() - t0} ms: ${summary}`)
      const failed = lines.filter((l) => l.result === 'fail')
      assert.deepEqual(failed, [], `${version(row)} failed`)
      for (const l of lines.filter((x) => x.result === 'skip')) {
        assert.match(l.why, /has no (Sandbox|sbx|Template)\.|^refused by design: /, `${l.scenario} skipped for another reason: ${l.why}`)
      }
      assert.equal(lines.at(-1)?.scenario, 'kill', `the run ended early: ${JSON.stringify(lines.at(-1))}`)
    })
}

// The published matrix (docs/compatibility.md): a row per release and way
// of reaching the daemon, a column per scenario; ✓ passed, –n skipped (note
// n says why), ✗ failed, · not in that package's set.
function table() {
  const scenarios = []
  for (const r of results) for (const l of r.lines) if (!scenarios.includes(l.scenario)) scenarios.push(l.scenario)
  const head = `| SDK | reached by | ${scenarios.map((s) => `\`${s}\``).join(' | ')} |`
  const rule = `|---|---|${scenarios.map(() => ':-:').join('|')}|`
  const notes = []
  const rows = results.map(({ row, version: v, lines }) => {
    const cells = scenarios.map((s) => {
      const l = lines.find((x) => x.scenario === s)
      if (!l) return '·'
      if (l.result === 'pass') return '✓'
      if (l.result === 'fail') return '✗'
      const why = l.why.replace(/^e2b \S+ has no /, 'the release has no ')
      if (!notes.includes(why)) notes.push(why)
      return `–${notes.indexOf(why) + 1}`
    })
    return `| ${v} | ${row.how === 'url' ? '`E2B_API_URL`' : '`E2B_DOMAIN`, TLS'} | ${cells.join(' | ')} |`
  })
  const foot = notes.map((n, i) => `${i + 1}. ${n}.`)
  return [head, rule, ...rows, '', '✓ passed; –n skipped, for the reason numbered n; · not in that package\'s set.', '',
    ...foot].join('\n')
}

maybe('docs/compatibility.md publishes this run\'s matrix', () => {
  assert.equal(results.length, ROWS.length, 'a release did not run')
  const begin = '<!-- sdk-matrix:begin (written by tests/e2e/sdk_matrix.test.mjs) -->'
  const end = '<!-- sdk-matrix:end -->'
  const doc = readFileSync(docPath, 'utf8')
  const i = doc.indexOf(begin)
  const j = doc.indexOf(end)
  assert.ok(i >= 0 && j > i, `docs/compatibility.md has no ${begin} ... ${end} section`)
  const now = `${begin}\n${table()}\n${end}`
  const published = doc.slice(i, j + end.length)
  if (published !== now && process.env.AIRLOCK_UPDATE_DOCS === '1') {
    writeFileSync(docPath, doc.slice(0, i) + now + doc.slice(j + end.length))
    return
  }
  assert.equal(published, now, 'docs/compatibility.md\'s matrix is not this run\'s (AIRLOCK_UPDATE_DOCS=1 rewrites it)')
})
