// End-to-end: the data plane as E2B's proxy behaves, through the official
// e2b SDK (2.51.0, unmodified) and a plain HTTP client (undici, the SDK's own
// transport) against a real `airlock serve`:
//   - one client connection carries 500 mixed control and data-plane requests
//     (streams, downloads, uploads, Connect errors, kills), each answered
//     within its deadline, never a second connection (issue 12, item 1);
//   - kill() ends the command streams in flight; a killed sandbox's ports
//     answer E2B's 502 "The sandbox was not found";
//   - uploadUrl()/downloadUrl() work with no header at all;
//   - allowPublicTraffic:false and maskRequestHost as E2B documents.
// (A background command re-attached after a long idle: idle.test.mjs.)
// Env: AIRLOCK_BIN, AIRLOCK_STATE_DIR (see daemon.mjs).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Client } from 'undici'
import { e2b, skipReason, startDaemon } from './daemon.mjs'

const { Sandbox } = e2b
const maybe = skipReason ? test.skip : test
let d

before(async () => {
  if (skipReason) return
  d = await startDaemon([])
})

after(async () => {
  if (d) await d.stop()
})

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Connect streaming envelope: flags (1 byte), big-endian length, payload.
function envelope(obj) {
  const payload = Buffer.from(JSON.stringify(obj))
  const head = Buffer.alloc(5)
  head.writeUInt32BE(payload.length, 1)
  return Buffer.concat([head, payload])
}

function decodeEnvelopes(buf) {
  const out = []
  let i = 0
  while (i + 5 <= buf.length) {
    const flags = buf[i]
    const len = buf.readUInt32BE(i + 1)
    if (i + 5 + len > buf.length) throw new Error('truncated envelope')
    out.push({ flags, json: JSON.parse(buf.subarray(i + 5, i + 5 + len).toString() || '{}') })
    i += 5 + len
  }
  if (i !== buf.length) throw new Error(`${buf.length - i} stray bytes after the envelopes`)
  return out
}

