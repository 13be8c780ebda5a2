// Custom templates from OCI images (issue 16 item 5) through the official e2b
// SDK (2.51.0, unmodified), hermetic: a local registry (Debian's
// docker-registry on 127.0.0.1, its own child process) serves a small image
// made here with umoci from airlock's own unpacked base tree (the agent
// left out, the user `user` removed, Env PYTHON_VERSION and PATH) and pushed
// with skopeo; the daemon pulls it over plain HTTP (serve --insecure-registry)
// and may reach it on loopback because serve --registry-allow names it.
//   (a) fromImage(ref).runCmd(...): the build pulls, adds the agent, creates
//       `user` (with sudo) in its own layer; a sandbox of it has the file the
//       step wrote and saw the image's Env at build time;
//   (b) a python:3.12-slim-style Dockerfile through fromDockerfile (FROM the
//       local image, ENV, WORKDIR, COPY, RUN, CMD http.server): its base is
//       cached from (a) (nothing pulled), and the server answers on port 8000;
//   (c) fromImage of a reference the registry does not have: BuildError
//       saying why (skopeo's error), at step base;
//   (d) the same image behind htpasswd auth: wrong credentials fail at base,
//       right ones build;
//   (e) hostile images (issue 32): one whose layer plants
//       `etc/airlock -> <a host directory>` fails at base naming the image's
//       path, the host directory untouched; one whose layer declares more
//       than the daemon's --max-image-unpack fails at base before unpacking;
//   (f) skopeo is no port scanner (issue 32 item 6): fromImage of a closed
//       port on 127.0.0.1, of the daemon's own HTTP port, of `localhost`, and
//       of `127.1` (a name that resolves to loopback, through the pull
//       proxy: the allowed registry's port, under another name) all fail at
//       base with the same message, nothing of the transport in it.
//
// Env: AIRLOCK_BIN (required), AIRLOCK_STATE_DIR (default /var/lib/airlock).
// Needs skopeo, umoci and docker-registry (scripts/setup installs them).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, mkdirSync, readdirSync, statSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { e2b, freePort, skipReason as fixtureSkip, startDaemon, STATE_DIR } from './daemon.mjs'

const { Sandbox, Template, BuildError } = e2b

const TOOLS = ['/usr/bin/skopeo', '/usr/bin/umoci', '/usr/bin/docker-registry']
let skipReason = fixtureSkip
if (!skipReason) {
  const missing = TOOLS.filter((t) => !existsSync(t))
  if (missing.length) skipReason = `missing ${missing.join(', ')} (run scripts/setup)`
}
if (skipReason && !fixtureSkip) console.log(`# SKIP e2e: ${skipReason}`)
const maybe = skipReason ? test.skip : test

let d, opts, work, ref, authRef
const registries = [] // the docker-registry children this file started
const installed = new Set() // oci-<key> images this run's builds installed


function run(cmd, args, options = {}) {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...options })
}

// The unpacked tree of the current `base` image's base layer.
function baseTree() {
  const ptr = JSON.parse(readFileSync(join(STATE_DIR, 'images/templates/base.json'), 'utf8'))
  const root = join(STATE_DIR, 'images/base', ptr.base_key, 'root')
  assert.ok(existsSync(join(root, 'usr/bin/python3')), `no base tree at ${root}`)
  return root
}

// docker-registry on 127.0.0.1:port over `data` (a second one may serve the
// same storage with htpasswd auth); returns the child and its exit promise.
async function startRegistry(name, port, htpasswd) {
  const dir = join(work, 'registry')
  mkdirSync(join(dir, 'data'), { recursive: true })
  const config = join(dir, `${name}.yml`)
  writeFileSync(config, [
    'version: 0.1',
    'log:',
    '  level: warn',
    'storage:',
    '  filesystem:',
    `    rootdirectory: ${join(dir, 'data')}`,
    ...(htpasswd ? ['auth:', '  htpasswd:', '    realm: airlock-test', `    path: ${htpasswd}`] : []),
    'http:',
    `  addr: 127.0.0.1:${port}`,
    '',
  ].join('\n'))
  const logPath = join(dir, `${name}.log`)
  const log = openSync(logPath, 'a')
  const child = spawn('/usr/bin/docker-registry', ['serve', config], { stdio: ['ignore', log, log] })
  const r = { child, exited: new Promise((res) => child.once('exit', res)) }
  registries.push(r)
  const end = Date.now() + 20000
  while (Date.now() < end) {
    try {
      const res = await fetch(`http://127.0.0.1:${port}/v2/`)
      if (res.status === 200 || res.status === 401) return r
    } catch {}
    await new Promise((res) => setTimeout(res, 100))
  }
  throw new Error(`docker-registry did not answer on 127.0.0.1:${port}: ${readFileSync(logPath, 'utf8')}`)
}

