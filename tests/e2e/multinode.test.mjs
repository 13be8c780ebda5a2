// Many nodes on one machine (issue 19, docs/multinode.md "Tests"): a real
// PostgreSQL, three node daemons (capacities 1, 2, 3) and two fronts, each in
// its own network namespace (cluster.mjs), driven through the fronts with the
// official e2b SDK and plain HTTP. Run by in_netns.sh (CTest does).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { closeSync, existsSync, openSync, readFileSync, readSync, readdirSync, writeSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import { BIN, STATE_DIR, e2b, waitFor } from './daemon.mjs'
import { Cluster, skipReason, tlsRequest } from './cluster.mjs'

const { Sandbox } = e2b
const maybe = skipReason ? test.skip : test
let cl

before(async () => {
  if (skipReason) return
  cl = new Cluster()
  try {
    await cl.start({ nodes: [['n1', 1], ['n2', 2], ['n3', 3]], fronts: ['f1', 'f2'] })
  } catch (e) {
    console.log(`# cluster logs in ${cl.logs()}`)
    throw e
  }
})

after(async () => {
  if (!cl) return
  await cl.stop()
  if (process.exitCode) console.log(`# cluster logs kept in ${cl.logs()}`)
  else cl.cleanup()
})

// A WebSocket echo server (the handshake by hand, then raw echo), for the guest.
const WS_ECHO = `import socket,hashlib,base64
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(('0.0.0.0',8765)); s.listen(8)
while True:
  c,_=s.accept(); d=b''
  while b'\\r\\n\\r\\n' not in d:
    x=c.recv(4096)
    if not x: break
    d+=x
  k=[l.split(b':',1)[1].strip() for l in d.split(b'\\r\\n') if l.lower().startswith(b'sec-websocket-key')]
  if k:
    a=base64.b64encode(hashlib.sha1(k[0]+b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
    c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: '+a+b'\\r\\n\\r\\n')
    while True:
      x=c.recv(4096)
      if not x: break
      c.sendall(b'echo:'+x)
  c.close()
`

