// End-to-end: E2B volumes (docs/volumes.md) through the official e2b SDK
// (tests/e2e's own 2.51.0, unmodified: it has `Volume`) against a real
// `airlock serve`: the control plane (Volume.create/getInfo/list/connect/
// destroy, airlock's sizeMB and team budget), the content API
// (Volume#list/makeDir/getInfo/exists/updateMetadata/readFile/writeFile/
// remove, token per volume, never following a symlink), mounts
// (Sandbox.create volumeMounts, both forms; two sandboxes and the content API
// see each other's writes; ENOSPC at sizeMB), what survives pause/resume,
// fork, checkpoint+rollback (qemu) and a daemon killed -9 and restarted.
// One daemon; two sandboxes shared by the mount cases (TCG is slow); every
// wait is for a condition, never a fixed sleep.
//
// The SDK sends volume *content* calls to opts.apiUrl ||
// E2B_VOLUME_API_URL || https://api.<domain> (VolumeConnectionConfig; not
// to E2B_API_URL): before() sets E2B_VOLUME_API_URL to the daemon.
//
// Env: AIRLOCK_BIN (required), AIRLOCK_STATE_DIR, AIRLOCK_RUNTIME (daemon.mjs).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { RUNTIME, e2b, skipReason, startDaemon, waitFor } from './daemon.mjs'

const { Sandbox, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError, AuthenticationError } = e2b

// 64 MiB volumes by default keep mkfs and the ENOSPC case cheap; 512 MiB
// per team leaves the budget case room.
const ARGS = ['--volume-size-mib', '64', '--team-volume-budget-mib', '512']
let d, opts, other, vol, small, sbxA, sbxB, canary, prSha, nfsBefore
const maybe = skipReason ? test.skip : test

// What the guest's /proc/mounts says of a volume: NFS (qemu), the gofer's 9p (gVisor).
const MOUNT_TYPE = RUNTIME === 'gvisor' ? /^9p rw/ : /^nfs rw/
const sha256 = (buf) => createHash('sha256').update(buf).digest('hex')
const sh = (s, cmd, o = {}) => s.commands.run(cmd, { timeoutMs: 120000, ...o })
const out = async (s, cmd) => (await sh(s, cmd)).stdout.trim()
const guestSha = (s, p) => out(s, `sha256sum ${p} | cut -d' ' -f1`)
const mountOf = (s, p) => out(s, `awk '$2=="${p}"{print $3" "$4}' /proc/mounts`)
// NFS caches attributes up to 1 s (src/agent/volume_mounts.h): a fresh
// command shows another writer's bytes within that; poll, never sleep.
async function guestSees(s, cmd, expected, what) {
  let last
  const ok = await waitFor(async () => (last = await out(s, `${cmd} 2>/dev/null || true`)) === expected, 30000, 250)
  assert.ok(ok, `${what}: ${JSON.stringify(last)}, expected ${JSON.stringify(expected)}`)
}

// Every NFS server on this host (ours: this suite's, or another's running
// beside it) holds nothing of the host's file systems (core/volumes.h): no
// mount and no open fd on the device of the host's root or of /dev, so
// open_by_handle_at (it keeps CAP_DAC_READ_SEARCH) reaches no host file;
// fds 0-2 are its own /dev/null; its bounding set is file serving's; it is
// pid 1's child in a pid namespace of its own.
function assertNfsServersConfined() {
  const devOf = (p) => { const st = statSync(p); return `${Math.floor(st.dev / 256)}:${st.dev % 256}` }
  const hostDevs = new Set(['/', '/dev', '/proc', '/tmp', '/run', '/var/lib'].map(devOf))
  const pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
    try { return readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'ganesha.nfsd' } catch { return false }
  })
  assert.ok(pids.length >= 1, 'an NFS server runs for the sandboxes with volumes')
  for (const pid of pids) {
    // mountinfo: id parent major:minor root mountpoint options [optional...] - fstype source ...
    const mounts = readFileSync(`/proc/${pid}/mountinfo`, 'utf8').trim().split('\n').map((l) => {
      const f = l.split(' ')
      return { dev: f[2], point: f[4], type: f[f.indexOf('-') + 1], line: l }
    })
    for (const m of mounts) assert.ok(!hostDevs.has(m.dev), `server ${pid} holds a host mount: ${m.line}`)
    assert.deepEqual(mounts.filter((m) => m.point === '/').map((m) => m.type), ['tmpfs'], 'its root is a tmpfs')
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      let st
      try { st = statSync(`/proc/${pid}/fd/${fd}`) } catch { continue }  // closed meanwhile
      const dev = `${Math.floor(st.dev / 256)}:${st.dev % 256}`
      if (st.isFile() || st.isDirectory() || st.isCharacterDevice()) assert.ok(!hostDevs.has(dev), `server ${pid} fd ${fd} is on a host file system`)
    }
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    // At most chown 0, dac_override 1, dac_read_search 2, fowner 3, fsetid 4,
    // setgid 6, setuid 7, sys_resource 24 (ganesha drops the last itself).
    const bnd = BigInt('0x' + /^CapBnd:\s+([0-9a-f]+)$/m.exec(status)[1])
    assert.equal(bnd & ~0x10000dfn, 0n, `its bounding set is file serving's: ${bnd.toString(16)}`)
    assert.match(status, /^NSpid:\s+\d+\s+\d+$/m, 'it is in a pid namespace of its own')
  }
}

