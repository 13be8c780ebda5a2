// End-to-end: the official @e2b/code-interpreter (2.8.0, unmodified) against
// `airlock serve` and the code-interpreter template (docs/code-interpreter.md):
// state per context, streaming callbacks, rich results (DataFrame, PNG,
// charts), errors, timeouts that interrupt the execution and not the kernel,
// parallel contexts, restart/delete, JavaScript/TypeScript/bash, non-ASCII
// output, create-time and per-call env vars, bounded output, the audit record,
// and port 49999's access token (issue 32).
//
// Env: AIRLOCK_BIN (required), AIRLOCK_STATE_DIR (default /var/lib/airlock).
// Skips (with the reason) when not root or when the code-interpreter image
// is not built (make image).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { request } from 'node:http'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { skipReason as baseSkip, startDaemon, waitFor, RUNTIME, STATE_DIR } from './daemon.mjs'

let skipReason = baseSkip
if (!skipReason && !existsSync(join(STATE_DIR, 'images', 'templates', 'code-interpreter.json'))) {
  skipReason = `no code-interpreter image in ${STATE_DIR} (run: make image)`
}
let ci = {}
if (!skipReason) {
  try {
    ci = await import('@e2b/code-interpreter')
  } catch (e) {
    skipReason = `@e2b/code-interpreter is not installed (npm ci in tests/e2e): ${e.message}`
  }
}
if (skipReason) console.log(`# SKIP code interpreter e2e: ${skipReason}`)
const maybe = skipReason ? test.skip : test
// Cases of the interpreter's own logic (its contexts and kernels; the guest
// only runs the processes, as in every other case) run on the microVM only:
// e2e_code_interpreter_gvisor runs the rest, what the runtime carries
// (streams, port 49999, signals, large output, files, env at create).
const interpreterOnly = skipReason ? test.skip : RUNTIME === 'gvisor'
  ? (name, o, fn) => test(name, { ...o, skip: 'interpreter logic, the same over both runtimes: e2e_code_interpreter runs it' }, fn)
  : test

let d, opts, sbx
const DOMAIN = 'airlock.test'
// A context is a kernel of its own, and starting one costs seconds under
// TCG: cases that only need "a context that is not the default one" share
// these instead of each starting another.
let other  // python, made by the first case
let jsContext = null
const sharedJsContext = async () => (jsContext ??= await sbx.createCodeContext({ language: 'js' }))

before(async () => {
  if (skipReason) return
  // --domain: the host form "<port>-<id>.airlock.test" is tried below.
  d = await startDaemon(['--domain', DOMAIN])
  opts = d.opts
  // The template's alias, as the package asks for it by default.
  sbx = await ci.Sandbox.create({ ...opts, timeoutMs: 1200000, envs: { CREATE_VAR: 'from-create' } })
})

after(async () => {
  if (sbx) await sbx.kill().catch(() => {})
  if (d) await d.stop()
})

// Width and height of a PNG (IHDR, the first chunk).
function pngSize(b64) {
  const buf = Buffer.from(b64, 'base64')
  assert.equal(buf.subarray(1, 4).toString('latin1'), 'PNG', 'not a PNG')
  return { width: buf.readUInt32BE(16), height: buf.readUInt32BE(20) }
}

maybe('the default template is code-interpreter-v1 and state persists within a context, not across', { timeout: 300000 }, async () => {
  const info = await ci.Sandbox.getInfo(sbx.sandboxId, opts)
  assert.equal(info.templateId, 'code-interpreter')
  // The template's own machine (E2B's shape for it), as no cpuCount/memoryMB was asked for.
  assert.deepEqual([info.cpuCount, info.memoryMB], [2, 2048])
  let r = await sbx.runCode('x = 41')
  assert.equal(r.error, undefined)
  r = await sbx.runCode('x + 1')
  assert.equal(r.text, '42')
  assert.equal(typeof r.executionCount, 'number')
  other = await sbx.createCodeContext()
  r = await sbx.runCode('x', { context: other })
  assert.equal(r.error?.name, 'NameError')
})

