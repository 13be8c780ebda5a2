// Issue 19's numbers (docs/multinode.md "Measured"), in one run on this machine:
//   1. create TTI (Sandbox.create + the first command) through a front to a
//      node, against a single-node daemon, interleaved create by create;
//   2. placements per second of two fronts against one PostgreSQL, creates
//      stubbed out (bench/placement_bench.cc), beside a SELECT 1 round trip;
//   3. a custom template built through the front on one node, then created
//      on a second node that never saw it (its image fetched over the
//      cluster's TLS, then a cold boot), on that node again, and on the node
//      that built it, beside the raw primitive: a sparse local copy of the
//      image (cp --sparse=always) on this disk (issue 38's "Measure").
// PostgreSQL (Debian's) runs in a temp directory on a Unix socket only; the
// daemons listen on loopback. Fronts and the node authenticate each other
// with the cluster's mutual TLS (`airlock cluster certs` into the temp
// directory); the bench reaches the node's own API as a front would, over
// HTTPS with a front's certificate. Needs root and the guest image.
//
// usage: node bench/multinode.mjs [N]   (N creates each way, default 20)
import { execFileSync, spawn } from 'node:child_process'
import { chownSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { freePort, pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const BIN = process.env.AIRLOCK_BIN || join(here, '../build/airlock')
const PLACEMENT_BENCH = process.env.AIRLOCK_PLACEMENT_BENCH || join(dirname(BIN), 'bench/airlock-placement-bench')
const STATE_DIR = process.env.AIRLOCK_STATE_DIR || '/var/lib/airlock'
const N = Number(process.argv[2] || 20)
const { Sandbox, Template } = await import(join(here, '../tests/e2e/node_modules/e2b/dist/index.mjs'))

const tmp = mkdtempSync(join(tmpdir(), 'airlock-mn-bench-'))
const pgBin = `/usr/lib/postgresql/${readdirSync('/usr/lib/postgresql').sort().pop()}/bin`
const procs = []

function run(argv, name) {
  const p = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] })
  let err = ''
  p.stderr.on('data', (d) => { err = (err + d).slice(-4000) })
  p.exited = new Promise((r) => p.once('exit', r))
  p.tail = () => `${name}: ${err}`
  procs.push(p)
  return p
}

// The cluster's certificates (made in the try below) and the bench's
// keep-alive HTTPS agent to the node as a front.
const certs = join(tmp, 'certs')
const tlsFlags = (member) => ['--cluster-ca', join(certs, 'ca.pem'), '--cluster-cert', join(certs, `${member}.pem`),
  '--cluster-key', join(certs, `${member}.key`)]
let asFront = null
// GET `url` (https://, the node) as a front: { ok, status, text }.
function nodeGet(url, headers = {}) {
  return new Promise((resolve, reject) => {
    const r = httpsRequest(url, { agent: asFront, headers, timeout: 10000 }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { text += d })
      res.on('end', () => resolve({ ok: res.statusCode >= 200 && res.statusCode < 300, status: res.statusCode, text }))
      res.on('error', reject)
    })
    r.on('timeout', () => r.destroy(new Error(`timeout: ${url}`)))
    r.on('error', reject)
    r.end()
  })
}

async function healthy(url, p) {
  for (let i = 0; i < 300; i++) {
    try { if ((url.startsWith('https:') ? await nodeGet(`${url}/health`) : await fetch(`${url}/health`)).ok) return } catch {}
    if (p.exitCode !== null) throw new Error(p.tail())
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`no answer from ${url}`)
}

