// The SDK matrix's scenario set (issue 34), run by sdk_matrix.test.mjs as a
// Node process of its own per pinned SDK release (tests/e2e/sdk-matrix/<dir>,
// each with its own package-lock.json), the package loaded unmodified from
// that directory. It does what a user of that release does: the SDK is told
// only what a user tells it (E2B_API_URL + E2B_SANDBOX_URL, or for releases
// that know only E2B_DOMAIN, the domain over TLS: see tls_resolver.mjs).
//
// Env: MATRIX_DIR (the release's directory), MATRIX_PACKAGE (e2b or
// @e2b/code-interpreter), MATRIX_TAG (metadata value and template name
// suffix, unique per run), E2B_API_KEY, and E2B_API_URL + E2B_SANDBOX_URL or
// E2B_DOMAIN.
//
// Output: one JSON line per scenario on stdout,
//   {"scenario": NAME, "result": "pass"|"fail"|"skip", "ms": N, "why": TEXT}
// "why" is the error for a fail, and for a skip the method the release lacks
// (by name). A scenario after a failed one that it needs is skipped so.
// Exit status 0 whatever the results: the test reads the lines.
import { createRequire } from 'node:module'
import { join } from 'node:path'

const dir = process.env.MATRIX_DIR
const pkgName = process.env.MATRIX_PACKAGE || 'e2b'
const tag = process.env.MATRIX_TAG || 'matrix'
const require = createRequire(join(dir, 'package.json'))
const pkg = require(pkgName)
const e2bVersion = require('e2b/package.json').version
const { Sandbox } = pkg
const Template = pkg.Template || require('e2b').Template
const requestTimeoutMs = 120000
const interpreter = pkgName === '@e2b/code-interpreter'

