// The multi-node suites' fixture (docs/multinode.md "Tests"): on this one
// machine, a real PostgreSQL (Debian's, started here in a temp directory)
// and airlock node and front daemons, each in a network namespace of its own,
// joined by a bridge in another. The suite itself runs in the client
// namespace in_netns.sh made (AIRLOCK_MN_CLIENT_NS), so every packet stays
// inside namespaces this run created: the subnet 10.99.0.0/24 exists only there.
// Fronts and nodes authenticate each other with the cluster's mutual TLS
// (certificates from `airlock cluster certs`, made per run); the suite
// reaches a node's own API as a front would (nodeFetch, with a front's
// certificate).
import { execFileSync, spawn } from 'node:child_process'
import { appendFileSync, chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { request as httpsRequest } from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BIN, STATE_DIR, RUNTIME, waitFor } from './daemon.mjs'
import { skipReason as daemonSkip } from './daemon.mjs'

export const PREFIX = process.env.AIRLOCK_MN_PREFIX
export const CLIENT_NS = process.env.AIRLOCK_MN_CLIENT_NS
const PG_BIN = (() => {
  try {
    const v = readdirSync('/usr/lib/postgresql').sort().pop()
    return v ? `/usr/lib/postgresql/${v}/bin` : null
  } catch {
    return null
  }
})()

export let skipReason = daemonSkip
if (!skipReason && (!PREFIX || !CLIENT_NS)) skipReason = 'not started by in_netns.sh (AIRLOCK_MN_CLIENT_NS unset)'
if (!skipReason && (!PG_BIN || !existsSync(join(PG_BIN, 'postgres')))) skipReason = 'no PostgreSQL server (apt install postgresql; scripts/setup does)'
if (skipReason) console.log(`# SKIP e2e: ${skipReason}`)

const ip = (...args) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] })
const PG_ADDR = '10.99.0.5'
const tmp = skipReason ? null : mkdtempSync(join(tmpdir(), 'airlock-mn-'))
const children = new Set()

// A namespace joined to the test bridge with `addr`/24 on its eth0.
function attach(ns, short, addr) {
  ip('-n', `${PREFIX}-lan`, 'link', 'add', short, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns)
  ip('-n', `${PREFIX}-lan`, 'link', 'set', short, 'master', 'br0', 'up')
  ip('-n', ns, 'link', 'set', 'lo', 'up')
  ip('-n', ns, 'addr', 'add', `${addr}/24`, 'dev', 'eth0')
  ip('-n', ns, 'link', 'set', 'eth0', 'up')
}

function makeNs(name) {
  ip('netns', 'add', name)
  ip('-n', name, 'link', 'set', 'lo', 'up')
}

// Starts `argv` in namespace `ns` (nsenter: /sys stays the host's, with its cgroups).
function spawnIn(ns, argv, logName) {
  const log = join(tmp, `${logName}.log`)
  const child = spawn('sh', ['-c', `exec nsenter --net=/run/netns/${ns} "$@" >>"${log}" 2>&1`, 'sh', ...argv],
    { stdio: 'ignore' })
  children.add(child)
  child.exited = new Promise((r) => child.once('exit', (code, sig) => { children.delete(child); r({ code, sig }) }))
  child.log = log
  return child
}

// The cluster's certificates of this run (airlock cluster certs), made or
// added to in `dir` (ca.pem, <member>.pem, <member>.key).
function makeCerts(dir, args) {
  execFileSync(BIN, ['cluster', 'certs', '--out', dir, ...args], { stdio: ['ignore', 'ignore', 'pipe'] })
}