// A bcrypt htpasswd line (Debian's python3 crypt; docker-registry takes $2y$).
function htpasswdLine(user, password) {
  const r = spawnSync('python3', ['-W', 'ignore', '-c',
    'import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)).replace("$2b$", "$2y$", 1))',
    password], { encoding: 'utf8' })
  if (r.status !== 0 || !r.stdout.startsWith('$2y$')) return null
  return `${user}:${r.stdout.trim()}\n`
}

// A python-slim-like image: the base tree without the agent, the user
// `user` (the build's user phase makes it) and what the tests do not need.
function makeImage(port) {
  const tree = join(work, 'tree')
  run('cp', ['-a', baseTree(), tree])
  for (const p of ['sbin/airlock-agent', 'usr/share/nodejs', 'usr/share/doc', 'etc/sudoers.d/airlock-user']) {
    rmSync(join(tree, p), { recursive: true, force: true })
  }
  spawnSync('userdel', ['--root', tree, '--remove', 'user'], { stdio: 'ignore' })
  assert.ok(!readFileSync(join(tree, 'etc/passwd'), 'utf8').includes('\nuser:'), 'user removed from the image')
  const layout = join(work, 'layout')
  run('umoci', ['init', '--layout', layout])
  run('umoci', ['new', '--image', `${layout}:1`])
  run('umoci', ['insert', '--image', `${layout}:1`, tree, '/'])
  run('umoci', ['config', '--image', `${layout}:1`, '--config.env', 'PYTHON_VERSION=3.11',
    '--config.env', 'PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin',
    '--config.workingdir', '/', '--config.cmd', 'python3'])
  rmSync(tree, { recursive: true, force: true })
  run('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', `oci:${layout}:1`, `docker://127.0.0.1:${port}/test/pyslim:1`])
  rmSync(layout, { recursive: true, force: true })
}

// An image of one layer, pushed as 127.0.0.1:port/test/<name>:1: `tree` (a
// directory, umoci insert) or `tar` (a tar file taken as it is, umoci raw
// add-layer, which does not read it as a tar).
function pushImage(port, name, { tree, tar }) {
  const layout = join(work, `layout-${name}`)
  run('umoci', ['init', '--layout', layout])
  run('umoci', ['new', '--image', `${layout}:1`])
  if (tree) run('umoci', ['insert', '--image', `${layout}:1`, tree, '/'])
  if (tar) run('umoci', ['raw', 'add-layer', '--image', `${layout}:1`, tar])
  run('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', `oci:${layout}:1`, `docker://127.0.0.1:${port}/test/${name}:1`])
  rmSync(layout, { recursive: true, force: true })
  return `127.0.0.1:${port}/test/${name}:1`
}

// A ustar header of a regular file `name` of `size` bytes.
function tarHeader(name, size) {
  const h = Buffer.alloc(512)
  h.write(name, 0)
  h.write('0000644\0', 100)
  h.write('0000000\0', 108)
  h.write('0000000\0', 116)
  h.write(size.toString(8).padStart(11, '0') + '\0', 124)
  h.write('00000000000\0', 136)
  h.write('0', 156)
  h.write('ustar\x0000', 257)
  h.fill(' ', 148, 156)
  let sum = 0
  for (const b of h) sum += b
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148)
  return h
}

const MAX_UNPACK_MIB = 4096 // the daemon's --max-image-unpack here (the pyslim image is ~0.5 GiB)
let linkRef, bombRef, hostDir, registryPort