// A WebSocket upgrade through the front at `addr` to `port` of sandbox `id`,
// then `payload` sent raw; resolves to everything read (null on no answer).
function wsEcho(addr, id, port, payload) {
  return new Promise((resolve) => {
    const sock = connect(3000, addr)
    let got = ''
    let sent = false
    const done = (v) => { sock.destroy(); clearTimeout(timer); resolve(v) }
    const timer = setTimeout(() => done(got.includes('101') ? got : null), 5000)
    sock.on('error', () => done(null))
    sock.on('connect', () => sock.write(`GET /chat HTTP/1.1\r\nHost: ${addr}:3000\r\nE2b-Sandbox-Id: ${id}\r\n` +
      `E2b-Sandbox-Port: ${port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n` +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n'))
    sock.on('data', (d) => {
      got += d
      if (!got.includes('\r\n\r\n')) return
      if (!got.startsWith('HTTP/1.1 101')) return done(null)  // not listening yet: 502
      if (!sent) { sent = true; sock.write(payload) }
      if (got.includes(`echo:${payload}`)) done(got)
    })
  })
}

// The node whose own API lists `id` (a node that does not answer: skipped).
async function nodeOf(id) {
  for (const name of cl.nodes.keys()) {
    let ids = []
    try { ids = await cl.nodeSandboxes(name) } catch { continue }
    if (ids.includes(id)) return name
  }
  return null
}

async function killAll() {
  const r = await cl.api('f1', 'GET', '/v2/sandboxes')
  assert.equal(r.status, 200, r.text)
  await Promise.all(r.json.map((s) => cl.api('f1', 'DELETE', `/sandboxes/${s.sandboxID}`)))
  assert.ok(await waitFor(async () => (await cl.api('f2', 'GET', '/nodes')).json.every((n) => n.reserved === 0), 20000),
    'every slot is free again')
}

maybe('a sandbox made through front 1 is reachable through front 2: commands, files, a port; unknown ids are 404', { timeout: 300000 }, async () => {
  const sbx = await Sandbox.create('base', { ...cl.opts('f1'), timeoutMs: 300000 })
  try {
    const other = await Sandbox.connect(sbx.sandboxId, cl.opts('f2'))
    assert.equal((await other.commands.run('echo $((6*7))')).stdout, '42\n')
    await other.files.write('/home/user/hello.txt', 'through two hops')
    assert.equal(await sbx.files.read('/home/user/hello.txt'), 'through two hops')
    // A streamed command (a Connect stream through front and node).
    const seen = []
    const r = await other.commands.run('for i in 1 2 3; do echo $i; sleep 0.2; done', { onStdout: (d) => seen.push(d) })
    assert.equal(r.stdout, '1\n2\n3\n')
    assert.ok(seen.length >= 2, `streamed in pieces (${seen.length})`)
    // A guest port, through front 2.
    await other.commands.run('cd /home/user && python3 -m http.server 8000 >/dev/null 2>&1', { background: true })
    const page = await waitFor(async () => {
      try {
        const res = await fetch(`${cl.fronts.get('f2').url}/hello.txt`, {
          headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' } })
        return res.status === 200 ? await res.text() : null
      } catch { return null }
    }, 30000, 250)
    assert.equal(page, 'through two hops')
    // A WebSocket upgrade to a guest port, through front 1 and the node (a
    // raw echo after the 101: bytes relayed both ways over two hops).
    await other.files.write('/home/user/ws.py', WS_ECHO)
    await other.commands.run('python3 /home/user/ws.py >/dev/null 2>&1', { background: true })
    const ws = await waitFor(() => wsEcho(cl.fronts.get('f1').addr, sbx.sandboxId, 8765, 'frame-1'), 30000, 250)
    assert.match(ws ?? '', /^HTTP\/1\.1 101/)
    assert.match(ws, /s3pPLMBiTxaQ9kYGzzhZRbK\+xOo=/)
    assert.match(ws, /echo:frame-1/)
    const info = await cl.api('f2', 'GET', `/sandboxes/${sbx.sandboxId}`)
    assert.equal(info.status, 200, info.text)
    assert.equal(info.json.sandboxID, sbx.sandboxId)
    const list = await cl.api('f2', 'GET', '/v2/sandboxes')
    assert.ok(list.json.some((s) => s.sandboxID === sbx.sandboxId), 'the merged list has it')
  } finally {
    await sbx.kill()
  }
  const unknown = await cl.api('f2', 'GET', '/sandboxes/doesnotexist0000')
  assert.equal(unknown.status, 404)
  const data = await fetch(`${cl.fronts.get('f1').url}/health`, { headers: { 'E2b-Sandbox-Id': 'doesnotexist0000' } })
  assert.equal(data.status, 502)
  assert.equal((await data.json()).message, 'The sandbox was not found')
  const noKey = await fetch(`${cl.fronts.get('f1').url}/v2/sandboxes`)
  assert.equal(noKey.status, 401)
  await killAll()
})

maybe('fronts and nodes authenticate each other: a node serves fronts of its cluster only; a front talks only to the node the registry names; a reservation works once, on its node, for its create', { timeout: 240000 }, async () => {
  const n2 = cl.nodes.get('n2')
  const url = `${n2.url}/health`
  assert.equal((await cl.nodeFetch('n2', '/health')).status, 200, 'a front of this cluster is served')
  await assert.rejects(tlsRequest(url, { certs: cl.certs }), 'no certificate: refused')
  // A node's certificate reaches only the node's artefact server (other
  // nodes fetch template images there), never its API.
  for (const path of ['/health', '/v2/sandboxes']) {
    const asNode = await tlsRequest(`${n2.url}${path}`, { certs: cl.certs, member: { name: 'n1' },
      headers: { 'X-API-Key': cl.apiKey } })
    assert.equal(asNode.status, 404, `a node's certificate on ${path}: ${asNode.status} ${asNode.text}`)
  }
  await assert.rejects(tlsRequest(url, { certs: cl.certs, member: { name: 'suite' }, alpn: ['airlock-artefacts/1'] }),
    'a front asking for the artefact server: refused')
  // A front's certificate of another CA, with the same name.
  const other = join(cl.logs(), 'other-ca')
  execFileSync(BIN, ['cluster', 'certs', '--out', other, '--front', 'f1'], { stdio: 'ignore' })
  await assert.rejects(tlsRequest(url, { certs: cl.certs, member: { name: 'f1', dir: other } }), 'another CA: refused')
  // The node's own CA from the other side: the suite does not trust a stranger either.
  await assert.rejects(cl.nodeFetch('n2', '/health', { ca: join(other, 'ca.pem') }), 'the node is not the other CA\'s')
  await assert.rejects(fetch(`http://${n2.addr}:3000/health`, { signal: AbortSignal.timeout(5000) }), 'plain HTTP: nothing')
  assert.ok(await waitFor(() => /refused a client from .*not a node's/.test(readFileSync(n2.child.log, 'utf8')), 5000),
    'the node logs why')
  // 200 connections that never start their handshake, from the suite's
  // address: refused past 128, and the fronts still reach the node.
  const idle = []
  for (let i = 0; i < 200; i++) {
    const sock = connect(3000, n2.addr)
    sock.on('error', () => {})
    idle.push(sock)
  }
  try {
    assert.ok(await waitFor(() => /too many handshakes at once from 10\.99\.0\.2/.test(readFileSync(n2.child.log, 'utf8')),
      10000), 'the node refuses past 128 handshakes from one address')
    const listed = await cl.api('f1', 'GET', '/v2/sandboxes')
    assert.equal(listed.status, 200, listed.text)
    assert.equal(listed.headers.get('x-airlock-unreachable-nodes'), null, 'the fronts still reach n2')
  } finally {
    for (const sock of idle) sock.destroy()
  }
  // A create straight at a node, without a front's reservation: refused.
  const direct = await cl.nodeFetch('n2', '/sandboxes', { method: 'POST', body: '{"templateID":"base"}',
    headers: { 'X-API-Key': cl.apiKey, 'Content-Type': 'application/json' } })
  assert.equal(direct.status, 403, direct.text)
  assert.match(direct.text, /takes creates from its fronts only/)
  // A client's own copy of the header, even empty, is refused at the front.
  const own = await fetch(`${cl.fronts.get('f1').url}/sandboxes`, { method: 'POST', body: '{}',
    headers: { 'X-API-Key': cl.apiKey, 'X-Airlock-Reservation': '' } })
  assert.equal(own.status, 400)

  // The registry says n1 is at n2's address: fronts do not take n2 for n1.
  const n1addr = cl.sql("SELECT address FROM nodes WHERE name = 'n1'")
  cl.sql(`UPDATE nodes SET address = '${n2.addr}:3000' WHERE name = 'n1'`)
  try {
    const r = await cl.api('f1', 'GET', '/v2/sandboxes')
    assert.equal(r.status, 200, r.text)
    assert.equal(r.headers.get('x-airlock-unreachable-nodes'), 'n1')
    assert.match(readFileSync(cl.fronts.get('f1').child.log, 'utf8'), /the certificate there is node n2's, not node n1's/)
  } finally {
    cl.sql(`UPDATE nodes SET address = '${n1addr}' WHERE name = 'n1'`)
  }
  assert.equal((await cl.api('f1', 'GET', '/v2/sandboxes')).headers.get('x-airlock-unreachable-nodes'), null)

  // A reservation is bound to its create: its token works once, on its node, for its body.
  const created = await Sandbox.create('base', { ...cl.opts('f1'), timeoutMs: 120000 })
  const used = cl.sql('SELECT node || \' \' || token FROM reservations WHERE used_at IS NOT NULL ORDER BY id DESC LIMIT 1').split(' ')
  const asNode = (node, token, body) => cl.nodeFetch(node, '/sandboxes', { method: 'POST', body: JSON.stringify(body),
    headers: { 'X-API-Key': cl.apiKey, 'Content-Type': 'application/json', 'X-Airlock-Reservation': token } })
  let a = await asNode(used[0], used[1], { templateID: 'base' })
  assert.equal(a.status, 403, a.text)
  assert.match(a.text, /already used/)
  // One made as a front makes it, for {"templateID":"base"} on n3 (gateway/reservation.h's digest).
  const token = 'ab'.repeat(16)
  const digest = createHash('sha256').update('{"templateID":"base"}').digest('hex')
  cl.sql(`INSERT INTO reservations (node, token, body_sha256) VALUES ('n3', '${token}', '${digest}')`)
  a = await asNode('n2', token, { templateID: 'base' })
  assert.equal(a.status, 403, a.text)
  assert.match(a.text, /for node n3, not n2/)
  a = await asNode('n3', token, { templateID: 'base', timeout: 60 })
  assert.equal(a.status, 403, a.text)
  assert.match(a.text, /made for another create/)
  assert.ok(!a.text.includes(token), 'the refusal does not echo the token')
  a = await asNode('n3', token, { templateID: 'base' })
  assert.equal(a.status, 201, a.text)
  assert.equal(cl.sql(`SELECT used_at IS NOT NULL FROM reservations WHERE token = '${token}'`), 't')
  await Promise.all([created.kill(), cl.api('f1', 'DELETE', `/sandboxes/${JSON.parse(a.text).sandboxID}`)])

  // An Idempotency-Key's retries, through either front, go to the node of
  // its first call and get its answer; the replay made nothing, so the
  // front gives its slot back.
  const once = (f) => fetch(`${cl.fronts.get(f).url}/sandboxes`, { method: 'POST', body: '{"templateID":"base"}',
    headers: { 'X-API-Key': cl.apiKey, 'Content-Type': 'application/json', 'Idempotency-Key': 'mn-replay-1' } })
  const first = await once('f1')
  const firstText = await first.text()
  assert.equal(first.status, 201, firstText)
  const id = JSON.parse(firstText).sandboxID
  const slots = () => Number(cl.sql('SELECT sum(reserved) FROM nodes'))
  const running = () => Number(cl.sql('SELECT count(*) FROM sandboxes WHERE lost_at IS NULL'))
  const count = running()
  for (const f of ['f2', 'f1', 'f2', 'f1', 'f2']) {
    const again = await once(f)
    assert.equal(again.status, 201)
    assert.equal(again.headers.get('idempotent-replayed'), 'true')
    assert.equal((await again.json()).sandboxID, id)
  }
  assert.equal(running(), count, 'no retry made a sandbox')
  // A malformed key (the node's rule: visible ASCII) is the node's 400, and no route is kept for it.
  const malformed = await fetch(`${cl.fronts.get('f1').url}/sandboxes`, { method: 'POST', body: '{"templateID":"base"}',
    headers: { 'X-API-Key': cl.apiKey, 'Content-Type': 'application/json', 'Idempotency-Key': 'has space' } })
  assert.equal(malformed.status, 400, await malformed.text())
  assert.equal(cl.sql("SELECT count(*) FROM idempotency_routes WHERE key = 'has space'"), '0')
  assert.ok(await waitFor(() => slots() === running(), 2000, 100), `slots ${slots()} for ${running()} sandbox(es)`)
  await cl.api('f1', 'DELETE', `/sandboxes/${id}`)

  // A cluster role without certificates is refused unless the operator says the network is trusted.
  const serve = (...args) => spawnSync(BIN, ['--state-dir', STATE_DIR, 'serve', '--database', cl.db, ...args], { encoding: 'utf8' })
  let r = serve('--role', 'front', '--listen', '127.0.0.1:0')
  assert.equal(r.status, 2, r.stderr)
  assert.match(r.stderr, /needs the cluster's mutual TLS: --cluster-ca, --cluster-cert and --cluster-key/)
  r = serve('--role', 'node', '--listen', '10.99.0.99:3000', '--node-name', 'n9', ...cl.tlsFlags('n1'))
  assert.equal(r.status, 2, r.stderr)
  assert.match(r.stderr, /--node-name n9, but --cluster-cert is n1's/)
  r = serve('--role', 'node', '--listen', '10.99.0.99:3000', ...cl.tlsFlags('f1'))
  assert.equal(r.status, 2, r.stderr)
  assert.match(r.stderr, /is front f1's, not a node's/)
})

maybe('every node\'s own views through either front: /host per node and summed, /metrics labelled by node, /audit merged, /audit/verify per node', { timeout: 240000 }, async () => {
  const made = []
  for (let i = 0; i < 3; i++) made.push(await Sandbox.create('base', { ...cl.opts('f1'), timeoutMs: 120000 }))
  const nodes = ['n1', 'n2', 'n3']
  for (const f of ['f1', 'f2']) {
    const host = await cl.api(f, 'GET', '/host')
    assert.equal(host.status, 200, host.text)
    assert.deepEqual(Object.keys(host.json.nodes).sort(), nodes)
    let running = 0
    for (const n of nodes) running += host.json.nodes[n].sandboxes.running
    assert.equal(running, 3)
    assert.equal(host.json.total.sandboxes.running, 3)
    assert.equal(host.json.total.memory.budgetMiB, nodes.reduce((a, n) => a + host.json.nodes[n].memory.budgetMiB, 0))
    assert.deepEqual(host.json.unreachable, [])

    const m = await fetch(`${cl.fronts.get(f).url}/metrics`)
    assert.equal(m.status, 200)
    const text = await m.text()
    for (const n of nodes) assert.match(text, new RegExp(`^airlock_sandboxes\\{node="${n}",state="running"\\} \\d+$`, 'm'))
    // One HELP and one TYPE per family, its samples together after them.
    assert.equal(text.match(/^# TYPE airlock_sandboxes gauge$/gm).length, 1)
    const lines = text.split('\n')
    const typeAt = lines.indexOf('# TYPE airlock_sandboxes gauge')
    assert.ok(lines.slice(typeAt + 1, typeAt + 13).every((l) => l.startsWith('airlock_sandboxes{node=')), 'samples follow their TYPE')
    let sum = 0
    for (const [, v] of text.matchAll(/^airlock_sandboxes\{node="n\d",state="running"\} (\d+)$/gm)) sum += Number(v)
    assert.equal(sum, 3)

    const audit = await cl.api(f, 'GET', '/audit?action=sandbox.created&limit=1000')
    assert.equal(audit.status, 200, audit.text)
    const mine = audit.json.filter((r) => made.some((s) => s.sandboxId === r.sandbox))
    assert.equal(mine.length, 3)
    for (const r of mine) assert.equal(r.node, await nodeOf(r.sandbox))
    const ts = audit.json.map((r) => r.ts)
    assert.deepEqual(ts, [...ts].sort(), 'merged oldest first')

    const verify = await cl.api(f, 'GET', '/audit/verify')
    assert.equal(verify.status, 200, verify.text)
    assert.equal(verify.json.ok, true, verify.text)
    assert.deepEqual(Object.keys(verify.json.nodes).sort(), nodes)
  }
  // A key without admin rights: the nodes' refusal, passed on.
  const plain = cl.createKey('plain-views', false, 'views')
  const r = await fetch(`${cl.fronts.get('f1').url}/host`, { headers: { 'X-API-Key': plain } })
  assert.equal(r.status, 403)
  await Promise.all(made.map((s) => s.kill()))
})

maybe('capacities 1, 2, 3: six concurrent creates through both fronts fill them exactly; the 7th is refused; a draining node gets none', { timeout: 300000 }, async () => {
  const creates = Array.from({ length: 6 }, (_, i) =>
    cl.api(i % 2 ? 'f2' : 'f1', 'POST', '/sandboxes', { templateID: 'base', timeout: 600 }))
  const made = await Promise.all(creates)
  for (const m of made) assert.equal(m.status, 201, m.text)
  const counts = {}
  for (const name of cl.nodes.keys()) counts[name] = (await cl.nodeSandboxes(name)).length
  assert.deepEqual(counts, { n1: 1, n2: 2, n3: 3 })
  const seventh = await cl.api('f2', 'POST', '/sandboxes', { templateID: 'base' })
  assert.equal(seventh.status, 503, seventh.text)
  assert.match(seventh.json.message, /capacity/)
  const nodes = (await cl.api('f1', 'GET', '/nodes')).json
  assert.deepEqual(nodes.map((n) => [n.name, n.reserved, n.capacity]), [['n1', 1, 1], ['n2', 2, 2], ['n3', 3, 3]])
  // A fork on a full node is refused too: its child needs a free slot there.
  const [onN1] = await cl.nodeSandboxes('n1')
  const fork = await cl.api('f2', 'POST', `/v2/sandboxes/${onN1}/fork`, { count: 1, memory: false, timeout: 60 })
  assert.equal(fork.status, 201, fork.text)
  assert.equal(fork.json[0].error?.code, 503, fork.text)
  assert.match(fork.json[0].error.message, /capacity/)
  assert.deepEqual(await cl.nodeSandboxes('n1'), [onN1])
  assert.equal((await cl.api('f1', 'GET', '/nodes')).json.find((n) => n.name === 'n1').reserved, 1)
  // Free n3, drain it: nothing lands there.
  const onN3 = await cl.nodeSandboxes('n3')
  for (const id of onN3) assert.equal((await cl.api('f1', 'DELETE', `/sandboxes/${id}`)).status, 204)
  assert.ok(await waitFor(async () => (await cl.api('f1', 'GET', '/nodes')).json.find((n) => n.name === 'n3').reserved === 0, 10000))
  assert.equal((await cl.api('f1', 'POST', '/nodes/n3/drain')).status, 200)
  const refused = await cl.api('f1', 'POST', '/sandboxes', { templateID: 'base' })
  assert.equal(refused.status, 503, refused.text)
  assert.equal((await cl.api('f2', 'DELETE', '/nodes/n3/drain')).status, 200)
  const back = await cl.api('f2', 'POST', '/sandboxes', { templateID: 'base' })
  assert.equal(back.status, 201, back.text)
  assert.equal(await nodeOf(back.json.sandboxID), 'n3')
  await killAll()
})

// Issue 32, item 9: a create's slot is freed only by the node's refusal. A
// client that hangs up does not free it (the front still waits for the
// node's answer), and each heartbeat makes `reserved` what the node runs
// plus the reservations in flight.
maybe('clients that hang up mid-create keep their slots: a capacity-2 node never runs 3; a refused create frees its slot; drift in reserved is corrected within seconds', { timeout: 300000 }, async () => {
  const reservedOf = async (name) => (await cl.api('f2', 'GET', '/nodes')).json.find((n) => n.name === name).reserved
  for (const n of ['n1', 'n3']) assert.equal((await cl.api('f1', 'POST', `/nodes/${n}/drain`)).status, 200)
  try {
    const bad = await cl.api('f1', 'POST', '/sandboxes', { templateID: 'no-such-template-32' })
    assert.ok(bad.status >= 400 && bad.status < 500, `the node refuses: ${bad.status} ${bad.text}`)
    assert.ok(await waitFor(async () => (await reservedOf('n2')) === 0, 5000, 100), 'a refused create frees its slot')
    // Two creates on n2 (capacity 2) whose clients give up after 0.4 s,
    // while the node is still making them.
    const hangUp = (f) => fetch(`${cl.fronts.get(f).url}/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-Key': cl.apiKey, 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID: 'base', timeout: 600 }),
      signal: AbortSignal.timeout(400),
    }).then((r) => r.status, (e) => e.name)
    const hungUp = await Promise.all([hangUp('f1'), hangUp('f2')])
    console.log(`# the hung-up creates: ${hungUp.join(', ')}`)
    // Until both exist, every other create is refused: their slots are held.
    const later = []
    const settled = await waitFor(async () => {
      const r = await cl.api(later.length % 2 ? 'f2' : 'f1', 'POST', '/sandboxes', { templateID: 'base', timeout: 600 })
      later.push(r.status)
      return (await cl.nodeSandboxes('n2')).length >= 2
    }, 60000, 100)
    assert.ok(settled, 'the node made the two hung-up creates')
    assert.ok(later.every((s) => s === 503), `creates placed while the hung-up ones were in flight: ${later.join(', ')}`)
    assert.equal((await cl.nodeSandboxes('n2')).length, 2, 'n2 runs its capacity, no more')
    assert.ok(await waitFor(async () => (await reservedOf('n2')) === 2, 5000, 100), 'reserved is what n2 runs')
    // Drift (here written by hand) is corrected by the node's next heartbeats.
    for (const drift of [0, 1]) {
      cl.sql(`UPDATE nodes SET reserved = ${drift} WHERE name = 'n2'`)
      const t0 = Date.now()
      assert.ok(await waitFor(async () => (await reservedOf('n2')) === 2, 5000, 100), `reserved ${drift} corrected to 2`)
      console.log(`# reserved ${drift} corrected after ${Date.now() - t0} ms`)
    }
    const full = await cl.api('f1', 'POST', '/sandboxes', { templateID: 'base' })
    assert.equal(full.status, 503, full.text)
  } finally {
    for (const n of ['n1', 'n3']) await cl.api('f1', 'DELETE', `/nodes/${n}/drain`)
  }
  await killAll()
})

maybe('kill -9 of a node: new creates avoid it within 15 s, its sandboxes are lost through both fronts, its slots freed; restarted, it takes work again', { timeout: 300000 }, async () => {
  // Two sandboxes on n2 (the others drained while they are made).
  await cl.api('f1', 'POST', '/nodes/n1/drain')
  await cl.api('f1', 'POST', '/nodes/n3/drain')
  const a = await cl.api('f1', 'POST', '/sandboxes', { templateID: 'base', timeout: 600 })
  const b = await cl.api('f2', 'POST', '/sandboxes', { templateID: 'base', timeout: 600 })
  assert.equal(a.status, 201, a.text)
  assert.equal(b.status, 201, b.text)
  await cl.api('f1', 'DELETE', '/nodes/n1/drain')
  await cl.api('f1', 'DELETE', '/nodes/n3/drain')
  const n2 = cl.nodes.get('n2')
  const t0 = Date.now()
  await cl.kill9Node('n2')
  const lapsed = await waitFor(async () => {
    const n = (await cl.api('f1', 'GET', '/nodes')).json.find((x) => x.name === 'n2')
    return !n.live && n.reserved === 0
  }, 15000, 250)
  assert.ok(lapsed, 'n2 is not live and holds no reservation within 15 s')
  console.log(`# node lapse noticed after ${Date.now() - t0} ms`)
  for (const front of ['f1', 'f2']) {
    for (const id of [a.json.sandboxID, b.json.sandboxID]) {
      const r = await cl.api(front, 'GET', `/sandboxes/${id}`)
      assert.equal(r.status, 404, r.text)
      assert.equal(r.json.outcome, 'lost')
    }
  }
  for (let i = 0; i < 3; i++) {
    const c = await cl.api(i % 2 ? 'f2' : 'f1', 'POST', '/sandboxes', { templateID: 'base', timeout: 600 })
    assert.equal(c.status, 201, c.text)
    assert.notEqual(await nodeOf(c.json.sandboxID), 'n2')
  }
  // Restarted: it registers again with what its journal still holds (its
  // VMMs outlived the daemon and are adopted), and takes new work.
  await cl.startNode('n2')
  const back = await waitFor(async () => (await cl.api('f2', 'GET', '/nodes')).json.find((x) => x.name === 'n2' && x.live), 15000)
  assert.ok(back, 'n2 is live again')
  for (const id of [a.json.sandboxID, b.json.sandboxID]) {
    const r = await cl.api('f1', 'GET', `/sandboxes/${id}`)
    assert.equal(r.status, 200, `adopted ${id} is routed again: ${r.text}`)
  }
  await killAll()
  await cl.api('f1', 'POST', '/nodes/n1/drain')
  await cl.api('f1', 'POST', '/nodes/n3/drain')
  const c = await cl.api('f2', 'POST', '/sandboxes', { templateID: 'base' })
  assert.equal(c.status, 201, c.text)
  assert.equal(await nodeOf(c.json.sandboxID), 'n2')
  await cl.api('f1', 'DELETE', '/nodes/n1/drain')
  await cl.api('f1', 'DELETE', '/nodes/n3/drain')
  await killAll()
})

maybe('kill a front: the other routes every live sandbox; a restarted front routes on its first request', { timeout: 300000 }, async () => {
  const made = []
  for (let i = 0; i < 3; i++) made.push(await Sandbox.create('base', { ...cl.opts('f1'), timeoutMs: 300000 }))
  await cl.kill9(cl.fronts.get('f1').child)
  for (const s of made) {
    const via2 = await Sandbox.connect(s.sandboxId, cl.opts('f2'))
    assert.equal((await via2.commands.run('echo alive')).stdout, 'alive\n')
  }
  await cl.startFront('f1')
  const first = await Sandbox.connect(made[0].sandboxId, cl.opts('f1'))
  assert.equal((await first.commands.run('echo back')).stdout, 'back\n')
  await killAll()
})

maybe('kill -9 of a front between a reservation and its create\'s delivery: the slot comes back within seconds, in the node\'s log and metrics', { timeout: 120000 }, async () => {
  // n1 alone takes work, and drops what fronts send it: f2's create is
  // placed (a slot reserved on n1) and then hangs in its connect.
  for (const n of ['n2', 'n3']) assert.equal((await cl.api('f1', 'POST', `/nodes/${n}/drain`)).status, 200)
  const n1 = cl.nodes.get('n1')
  const nft = (script) => execFileSync('ip', ['netns', 'exec', n1.ns, 'nft', '-f', '-'], { input: script })
  const hold = 'table inet mnhold {\n chain input {\n type filter hook input priority 0\n tcp dport 3000 drop\n }\n}\n'
  nft(hold)
  const reserved = () => Number(cl.sql("SELECT reserved FROM nodes WHERE name = 'n1'"))
  const metric = async () => {
    nft('delete table inet mnhold')
    try {
      const m = await cl.nodeFetch('n1', '/metrics', { headers: { 'X-API-Key': cl.apiKey } })
      return Number(/^airlock_cluster_reservations_dropped_total (\d+)$/m.exec(m.text)?.[1])
    } finally {
      nft(hold)
    }
  }
  const f2 = cl.fronts.get('f2')
  let killed = false
  try {
    const before = await metric()
    const hung = fetch(`${f2.url}/sandboxes`, { method: 'POST', body: JSON.stringify({ templateID: 'base' }),
      headers: { 'X-API-Key': cl.apiKey, 'Content-Type': 'application/json' } }).catch(() => null)
    assert.ok(await waitFor(() => reserved() === 1, 10000, 100), 'f2 reserved a slot on n1')
    await cl.kill9(f2.child)
    killed = true
    await hung
    // Its lease (5 s) unrenewed, n1's next heartbeat drops it.
    const t0 = Date.now()
    assert.ok(await waitFor(() => reserved() === 0, 15000, 100), `n1 still holds ${reserved()} slot(s)`)
    console.log(`# measure: slot of a dead front's reservation back in ${Date.now() - t0} ms after its kill -9`)
    assert.match(readFileSync(n1.child.log, 'utf8'), /1 reservation\(s\) dropped: their front stopped renewing them/)
    assert.equal(await metric(), before + 1)
  } finally {
    try { nft('delete table inet mnhold') } catch {}
    for (const n of ['n2', 'n3']) await cl.api('f1', 'DELETE', `/nodes/${n}/drain`)
    if (killed) await cl.startFront('f2')
  }
})

maybe('a template built through front 1 starts on a node that never saw it: its image is fetched once, hash-checked (a corrupt copy is refused), and byte-exact', { timeout: 600000 }, async () => {
  const { Template } = e2b
  const opts = cl.opts('f1')
  // Random bytes in the image, read back through each node that starts it.
  const t0 = Date.now()
  await Template.build(Template().fromBaseImage()
    .runCmd('head -c 3000 /dev/urandom | base64 > /home/user/moved.txt && sha256sum /home/user/moved.txt > /home/user/moved.sum'),
  'moved-e2e', opts)
  console.log(`# measure: template built through f1 in ${Date.now() - t0} ms`)
  const published = cl.sql("SELECT publisher FROM template_bundles WHERE 'moved-e2e' = ANY(names) AND bundle IS NOT NULL")
  assert.equal(published, 'n1', 'the template node published it')
  const digest = cl.sql("SELECT digest FROM node_artefacts WHERE node = 'n1'")
  assert.match(digest, /^[0-9a-f]{64}$/m)
  const tFirst = Date.now()
  const first = await Sandbox.create('moved-e2e', { ...opts, timeoutMs: 300000 })
  console.log(`# measure: first create of the template on a node that holds it (${await nodeOf(first.sandboxId)}): ${Date.now() - tFirst} ms`)
  const want = (await first.commands.run('cat /home/user/moved.txt')).stdout
  assert.ok(want.length > 3000)
  await first.kill()

  const n4 = await cl.addBareNode('n4', 2)
  const metrics = async () => {
    const m = (await cl.nodeFetch('n4', '/metrics')).text
    const num = (re) => Number(re.exec(m)?.[1] ?? NaN)
    return { ok: num(/^airlock_cluster_artefact_fetches_total\{outcome="ok"\} (\d+)$/m),
      corrupt: num(/^airlock_cluster_artefact_fetches_total\{outcome="corrupt"\} (\d+)$/m),
      bytes: num(/^airlock_cluster_artefact_bytes_received_total (\d+)$/m) }
  }
  const pointer = join(n4.state, 'images', 'templates')
  for (const n of ['n1', 'n2', 'n3']) assert.equal((await cl.api('f1', 'POST', `/nodes/${n}/drain`)).status, 200)
  try {
    // n4 lists no template: placement falls back to it, and it fetches the image.
    const t1 = Date.now()
    const a = await Sandbox.create('moved-e2e', { ...cl.opts('f2'), timeoutMs: 300000 })
    console.log(`# measure: first create of the template on a node that never saw it: ${Date.now() - t1} ms`)
    assert.equal(await nodeOf(a.sandboxId), 'n4')
    assert.equal((await a.commands.run('cat /home/user/moved.txt')).stdout, want)
    assert.equal((await a.commands.run('sha256sum -c /home/user/moved.sum')).exitCode, 0)
    const m1 = await metrics()
    assert.equal(m1.ok, 1)
    assert.ok(m1.bytes > 0)
    console.log(`# measure: bytes moved to n4: ${m1.bytes}`)
    assert.equal(cl.sql(`SELECT count(*) FROM node_artefacts WHERE node = 'n4' AND digest = '${digest.split('\n')[0]}'`), '1')
    // Once per node: the second create on n4 fetches nothing.
    const t2 = Date.now()
    const b = await Sandbox.create('moved-e2e', { ...cl.opts('f1'), timeoutMs: 300000 })
    console.log(`# measure: a later create of it on n4: ${Date.now() - t2} ms`)
    assert.equal(await nodeOf(b.sandboxId), 'n4')
    assert.deepEqual(await metrics(), m1)
    await a.kill()
    await b.kill()

    // A corrupt copy: n4 forgets the image; one byte of n1's file changes
    // while its cached digest still names the old bytes (mtime kept).
    await cl.kill9Node('n4')
    const img = readdirSync(pointer).find((f) => /^b[0-9a-f]{32}\.json$/.test(f))
    const rootfs = JSON.parse(readFileSync(join(STATE_DIR, 'images', 'templates', img), 'utf8')).rootfs_key
    // n4 keys its copy by the image's digest (its own pointer says which).
    const ownKey = JSON.parse(readFileSync(join(pointer, img), 'utf8')).rootfs_key
    assert.equal(ownKey, digest.split('\n')[0].slice(0, 20))
    execFileSync('rm', ['-rf', join(pointer, img), join(n4.state, 'images', 'rootfs', ownKey)])
    cl.sql("DELETE FROM node_artefacts WHERE node = 'n4'")
    await cl.startNode('n4')
    const src = join(STATE_DIR, 'images', 'rootfs', rootfs, 'rootfs.ext4')
    const flip = (fd, at) => { const x = Buffer.alloc(1); readSync(fd, x, 0, 1, at); x[0] ^= 0xff; writeSync(fd, x, 0, 1, at) }
    // The modification time to the nanosecond (what the digest's sidecar checks).
    const mtime = execFileSync('stat', ['-c', '%.9Y', src], { encoding: 'utf8' }).trim()
    const keepMtime = () => execFileSync('touch', ['-m', '-d', `@${mtime}`, src])
    const fd = openSync(src, 'r+')
    try {
      flip(fd, 1104)  // inside the ext4 superblock's UUID
      keepMtime()
      const bad = await cl.api('f2', 'POST', '/sandboxes', { templateID: 'moved-e2e' })
      assert.equal(bad.status, 500, bad.text)
      assert.match(bad.json.message, /does not match its digest/)
      assert.equal((await metrics()).corrupt, 1)
      assert.ok(!existsSync(join(pointer, img)), 'nothing was installed')
    } finally {
      flip(fd, 1104)
      closeSync(fd)
      keepMtime()
    }
    const c = await Sandbox.create('moved-e2e', { ...cl.opts('f2'), timeoutMs: 300000 })
    assert.equal(await nodeOf(c.sandboxId), 'n4')
    assert.equal((await c.commands.run('cat /home/user/moved.txt')).stdout, want)
    await c.kill()
  } finally {
    for (const n of ['n1', 'n2', 'n3']) await cl.api('f1', 'DELETE', `/nodes/${n}/drain`)
  }
  await killAll()
  // n4 leaves (its namespace goes with the cluster's at the end).
  n4.child.kill('SIGTERM')
  await n4.child.exited
})

maybe('secrets through either front: made on the template node, sealed in the registry, used by creates on other nodes; an update and a delete reach them', { timeout: 300000 }, async () => {
  const value = `mn-${createHash('sha256').update(String(Math.random())).digest('hex').slice(0, 24)}`
  const made = await cl.api('f1', 'POST', '/secrets', { name: 'mn_token', value })
  assert.equal(made.status, 201, made.text)
  assert.equal(made.json.value, undefined)
  // Sealed with the cluster key: the registry never holds the value in clear.
  assert.ok(await waitFor(() => cl.sql("SELECT count(*) FROM cluster_secrets WHERE name = 'mn_token' AND sealed IS NOT NULL") === '1', 10000))
  assert.equal(cl.sql(`SELECT count(*) FROM cluster_secrets WHERE sealed LIKE '%${value}%' OR info LIKE '%${value}%'`), '0')
  for (const f of ['f1', 'f2']) {
    const listed = await cl.api(f, 'GET', '/secrets')
    assert.equal(listed.status, 200, listed.text)
    assert.ok(listed.json.some((x) => x.name === 'mn_token'), `${f} lists it`)
  }
  const digest = (v) => createHash('sha256').update(v).digest('hex')
  // n1 (the template node, where the secret was made) takes no creates.
  assert.equal((await cl.api('f1', 'POST', '/nodes/n1/drain')).status, 200)
  try {
    const use = async (front) => {
      const r = await cl.api(front, 'POST', '/sandboxes', { templateID: 'base', secrets: { mn_token: { scope: 'env', env: 'MN_TOKEN' } } })
      if (r.status !== 201) return { status: r.status, text: r.text }
      const sbx = await Sandbox.connect(r.json.sandboxID, cl.opts(front))
      const got = (await sbx.commands.run('printf %s "$MN_TOKEN" | sha256sum | cut -d" " -f1')).stdout.trim()
      const node = await nodeOf(r.json.sandboxID)
      await sbx.kill()
      return { status: 201, got, node }
    }
    const first = await use('f2')
    assert.equal(first.status, 201, first.text)
    assert.notEqual(first.node, 'n1')
    assert.equal(first.got, digest(value), 'the value made on n1, in a sandbox on another node')
    const updated = await cl.api('f2', 'POST', '/secrets/mn_token', { value: `${value}-2` })
    assert.equal(updated.status, 200, updated.text)
    assert.equal(updated.json.currentVersion, 2)
    const second = await use('f1')
    assert.equal(second.got, digest(`${value}-2`), `the update reaches node ${second.node}`)
    assert.equal((await cl.api('f1', 'DELETE', '/secrets/mn_token')).status, 204)
    // (an admin key is told it does not exist: 400; another team's key gets 403 either way)
    const third = await use('f2')
    assert.equal(third.status, 400, `a deleted secret: ${third.status} ${third.text ?? ''}`)
    assert.match(third.text, /mn_token does not exist/)
    assert.equal((await cl.api('f2', 'GET', '/secrets/mn_token')).status, 404)
  } finally {
    await cl.api('f1', 'DELETE', '/nodes/n1/drain')
  }
  await killAll()
})

maybe('the official SDK suite (sdk.test.mjs) passes against a front', { timeout: 600000 }, async () => {
  // A runner of its own (not a subtest of this one: NODE_TEST_CONTEXT would make it one).
  const env = { ...process.env }
  delete env.NODE_TEST_CONTEXT
  const child = spawn(process.execPath, ['--test', '--test-reporter=tap', '--test-concurrency=1', 'sdk.test.mjs'], {
    cwd: new URL('.', import.meta.url).pathname,
    env: { ...env, AIRLOCK_E2E_TARGET_URL: cl.fronts.get('f2').url, AIRLOCK_E2E_TARGET_KEY: cl.apiKey,
      AIRLOCK_E2E_TARGET_DB: cl.db },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  let out = ''
  child.stdout.on('data', (d) => { out += d })
  const code = await new Promise((r) => child.once('exit', r))
  const failed = out.split('\n').filter((l) => /^\s*not ok|^# (pass|fail|skipped)/.test(l))
  console.log(failed.map((l) => `# sdk.test.mjs: ${l.trim()}`).join('\n'))
  assert.equal(code, 0, out.slice(-4000))
  assert.match(out, /^# pass [1-9]/m)
  assert.match(out, /^# skipped 0/m)
  await killAll()
})

maybe('serve --role both: a front and a node in one process, routed like the others; a clean stop', { timeout: 300000 }, async () => {
  const both = await cl.startBoth('b1', 1)
  for (const n of ['n1', 'n2', 'n3']) assert.equal((await cl.api('f1', 'POST', `/nodes/${n}/drain`)).status, 200)
  try {
    const sbx = await Sandbox.create('base', { ...cl.opts('b1'), timeoutMs: 300000 })
    assert.equal(await nodeOf(sbx.sandboxId), 'b1')
    const via = await Sandbox.connect(sbx.sandboxId, cl.opts('f2'))
    assert.equal((await via.commands.run('echo both')).stdout, 'both\n')
    await sbx.kill()
  } finally {
    for (const n of ['n1', 'n2', 'n3']) await cl.api('f1', 'DELETE', `/nodes/${n}/drain`)
  }
  await killAll()
  both.kill('SIGTERM')
  const { code, sig } = await both.exited
  assert.equal(code, 0, `exit ${code} ${sig}`)
  cl.nodes.delete('b1')
  cl.fronts.delete('b1')
})