// An HTTPS request to a node as a client holding `member`'s certificate
// (a front's, unless the test says otherwise: null for none), trusting
// `ca` (default: the cluster's), offering the ALPN protocols `alpn` if
// given. Resolves { status, text, headers };
// rejects when TLS fails or the node closes the connection.
export function tlsRequest(url, { method = 'GET', headers = {}, body, certs, member, ca, alpn, timeoutMs = 10000 } = {}) {
  const u = new URL(url)
  const opts = {
    host: u.hostname, port: u.port, path: u.pathname + u.search, method, headers,
    ca: readFileSync(ca ?? join(certs, 'ca.pem')), timeout: timeoutMs, agent: false,
  }
  if (alpn) opts.ALPNProtocols = alpn
  if (member) {
    opts.cert = readFileSync(join(member.dir ?? certs, `${member.name}.pem`))
    opts.key = readFileSync(join(member.dir ?? certs, `${member.name}.key`))
  }
  return new Promise((resolve, reject) => {
    const r = httpsRequest(opts, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { text += d })
      res.on('end', () => resolve({ status: res.statusCode, text, headers: res.headers }))
      res.on('error', reject)
    })
    r.on('timeout', () => r.destroy(new Error('timed out')))
    r.on('error', reject)
    r.end(body)
  })
}

async function healthy(url, ms, child, tls) {
  let gone = false
  child?.exited.then(() => { gone = true })
  return waitFor(async () => {
    if (gone) throw new Error(`exited early (log ${child.log})`)
    try {
      if (tls) return (await tlsRequest(`${url}/health`, { ...tls, timeoutMs: 2000 })).status === 200
      return (await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) })).status === 200
    } catch {
      return false
    }
  }, ms, 200)
}

export class Cluster {
  constructor() {
    this.nodes = new Map()   // name -> { ns, addr, url, capacity, child, db }
    this.fronts = new Map()  // name -> { ns, addr, url, child }
    this.db = `postgres://postgres@${PG_ADDR}:5432/postgres`
  }

  async start({ nodes, fronts }) {
    makeNs(`${PREFIX}-lan`)
    ip('-n', `${PREFIX}-lan`, 'link', 'add', 'br0', 'type', 'bridge')
    ip('-n', `${PREFIX}-lan`, 'link', 'set', 'br0', 'up')
    attach(CLIENT_NS, 'c', '10.99.0.2')
    makeNs(`${PREFIX}-pg`)
    attach(`${PREFIX}-pg`, 'pg', PG_ADDR)
    await this.startPostgres()
    let i = 0
    for (const [name, capacity] of nodes) {
      const ns = `${PREFIX}-${name}`
      const addr = `10.99.0.${11 + i++}`
      makeNs(ns)
      attach(ns, name, addr)
      // A directory per node: its registry, audit trail and keys are its own.
      execFileSync('mkdir', ['-p', join(tmp, name)])
      this.nodes.set(name, { ns, addr, url: `https://${addr}:3000`, capacity, db: join(tmp, name, 'airlock.db') })
    }
    i = 0
    for (const name of fronts) {
      const ns = `${PREFIX}-${name}`
      const addr = `10.99.0.${21 + i++}`
      makeNs(ns)
      attach(ns, name, addr)
      this.fronts.set(name, { ns, addr, url: `http://${addr}:3000` })
    }
    // The cluster CA and a certificate per member; the suite acts as a
    // front of its own ("suite") when it asks a node directly.
    this.certs = join(tmp, 'certs')
    makeCerts(this.certs, [...[...this.nodes].flatMap(([name, n]) => ['--node', `${name},${n.addr}`]),
      ...[...this.fronts.keys(), 'suite'].flatMap((name) => ['--front', name])])
    // The schema first (by the first daemon to start), then the admin key.
    await Promise.all([...this.nodes.keys()].map((n) => this.startNode(n)))
    await Promise.all([...this.fronts.keys()].map((f) => this.startFront(f)))
    this.apiKey = this.createKey('admin', true)
  }

  async startPostgres() {
    const data = join(tmp, 'pg')
    const sock = join(tmp, 'pgsock')
    execFileSync('mkdir', ['-p', data, sock])
    chownSync(data, uid('postgres'), gid('postgres'))
    chownSync(sock, uid('postgres'), gid('postgres'))
    chownSync(tmp, uid('postgres'), gid('postgres'))
    execFileSync('setpriv', ['--reuid=postgres', '--regid=postgres', '--init-groups', join(PG_BIN, 'initdb'), '-D', data, '--auth=trust', '-U', 'postgres',
      '--no-sync'], { stdio: 'ignore' })
    // The test subnet only (it exists only in this run's namespaces).
    appendFileSync(join(data, 'pg_hba.conf'), 'host all postgres 10.99.0.0/24 trust\n')
    this.pg = spawnIn(`${PREFIX}-pg`, ['setpriv', '--reuid=postgres', '--regid=postgres', '--init-groups', join(PG_BIN, 'postgres'), '-D', data,
      '-h', PG_ADDR, '-p', '5432', '-k', sock, '-c', 'fsync=off', '-c', 'max_connections=200'], 'postgres')
    const ok = await waitFor(() => {
      try {
        execFileSync(join(PG_BIN, 'pg_isready'), ['-h', PG_ADDR, '-p', '5432', '-t', '1'], { stdio: 'ignore' })
        return true
      } catch {
        return false
      }
    }, 30000, 200)
    if (!ok) throw new Error('postgres did not start')
  }