async function api(method, path, body, key = opts.apiKey, headers = {}) {
  const r = await fetch(`${d.url}${path}`, { method, headers: { 'X-API-Key': key, 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await r.text()
  let json = null
  try { json = text ? JSON.parse(text) : null } catch { json = text }
  return { status: r.status, body: json }
}
const rejectsWith = (p, status) => assert.rejects(p, (e) => {
  assert.ok(e instanceof VolumeError, `${e}`)
  assert.match(e.message, new RegExp(`^${status}: `))
  return true
})

// TCP listeners on the NFS ports (2049, 20048, rpcbind's 111) in the host's netns.
function nfsListeners() {
  return ['/proc/net/tcp', '/proc/net/tcp6'].flatMap((f) => readFileSync(f, 'utf8').split('\n').slice(1))
    .map((l) => l.trim().split(/\s+/)).filter((c) => c[3] === '0A' && /:(0801|4E50|006F)$/.test(c[1] || '')).length
}
// The daemon's view of its mounts (it may hold them in a namespace of its own).
function daemonMounts() {
  const port = new URL(d.url).port
  const pid = execFileSync('pgrep', ['-o', '-f', '--', `--listen 127.0.0.1:${port}`], { encoding: 'utf8' }).trim()
  return readFileSync(`/proc/${pid}/mounts`, 'utf8').split('\n').map((l) => l.split(' '))
}

before(async () => {
  if (skipReason) return
  nfsBefore = nfsListeners()
  d = await startDaemon(ARGS)
  opts = d.opts
  other = { ...opts, apiKey: d.createKey('e2e-vol-other') }
  process.env.E2B_VOLUME_API_URL = d.url
  canary = mkdtempSync(join(tmpdir(), 'airlock-e2e-canary-'))
  writeFileSync(join(canary, 'target.txt'), 'canary')
})

after(async () => {
  for (const s of [sbxA, sbxB]) if (s) await s.kill().catch(() => {})
  if (d) await d.stop()
  if (canary) rmSync(canary, { recursive: true, force: true })
})

maybe('volumes API: create/getInfo/list/connect; names unique per team, bad names 400; another team sees none of it', { timeout: 120000 }, async () => {
  vol = await Volume.create('e2e-data', opts)
  assert.ok(vol.volumeId && vol.volumeId !== vol.name, vol.volumeId)  // TODO(verify): the id's format
  assert.equal(vol.name, 'e2e-data')
  assert.ok(vol.token.length >= 16, 'a bearer token for the content API')
  assert.deepEqual(await Volume.getInfo(vol.volumeId, opts),
    { volumeId: vol.volumeId, name: 'e2e-data', token: vol.token, domain: undefined })
  // airlock adds sizeMB (here serve --volume-size-mib 64) and createdAt, and takes the name for the id.
  const got = await api('GET', `/volumes/${vol.volumeId}`)
  assert.equal(got.status, 200)
  assert.deepEqual([got.body.volumeID, got.body.name, got.body.token, got.body.sizeMB], [vol.volumeId, 'e2e-data', vol.token, 64])
  assert.equal((await api('GET', '/volumes/e2e-data')).body.volumeID, vol.volumeId)
  const c = await Volume.connect(vol.volumeId, opts)
  assert.equal(c.token, vol.token)
  // sizeMB: airlock's extension, refused when not a positive integer.
  const made = await api('POST', '/volumes', { name: 'e2e-small', sizeMB: 16 })
  assert.equal(made.status, 201, JSON.stringify(made.body))
  assert.equal(made.body.name, 'e2e-small')
  assert.ok(made.body.volumeID && made.body.token, JSON.stringify(made.body))
  small = new Volume(made.body.volumeID, made.body.name, made.body.token)
  assert.equal((await api('GET', `/volumes/${small.volumeId}`)).body.sizeMB, 16)
  for (const sizeMB of [0, -1, '16', 1.5]) {
    assert.equal((await api('POST', '/volumes', { name: 'e2e-bad-size', sizeMB })).status, 400, `sizeMB ${sizeMB}`)
  }
  const listed = await Volume.list(opts)
  for (const v of [vol, small]) assert.ok(listed.some((l) => l.volumeId === v.volumeId && l.name === v.name), JSON.stringify(listed))
  assert.equal((await api('GET', '/volumes')).body.find((v) => v.volumeID === vol.volumeId)?.name, 'e2e-data')

  await rejectsWith(Volume.create('e2e-data', opts), 409)
  for (const name of ['', '..', '.hidden', '/', 'a/b', 'has space', 'x'.repeat(64)]) await rejectsWith(Volume.create(name, opts), 400)
  const longest = await Volume.create('x'.repeat(63), opts)
  assert.equal(await Volume.destroy(longest.volumeId, opts), true)

  // Another team: 404 on every route (destroy reads 404 as false), and the name is free for it.
  await assert.rejects(Volume.getInfo(vol.volumeId, other), VolumeNotFoundError)
  assert.equal(await Volume.destroy(vol.volumeId, other), false)
  assert.equal((await api('GET', `/volumes/${vol.volumeId}`, undefined, other.apiKey)).status, 404)
  assert.ok(!(await Volume.list(other)).some((v) => v.volumeId === vol.volumeId))
  const theirs = await Volume.create('e2e-data', other)
  assert.notEqual(theirs.volumeId, vol.volumeId)
  assert.notEqual(theirs.token, vol.token)
  assert.equal((await api('GET', '/volumes/e2e-data', undefined, other.apiKey)).body.volumeID, theirs.volumeId, 'a name is the team\'s')
  assert.equal(await Volume.destroy(theirs.volumeId, other), true)
  assert.equal((await Volume.getInfo(vol.volumeId, opts)).name, 'e2e-data', 'ours is untouched')
})

maybe('the team volume budget (--team-volume-budget-mib) counts sizeMB; a delete frees it', { timeout: 120000 }, async () => {
  const key = d.createKey('e2e-vol-budget')
  const mk = (name, sizeMB) => api('POST', '/volumes', { name, sizeMB }, key)
  const b1 = await mk('b1', 400)
  assert.equal(b1.status, 201)
  for (const [name, size] of [['b2', 200], ['huge', 1000]]) {
    const refused = await mk(name, size)
    // TODO(verify): 507 (ResourceExhausted maps to 503, E2B's "retry" ServiceBusyError, without HttpStatusContext::kDisk).
    assert.equal(refused.status, 507, JSON.stringify(refused.body))
    assert.match(refused.body.message, /budget/i)
  }
  const b2 = await mk('b2', 112)
  assert.equal(b2.status, 201, 'up to the budget exactly')
  assert.equal((await api('DELETE', `/volumes/${b1.body.volumeID}`, undefined, key)).status, 204)
  const b3 = await mk('b3', 200)
  assert.equal(b3.status, 201, 'the delete gave the space back')
  for (const b of [b2, b3]) assert.equal((await api('DELETE', `/volumes/${b.body.volumeID}`, undefined, key)).status, 204)
})

maybe('content API: write (force makes parents), overwrite, read bytes, makeDir, list, getInfo, updateMetadata, remove; owner 1000, 0644/0755', { timeout: 120000 }, async () => {
  assert.deepEqual(await vol.list('/'), [], 'a new volume is empty (mkfs\'s lost+found removed)')
  await assert.rejects(vol.writeFile('/docs/a.txt', 'hello'), VolumePathNotFoundError, 'no parent, no force: 404')
  const w = await vol.writeFile('/docs/a.txt', 'hello', { force: true })
  assert.deepEqual({ ...w, atime: 0, mtime: 0, ctime: 0 },
    { name: 'a.txt', path: '/docs/a.txt', type: 'file', size: 5, mode: 0o644, uid: 1000, gid: 1000, atime: 0, mtime: 0, ctime: 0 })
  assert.ok(Math.abs(w.mtime.getTime() - Date.now()) < 60000, `mtime ${w.mtime}`)
  const dir = await vol.getInfo('/docs')
  assert.deepEqual([dir.type, dir.mode, dir.uid, dir.gid, dir.name, dir.path], ['directory', 0o755, 1000, 1000, 'docs', '/docs'])
  assert.equal((await vol.writeFile('/docs/a.txt', 'second')).size, 6, 'an overwrite')
  assert.equal(await vol.readFile('/docs/a.txt'), 'second')
  const data = randomBytes(3 << 20)
  await vol.writeFile('/docs/blob.bin', data)
  assert.equal(sha256(await vol.readFile('/docs/blob.bin', { format: 'bytes' })), sha256(data))
  // uid/gid/mode go as query numbers (mode in decimal: 0o600 is mode=384).
  const s = await vol.writeFile('/docs/secret', 's', { mode: 0o600, uid: 0, gid: 0 })
  assert.deepEqual([s.mode, s.uid, s.gid], [0o600, 0, 0])
  const m = await vol.makeDir('/deep/er', { force: true, mode: 0o700 })
  assert.deepEqual([m.type, m.mode, m.uid, m.path], ['directory', 0o700, 1000, '/deep/er'])
  const u = await vol.updateMetadata('/docs/a.txt', { mode: 0o640, uid: 1001 })
  assert.deepEqual([u.mode, u.uid, u.gid], [0o640, 1001, 1000], 'only the fields sent change')
  const top = (await vol.list('/')).map((e) => `${e.type} ${e.path}`).sort()
  assert.deepEqual(top, ['directory /deep', 'directory /docs'])
  const two = (await vol.list('/', { depth: 2 })).map((e) => e.path).sort()
  assert.deepEqual(two, ['/deep', '/deep/er', '/docs', '/docs/a.txt', '/docs/blob.bin', '/docs/secret'])
  assert.equal(await vol.exists('/docs/a.txt'), true)
  assert.equal(await vol.exists('/nope'), false)
  await assert.rejects(vol.getInfo('/nope'), VolumePathNotFoundError)
  await assert.rejects(vol.readFile('/nope'), VolumePathNotFoundError)
  await assert.rejects(vol.list('/nope'), VolumePathNotFoundError)
  await vol.remove('/docs/secret')
  await vol.remove('/deep/er')
  await vol.remove('/deep')
  assert.equal(await vol.exists('/deep'), false)
  await assert.rejects(vol.remove('/deep'), VolumePathNotFoundError)
})

maybe('content API: the bearer token is per volume, none is 401, an API key is no token, ".." is 400', { timeout: 60000 }, async () => {
  // Another volume's token: 404 (the SDK's VolumePathNotFoundError) or 401.
  await assert.rejects(vol.readFile('/docs/a.txt', { token: small.token }),
    (e) => e instanceof VolumePathNotFoundError || e instanceof AuthenticationError)
  await assert.rejects(new Volume(vol.volumeId, vol.name).list('/'), AuthenticationError)
  const bare = await fetch(`${d.url}/volumecontent/${vol.volumeId}/file?path=/docs/a.txt`)
  assert.equal(bare.status, 401)
  // A tenant's HTML read back on our origin is a download, never a page.
  await vol.writeFile('/page.html', '<html><script>alert(document.cookie)</script></html>')
  const page = await fetch(`${d.url}/volumecontent/${vol.volumeId}/file?path=/page.html`, { headers: { Authorization: `Bearer ${vol.token}` } })
  assert.equal(page.status, 200)
  assert.deepEqual([page.headers.get('content-type'), page.headers.get('content-disposition'), page.headers.get('x-content-type-options')],
    ['application/octet-stream', 'attachment', 'nosniff'])
  assert.equal(await page.text(), '<html><script>alert(document.cookie)</script></html>')
  await vol.remove('/page.html')
  const byKey = await fetch(`${d.url}/volumecontent/${vol.volumeId}/file?path=/docs/a.txt`, { headers: { 'X-API-Key': opts.apiKey } })
  assert.equal(byKey.status, 401)  // TODO(verify): only the volume's token opens its content
  await rejectsWith(vol.readFile('/../etc/passwd'), 400)
  await rejectsWith(vol.readFile('/docs/../../etc/passwd'), 400)
  await rejectsWith(vol.writeFile('/docs/../../x', 'x', { force: true }), 400)
  await rejectsWith(vol.makeDir('/..'), 400)
  await rejectsWith(vol.list('/..'), 400)
})

maybe('Sandbox.create refuses a bad volumeMounts (a bad path, an unknown name, another team\'s volume) and starts nothing', { timeout: 120000 }, async () => {
  const refused = (o, statuses) => assert.rejects(Sandbox.create('base', o), (e) => {
    assert.ok(statuses.includes(e.statusCode), `${e.statusCode} ${e.message}`)
    return true
  })
  await refused({ ...opts, volumeMounts: { 'relative/path': vol } }, [400])
  await refused({ ...opts, volumeMounts: { '/': vol } }, [400])
  await refused({ ...opts, volumeMounts: { '/mnt/../etc': vol } }, [400])
  // TODO(verify): 400 or 404 for a volume name the team does not have.
  await refused({ ...opts, volumeMounts: { '/mnt/x': 'no-such-volume' } }, [400, 404])
  await refused({ ...other, volumeMounts: { '/mnt/x': 'e2e-small' } }, [400, 404])
  assert.equal((await Sandbox.list(opts).nextItems()).length, 0)
})

maybe('mounts: both forms, read-write for `user`; two sandboxes and the content API see each other\'s writes; sizeMB is the size; 409 on delete', { timeout: 600000 }, async () => {
  ;[sbxA, sbxB] = await Promise.all([
    Sandbox.create('base', { ...opts, timeoutMs: 1800000, volumeMounts: { '/mnt/data': vol } }),
    Sandbox.create('base', { ...opts, timeoutMs: 1800000, volumeMounts: { '/mnt/data': 'e2e-data', '/mnt/small': small.name } }),
  ])
  const mounts = async (id) => (await Sandbox.getInfo(id, opts)).volumeMounts.slice().sort((a, b) => a.path.localeCompare(b.path))
  assert.deepEqual(await mounts(sbxA.sandboxId), [{ name: 'e2e-data', path: '/mnt/data' }])
  assert.deepEqual(await mounts(sbxB.sandboxId), [{ name: 'e2e-data', path: '/mnt/data' }, { name: 'e2e-small', path: '/mnt/small' }])
  const listed = (await Sandbox.list(opts).nextItems()).find((s) => s.sandboxId === sbxA.sandboxId)
  assert.deepEqual(listed.volumeMounts, [{ name: 'e2e-data', path: '/mnt/data' }])  // TODO(verify): GET /v2/sandboxes lists them too
  for (const s of [sbxA, sbxB]) {
    const [fstype, options] = (await mountOf(s, '/mnt/data')).split(' ')
    if (RUNTIME === 'qemu') assert.equal(fstype, 'nfs')
    assert.match(options, /(^|,)rw(,|$)/)
    const size = Number(await out(s, 'df -m --output=size /mnt/data | tail -1'))  // TODO(verify): gVisor's statfs of a bind mount
    assert.ok(size > 40 && size <= 64, `--volume-size-mib 64: df says ${size} MiB`)
  }
  // Written by the content API: there as written, to both guests.
  // The volume's root is the sandbox user's (1000, 0755), as what the API makes.
  assert.equal(await out(sbxA, 'stat -c "%u %g %a" /mnt/data /mnt/data/docs/a.txt'), '1000 1000 755\n1001 1000 640')
  await guestSees(sbxB, 'cat /mnt/data/docs/a.txt', 'second', 'B reads the API\'s file')
  // Written in A (as `user`), seen by the API and by B after A's command returned.
  prSha = await out(sbxA, 'head -c 1048576 /dev/urandom > /mnt/data/pr.bin && sha256sum /mnt/data/pr.bin | cut -d" " -f1')
  assert.equal(sha256(await vol.readFile('/pr.bin', { format: 'bytes' })), prSha)
  const st = await vol.getInfo('/pr.bin')
  assert.deepEqual([st.uid, st.gid, st.mode, st.size], [1000, 1000, 0o644, 1 << 20])
  await guestSees(sbxB, 'sha256sum /mnt/data/pr.bin | cut -d" " -f1', prSha, 'B reads A\'s bytes')
  await sh(sbxB, 'echo from-b > /mnt/data/b.txt')
  await guestSees(sbxA, 'cat /mnt/data/b.txt', 'from-b', 'A reads B\'s file')
  // An overwrite of a file a guest has already read (its attribute cache expires).
  await vol.writeFile('/ver.txt', 'v1')
  await guestSees(sbxA, 'cat /mnt/data/ver.txt', 'v1', 'A reads v1')
  await vol.writeFile('/ver.txt', 'v2')
  await guestSees(sbxA, 'cat /mnt/data/ver.txt', 'v2', 'A reads the overwrite')
  await sh(sbxA, 'rm /mnt/data/ver.txt')
  assert.equal(await vol.exists('/ver.txt'), false)
  // Host side: one ext4 image per volume, loop-mounted nodev,nosuid,noexec;
  // no NFS server listening in the host's netns (only in each sandbox's).
  // <state_dir>/volumes/<id>/fs. TODO(verify): a gVisor bind of it, if the daemon's namespace shows one, has the same flags.
  const hms = daemonMounts().filter((f) => f[1] && f[1].includes(vol.volumeId))
  assert.ok(hms.length >= 1, 'the volume\'s host mount')
  for (const hm of hms) {
    assert.match(hm[0], /^\/dev\/loop\d+$/)
    assert.equal(hm[2], 'ext4')
    for (const o of ['nodev', 'nosuid', 'noexec']) assert.ok(hm[3].split(',').includes(o), `${o} in ${hm.join(' ')}`)
  }
  assert.equal(nfsListeners(), nfsBefore, 'no NFS listener added to the host netns')
  if (RUNTIME === 'qemu') assertNfsServersConfined()
  // Mounted: the delete is refused, and the volume is whole.
  await rejectsWith(Volume.destroy(vol.volumeId, opts), 409)
  assert.equal((await api('DELETE', `/volumes/${small.volumeId}`)).status, 409)
  assert.equal(await vol.readFile('/docs/a.txt'), 'second')
})

maybe('symlinks (and a fifo) made in a guest: shown as they are, never followed (or opened) by the content API', { timeout: 300000 }, async () => {
  await sh(sbxA, `ln -s /etc /mnt/data/esc && ln -s ${canary} /mnt/data/escdir && ln -s ${canary}/target.txt /mnt/data/canary && ` +
    'ln -s ../../../../../../etc /mnt/data/rel && mkfifo /mnt/data/fifo')
  const esc = await vol.getInfo('/esc')
  assert.deepEqual([esc.type, esc.target, esc.name, esc.path], ['symlink', '/etc', 'esc', '/esc'])
  const byName = Object.fromEntries((await vol.list('/')).map((e) => [e.name, e]))
  assert.deepEqual([byName.esc.type, byName.esc.target], ['symlink', '/etc'])
  assert.deepEqual([byName.rel.type, byName.rel.target], ['symlink', '../../../../../../etc'])  // readlink's text
  assert.equal(byName['pr.bin'].target, undefined)
  // Reads, writes, listings, metadata: through a link, refused; the host's files untouched.
  await rejectsWith(vol.readFile('/esc/passwd'), 400)
  await rejectsWith(vol.readFile('/rel/passwd'), 400)
  await rejectsWith(vol.readFile('/escdir/target.txt'), 400)
  await rejectsWith(vol.readFile('/canary'), 400)  // the last component a link: refused too
  await rejectsWith(vol.writeFile('/escdir/new.txt', 'x'), 400)
  await rejectsWith(vol.writeFile('/escdir/sub/new.txt', 'x', { force: true }), 400)
  await rejectsWith(vol.writeFile('/canary', 'pwned'), 400)
  await rejectsWith(vol.makeDir('/escdir/newdir', { force: true }), 400)
  await rejectsWith(vol.list('/escdir'), 400)  // "not a directory"
  const hostBefore = statSync(join(canary, 'target.txt'))
  await vol.updateMetadata('/canary', { mode: 0o777, uid: 4242 }).catch(() => {})
  const hostAfter = statSync(join(canary, 'target.txt'))
  assert.deepEqual([hostAfter.mode, hostAfter.uid], [hostBefore.mode, hostBefore.uid], 'metadata of the link\'s target')
  assert.equal(readFileSync(join(canary, 'target.txt'), 'utf8'), 'canary')
  assert.deepEqual(readdirSync(canary), ['target.txt'])
  // A planted fifo is an 'unknown' entry, refused at once (a read would block for ever).
  // On gVisor a named pipe lives in the Sentry: the gofer never makes one on the host.
  if (RUNTIME !== 'gvisor') {
    assert.equal((await vol.getInfo('/fifo')).type, 'unknown')
    await rejectsWith(vol.readFile('/fifo', { requestTimeoutMs: 10000 }), 400)
    await rejectsWith(vol.writeFile('/fifo', 'x', { requestTimeoutMs: 10000 }), 400)
  } else {
    assert.equal(await vol.exists('/fifo'), false)
    await sh(sbxA, 'rm /mnt/data/fifo')
  }
  // remove: the link only.
  for (const p of ['/esc', '/escdir', '/canary', '/rel', ...(RUNTIME !== 'gvisor' ? ['/fifo'] : [])]) await vol.remove(p)
  assert.equal(await out(sbxA, 'ls -A /mnt/data | sort | tr "\\n" " "'), 'b.txt docs pr.bin')
  assert.ok(existsSync('/etc/passwd') && existsSync(join(canary, 'target.txt')))
  assert.equal(await out(sbxA, 'test -f /etc/passwd && echo ok'), 'ok')
})

maybe('a volume is sizeMB big: the guest gets ENOSPC, the content API 507, nothing half-written is left', { timeout: 300000 }, async () => {
  const size = Number(await out(sbxB, 'df -m --output=size /mnt/small | tail -1'))
  assert.ok(size > 8 && size <= 16, `sizeMB 16: df says ${size} MiB`)
  const dd = await out(sbxB, 'dd if=/dev/zero of=/mnt/small/fill bs=1M count=32 conv=fsync 2>&1; echo rc=$?')
  assert.match(dd, /No space left on device/)
  assert.doesNotMatch(dd, /rc=0$/)
  await sh(sbxB, 'rm -f /mnt/small/fill')
  // TODO(verify): the handler removes what it wrote (VolumeFs::CreateFile truncates in place). And a PUT refused before
  // its body is read must still reach the SDK as 507: a server closing with unread bytes sends RST, which undici may
  // report as a socket error instead (drain, or shut down the write side first).
  await rejectsWith(small.writeFile('/too-big.bin', Buffer.alloc(24 << 20)), 507)
  assert.equal(await small.exists('/too-big.bin'), false)
  const ok = randomBytes(4 << 20)
  await small.writeFile('/ok.bin', ok)
  await guestSees(sbxB, 'sha256sum /mnt/small/ok.bin | cut -d" " -f1', sha256(ok), 'the space is back')
  assert.equal(await out(sbxB, 'dd if=/dev/zero of=/mnt/small/more bs=1M count=4 conv=fsync 2>/dev/null; echo rc=$?'), 'rc=0')
})

maybe('pause and resume: the mount is back, its bytes identical; the content API works and delete is 409 while paused', { timeout: 600000 }, async () => {
  assert.equal(await sbxA.pause(), true)
  const info = await Sandbox.getInfo(sbxA.sandboxId, opts)
  assert.equal(info.state, 'paused')
  assert.deepEqual(info.volumeMounts, [{ name: 'e2e-data', path: '/mnt/data' }])
  await rejectsWith(Volume.destroy(vol.volumeId, opts), 409)
  await vol.writeFile('/while-paused.txt', 'written while paused')
  assert.equal(sha256(await vol.readFile('/pr.bin', { format: 'bytes' })), prSha)
  sbxA = await Sandbox.connect(sbxA.sandboxId, opts)
  assert.match(await mountOf(sbxA, '/mnt/data'), MOUNT_TYPE)
  assert.equal(await guestSha(sbxA, '/mnt/data/pr.bin'), prSha)
  await guestSees(sbxA, 'cat /mnt/data/while-paused.txt', 'written while paused', 'the paused-time write')
  await sh(sbxA, 'echo after > /mnt/data/after-resume.txt')
  assert.equal(await vol.readFile('/after-resume.txt'), 'after\n')
  await guestSees(sbxB, 'cat /mnt/data/after-resume.txt', 'after', 'B reads the resumed A\'s file')
})

maybe('fork: the child mounts the same volume (not a copy): identical bytes, and writes both ways', { timeout: 600000 }, async () => {
  const [child] = await Sandbox.fork(sbxA.sandboxId, { ...opts, count: 1, timeoutMs: 300000 })
  assert.ok(!(child instanceof Error), `${child}`)
  try {
    assert.deepEqual((await Sandbox.getInfo(child.sandboxId, opts)).volumeMounts, [{ name: 'e2e-data', path: '/mnt/data' }])
    assert.match(await mountOf(child, '/mnt/data'), MOUNT_TYPE)
    assert.equal(await guestSha(child, '/mnt/data/pr.bin'), prSha)
    await sh(child, 'echo from-child > /mnt/data/child.txt')
    await guestSees(sbxA, 'cat /mnt/data/child.txt', 'from-child', 'the parent reads the child\'s file')
    await sh(sbxA, 'echo from-parent > /mnt/data/parent.txt')
    await guestSees(child, 'cat /mnt/data/parent.txt', 'from-parent', 'the child reads the parent\'s file')
    await rejectsWith(Volume.destroy(vol.volumeId, opts), 409)
  } finally {
    await child.kill()
  }
  assert.equal(await vol.readFile('/child.txt'), 'from-child\n', 'the child\'s write outlives it')
})

maybe('checkpoint and rollback: the sandbox goes back, the volume does not (a write after the checkpoint survives)', { timeout: 600000 }, async () => {
  await sh(sbxA, 'echo before > ~/home-before.txt')
  const cp = await api('POST', `/sandboxes/${sbxA.sandboxId}/checkpoints`, {})
  assert.equal(cp.status, 201, JSON.stringify(cp.body))
  await sh(sbxA, 'echo after-ckpt > /mnt/data/after-ckpt.txt && echo gone > ~/home-after.txt && rm ~/home-before.txt')
  await vol.writeFile('/api-after-ckpt.txt', 'api')
  const rb = await api('POST', `/sandboxes/${sbxA.sandboxId}/rollback`, { checkpointID: cp.body.checkpointID })
  assert.equal(rb.status, 200, JSON.stringify(rb.body))
  assert.equal(await out(sbxA, 'cat ~/home-before.txt; test -e ~/home-after.txt || echo rolled-back'), 'before\nrolled-back')
  assert.match(await mountOf(sbxA, '/mnt/data'), MOUNT_TYPE)
  await guestSees(sbxA, 'cat /mnt/data/after-ckpt.txt', 'after-ckpt', 'the volume write after the checkpoint')
  await guestSees(sbxA, 'cat /mnt/data/api-after-ckpt.txt', 'api', 'the content API write after the checkpoint')
  assert.equal(await guestSha(sbxA, '/mnt/data/pr.bin'), prSha)
  await sh(sbxA, 'echo after-rollback > /mnt/data/after-rollback.txt')
  assert.equal(await vol.readFile('/after-rollback.txt'), 'after-rollback\n')
  const del = await api('DELETE', `/sandboxes/${sbxA.sandboxId}/checkpoints/${cp.body.checkpointID}`)
  assert.equal(del.status, 204)
})

maybe('a volume outlives its sandboxes: delete is 409 until the last one mounting it is gone, then 204', { timeout: 300000 }, async () => {
  await sbxB.kill()
  sbxB = null
  assert.equal(await Volume.destroy(small.volumeId, opts), true, 'e2e-small was mounted by B only')
  await assert.rejects(Volume.getInfo(small.volumeId, opts), VolumeNotFoundError)
  await rejectsWith(Volume.destroy(vol.volumeId, opts), 409)
  await sbxA.kill()
  sbxA = null
  assert.equal(sha256(await vol.readFile('/pr.bin', { format: 'bytes' })), prSha)
  assert.equal(await vol.readFile('/b.txt'), 'from-b\n')
})

maybe('a daemon killed -9 and restarted on its state: volumes, tokens and bytes kept, mounted again; then deleted for good', { timeout: 600000 }, async () => {
  await d.kill9()
  d = await startDaemon(ARGS, d)
  opts = d.opts
  process.env.E2B_VOLUME_API_URL = d.url
  assert.deepEqual(await Volume.getInfo(vol.volumeId, opts),
    { volumeId: vol.volumeId, name: 'e2e-data', token: vol.token, domain: undefined })
  assert.equal(sha256(await vol.readFile('/pr.bin', { format: 'bytes' })), prSha, 'the old token still opens it')
  const s = await Sandbox.create('base', { ...opts, timeoutMs: 300000, volumeMounts: { '/mnt/again': 'e2e-data' } })
  try {
    assert.equal(await guestSha(s, '/mnt/again/pr.bin'), prSha)
    await sh(s, 'echo restarted > /mnt/again/restarted.txt')
    assert.equal(await vol.readFile('/restarted.txt'), 'restarted\n')
  } finally {
    await s.kill()
  }
  assert.equal(await Volume.destroy(vol.volumeId, opts), true)
  assert.equal(await Volume.destroy(vol.volumeId, opts), false)
  await assert.rejects(Volume.getInfo(vol.volumeId, opts), VolumeNotFoundError)
  assert.ok(!(await Volume.list(opts)).some((v) => v.volumeId === vol.volumeId))
  await assert.rejects(vol.readFile('/pr.bin'), (e) => e instanceof VolumePathNotFoundError || e instanceof AuthenticationError)
  assert.ok(!daemonMounts().some((f) => f[1] && f[1].includes(vol.volumeId)), 'its host mount is gone')
  // The name is free again.
  const again = await Volume.create('e2e-data', opts)
  assert.equal(await again.exists('/pr.bin'), false, 'a new volume of that name starts empty')
  assert.equal(await Volume.destroy(again.volumeId, opts), true)
})