try {
  // The cluster's CA and certificates (airlock cluster certs): the node's
  // (named for 127.0.0.1, where it is reached), the front's, and `bench`, a
  // front's the bench itself uses to reach the node directly (fetch, to the
  // front, keeps its connections alive; so does this agent).
  execFileSync(BIN, ['cluster', 'certs', '--out', certs, '--node', 'bench-node,127.0.0.1', '--node', 'bench-node2,127.0.0.1',
    '--front', 'bench-front', '--front', 'bench'],
    { stdio: ['ignore', 'ignore', 'inherit'] })
  asFront = new HttpsAgent({ keepAlive: true, ca: readFileSync(join(certs, 'ca.pem')),
    cert: readFileSync(join(certs, 'bench.pem')), key: readFileSync(join(certs, 'bench.key')) })

  // PostgreSQL on a Unix socket in tmp.
  const data = join(tmp, 'pg'), sock = join(tmp, 'sock')
  mkdirSync(data)
  mkdirSync(sock)
  const pgUid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }))
  const pgGid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }))
  for (const d of [tmp, data, sock]) chownSync(d, pgUid, pgGid)
  const asPg = ['setpriv', '--reuid=postgres', '--regid=postgres', '--init-groups']
  execFileSync(asPg[0], [...asPg.slice(1), join(pgBin, 'initdb'), '-D', data, '--auth=trust', '-U', 'postgres', '--no-sync'], { stdio: 'ignore' })
  const pg = run([...asPg, join(pgBin, 'postgres'), '-D', data, '-k', sock, '-c', 'listen_addresses=', '-c', 'max_connections=100'], 'postgres')
  const db = `postgresql:///postgres?host=${sock}&user=postgres`
  for (let i = 0; ; i++) {
    try { execFileSync(join(pgBin, 'pg_isready'), ['-h', sock, '-t', '1'], { stdio: 'ignore' }); break } catch {}
    if (i > 100 || pg.exitCode !== null) throw new Error(pg.tail())
    await new Promise((r) => setTimeout(r, 100))
  }

  // 1. TTI through a front vs a single-node daemon.
  const single = await startDaemon(['--pool', '0'])
  const nodePort = await freePort(), frontPort = await freePort()
  mkdirSync(join(tmp, 'node'))
  const node = run([BIN, '--state-dir', STATE_DIR, 'serve', '--role', 'node', '--database', db,
    '--listen', `127.0.0.1:${nodePort}`, '--advertise', `127.0.0.1:${nodePort}`, '--node-name', 'bench-node',
    '--capacity', '100', '--db', join(tmp, 'node', 'airlock.db'), '--kill-on-exit', '--pool', '0', ...tlsFlags('bench-node')], 'node')
  const front = run([BIN, 'serve', '--role', 'front', '--database', db, '--listen', `127.0.0.1:${frontPort}`,
    ...tlsFlags('bench-front')], 'front')
  const frontUrl = `http://127.0.0.1:${frontPort}`
  const nodeUrl = `https://127.0.0.1:${nodePort}`
  await healthy(nodeUrl, node)
  await healthy(frontUrl, front)
  const key = execFileSync(BIN, ['apikey', '--db', db, 'create', '--name', 'bench', '--admin'], { encoding: 'utf8' }).split('\n')[0].trim()
  const viaFront = { apiKey: key, apiUrl: frontUrl, sandboxUrl: frontUrl, requestTimeoutMs: 300000 }
  const tti = async (opts) => {
    const t0 = performance.now()
    const s = await Sandbox.create('base', opts)
    const create = performance.now() - t0
    await s.commands.run('true')
    const total = performance.now() - t0
    await s.kill()
    return { create, total }
  }
  await tti(single.opts)  // first creates warm both paths (template snapshot, page cache)
  await tti(viaFront)
  const direct = [], fronted = []
  for (let i = 0; i < N; i++) {
    direct.push(await tti(single.opts))
    fronted.push(await tti(viaFront))
  }
  await single.stop()

  // The front's own hop, without a VM: GET /sandboxes/{unknown} through the
  // front (a registry lookup, a 404) and a node's /health through the front's relay.
  const hop = []
  for (let i = 0; i < 200; i++) {
    const t0 = performance.now()
    await (await fetch(`${frontUrl}/sandboxes/nosuchsandbox`, { headers: { 'X-API-Key': key } })).text()
    hop.push(performance.now() - t0)
  }
  // The relay itself: GET /sandboxes/{id} of a live sandbox through the
  // front, against the same call made to its node directly (over the
  // cluster's TLS, as the front makes it), interleaved.
  const live = await Sandbox.create('base', viaFront)
  const getVia = async (base) => {
    const t0 = performance.now()
    const url = `${base}/sandboxes/${live.sandboxId}`, headers = { 'X-API-Key': key }
    let status
    if (base.startsWith('https:')) status = (await nodeGet(url, headers)).status
    else { const r = await fetch(url, { headers }); await r.text(); status = r.status }
    if (status !== 200) throw new Error(`GET through ${base}: ${status}`)
    return performance.now() - t0
  }
  const relayed = [], atNode = []
  for (let i = 0; i < 200; i++) {
    relayed.push(await getVia(frontUrl))
    atNode.push(await getVia(nodeUrl))
  }
  await live.kill()

  const row = (what, v) => `| ${what} | ${pct(v, 50).toFixed(0)} | ${pct(v, 99).toFixed(0)} |`
  console.log(`\n## Create TTI through a front (N=${N} each, interleaved; qemu, TCG)\n`)
  console.log('| what | p50 ms | p99 ms |\n|---|---|---|')
  console.log(row('create + first command, single-node daemon (raw primitive)', direct.map((x) => x.total)))
  console.log(row('create + first command, through a front to a node', fronted.map((x) => x.total)))
  console.log(row('create alone, single-node daemon', direct.map((x) => x.create)))
  console.log(row('create alone, through a front', fronted.map((x) => x.create)))
  console.log(`| front lookup of an unknown id (registry query + 404), no VM | ${pct(hop, 50).toFixed(2)} | ${pct(hop, 99).toFixed(2)} |`)
  console.log(`| GET /sandboxes/{id} at the node, HTTPS as a front (raw primitive of the hop) | ${pct(atNode, 50).toFixed(2)} | ${pct(atNode, 99).toFixed(2)} |`)
  console.log(`| GET /sandboxes/{id} through the front (cached route + relay) | ${pct(relayed, 50).toFixed(2)} | ${pct(relayed, 99).toFixed(2)} |`)
  const ratio = pct(fronted.map((x) => x.total), 50) / pct(direct.map((x) => x.total), 50)
  const added = pct(fronted.map((x) => x.total), 50) - pct(direct.map((x) => x.total), 50)
  console.log(`\nfront / single p50 TTI: ${ratio.toFixed(3)} x (${added.toFixed(1)} ms added; goal <= 1.1 x or <= 5 ms)`)

  // 3. A template on a node that never saw it.
  const sql = (q) => execFileSync(join(pgBin, 'psql'), ['-h', sock, '-U', 'postgres', '-d', 'postgres', '-At', '-c', q],
    { encoding: 'utf8' }).trim()
  const api = (method, path) => fetch(`${frontUrl}${path}`, { method, headers: { 'X-API-Key': key } })
  const ttiOf = async (tmpl) => {
    const t0 = performance.now()
    const s = await Sandbox.create(tmpl, viaFront)
    await s.commands.run('true')
    const ms = performance.now() - t0
    await s.kill()
    return ms
  }
  await Template.build(Template().fromBaseImage().runCmd('head -c 1000000 /dev/urandom > /home/user/blob'), 'bench-moved', viaFront)
  const node2Port = await freePort()
  const state2 = join(tmp, 'node2-state')
  const fresh2 = () => {
    rmSync(state2, { recursive: true, force: true })
    mkdirSync(join(state2, 'images', 'templates'), { recursive: true })
    execFileSync('cp', [join(STATE_DIR, 'images', 'templates', 'base.json'), join(state2, 'images', 'templates')])
    execFileSync('cp', ['-a', join(STATE_DIR, 'images', 'boot'), join(state2, 'images')])
    rmSync(join(tmp, 'node2'), { recursive: true, force: true })
    mkdirSync(join(tmp, 'node2'))
    sql("DELETE FROM node_artefacts WHERE node = 'bench-node2'")
  }
  const startNode2 = async () => {
    const p = run([BIN, '--state-dir', state2, 'serve', '--role', 'node', '--database', db,
      '--listen', `127.0.0.1:${node2Port}`, '--advertise', `127.0.0.1:${node2Port}`, '--node-name', 'bench-node2',
      '--capacity', '100', '--db', join(tmp, 'node2', 'airlock.db'), '--kill-on-exit', '--pool', '0',
      ...tlsFlags('bench-node2')], 'node2')
    await healthy(`https://127.0.0.1:${node2Port}`, p)
    return p
  }
  const image = JSON.parse(sql("SELECT bundle FROM template_bundles WHERE 'bench-moved' = ANY(names)")).builds[0]
  const rootfs = join(STATE_DIR, 'images', 'rootfs', image.artefact.rootfsKey, 'rootfs.ext4')
  const copy = [], firstOn2 = [], againOn2 = [], onBuilder = [], bytes = []
  const rounds = Math.max(1, Math.min(N, 5))
  for (let i = 0; i < rounds; i++) {
    const t0 = performance.now()
    execFileSync('cp', ['--sparse=always', rootfs, join(tmp, 'copy.ext4')])
    copy.push(performance.now() - t0)
    rmSync(join(tmp, 'copy.ext4'))
    fresh2()
    const node2 = await startNode2()
    await api('POST', '/nodes/bench-node/drain')
    firstOn2.push(await ttiOf('bench-moved'))
    againOn2.push(await ttiOf('bench-moved'))
    const m = (await nodeGet(`https://127.0.0.1:${node2Port}/metrics`)).text
    bytes.push(Number(/^airlock_cluster_artefact_bytes_received_total (\d+)$/m.exec(m)?.[1] ?? NaN))
    await api('DELETE', '/nodes/bench-node/drain')
    node2.kill('SIGTERM')
    await node2.exited
    onBuilder.push(await ttiOf('bench-moved'))
  }
  console.log(`\n## A custom template on a node that never saw it (N=${rounds}; qemu, TCG; image ${image.artefact.size} bytes logical, ${image.artefact.allocated} allocated)\n`)
  console.log('| what | p50 ms | p99 ms |\n|---|---|---|')
  console.log(row('raw primitive: cp --sparse=always of the image on this disk', copy))
  console.log(row('create + first command on a node that never saw it (fetch + cold boot)', firstOn2))
  console.log(row('create + first command on that node again', againOn2))
  console.log(row('create + first command on the node that built it', onBuilder))
  console.log(`\nbytes received per fetch: ${bytes.join(', ')}`)
  for (const p of [front, node]) p.kill('SIGTERM')
  await Promise.all([front.exited, node.exited])

  // 2. Placements per second.
  console.log('\n## Placements per second, two fronts, one PostgreSQL (creates stubbed out)')
  console.log(execFileSync(PLACEMENT_BENCH, ['--database', db, '--seconds', '10', '--fronts', '2', '--nodes', '10'], { encoding: 'utf8' }))
} finally {
  asFront?.destroy()
  for (const p of procs) if (p.exitCode === null) p.kill('SIGTERM')
  await Promise.all(procs.map((p) => p.exited))
  rmSync(tmp, { recursive: true, force: true })
}