function emit(scenario, result, ms, why = '') {
  process.stdout.write(`${JSON.stringify({ scenario, result, ms, why })}\n`)
}
function check(ok, what) {
  if (!ok) throw new Error(what)
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
async function waitFor(cond, ms) {
  const end = Date.now() + ms
  for (;;) {
    const v = await cond()
    if (v || Date.now() >= end) return v
    await sleep(200)
  }
}

// A method the release lacks: `lacks('Sandbox.list')` (static),
// `lacks('proto.fork')` (a sandbox's), `lacks('Template.exists')`.
function lacks(path) {
  const [cls, name] = path.split('.')
  const target = cls === 'Template' ? Template : cls === 'Sandbox' ? Sandbox : Sandbox.prototype
  return !target || typeof target[name] !== 'function'
}

// A scenario that checks airlock refuses what the release does, by design:
// reported as a skip with the reason, after the refusal itself was seen.
class RefusedByDesign extends Error {}

const failed = new Set()
async function scenario(name, { needs = [], after = [] }, fn) {
  const missing = needs.filter(lacks)
  const named = missing.map((m) => `${m.replace(/^proto\./, 'sbx.')}()`)
  if (missing.length) return emit(name, 'skip', 0, `e2b ${e2bVersion} has no ${named.join(', ')}`)
  const broken = after.filter((n) => failed.has(n))
  if (broken.length) {
    failed.add(name)
    return emit(name, 'skip', 0, `needs ${broken.join(', ')}, which failed`)
  }
  const t0 = Date.now()
  try {
    await fn()
    emit(name, 'pass', Date.now() - t0)
  } catch (e) {
    failed.add(name)
    if (e instanceof RefusedByDesign) return emit(name, 'skip', Date.now() - t0, `refused by design: ${e.message}`)
    emit(name, 'fail', Date.now() - t0, `${e && e.name}: ${e && e.message}`.slice(0, 500))
  }
}

// Sandbox.list: an array before 2.0, a paginator since.
async function listed(query) {
  const r = Sandbox.list({ query, requestTimeoutMs })
  if (typeof r.nextItems === 'function') {
    const all = []
    while (r.hasNext) all.push(...(await r.nextItems()))
    return all
  }
  return await r
}

let sbx = null
const marker = `kept-${tag}`

await scenario('create', {}, async () => {
  sbx = await Sandbox.create({ timeoutMs: 600000, metadata: { matrix: tag }, requestTimeoutMs })
  check(typeof sbx.sandboxId === 'string' && sbx.sandboxId.length > 0, 'no sandboxId')
})

// A sandbox whose timeout ends while the others run: checked by 'timeout'.
let shortLived = null
const shortCreated = Date.now()
await scenario('create.timeout', { after: ['create'] }, async () => {
  shortLived = await Sandbox.create({ timeoutMs: 5000, requestTimeoutMs })
  check(await shortLived.isRunning(), 'not running after create')
})

if (interpreter) {
  await scenario('runCode', { after: ['create'] }, async () => {
    if (e2bVersion.startsWith('1.')) {
      // 1.x calls /execute with no X-Access-Token (E2B's 1.x sandboxes were
      // unsecured unless asked); every airlock sandbox is secured.
      const refused = await sbx.runCode('1').then(() => false, (e) => /401/.test(e.message))
      check(refused, 'runCode without a token was not refused with 401')
      throw new RefusedByDesign('@e2b/code-interpreter 1.x sends no X-Access-Token to /execute, and every airlock ' +
        'sandbox is secured (docs/code-interpreter.md)')
    }
    const r = await sbx.runCode('x = 6 * 7\nprint("printed", x)\nx')
    check(r.error == null, `error ${JSON.stringify(r.error)}`)
    check(r.text === '42', `text ${JSON.stringify(r.text)}`)
    check(r.logs.stdout.join('') === 'printed 42\n', `stdout ${JSON.stringify(r.logs.stdout)}`)
    const err = await sbx.runCode('1/0')
    check(err.error && err.error.name === 'ZeroDivisionError', `error ${JSON.stringify(err.error)}`)
    // State is kept between calls in the default context.
    const again = await sbx.runCode('x + 1')
    check(again.text === '43', `state: ${JSON.stringify(again.text)}`)
  })
}

await scenario('commands.run', { after: ['create'] }, async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  check(r.exitCode === 0 && r.stdout === 'out\n' && r.stderr === 'err\n', `got ${JSON.stringify(r)}`)
  let code = null
  try {
    await sbx.commands.run('exit 3')
  } catch (e) {
    code = e.exitCode
  }
  check(code === 3, `exit 3 gave ${code}`)
  const who = await sbx.commands.run('whoami; pwd')
  check(who.stdout === 'user\n/home/user\n', `whoami; pwd: ${JSON.stringify(who.stdout)}`)
})

await scenario('commands.stream', { after: ['create'] }, async () => {
  const chunks = []
  const r = await sbx.commands.run('for i in 1 2 3; do echo line $i; sleep 0.3; done', { onStdout: (d) => chunks.push(d) })
  check(chunks.join('') === 'line 1\nline 2\nline 3\n', `chunks ${JSON.stringify(chunks)}`)
  check(chunks.length >= 2, `one chunk only: ${JSON.stringify(chunks)}`)
  check(r.stdout === 'line 1\nline 2\nline 3\n', `stdout ${JSON.stringify(r.stdout)}`)
})

await scenario('commands.stdin', { after: ['create'] }, async () => {
  // `stdin: true` is the newer releases' opt-in; older ones keep stdin open.
  const h = await sbx.commands.run('head -n 1', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'from stdin\n')
  const r = await h.wait()
  check(r.stdout === 'from stdin\n', `stdout ${JSON.stringify(r.stdout)}`)
})