  async startNode(name, extra = []) {
    this.killed?.delete(name)
    const n = this.nodes.get(name)
    n.child = spawnIn(n.ns, [BIN, '--state-dir', n.state ?? STATE_DIR, 'serve', '--role', 'node', '--database', this.db,
      '--listen', `${n.addr}:3000`, '--node-name', name, '--capacity', String(n.capacity), '--db', n.db,
      '--runtime', RUNTIME, '--pool', '0', '--kill-on-exit', '--mcp-api', `10.99.0.21:3000`, ...this.tlsFlags(name),
      '--cluster-secrets-key', join(this.certs, 'secrets.key'), ...extra], name)
    if (!(await healthy(n.url, 30000, n.child, this.asFront()))) throw new Error(`node ${name} did not start (log ${n.child.log})`)
  }

  async startFront(name) {
    const f = this.fronts.get(name)
    f.child = spawnIn(f.ns, [BIN, '--state-dir', STATE_DIR, 'serve', '--role', 'front', '--database', this.db,
      '--listen', `${f.addr}:3000`, '--heartbeat-lapse', '5000', ...this.tlsFlags(name)], name)
    if (!(await healthy(f.url, 30000, f.child))) throw new Error(`front ${name} did not start (log ${f.child.log})`)
  }

  // `serve --role both`: a front on :3000 and a node on :3001, one process,
  // in a namespace of its own.
  async startBoth(name, capacity) {
    const ns = `${PREFIX}-${name}`
    const addr = '10.99.0.31'
    makeNs(ns)
    attach(ns, name, addr)
    execFileSync('mkdir', ['-p', join(tmp, name)])
    makeCerts(this.certs, ['--both', `${name},${addr}`])
    const child = spawnIn(ns, [BIN, '--state-dir', STATE_DIR, 'serve', '--role', 'both', '--database', this.db,
      '--listen', `${addr}:3000`, '--node-listen', `${addr}:3001`, '--node-name', name, '--capacity', String(capacity),
      '--db', join(tmp, name, 'airlock.db'), '--runtime', RUNTIME, '--pool', '0', '--kill-on-exit',
      ...this.tlsFlags(name), '--cluster-secrets-key', join(this.certs, 'secrets.key')], name)
    this.nodes.set(name, { ns, addr, url: `https://${addr}:3001`, capacity, child })
    this.fronts.set(name, { ns, addr, url: `http://${addr}:3000`, child })
    if (!(await healthy(`http://${addr}:3000`, 30000, child)) ||
        !(await healthy(`https://${addr}:3001`, 30000, child, this.asFront())))
      throw new Error(`${name} did not start (log ${child.log})`)
    return child
  }

  // A node that joins later, with a state directory of its own holding only
  // the boot files of the built-in images (no template's root filesystem):
  // what it starts, it must fetch from the other nodes (issue 38 item 1).
  async addBareNode(name, capacity) {
    const ns = `${PREFIX}-${name}`
    const addr = `10.99.0.${11 + this.nodes.size}`
    makeNs(ns)
    attach(ns, name, addr)
    const state = join(tmp, name, 'state')
    execFileSync('mkdir', ['-p', join(state, 'images', 'templates')])
    execFileSync('cp', [join(STATE_DIR, 'images', 'templates', 'base.json'), join(state, 'images', 'templates')])
    // Hard links (read-only files, one filesystem); a copy where that fails.
    try {
      execFileSync('cp', ['-al', join(STATE_DIR, 'images', 'boot'), join(state, 'images')])
    } catch {
      execFileSync('cp', ['-a', join(STATE_DIR, 'images', 'boot'), join(state, 'images')])
    }
    makeCerts(this.certs, ['--node', `${name},${addr}`])
    this.nodes.set(name, { ns, addr, url: `https://${addr}:3000`, capacity, db: join(tmp, name, 'airlock.db'), state })
    await this.startNode(name)
    return this.nodes.get(name)
  }