before(async () => {
  if (skipReason) return
  work = mkdtempSync(join(tmpdir(), 'airlock-oci-'))
  const port = await freePort()
  await startRegistry('open', port)
  const t0 = Date.now()
  makeImage(port)
  console.log(`# test image made and pushed in ${Date.now() - t0} ms`)
  ref = `127.0.0.1:${port}/test/pyslim:1`
  // (e) A host directory an image's link aims at, with a file of the name
  // staging writes; and a layer that declares 5 GiB (its data left out:
  // the size check reads headers only, and refuses it before umoci would).
  hostDir = join(work, 'host')
  mkdirSync(hostDir)
  writeFileSync(join(hostDir, 'rootfs-id'), 'host\n')
  const linkTree = join(work, 'link-tree')
  mkdirSync(join(linkTree, 'etc'), { recursive: true })
  mkdirSync(join(linkTree, 'usr/sbin'), { recursive: true })
  symlinkSync('usr/sbin', join(linkTree, 'sbin'))
  symlinkSync(hostDir, join(linkTree, 'etc/airlock'))
  linkRef = pushImage(port, 'link', { tree: linkTree })
  writeFileSync(join(work, 'bomb.tar'), Buffer.concat([tarHeader('zeros', (MAX_UNPACK_MIB + 1024) * 1024 * 1024), Buffer.alloc(4096)]))
  bombRef = pushImage(port, 'bomb', { tar: join(work, 'bomb.tar') })
  // The same storage behind htpasswd auth (alice / the password below).
  const line = htpasswdLine('alice', 's3cret-pw')
  registryPort = port
  const insecure = ['--insecure-registry', `127.0.0.1:${port}`, '--registry-allow', `127.0.0.1:${port}`,
    '--max-image-unpack', String(MAX_UNPACK_MIB)]
  if (line) {
    const authPort = await freePort()
    writeFileSync(join(work, 'htpasswd'), line)
    await startRegistry('auth', authPort, join(work, 'htpasswd'))
    authRef = `127.0.0.1:${authPort}/test/pyslim:1`
    insecure.push('--insecure-registry', `127.0.0.1:${authPort}`, '--registry-allow', `127.0.0.1:${authPort}`)
  }
  d = await startDaemon(insecure)
  opts = d.opts
})

after(async () => {
  if (d) await d.stop()
  for (const r of registries) {
    if (r.child.exitCode === null && r.child.signalCode === null) {
      r.child.kill('SIGTERM')
      await r.exited
    }
  }
  // The images this run installed (a new digest each run): their pointers
  // and configs go; the next image collection sweeps their rootfs once no
  // layer needs it.
  for (const name of installed) {
    rmSync(join(STATE_DIR, 'images/templates', `${name}.json`), { force: true })
    rmSync(join(STATE_DIR, 'images/oci', `${name.slice(4)}.json`), { force: true })
  }
  if (work) rmSync(work, { recursive: true, force: true })
})

async function build(t, name, extra = {}) {
  const logs = []
  const t0 = Date.now()
  try {
    const info = await Template.build(t, name, { ...opts, ...extra, onBuildLogs: (l) => logs.push(l.message) })
    return { info, logs, ms: Date.now() - t0 }
  } finally {
    for (const l of logs) {
      const m = l.match(/installed as image (oci-[0-9a-f]{20})/)
      if (m) installed.add(m[1])
    }
  }
}

async function sh(sb, cmd, user) {
  const r = await sb.commands.run(cmd, user ? { user } : {})
  return r.stdout.trim()
}