await scenario('files', { after: ['create'] }, async () => {
  await sbx.files.write('/home/user/m/a/b.txt', 'nested text')
  check((await sbx.files.read('/home/user/m/a/b.txt')) === 'nested text', 'nested text round trip')
  const bytes = new Uint8Array(256).map((_, i) => i)
  await sbx.files.write('/home/user/m/all.bin', bytes.buffer)
  const back = await sbx.files.read('/home/user/m/all.bin', { format: 'bytes' })
  check(back.length === 256 && back.every((b, i) => b === i), 'binary round trip')
  await sbx.files.write([
    { path: '/home/user/m/one.txt', data: 'one' },
    { path: '/home/user/m/two.txt', data: 'two' },
  ])
  check((await sbx.files.read('/home/user/m/two.txt')) === 'two', 'multi-file write')
  const ls = await sbx.commands.run('stat -c %U /home/user/m/a/b.txt; cat /home/user/m/one.txt')
  check(ls.stdout === 'user\none', `owner and content: ${JSON.stringify(ls.stdout)}`)
  const names = (await sbx.files.list('/home/user/m')).map((e) => e.name).sort()
  check(JSON.stringify(names) === JSON.stringify(['a', 'all.bin', 'one.txt', 'two.txt']), `list ${names}`)
  check(await sbx.files.exists('/home/user/m/one.txt'), 'exists')
  await sbx.files.remove('/home/user/m/one.txt')
  check(!(await sbx.files.exists('/home/user/m/one.txt')), 'removed')
})

await scenario('files.url', { needs: ['proto.uploadUrl', 'proto.downloadUrl'], after: ['create'] }, async () => {
  // Signed when the sandbox is secured (the newer releases), plain before:
  // either way the URL alone reaches the file, with no SDK headers.
  const up = await sbx.uploadUrl('/home/user/m/url.txt')
  const form = new FormData()
  form.append('file', new Blob(['through a URL']), 'url.txt')
  const put = await fetch(up, { method: 'POST', body: form })
  check(put.ok, `upload ${put.status} ${await put.text()}`)
  const down = await fetch(await sbx.downloadUrl('/home/user/m/url.txt'))
  check(down.ok && (await down.text()) === 'through a URL', `download ${down.status}`)
})

await scenario('files.watch', { after: ['create'] }, async () => {
  await sbx.files.makeDir('/home/user/w')
  const seen = []
  const w = await sbx.files.watchDir('/home/user/w', (ev) => seen.push(ev.name))
  try {
    await sbx.files.write('/home/user/w/new.txt', 'watched')
    check(await waitFor(() => seen.includes('new.txt'), 20000), `events ${JSON.stringify(seen)}`)
  } finally {
    await w.stop()
  }
})

await scenario('metrics', { needs: ['proto.getMetrics'], after: ['create'] }, async () => {
  const m = await waitFor(async () => {
    const all = await sbx.getMetrics()
    return all.length ? all : null
  }, 30000)
  check(m && m.length > 0, 'no metrics in 30 s')
  const last = m[m.length - 1]
  check(last.cpuCount > 0 && last.memTotal > 0, `metrics ${JSON.stringify(last)}`)
})

await scenario('list.filters', { needs: ['Sandbox.list'], after: ['create'] }, async () => {
  const mine = await listed({ metadata: { matrix: tag } })
  check(mine.length === 1 && mine[0].sandboxId === sbx.sandboxId, `metadata filter: ${JSON.stringify(mine.map((s) => s.sandboxId))}`)
  const none = await listed({ metadata: { matrix: `${tag}-other` } })
  check(none.length === 0, 'another value matched')
})

let child = null
await scenario('fork', { needs: ['proto.fork'], after: ['create'] }, async () => {
  await sbx.files.write(`/home/user/${marker}`, 'before fork')
  const children = await sbx.fork({ timeoutMs: 120000, requestTimeoutMs })
  const list = Array.isArray(children) ? children : [children]
  check(list.length === 1 && !(list[0] instanceof Error), `fork gave ${list}`)
  child = list[0]
  check(child.sandboxId !== sbx.sandboxId, 'the same id')
  check((await child.files.read(`/home/user/${marker}`)) === 'before fork', 'the child lacks the parent file')
  await child.files.write(`/home/user/${marker}`, 'child only')
  check((await sbx.files.read(`/home/user/${marker}`)) === 'before fork', 'the child wrote into the parent')
  await child.kill()
})