maybe('one keep-alive connection answers 500 mixed control and data-plane requests', { timeout: 900000 }, async () => {
  const client = new Client(d.url, { pipelining: 1, keepAliveTimeout: 600000, keepAliveMaxTimeout: 600000 })
  const killer = new Client(d.url)
  let connects = 0
  client.on('connect', () => connects++)
  const deadline = 30000
  let n = 0
  const call = async (what, o) => {
    n++
    const t0 = Date.now()
    try {
      const r = await client.request({ headersTimeout: deadline, bodyTimeout: deadline, ...o })
      const body = Buffer.from(await r.body.arrayBuffer())
      return { status: r.statusCode, headers: r.headers, body }
    } catch (e) {
      throw new Error(`request ${n} (${what}) failed after ${Date.now() - t0} ms: ${e.message}`)
    }
  }
  const api = { 'X-API-Key': d.apiKey, 'Content-Type': 'application/json' }
  const create = async () => {
    const r = await call('create', { method: 'POST', path: '/v2/sandboxes', headers: api, body: '{"timeout":600}' })
    assert.equal(r.status, 201, r.body.toString())
    return JSON.parse(r.body.toString())
  }
  let sb = await create()
  const envd = () => ({ 'E2b-Sandbox-Id': sb.sandboxID, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sb.envdAccessToken })
  try {
    while (n < 500) {
      const i = n
      switch (i % 9) {
        case 0: {  // a streamed command (chunked Connect stream)
          const r = await call('Process/Start', {
            method: 'POST', path: '/process.Process/Start',
            headers: { ...envd(), 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' },
            body: envelope({ process: { cmd: '/bin/bash', args: ['-c', `echo ka${i}`] }, stdin: false }),
          })
          assert.equal(r.status, 200, r.body.toString())
          const evs = decodeEnvelopes(r.body)
          const out = evs.map((e) => e.json?.event?.data?.stdout).filter(Boolean).map((b) => Buffer.from(b, 'base64').toString()).join('')
          assert.equal(out, `ka${i}\n`)
          assert.equal(evs.at(-1).flags & 2, 2, 'the stream ends with an end-of-stream envelope')
          break
        }
        case 1: {  // a download with Content-Length
          const r = await call('GET /files', { method: 'GET', path: '/files?path=%2Fetc%2Fos-release', headers: envd() })
          assert.equal(r.status, 200)
          assert.equal(Number(r.headers['content-length']), r.body.length)
          assert.match(r.body.toString(), /Debian/)
          break
        }
        case 2: {  // a Connect unary error
          const r = await call('Stat 404', {
            method: 'POST', path: '/filesystem.Filesystem/Stat',
            headers: { ...envd(), 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' },
            body: JSON.stringify({ path: `/no/such/file${i}` }),
          })
          assert.equal(r.status, 404, r.body.toString())
          assert.equal(JSON.parse(r.body.toString()).code, 'not_found')
          break
        }
        case 3: {
          const r = await call('GET /health', { method: 'GET', path: '/health' })
          assert.equal(r.status, 200)
          break
        }
        case 4: {  // a REST error from the agent
          const r = await call('GET /files 404', { method: 'GET', path: `/files?path=%2Fmissing${i}`, headers: envd() })
          assert.equal(r.status, 404)
          assert.equal(JSON.parse(r.body.toString()).code, 404)
          break
        }
        case 5: {
          const r = await call('list', { method: 'GET', path: '/v2/sandboxes', headers: api })
          assert.equal(r.status, 200)
          assert.ok(JSON.parse(r.body.toString()).some((s) => s.sandboxID === sb.sandboxID))
          break
        }
        case 6: {  // an upload (octet-stream, Content-Length)
          const r = await call('POST /files', {
            method: 'POST', path: `/files?path=%2Ftmp%2Fka${i}`,
            headers: { ...envd(), 'Content-Type': 'application/octet-stream' }, body: `payload ${i}`,
          })
          assert.equal(r.status, 200, r.body.toString())
          const back = await call('GET /files back', { method: 'GET', path: `/files?path=%2Ftmp%2Fka${i}`, headers: envd() })
          assert.equal(back.body.toString(), `payload ${i}`)
          break
        }
        case 7: {  // the agent's health, then a control call straight after
          const r = await call('envd /health', { method: 'GET', path: '/health', headers: envd() })
          assert.ok(r.status === 204 || r.status === 200, String(r.status))
          const g = await call('get', { method: 'GET', path: `/sandboxes/${sb.sandboxID}`, headers: api })
          assert.equal(g.status, 200)
          break
        }
        case 8: {  // every 100 or so: kill (on another connection, as the SDK) and create
          if (i % 100 < 9) {
            // As the SDK: kill() goes out on its own (API) connection while
            // this one has just relayed the sandbox's last stream.
            const last = await call('Process/Start before kill', {
              method: 'POST', path: '/process.Process/Start',
              headers: { ...envd(), 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' },
              body: envelope({ process: { cmd: '/bin/bash', args: ['-c', 'echo last'] }, stdin: false }),
            })
            assert.equal(last.status, 200)
            const k = await killer.request({ method: 'DELETE', path: `/sandboxes/${sb.sandboxID}`, headers: api, headersTimeout: deadline })
            await k.body.dump()
            assert.equal(k.statusCode, 204)
            const gone = await call('killed port', { method: 'GET', path: '/files?path=%2Fetc%2Fhostname', headers: envd() })
            assert.equal(gone.status, 502)
            sb = await create()
          } else {
            const r = await call('GET /files big', { method: 'GET', path: '/files?path=%2Fusr%2Fbin%2Fbash', headers: envd() })
            assert.equal(r.status, 200)
            assert.ok(r.body.length > 500000)
          }
          break
        }
      }
    }
    assert.equal(connects, 1, `${n} requests took ${connects} connections: the daemon closed a keep-alive connection`)
    console.log(`# ${n} requests on ${connects} connection`)
  } finally {
    await call('kill', { method: 'DELETE', path: `/sandboxes/${sb.sandboxID}`, headers: api }).catch(() => {})
    await client.close()
    await killer.close()
  }
})

maybe('kill() ends the command streams in flight; a killed sandbox answers 502 as E2B', async () => {
  const sbx = await Sandbox.create({ ...d.opts })
  const id = sbx.sandboxId
  const running = sbx.commands.run('sleep 120', { timeoutMs: 180000 })
  running.catch(() => {})
  // The stream is open once the command runs in the guest.
  for (let t0 = Date.now(); ; await sleep(100)) {
    const ps = await sbx.commands.list()
    if (ps.some((p) => p.cmd === '/bin/bash' && p.args.join(' ').includes('sleep 120'))) break
    assert.ok(Date.now() - t0 < 30000, 'the command never showed up')
  }
  const k0 = Date.now()
  await sbx.kill()
  await assert.rejects(running, (e) => {
    console.log(`# stream ended ${Date.now() - k0} ms after kill: ${e.name}: ${e.message}`)
    assert.ok(Date.now() - k0 < 15000, 'the stream outlived its sandbox')
    assert.match(e.message, /killed or reached its end of life/)
    return true
  })
  assert.equal(await sbx.isRunning(), false)
  for (const port of ['49983', '8080']) {
    const r = await fetch(`${d.url}/health`, { headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': port } })
    assert.equal(r.status, 502)
    assert.deepEqual(await r.json(), { code: 502, message: 'The sandbox was not found', sandboxId: id })
  }
})

// The Python SDK's commands.run(timeout=N): only Connect-Timeout-Ms, and it
// expects the stream to end as envd ends it, with deadline_exceeded (no end
// event); the process group is killed and the audit record says so.
maybe('a Start whose Connect-Timeout-Ms passes ends with deadline_exceeded and kills the command, as envd', async () => {
  const sbx = await Sandbox.create({ ...d.opts })
  try {
    const info = await (await fetch(`${d.url}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-Key': d.apiKey } })).json()
    const t0 = Date.now()
    const r = await fetch(`${d.url}/process.Process/Start`, {
      method: 'POST',
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': info.envdAccessToken,
        'Content-Type': 'application/connect+json',
        'Connect-Protocol-Version': '1', 'Connect-Timeout-Ms': '3000' },
      body: envelope({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo before; exec -a airlock-deadline sleep 600'] } }),
    })
    assert.equal(r.status, 200)
    const evs = decodeEnvelopes(Buffer.from(await r.arrayBuffer()))
    assert.ok(Date.now() - t0 < 60000)
    assert.ok(evs[0].json.event.start.pid > 0)
    const out = evs.map((e) => e.json?.event?.data?.stdout).filter(Boolean).map((b) => Buffer.from(b, 'base64').toString()).join('')
    assert.equal(out, 'before\n')
    assert.ok(!evs.some((e) => e.json?.event?.end), 'no end event before the error')
    assert.equal(evs.at(-1).flags & 2, 2)
    assert.equal(evs.at(-1).json.error.code, 'deadline_exceeded')
    assert.equal((await sbx.commands.run("pgrep -c -f '^airlock-deadline' || true")).stdout, '0\n')
    const audit = await (await fetch(`${d.url}/sandboxes/${sbx.sandboxId}/audit`, { headers: { 'X-API-Key': d.apiKey } })).json()
    assert.ok(audit.some((a) => a.action === 'exec' && a.outcome === 'deadline exceeded' && a.signal === 'killed'),
      JSON.stringify(audit).slice(0, 2000))
  } finally {
    await sbx.kill()
  }
})

// Resumable command output (docs/agent.md "Resumable output"), through the
// daemon's data plane to a real guest: a client drops its stream mid-output
// and reconnects with resumeFrom; it gets every byte it missed, once, in
// order, with offsets; output no longer held is out_of_range.
maybe('a dropped command stream resumes from its offsets, byte for byte; dropped output is out_of_range', async () => {
  const sbx = await Sandbox.create({ ...d.opts })
  try {
    const info = await (await fetch(`${d.url}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-Key': d.apiKey } })).json()
    const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': info.envdAccessToken,
      'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' }
    const rpc = (method, msg, signal) => fetch(`${d.url}/process.Process/${method}`, { method: 'POST', headers, body: envelope(msg), signal })
    let wantOut = ''
    let wantErr = ''
    for (let i = 1; i <= 4000; i++) {
      wantOut += `out ${i}\n`
      wantErr += `err ${i}\n`
    }
    const got = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) }
    const take = (ev) => {
      for (const k of ['stdout', 'stderr']) {
        const b64 = ev?.data?.[k]
        if (b64 === undefined) continue
        assert.equal(Number(ev.data.offset ?? 0), got[k].length, `the offset of a ${k} event is the bytes before it`)
        got[k] = Buffer.concat([got[k], Buffer.from(b64, 'base64')])
      }
    }
    // Start, read until some output arrived, then drop the stream.
    const ac = new AbortController()
    const r = await rpc('Start', { process: { cmd: '/bin/bash', args: ['-c',
      'for i in $(seq 1 2000); do echo out $i; echo err $i >&2; done; sleep 2; ' +
      'for i in $(seq 2001 4000); do echo out $i; echo err $i >&2; done; exit 5'] }, stdin: false }, ac.signal)
    assert.equal(r.status, 200)
    const reader = r.body.getReader()
    let buf = Buffer.alloc(0)
    let pid = 0
    while (got.stdout.length < 200) {
      const { value, done } = await reader.read()
      assert.ok(!done, 'the stream ended before any output')
      buf = Buffer.concat([buf, Buffer.from(value)])
      while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
        const len = buf.readUInt32BE(1)
        const msg = JSON.parse(buf.subarray(5, 5 + len).toString())
        buf = buf.subarray(5 + len)
        if (msg.event?.start) pid = msg.event.start.pid
        take(msg.event)
      }
    }
    ac.abort()
    await reader.cancel().catch(() => {})
    assert.ok(pid > 0)
    const from = { stdout: String(got.stdout.length), stderr: String(got.stderr.length) }
    const c = await rpc('Connect', { process: { pid }, resumeFrom: from })
    assert.equal(c.status, 200)
    const evs = decodeEnvelopes(Buffer.from(await c.arrayBuffer()))
    const nonzero = Object.fromEntries(Object.entries(from).filter(([, v]) => v !== '0'))  // proto3 JSON omits zeros
    assert.deepEqual(evs[0].json.event.start, { pid, offsets: nonzero })
    for (const e of evs) take(e.json.event)
    assert.equal(evs.at(-2).json.event.end.exitCode, 5)
    assert.equal(evs.at(-1).flags & 2, 2)
    assert.equal(evs.at(-1).json.error, undefined)
    assert.equal(got.stdout.toString(), wantOut)
    assert.equal(got.stderr.toString(), wantErr)
    console.log(`# dropped after ${from.stdout}+${from.stderr} bytes, resumed ${evs.length - 3} data events`)

    // 3 MB with nobody reading: the guest's agent holds the last 1 MiB.
    const big = 3_000_000
    const s = await rpc('Start', { process: { cmd: '/bin/bash', args: ['-c', `head -c ${big} /dev/zero | tr '\\0' a; sleep 120`] }, stdin: false })
    const sr = s.body.getReader()
    let head = Buffer.alloc(0)
    while (head.length < 5 || head.length < 5 + head.readUInt32BE(1)) head = Buffer.concat([head, Buffer.from((await sr.read()).value)])
    const bigPid = JSON.parse(head.subarray(5, 5 + head.readUInt32BE(1)).toString()).event.start.pid
    await sr.cancel()
    const resume = async (n) => {
      const ac2 = new AbortController()
      const res = await rpc('Connect', { process: { pid: bigPid }, resumeFrom: { stdout: String(n) } }, ac2.signal)
      const rd = res.body.getReader()
      let b = Buffer.alloc(0)
      while (b.length < 5 || b.length < 5 + b.readUInt32BE(1)) {
        const { value, done } = await rd.read()
        if (done) break
        b = Buffer.concat([b, Buffer.from(value)])
      }
      ac2.abort()
      await rd.cancel().catch(() => {})
      return { flags: b[0], json: JSON.parse(b.subarray(5, 5 + b.readUInt32BE(1)).toString()) }
    }
    for (let t0 = Date.now(); ; await sleep(200)) {  // until all of it was written
      if ((await resume(big)).json.event?.start) break
      assert.ok(Date.now() - t0 < 60000, 'the 3 MB were never written')
    }
    const gone = await resume(0)
    assert.equal(gone.flags & 2, 2)
    assert.equal(gone.json.error.code, 'out_of_range')
    assert.match(gone.json.error.message, /stdout before byte \d+ is no longer held/)
    assert.equal((await resume(big + 1)).json.error.code, 'out_of_range')
    assert.deepEqual((await resume(big - 1000)).json.event.start, { pid: bigPid, offsets: { stdout: String(big - 1000) } })
  } finally {
    await sbx.kill()
  }
})

maybe('uploadUrl() and downloadUrl() work from a client with no headers; X-Access-Token alone names the sandbox', async () => {
  const sbx = await Sandbox.create({ ...d.opts, secure: true })
  try {
    const up = await sbx.uploadUrl('/home/user/signed.txt', { useSignatureExpiration: 120 })
    assert.ok(!up.includes(sbx.sandboxId), 'the URL is one origin for every sandbox')
    const form = new FormData()
    form.append('file', new Blob(['signed upload']), '/home/user/signed.txt')
    const r = await fetch(up, { method: 'POST', body: form })
    assert.equal(r.status, 200, await r.clone().text())
    const down = await sbx.downloadUrl('/home/user/signed.txt', { useSignatureExpiration: 120 })
    const g = await fetch(down)
    assert.equal(g.status, 200)
    assert.equal(await g.text(), 'signed upload')
    assert.equal(await sbx.files.read('/home/user/signed.txt'), 'signed upload')
    // Tampered or expired: refused, never routed anywhere.
    const bad = new URL(down)
    bad.searchParams.set('path', '/etc/shadow')
    const b = await fetch(bad)
    assert.equal(b.status, 401)
    // Expired, as E2B's own SDK test makes one (an expiry in the past) and
    // with envd's answer to the byte; the same through the sandbox's header.
    const old = await sbx.downloadUrl('/home/user/signed.txt', { useSignatureExpiration: -10_000 })
    for (const headers of [{}, { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }]) {
      const e = await fetch(old, { headers })
      assert.equal(e.status, 401)
      assert.deepEqual(await e.json(), { code: 401, message: 'signature is already expired' })
    }
    // The SDK 2.10 and older with E2B_SANDBOX_URL: envd's HTTP calls carry
    // only X-Access-Token, which names the sandbox; a wrong one reaches no
    // guest, and no daemon route either.
    const token = sbx.envdAccessToken
    assert.ok(token, 'a secured sandbox has an access token')
    const byToken = await fetch(`${d.url}/files?path=/home/user/signed.txt&username=user`, { headers: { 'X-Access-Token': token } })
    assert.equal(byToken.status, 200)
    assert.equal(await byToken.text(), 'signed upload')
    // One origin for every sandbox, chosen by headers: no cache may serve one
    // sandbox's answer to another's request, nor keep a file's bytes.
    assert.equal(byToken.headers.get('vary'), 'E2b-Sandbox-Id, E2b-Sandbox-Port, X-Access-Token')
    assert.equal(byToken.headers.get('cache-control'), 'no-store')
    const health = await fetch(`${d.url}/health`, { headers: { 'X-Access-Token': token } })
    assert.equal(health.status, 204, 'the agent answers /health (the daemon answers 200)')
    for (const path of ['/files?path=/etc/hostname', '/health']) {
      const wrong = await fetch(`${d.url}${path}`, { headers: { 'X-Access-Token': `${token}x` } })
      assert.equal(wrong.status, 502)
      assert.equal((await wrong.json()).message, 'The sandbox was not found')
    }
    assert.equal((await fetch(`${d.url}/health`)).status, 200, 'the daemon\'s /health without a token')
  } finally {
    await sbx.kill()
  }
  // A killed sandbox's token: "not found", as E2B's proxy (isRunning() false).
  const gone = await fetch(`${d.url}/health`, { headers: { 'X-Access-Token': sbx.envdAccessToken } })
  assert.equal(gone.status, 502)
})

// A guest server that answers with the Host header it saw (over TLS with
// /tmp/c.pem and /tmp/k.pem when `tls`); ready when the data plane reaches
// it (never a fixed sleep).
async function startHostEcho(sbx, port, tls = false) {
  const wrap = tls
    ? `
import ssl
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain("/tmp/c.pem", "/tmp/k.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)`
    : ''
  await sbx.commands.run(
    `python3 -c '
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = (self.headers.get("Host") or "").encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("0.0.0.0", ${port}), H)${wrap}
srv.serve_forever()' >/dev/null 2>&1`,
    { background: true, timeoutMs: 0 })
  for (let t0 = Date.now(); ; await sleep(200)) {
    const r = await sbx.commands.run(`python3 -c 'import socket; socket.create_connection(("127.0.0.1", ${port}), 1)' && echo up || true`)
    if (r.stdout.includes('up')) return
    assert.ok(Date.now() - t0 < 30000, `guest port ${port} never listened`)
  }
}

maybe('allowPublicTraffic:false needs the traffic token; maskRequestHost sets the Host the guest sees; httpsPorts', async () => {
  const sbx = await Sandbox.create({ ...d.opts,
    network: { allowPublicTraffic: false, maskRequestHost: 'localhost:${PORT}', httpsPorts: [8443, 8444] } })
  try {
    // network.httpsPorts (issue 34): a guest server with its own
    // (self-signed) TLS is reached over TLS by the data plane; the client's
    // side stays as it was. A port listed whose server is not TLS: 502.
    const info = await (await fetch(`${d.url}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-Key': d.apiKey } })).json()
    assert.deepEqual(info.network.httpsPorts, [8443, 8444])
    await startHostEcho(sbx, 8444)
    await sbx.commands.run(`openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
      -subj /CN=guest -keyout /tmp/k.pem -out /tmp/c.pem 2>/dev/null`)
    await startHostEcho(sbx, 8443, true)
    const th = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2B-Traffic-Access-Token': sbx.trafficAccessToken }
    const tlsOk = await fetch(`${d.url}/`, { headers: { ...th, 'E2b-Sandbox-Port': '8443' } })
    assert.equal(tlsOk.status, 200)
    assert.equal(await tlsOk.text(), 'localhost:8443')
    const notTls = await fetch(`${d.url}/`, { headers: { ...th, 'E2b-Sandbox-Port': '8444' } })
    assert.equal(notTls.status, 502)
    assert.match((await notTls.json()).message, /TLS to the guest port failed/)
    await assert.rejects(Sandbox.create({ ...d.opts, network: { httpsPorts: [49983] } }), /httpsPorts/)
    assert.match(sbx.trafficAccessToken ?? '', /^[0-9a-f]{64}$/)
    await startHostEcho(sbx, 8000)
    const h = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' }
    const none = await fetch(`${d.url}/`, { headers: h })
    assert.equal(none.status, 403)
    assert.match((await none.json()).message, /missing/)
    const wrong = await fetch(`${d.url}/`, { headers: { ...h, 'E2B-Traffic-Access-Token': 'x'.repeat(64) } })
    assert.equal(wrong.status, 403)
    const ok = await fetch(`${d.url}/`, { headers: { ...h, 'E2B-Traffic-Access-Token': sbx.trafficAccessToken } })
    assert.equal(ok.status, 200)
    assert.equal(await ok.text(), 'localhost:8000')
    // The agent's own port keeps its own check (the SDK's calls work).
    assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n')
  } finally {
    await sbx.kill()
  }
  // Without a mask the guest sees the client's Host, as behind E2B's proxy.
  const open = await Sandbox.create({ ...d.opts })
  try {
    assert.equal(open.trafficAccessToken ?? null, null)
    await startHostEcho(open, 8001)
    const r = await fetch(`${d.url}/`, { headers: { 'E2b-Sandbox-Id': open.sandboxId, 'E2b-Sandbox-Port': '8001' } })
    assert.equal(r.status, 200)
    assert.equal(await r.text(), new URL(d.url).host)
  } finally {
    await open.kill()
  }
  // A mask that could smuggle a header is refused at create.
  await assert.rejects(Sandbox.create({ ...d.opts, network: { maskRequestHost: 'a\r\nX-Evil: 1' } }), /maskRequestHost/)
})

// Issue 34, item 6: a guest server answers the first request through the
// data plane. (a) One that starts listening half a second after the request
// was sent: the relay dials again on a refusal, 5 attempts 100 ms × n apart,
// as E2B's proxy (before, the first dial's refusal was a 502). (b) One that
// was listening before a pause answers the first request after the resume,
// through an explicit connect() and through autoResume.
maybe('a guest server answers the first request: listening within a second of it, and right after a resume', async () => {
  const sbx = await Sandbox.create({ ...d.opts, lifecycle: { onTimeout: 'pause', autoResume: true } })
  try {
    const h = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8002' }
    let armed
    const isArmed = new Promise((r) => { armed = r })
    await sbx.commands.run(
      `python3 -c '
import socket, sys, time
print("armed", flush=True)
time.sleep(0.5)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 8002)); s.listen(8)
while True:
    c, _ = s.accept(); c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok"); c.close()'`,
      { background: true, timeoutMs: 0, onStdout: (s) => { if (s.includes('armed')) armed() } })
    await isArmed
    const first = await fetch(`${d.url}/`, { headers: h })
    assert.equal(first.status, 200, await first.text())
    for (const resume of ['connect', 'autoResume']) {
      await sbx.pause()
      if (resume === 'connect') await sbx.connect()
      const r = await fetch(`${d.url}/`, { headers: h })
      assert.equal(r.status, 200, `${resume}: ${await r.text()}`)
    }
    // A port nobody listens on is still E2B's 502 once the attempts are spent.
    const closed = await fetch(`${d.url}/`, { headers: { ...h, 'E2b-Sandbox-Port': '8003' } })
    assert.equal(closed.status, 502)
  } finally {
    await sbx.kill()
  }
})