let first
maybe('fromImage of a registry image builds: the agent added, user made, the image Env seen at build time', { timeout: 900000 }, async () => {
  const t = Template()
    .fromImage(ref)
    .runCmd('python3 -c "print(1)" > /home/user/ok.txt')
    .runCmd('echo "$PYTHON_VERSION|$(whoami)|$HOME" > /home/user/env.txt')
  first = await build(t, 'pyslim-e2e')
  console.log(`# fromImage build ${first.ms} ms`)
  const joined = first.logs.join('\n')
  assert.ok(first.logs.some((l) => l.startsWith(`[base] FROM ${ref}`)), joined)
  assert.ok(first.logs.some((l) => /^\[base\] pulling /.test(l)), joined)
  assert.ok(first.logs.some((l) => /^\[base\] USER user \[/.test(l)), joined)
  assert.equal(installed.size, 1, joined)
  const sb = await Sandbox.create('pyslim-e2e', opts)
  try {
    assert.equal(await sh(sb, 'cat /home/user/ok.txt'), '1')
    assert.equal(await sh(sb, 'cat /home/user/env.txt'), '3.11|user|/home/user')
    assert.equal(await sh(sb, 'whoami; pwd'), 'user\n/home/user')
    // The user phase: `user` made by the build, with passwordless sudo.
    assert.equal(await sh(sb, 'sudo -n whoami'), 'root')
    assert.equal(await sh(sb, 'test -x /sbin/airlock-agent && cat /etc/hostname'), 'airlock')
  } finally {
    await sb.kill()
  }
})

maybe('a python-slim-style Dockerfile FROM the registry image builds on the cached base; its CMD serves port 8000', { timeout: 900000 }, async () => {
  assert.ok(first, 'the fromImage build ran')
  const ctx = join(work, 'ctx')
  mkdirSync(ctx, { recursive: true })
  writeFileSync(join(ctx, 'requirements.txt'), 'requests==2.31.0\n')
  const dockerfile = [
    `FROM ${ref}`,
    'ENV APP_HOME=/srv/app GREETING=hello',
    'WORKDIR /srv/app',
    'COPY requirements.txt .',
    'RUN python3 -c "import sys; print(sys.version_info[0])" > py.txt && cp requirements.txt reqs.txt && echo "$PYTHON_VERSION $GREETING $APP_HOME" > env.txt',
    'EXPOSE 8000',
    'CMD ["python3", "-m", "http.server", "8000"]',
    '',
  ].join('\n')
  const t = Template({ fileContextPath: ctx }).fromDockerfile(dockerfile)
  const b = await build(t, 'pyslim-dockerfile-e2e')
  console.log(`# Dockerfile build ${b.ms} ms`)
  const joined = b.logs.join('\n')
  // Same base, same team: the user phase's layer is reused and nothing is pulled.
  assert.ok(b.logs.some((l) => /^CACHED \[base\] USER user \[/.test(l)), joined)
  assert.ok(!b.logs.some((l) => /^\[base\] pulling /.test(l)), joined)
  const sb = await Sandbox.create('pyslim-dockerfile-e2e', opts)
  try {
    assert.equal(await sh(sb, 'cat /srv/app/py.txt /srv/app/reqs.txt /srv/app/env.txt'), '3\nrequests==2.31.0\n3.11 hello /srv/app')
    assert.equal(await sh(sb, 'whoami; pwd'), 'user\n/srv/app')
    // The CMD runs (started by the template, already up in its snapshot).
    assert.equal(await sh(sb, 'curl -s localhost:8000/py.txt'), '3')
    // And through the data plane.
    const headers = { 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '8000' }
    if (sb.trafficAccessToken) headers['E2B-Traffic-Access-Token'] = sb.trafficAccessToken
    const r = await fetch(`${d.url}/env.txt`, { headers })
    assert.equal(r.status, 200)
    assert.equal((await r.text()).trim(), '3.11 hello /srv/app')
  } finally {
    await sb.kill()
  }
})

maybe('fromImage of an image the registry does not have fails at base with the reason', { timeout: 300000 }, async () => {
  const nope = ref.replace('/test/pyslim:1', '/test/nope:1')
  const t0 = Date.now()
  await assert.rejects(build(Template().fromImage(nope).runCmd('true'), 'nope-e2e'), (e) => {
    assert.ok(e instanceof BuildError, String(e))
    assert.match(e.message, new RegExp(`cannot pull image '${nope.replace(/[.]/g, '\\.')}'`))
    assert.match(e.message, /manifest unknown|not known|not found/i)
    return true
  })
  console.log(`# failed build answered in ${Date.now() - t0} ms`)
  // The status names the step.
  const bg = await Template.buildInBackground(Template().fromImage(nope).runCmd('true'), 'nope-bg-e2e', opts)
  let st
  for (let i = 0; i < 200; i++) {
    st = await Template.getBuildStatus(bg, { ...opts, logsOffset: 0 })
    if (st.status === 'error' || st.status === 'ready') break
    await new Promise((r) => setTimeout(r, 200))
  }
  assert.equal(st.status, 'error')
  assert.equal(st.reason?.step, 'base', JSON.stringify(st.reason))
  assert.match(st.reason?.message ?? '', /cannot pull image/)
})

maybe('fromImage with registry credentials: wrong ones fail at base, right ones build', { timeout: 600000 }, async (t) => {
  if (!authRef) return t.skip('no bcrypt from python3 crypt for the htpasswd file')
  await assert.rejects(build(Template().fromImage(authRef, { username: 'alice', password: 'wrong' }).runCmd('true'), 'auth-bad-e2e'), (e) => {
    assert.ok(e instanceof BuildError, String(e))
    assert.match(e.message, /cannot pull image .*(unauthorized|authentication required)/i)
    return true
  })
  const b = await build(Template().fromImage(authRef, { username: 'alice', password: 's3cret-pw' })
    .runCmd('echo "$PYTHON_VERSION" > /home/user/auth.txt'), 'auth-e2e')
  console.log(`# fromImage with credentials build ${b.ms} ms`)
  const sb = await Sandbox.create('auth-e2e', opts)
  try {
    assert.equal(await sh(sb, 'cat /home/user/auth.txt'), '3.11')
  } finally {
    await sb.kill()
  }
})

maybe('hostile images fail at base, before a VM: a planted etc/airlock link, a layer past --max-image-unpack', { timeout: 300000 }, async () => {
  const before = statSync(join(hostDir, 'rootfs-id'))
  await assert.rejects(build(Template().fromImage(linkRef).runCmd('true'), 'link-e2e'), (e) => {
    assert.ok(e instanceof BuildError, String(e))
    assert.match(e.message, /the image's '\/etc\/airlock' is a symlink/)
    return true
  })
  // The host directory is as it was: the same file, nothing added.
  const after = statSync(join(hostDir, 'rootfs-id'))
  assert.equal(after.ino, before.ino)
  assert.equal(readFileSync(join(hostDir, 'rootfs-id'), 'utf8'), 'host\n')
  assert.deepEqual(readdirSync(hostDir), ['rootfs-id'])
  const t0 = Date.now()
  await assert.rejects(build(Template().fromImage(bombRef).runCmd('true'), 'bomb-e2e'), (e) => {
    assert.ok(e instanceof BuildError, String(e))
    assert.match(e.message, new RegExp(`expand to more than ${MAX_UNPACK_MIB} MiB when unpacked`))
    return true
  })
  console.log(`# expanding layer refused in ${Date.now() - t0} ms`)
})

maybe('fromImage cannot probe the host: a closed port, an HTTP service, localhost and a loopback alias read the same', { timeout: 300000 }, async () => {
  const closed = await freePort()
  const daemonPort = new URL(d.url).port
  const refs = [
    `127.0.0.1:${closed}/x:1`, // nothing listens
    `127.0.0.1:${daemonPort}/x:1`, // the daemon's own HTTP API
    `localhost:${daemonPort}/x:1`, // Go never proxies localhost: refused before skopeo
    `127.1:${registryPort}/test/pyslim:1`, // the allowed registry under another name: resolved by the proxy, refused
  ]
  const t0 = Date.now()
  const seen = []
  for (const r of refs) {
    await assert.rejects(build(Template().fromImage(r).runCmd('true'), 'probe-e2e'), (e) => {
      assert.ok(e instanceof BuildError, String(e))
      assert.ok(e.message.includes(`cannot pull image '${r}': the registry refused or could not be reached`), e.message)
      assert.doesNotMatch(e.message, /connect|dial|HTTP|tls|timeout|gateway|EOF|no such host|127\.0\.0\.1:[0-9]+\/v2/i)
      seen.push(e.message.replace(r, 'REF'))
      return true
    })
  }
  assert.equal(new Set(seen).size, 1, seen.join('\n'))
  console.log(`# ${refs.length} refused pulls answered in ${Date.now() - t0} ms`)
})