// A raw HTTP request with the Host the caller picks (fetch cannot set Host).
function rawPost(url, path, headers, body) {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path, method: 'POST', headers: { 'Content-Type': 'application/json', ...headers } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { text += c })
      res.on('end', () => resolve({ status: res.statusCode, text }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

maybe('port 49999 needs the access token on /execute, by header and by host; the official SDK still works', { timeout: 300000 }, async () => {
  const id = sbx.sandboxId
  const body = JSON.stringify({ code: "open('/tmp/ran-by-a-raw-call', 'w').write('x')" })
  const viaHeader = (h) => rawPost(d.url, '/execute', { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49999', ...h }, body)
  const viaHost = (host, h = {}) => rawPost(d.url, '/execute', { Host: host, ...h }, body)
  let r = await viaHeader({})
  assert.equal(r.status, 401, r.text)
  assert.match(r.text, /missing X-Access-Token/)
  r = await viaHeader({ 'X-Access-Token': 'wrong' })
  assert.equal(r.status, 401, r.text)
  assert.match(r.text, /invalid X-Access-Token/)
  r = await viaHost(`49999-${id}.${DOMAIN}`)
  assert.equal(r.status, 401, r.text)
  assert.match(r.text, /missing X-Access-Token/)
  r = await viaHost(`49999-${id}.${DOMAIN}`, { 'X-Access-Token': 'wrong' })
  assert.equal(r.status, 401, r.text)
  // Another domain names no sandbox: the control plane, which wants an API key.
  r = await viaHost(`49999-${id}.elsewhere.test`)
  assert.equal(r.status, 401, r.text)
  assert.match(r.text, /X-API-Key/)
  // The interpreter checks too: from inside the guest, past the daemon.
  const inside = await sbx.commands.run(
    `curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d '{"code":"1"}' http://127.0.0.1:49999/execute`)
  assert.equal(inside.stdout, '401')
  assert.equal((await sbx.commands.run('test -e /tmp/ran-by-a-raw-call && echo ran || echo no')).stdout, 'no\n')
  // The SDK: /execute with the token, the contexts routes (no token sent).
  assert.equal((await sbx.runCode('6 * 7')).text, '42')
  assert.ok((await sbx.listCodeContexts()).length >= 1)
  r = await viaHost(`49999-${id}.${DOMAIN}`, { 'X-Access-Token': sbx.envdAccessToken })
  assert.equal(r.status, 200, r.text)
  assert.equal((await sbx.commands.run('cat /tmp/ran-by-a-raw-call')).stdout, 'x')
})

maybe('stdout and stderr stream while the code runs, in order, before the result', { timeout: 300000 }, async () => {
  const events = []
  let firstOutAt = 0
  const r = await sbx.runCode(
    "import sys, time\nprint('a', flush=True)\nprint('b', file=sys.stderr, flush=True)\nprint('c', flush=True)\n" +
      "time.sleep(3)\nprint('d')\n'done'",
    {
      onStdout: (m) => {
        if (!firstOutAt) firstOutAt = Date.now()
        events.push(`out:${m.line}`)
      },
      onStderr: (m) => events.push(`err:${m.line}`),
      onResult: (res) => events.push(`result:${res.text}`),
    })
  const endAt = Date.now()
  assert.deepEqual(events, ['out:a\n', 'err:b\n', 'out:c\n', 'out:d\n', 'result:done'])
  assert.ok(endAt - firstOutAt >= 2000, `the first line came ${endAt - firstOutAt} ms before the end: not streamed`)
  assert.deepEqual(r.logs.stdout, ['a\n', 'c\n', 'd\n'])
  assert.deepEqual(r.logs.stderr, ['b\n'])
})

maybe('a DataFrame gives html and data', { timeout: 300000 }, async () => {
  const r = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  const res = r.results.find((x) => x.isMainResult)
  assert.match(res.html, /<table/)
  assert.deepEqual(res.data, { a: [1, 2], b: ['x', 'y'] })
  assert.ok(res.formats().includes('html') && res.formats().includes('data'), res.formats().join())
})

maybe('plt.show() gives a PNG of the figure size and a line chart with the plotted points', { timeout: 300000 }, async () => {
  const r = await sbx.runCode(
    'import matplotlib.pyplot as plt\n' +
      'plt.figure(figsize=(4, 3), dpi=100)\n' +
      "plt.plot([1, 2, 3], [2, 4, 9], label='growth')\n" +
      "plt.title('Growth'); plt.xlabel('day'); plt.ylabel('size')\n" +
      'plt.show()')
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  const res = r.results.find((x) => x.png)
  assert.ok(res, `no png among ${r.results.length} results`)
  assert.deepEqual(pngSize(res.png), { width: 400, height: 300 })
  assert.equal(res.chart.type, 'line')
  assert.equal(res.chart.title, 'Growth')
  assert.equal(res.chart.x_label, 'day')
  assert.equal(res.chart.y_label, 'size')
  assert.equal(res.chart.elements[0].label, 'growth')
  assert.deepEqual(res.chart.elements[0].points, [[1, 2], [2, 4], [3, 9]])
})

maybe('a bar chart and a pie chart give their data', { timeout: 300000 }, async () => {
  let r = await sbx.runCode(
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.bar(['A', 'B', 'C'], [3, 5, 2])\nax.set_title('Sales')\nfig")
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  let chart = r.results.find((x) => x.chart)?.chart
  assert.equal(chart?.type, 'bar', JSON.stringify(chart))
  assert.equal(chart.title, 'Sales')
  assert.deepEqual(chart.elements.map((e) => [e.label, e.value]), [['A', 3], ['B', 5], ['C', 2]])
  r = await sbx.runCode(
    "import matplotlib.pyplot as plt\nplt.figure()\nplt.pie([1, 2, 3], labels=['x', 'y', 'z'])\nplt.title('Share')\nplt.show()")
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  chart = r.results.find((x) => x.chart)?.chart
  assert.equal(chart?.type, 'pie', JSON.stringify(chart))
  assert.equal(chart.title, 'Share')
  assert.deepEqual(chart.elements.map((e) => e.label), ['x', 'y', 'z'])
  const angles = chart.elements.map((e) => e.angle)
  assert.ok(Math.abs(angles[1] / angles[0] - 2) < 0.01 && Math.abs(angles[2] / angles[0] - 3) < 0.01, JSON.stringify(angles))
})

maybe('an exception gives execution.error with a traceback; the context works after it', { timeout: 300000 }, async () => {
  const errors = []
  const r = await sbx.runCode('def f():\n    return 1 / 0\nf()', { onError: (e) => errors.push(e.name) })
  assert.equal(r.error.name, 'ZeroDivisionError')
  assert.match(r.error.value, /division by zero/)
  assert.match(r.error.traceback, /ZeroDivisionError/)
  assert.deepEqual(errors, ['ZeroDivisionError'])
  assert.equal((await sbx.runCode('2 * 21')).text, '42')
})

maybe('timeoutMs interrupts the execution, not the kernel: the context answers afterwards', { timeout: 300000 }, async () => {
  // The first case's context (its own kernel, not the default one).
  const ctx = other ?? await sbx.createCodeContext()
  await sbx.runCode('kept = 7', { context: ctx })
  await assert.rejects(sbx.runCode('while True: pass', { context: ctx, timeoutMs: 3000 }), (e) => {
    assert.equal(e.name, 'TimeoutError', e.message)
    return true
  })
  const r = await sbx.runCode('kept + 1', { context: ctx, timeoutMs: 120000 })
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  assert.equal(r.text, '8')
})

interpreterOnly('three contexts run in parallel; restart clears state; delete then use is NotFoundError', { timeout: 300000 }, async () => {
  const ctxs = await Promise.all([0, 1, 2].map(() => sbx.createCodeContext({ cwd: '/tmp' })))
  assert.equal(new Set(ctxs.map((c) => c.id)).size, 3)
  for (const c of ctxs) assert.deepEqual([c.language, c.cwd], ['python', '/tmp'])
  const out = await Promise.all(ctxs.map((c, i) => sbx.runCode(`import os, time\ntime.sleep(1)\nv = ${i}\n(v, os.getcwd())`, { context: c })))
  assert.deepEqual(out.map((r) => r.text), ["(0, '/tmp')", "(1, '/tmp')", "(2, '/tmp')"])
  const listed = (await sbx.listCodeContexts()).map((c) => c.id)
  for (const c of ctxs) assert.ok(listed.includes(c.id), `context ${c.id} not listed`)
  await sbx.restartCodeContext(ctxs[0])
  assert.equal((await sbx.runCode('v', { context: ctxs[0] })).error?.name, 'NameError')
  assert.equal((await sbx.runCode('v', { context: ctxs[1] })).text, '1')
  await sbx.removeCodeContext(ctxs[2])
  await assert.rejects(sbx.runCode('1', { context: ctxs[2] }), (e) => e.name === 'NotFoundError')
})

interpreterOnly('JavaScript and TypeScript contexts keep state; top-level await works; bash runs', { timeout: 600000 }, async () => {
  const js = await sharedJsContext()
  assert.equal(js.language, 'javascript')
  await sbx.runCode('const base = 40; let n = 1', { context: js })
  let r = await sbx.runCode('n += 1; await new Promise((r) => setTimeout(r, 10)); base + n', { context: js })
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  assert.equal(r.text, '42')
  r = await sbx.runCode("console.log('from js'); 'x'.repeat(2)", { context: js })
  assert.deepEqual(r.logs.stdout, ['from js\n'])
  const ts = await sbx.createCodeContext({ language: 'ts' })
  assert.equal(ts.language, 'typescript')
  await sbx.runCode('const k: number = 20; function twice(v: number): number { return v * 2 }', { context: ts })
  r = await sbx.runCode('twice(k) + 2', { context: ts })
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  assert.equal(r.text, '42')
  r = await sbx.runCode('X=41; echo $((X + 1))', { language: 'bash' })
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  assert.deepEqual(r.logs.stdout.join(''), '42\n')
  await assert.rejects(sbx.runCode('1', { language: 'cobol' }), (e) => e.name === 'SandboxError')
})

maybe('non-ASCII output arrives intact even when split across network chunks', { timeout: 300000 }, async () => {
  let r = await sbx.runCode('print("café ✓ 日本 🚀")')
  assert.deepEqual(r.logs.stdout, ['café ✓ 日本 🚀\n'])
  // Large enough that the stream is cut into many network chunks anywhere.
  r = await sbx.runCode('print("café ✓ 日本 🚀 " * 50000)')
  assert.equal(r.logs.stdout.join(''), 'café ✓ 日本 🚀 '.repeat(50000) + '\n')
  r = await sbx.runCode('"naïve ✓"')
  assert.equal(r.text, 'naïve ✓')
})

maybe('create-time envs and per-call envs are visible in the kernel; per-call ones do not stay', { timeout: 300000 }, async () => {
  let r = await sbx.runCode("import os\nos.environ.get('CREATE_VAR')")
  assert.equal(r.text, 'from-create')
  r = await sbx.runCode("import os\n(os.environ.get('CALL_VAR'), os.environ.get('CREATE_VAR'))", { envs: { CALL_VAR: "it's \"quoted\"\n$(x)" } })
  assert.equal(r.text, `('it\\'s "quoted"\\n$(x)', 'from-create')`)
  r = await sbx.runCode("import os\nos.environ.get('CALL_VAR', 'gone')")
  assert.equal(r.text, 'gone')
  // The JavaScript/TypeScript case's context where it ran (not on gVisor).
  const js = await sharedJsContext()
  r = await sbx.runCode('process.env.CREATE_VAR + "/" + process.env.JS_VAR', { context: js, envs: { JS_VAR: 'j' } })
  assert.equal(r.text, 'from-create/j')
})

maybe('10 MB of output arrives complete; far more is cut with a clear error and the sandbox still answers', { timeout: 900000 }, async () => {
  let total = 0
  let r = await sbx.runCode("import sys\nfor i in range(10240):\n    sys.stdout.write('x' * 1023 + '\\n')", {
    onStdout: (m) => { total += m.line.length },
    timeoutMs: 600000,
  })
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  assert.equal(total, 10240 * 1024)
  r = await sbx.runCode("import sys\nfor i in range(1 << 20):\n    sys.stdout.write('y' * 1023 + '\\n')", { timeoutMs: 600000 })
  assert.equal(r.error?.name, 'OutputLimitExceeded', JSON.stringify(r.error))
  assert.match(r.error.value, /MiB/)
  assert.equal((await sbx.runCode('1 + 1')).text, '2')
  assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
})

maybe('every execution is an audit record: the code hash and size, language, outcome, output sizes', { timeout: 300000 }, async () => {
  const code = "print('audited')\n6 * 7"
  await sbx.runCode(code, { timeoutMs: 300000 })
  const sha = createHash('sha256').update(code).digest('hex')
  const auditDir = join(dirname(d.db), 'audit')
  const rec = await waitFor(() => {
    if (!existsSync(auditDir)) return null
    for (const f of readdirSync(auditDir)) {
      for (const line of readFileSync(join(auditDir, f), 'utf8').split('\n')) {
        if (!line.includes(sha)) continue
        const j = JSON.parse(line)
        if (j.action === 'interpreter.execute') return j
      }
    }
    return null
  }, 30000)
  assert.ok(rec, 'no interpreter.execute record with the code hash')
  assert.equal(rec.sandbox, sbx.sandboxId)
  assert.equal(rec.code_bytes, Buffer.byteLength(code))
  assert.equal(rec.language, 'python')
  assert.equal(rec.outcome, 'ended')
  assert.equal(rec.stdout_bytes, 'audited\n'.length)
  assert.equal(rec.results, 1)
  assert.ok(!JSON.stringify(rec).includes('audited\\n6'), 'the code itself is in the record')
})

// A sandbox from the warm pool (its kernel ran a warm-up when the template
// snapshot was taken and again when it was parked; the claim's /init then
// re-inits it): the first runCode sees the create's env vars, a PRNG seeded
// for this sandbox alone, and nothing of either warm-up (no cached output,
// '_' unbound, execution count 1).
interpreterOnly('from the warm pool: the first runCode has the sandbox\'s own env vars and seed, and no trace of the warm-ups', { timeout: 600000 }, async () => {
  const p = await startDaemon(['--pool', '1'])
  const metric = async (name) => {
    const text = await (await fetch(`${p.url}/metrics`, { headers: { 'X-API-Key': p.apiKey } })).text()
    return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? 0)
  }
  try {
    await (await ci.Sandbox.create({ ...p.opts, timeoutMs: 600000 })).kill()  // the pool learns the shape
    const draws = []
    for (const v of ['one', 'two']) {
      // base's, which the daemon parks at its start, and code-interpreter's.
      assert.ok(await waitFor(async () => (await metric('airlock_pool_parked')) >= 2, 300000, 250),
        'the warm pool did not park a code-interpreter sandbox')
      const hits = await metric('airlock_pool_hits_total')
      const sb = await ci.Sandbox.create({ ...p.opts, timeoutMs: 600000, envs: { POOL_VAR: v } })
      assert.equal(await metric('airlock_pool_hits_total'), hits + 1, 'the create did not take the parked sandbox')
      try {
        const r = await sb.runCode("import os, random\nprint(os.environ.get('POOL_VAR'), len(Out), repr(_))\nrandom.random()")
        assert.equal(r.error, undefined)
        assert.equal(r.logs.stdout.join(''), `${v} 0 ''\n`)
        assert.equal(r.executionCount, 1)
        draws.push(r.text)
      } finally {
        await sb.kill()
      }
    }
    assert.notEqual(draws[0], draws[1], 'two sandboxes of one template snapshot drew the same number')
  } finally {
    await p.stop()
  }
})