await scenario('snapshot', { needs: ['proto.createSnapshot', 'Sandbox.deleteSnapshot'], after: ['create'] }, async () => {
  await sbx.files.write(`/home/user/${marker}`, 'in snapshot')
  const snap = await sbx.createSnapshot({ requestTimeoutMs })
  check(typeof snap.snapshotId === 'string' && snap.snapshotId.length > 0, `snapshot ${JSON.stringify(snap)}`)
  try {
    check(await sbx.isRunning(), 'not running after its snapshot')
    const from = await Sandbox.create(snap.snapshotId, { timeoutMs: 120000, requestTimeoutMs })
    try {
      check((await from.files.read(`/home/user/${marker}`)) === 'in snapshot', 'the snapshot lacks the file')
    } finally {
      await from.kill()
    }
  } finally {
    check(await Sandbox.deleteSnapshot(snap.snapshotId, { requestTimeoutMs }), 'delete')
  }
})

await scenario('pause.resume', { needs: ['proto.betaPause'], after: ['create'] }, async () => {
  await sbx.commands.run(`echo resumed > /home/user/${marker}`)
  const pause = typeof sbx.pause === 'function' ? sbx.pause.bind(sbx) : sbx.betaPause.bind(sbx)
  await pause({ requestTimeoutMs })
  check(!(await sbx.isRunning().catch(() => false)), 'running after pause')
  if (typeof Sandbox.getInfo === 'function') {
    const info = await Sandbox.getInfo(sbx.sandboxId, { requestTimeoutMs })
    check(info.state === 'paused', `state ${info.state}`)
  }
  sbx = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600000, requestTimeoutMs })
  const r = await sbx.commands.run(`cat /home/user/${marker}`)
  check(r.stdout === 'resumed\n', `after resume: ${JSON.stringify(r.stdout)}`)
})

if (!interpreter) {
  await scenario('template.exists', { needs: ['Template.exists'] }, async () => {
    check((await Template.exists('base', { requestTimeoutMs })) === true, 'base does not exist')
    check((await Template.exists(`nothing-${tag}`, { requestTimeoutMs })) === false, 'a made-up name exists')
  })

  await scenario('template.build', { needs: ['Template.build'] }, async () => {
    // The same one step for every release: after the first, its layer is cached.
    const t = Template().fromTemplate('base').runCmd('echo built-by-matrix > /home/user/matrix.txt')
    const name = `matrix-${tag}`
    // build(template, name, opts) since 2.20 (with Template.exists); build(template, {alias}) before.
    const two = typeof Template.exists === 'function'
    const info = two ? await Template.build(t, name, { requestTimeoutMs }) : await Template.build(t, { alias: name, requestTimeoutMs })
    check(info && (info.templateId || info.templateID || info.name), `build gave ${JSON.stringify(info)}`)
    const s = await Sandbox.create(name, { timeoutMs: 120000, requestTimeoutMs })
    try {
      const r = await s.commands.run('cat /home/user/matrix.txt')
      check(r.stdout === 'built-by-matrix\n', `built file: ${JSON.stringify(r.stdout)}`)
    } finally {
      await s.kill()
    }
  })
}

await scenario('timeout', { after: ['create.timeout'] }, async () => {
  // The 5 s timeout has passed (the scenarios between took longer, or the
  // wait below does): the sandbox is gone.
  const gone = await waitFor(async () => !(await shortLived.isRunning().catch(() => false)), Math.max(0, shortCreated + 60000 - Date.now()))
  check(gone, `still running ${Date.now() - shortCreated} ms after a 5000 ms timeout`)
})

await scenario('kill', { after: ['create'] }, async () => {
  const id = sbx.sandboxId
  await sbx.kill()
  check(!(await sbx.isRunning().catch(() => false)), 'running after kill')
  let gone = false
  try {
    await Sandbox.connect(id, { requestTimeoutMs })
  } catch (e) {
    gone = /not found|NotFound/i.test(`${e.name} ${e.message}`)
  }
  check(gone, 'connect to a killed sandbox did not answer not found')
})

// The SDK may hold a pooled connection or a timer open: the run is over.
process.exit(0)