  // serve's flags for member `name`'s certificate.
  tlsFlags(name) {
    return ['--cluster-ca', join(this.certs, 'ca.pem'), '--cluster-cert', join(this.certs, `${name}.pem`),
      '--cluster-key', join(this.certs, `${name}.key`)]
  }

  // tlsRequest's options for the suite acting as a front.
  asFront() {
    return { certs: this.certs, member: { name: 'suite' } }
  }

  // A request to node `name`'s own API, as a front (tlsRequest).
  nodeFetch(name, path, opts = {}) {
    return tlsRequest(`${this.nodes.get(name).url}${path}`, { ...this.asFront(), ...opts })
  }

  createKey(name, admin = false, team = '') {
    const args = ['--state-dir', STATE_DIR, 'apikey', '--db', this.db, 'create', '--name', name]
    if (admin) args.push('--admin')
    if (team) args.push('--team', team)
    return execFileSync(BIN, args, { encoding: 'utf8' }).split('\n')[0].trim()
  }

  opts(front) {
    const url = this.fronts.get(front).url
    return { apiKey: this.apiKey, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 120000 }
  }

  async api(front, method, path, body) {
    const r = await fetch(`${this.fronts.get(front).url}${path}`, {
      method,
      headers: { 'X-API-Key': this.apiKey, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    const text = await r.text()
    let json = null
    try { json = JSON.parse(text) } catch {}
    return { status: r.status, json, text, headers: r.headers }
  }

  // One SQL statement on the cluster registry (psql); its rows as text.
  sql(statement) {
    return execFileSync(join(PG_BIN, 'psql'), ['-h', PG_ADDR, '-p', '5432', '-U', 'postgres', '-d', 'postgres',
      '-v', 'ON_ERROR_STOP=1', '-At', '-c', statement], { encoding: 'utf8' }).trim()
  }

  // The sandboxes a node's own API lists (asked of the node, not a front).
  async nodeSandboxes(name) {
    const r = await this.nodeFetch(name, '/v2/sandboxes?state=running,paused', { headers: { 'X-API-Key': this.apiKey } })
    if (r.status !== 200) throw new Error(`node ${name}: ${r.status} ${r.text}`)
    return JSON.parse(r.text).map((s) => s.sandboxID)
  }

  async kill9(child) {
    child.kill('SIGKILL')
    await child.exited
  }

  async kill9Node(name) {
    (this.killed ??= new Set()).add(name)
    await this.kill9(this.nodes.get(name).child)
  }

  async stop() {
    // A node killed and not restarted left its VMMs running: started again,
    // it adopts them, and its SIGTERM (--kill-on-exit) ends them.
    for (const name of this.killed ?? []) {
      try { await this.startNode(name) } catch (e) { console.log(`# restarting ${name} to clean up: ${e.message}`) }
    }
    const all = [...new Set([...this.fronts.values(), ...this.nodes.values()].map((x) => x.child).filter(Boolean))]
    for (const c of all) if (c.exitCode === null) c.kill('SIGTERM')
    await Promise.all(all.map((c) => Promise.race([c.exited, new Promise((r) => setTimeout(r, 60000).unref())])))
    for (const c of [...children]) if (c !== this.pg) c.kill('SIGKILL')
    if (this.pg) {
      this.pg.kill('SIGINT')
      await this.pg.exited
    }
    for (const name of ['lan', 'pg', ...this.nodes.keys(), ...this.fronts.keys()]) {
      try { ip('netns', 'delete', `${PREFIX}-${name}`) } catch {}
    }
  }

  logs() {
    return tmp
  }

  cleanup() {
    rmSync(tmp, { recursive: true, force: true })
  }
}

function uid(user) {
  return Number(execFileSync('id', ['-u', user], { encoding: 'utf8' }).trim())
}
function gid(user) {
  return Number(execFileSync('id', ['-g', user], { encoding: 'utf8' }).trim())
}
