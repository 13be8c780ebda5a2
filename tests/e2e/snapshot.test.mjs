// End-to-end: pause/resume and fork through the official e2b SDK (2.51.0,
// unmodified) against a real `airlock serve` started here (temp port, fresh
// registry, the real state dir for images). See docs/snapshots.md.
//
// Env: AIRLOCK_BIN (required), AIRLOCK_STATE_DIR (default /var/lib/airlock).
// Skips (with the reason) when not root or when no guest image exists.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { RUNTIME, e2b, skipReason, startDaemon, waitFor } from './daemon.mjs'

const { Sandbox, SandboxNotFoundError } = e2b

let d, url, opts, apiKey
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const sha256 = (buf) => createHash('sha256').update(buf).digest('hex')

before(async () => {
  if (skipReason) return
  d = await startDaemon([])
  ;({ url, opts, apiKey } = d)
})

after(async () => {
  if (d) await d.stop()
})

const maybe = skipReason ? test.skip : test

// The ticker's log: "tick 0", "tick 1", ... one line per 200 ms.
async function ticks(sbx) {
  const text = await sbx.files.read('/home/user/ticks.log')
  return text.trim().split('\n').map((l) => Number(l.split(' ')[1]))
}

function assertConsecutive(seq) {
  seq.forEach((v, i) => assert.equal(v, i, `tick ${i} is ${v}: the ticker restarted or lost output`))
}

maybe('pause() then Sandbox.connect(): files, processes, memory and clock survive; pause twice', { timeout: 600000 }, async () => {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 300000 })
  try {
    const data = randomBytes(1 << 20)
    await sbx.files.write('/home/user/data.bin', data)
    // A background process and an in-memory value (a shell variable) that only survive with memory.
    const ticker = await sbx.commands.run(
      "bash -c 'i=0; while :; do echo tick $i >> /home/user/ticks.log; i=$((i+1)); sleep 0.2; done'",
      { background: true })
    let before = []
    for (let i = 0; i < 40 && before.length < 2; i++) {
      await sleep(250)
      before = await ticks(sbx).catch(() => [])
    }
    assert.ok(before.length >= 2, `ticker wrote ${before.length} lines`)

    for (let cycle = 0; cycle < 2; cycle++) {
      assert.equal(await sbx.pause(), true, `cycle ${cycle}: pause`)
      assert.equal(await sbx.pause(), false, `cycle ${cycle}: a second pause answers 409 → false`)
      assert.equal(await sbx.isRunning(), false)
      const info = await Sandbox.getInfo(sbx.sandboxId, opts)
      assert.equal(info.state, 'paused')
      const paused = await Sandbox.list({ ...opts, query: { state: ['paused'] } }).nextItems()
      assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId), 'listed as paused')
      await sleep(3000)  // the guest clock stands still meanwhile; resume must fix it

      const again = await Sandbox.connect(sbx.sandboxId, opts)
      assert.equal(await again.isRunning(), true)
      assert.equal((await Sandbox.getInfo(sbx.sandboxId, opts)).state, 'running')
      const back = Buffer.from(await again.files.read('/home/user/data.bin', { format: 'bytes' }))
      assert.equal(sha256(back), sha256(data), `cycle ${cycle}: file written before pause reads back identically`)
      const procs = await again.commands.list()
      assert.ok(procs.some((p) => p.pid === ticker.pid), `cycle ${cycle}: the background process still runs`)
      const n0 = (await ticks(again)).length
      let after = []
      await waitFor(async () => (after = await ticks(again)).length > n0, 10000, 200)
      assert.ok(after.length > n0, `cycle ${cycle}: its output continues (${n0} → ${after.length})`)
      assertConsecutive(after)
      // Wall clock correct right after restore (the agent sets it from the host).
      // (compared with the host's clock before and after the command, so load does not matter)
      const h0 = Date.now()
      const guestMs = Number((await again.commands.run('date +%s%3N')).stdout.trim())
      const h1 = Date.now()
      assert.ok(guestMs > h0 - 1000 && guestMs < h1 + 1000, `guest clock ${guestMs} outside host window [${h0}, ${h1}] ± 1 s`)
    }
  } finally {
    await sbx.kill()
  }
  await assert.rejects(Sandbox.connect(sbx.sandboxId, opts), (e) => e instanceof SandboxNotFoundError)
})

// As E2B: "paused" from the moment a pause starts, and a connect during the
// pause waits for it, then resumes (201) with the new TTL in force.
maybe('a sandbox being paused reads paused; connect during the pause waits and resumes', { timeout: 300000 }, async () => {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 600000 })
  try {
    await sbx.files.write('/home/user/p.txt', 'before the pause')
    const api = { 'X-API-Key': apiKey, 'Content-Type': 'application/json' }
    const state = async () => (await (await fetch(`${url}/sandboxes/${sbx.sandboxId}`, { headers: api })).json()).state
    let pauseAnswered = false
    const pause = fetch(`${url}/sandboxes/${sbx.sandboxId}/pause`, { method: 'POST', headers: api })
      .then((r) => { pauseAnswered = true; return r })
    // The pause under way (its answer not yet sent): already "paused".
    let seen
    while (!pauseAnswered && (seen = await state()) !== 'paused') {}
    assert.equal(seen, 'paused', 'GET answered running until the pause had ended')
    const connected = fetch(`${url}/sandboxes/${sbx.sandboxId}/connect`, { method: 'POST', headers: api, body: '{"timeout":300}' })
    assert.equal((await pause).status, 204)
    const c = await connected
    assert.equal(c.status, 201, await c.clone().text())
    assert.equal(await state(), 'running')
    // The data plane answers at once, and the TTL is the connect's.
    assert.equal(await sbx.files.read('/home/user/p.txt'), 'before the pause')
    const end = Date.parse((await (await fetch(`${url}/sandboxes/${sbx.sandboxId}`, { headers: api })).json()).endAt)
    assert.ok(Math.abs(end - (Date.now() + 300000)) < 60000, `endAt ${new Date(end).toISOString()}`)
  } finally {
    await sbx.kill()
  }
})

// What a disk-only snapshot must bring back byte for byte: every file under
// /home/user with its mode, owner, mtime and link target, and a 3 MiB file's
// digest.
const FS_DIGEST = "cd /home/user && find . -xdev -printf '%p %y %m %U %T@ %l\\n' | sort | sha256sum && sha256sum big.bin"

maybe('fork v2 {memory:false} and pause({keepMemory:false}) keep the filesystem and boot on it', { timeout: 300000 }, async () => {
  const sbx = await Sandbox.create('base', { ...opts, envs: { KEEP: 'me' } })
  try {
    await sbx.files.write('/home/user/fs-only.txt', 'still here')
    await sbx.commands.run('head -c 3145728 /dev/urandom > big.bin && chmod 640 big.bin && ln -s big.bin big.link && ' +
      'mkdir -p d/e && echo deep > d/e/f && mkfifo d/fifo && touch -d @1000000000 d/e/f', { cwd: '/home/user' })
    // A template file removed, one replaced, as root.
    const gone = (await sbx.commands.run('find /etc -maxdepth 1 -type f ! -name hostname ! -name hosts ! -name resolv.conf | sort | head -1', { user: 'root' })).stdout.trim()
    assert.ok(gone, 'the template has a file in /etc')
    await sbx.commands.run(`rm ${gone} && echo mine > /usr/local/bin/tool && chmod 4755 /usr/local/bin/tool`, { user: 'root' })
    const digest = (await sbx.commands.run(FS_DIGEST)).stdout
    const bg = await sbx.commands.run('sleep 600', { background: true })
    // Fork v2 without memory (issue 34): one child of the parent's
    // filesystem (synced by the fork, or on gVisor exported by its agent),
    // booted on it; the parent runs on.
    const forked = await fetch(`${url}/v2/sandboxes/${sbx.sandboxId}/fork`, {
      method: 'POST', headers: { 'X-API-Key': apiKey, 'Content-Type': 'application/json' },
      body: JSON.stringify({ count: 1, memory: false, timeout: 120 }) })
    assert.equal(forked.status, 201, await forked.clone().text())
    const [result] = await forked.json()
    assert.ok(result.sandbox, JSON.stringify(result))
    const child = await Sandbox.connect(result.sandbox.sandboxID, opts)
    try {
      assert.equal(await child.files.read('/home/user/fs-only.txt'), 'still here')
      assert.equal((await child.commands.run(FS_DIGEST)).stdout, digest, 'the child has the parent\'s files, exactly')
      assert.ok(!(await child.commands.list()).some((p) => p.cmd === 'sleep'), 'a booted child has no processes')
      assert.equal((await child.commands.run('echo $KEEP')).stdout, 'me\n', 'the parent\'s env vars')
      await child.files.write('/home/user/fs-only.txt', 'the child\'s')
    } finally {
      await child.kill()
    }
    assert.equal(await sbx.files.read('/home/user/fs-only.txt'), 'still here', 'the parent runs on, its disk its own')
    assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid), 'the parent keeps its processes')
    const bad = await fetch(`${url}/v2/sandboxes/${sbx.sandboxId}/fork`, {
      method: 'POST', headers: { 'X-API-Key': apiKey, 'Content-Type': 'application/json' }, body: '{"memory":"no"}' })
    assert.equal(bad.status, 400)
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    const again = await Sandbox.connect(sbx.sandboxId, opts)
    assert.equal(await again.files.read('/home/user/fs-only.txt'), 'still here')
    assert.equal((await again.commands.run(FS_DIGEST)).stdout, digest, 'the files, byte for byte, after the reboot')
    const checks = await again.commands.run(`test ! -e ${gone} && stat -c '%a %s' /usr/local/bin/tool`, { user: 'root' })
    assert.equal(checks.stdout, '4755 5\n', 'a removed template file stays removed; a setuid file keeps its mode')
    const procs = await again.commands.list()
    assert.ok(!procs.some((p) => p.pid === bg.pid && p.cmd === 'sleep'), 'a reboot does not keep processes')
    assert.equal((await again.commands.run('echo $KEEP')).stdout, 'me\n', 'sandbox env vars survive a reboot')
    // And again: a second pause exports what the first resume brought back.
    await again.files.write('/home/user/second.txt', 'second')
    assert.equal(await again.pause({ keepMemory: false }), true)
    const third = await Sandbox.connect(sbx.sandboxId, opts)
    assert.equal(await third.files.read('/home/user/second.txt'), 'second')
    assert.equal((await third.commands.run('sha256sum big.bin', { cwd: '/home/user' })).stdout, digest.split('\n').slice(1).join('\n'))
  } finally {
    await sbx.kill()
  }
})

// A Python process holding a counter in memory, served on 127.0.0.1:7000
// inside the guest: every connection gets the next value.
const COUNTER = `python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7000)); s.listen(8)
n = 0
while True:
    c, _ = s.accept(); n += 1; c.sendall(str(n).encode()); c.close()
'`
const ASK = `python3 -c 'import socket; s = socket.create_connection(("127.0.0.1", 7000)); print(s.recv(64).decode())'`

async function ask(sbx) {
  for (let i = 0; ; i++) {
    try {
      return Number((await sbx.commands.run(ASK, { timeoutMs: 180000 })).stdout.trim())
    } catch (e) {
      if (i >= 20) throw e
      await sleep(250)  // the server is still starting
    }
  }
}

maybe('Sandbox.fork: 5 children see memory and disk at fork time, write privately, differ in entropy', { timeout: 600000 }, async () => {
  const parent = await Sandbox.create('base', { ...opts, timeoutMs: 300000 })
  const children = []
  try {
    await parent.commands.run(COUNTER, { background: true })
    assert.equal(await ask(parent), 1)
    assert.equal(await ask(parent), 2)
    await parent.files.write('/home/user/state.txt', 'parent state')

    const t0 = Date.now()
    const forks = await Sandbox.fork(parent.sandboxId, { ...opts, count: 5, timeoutMs: 120000 })
    console.log(`# fork of 5 children: ${Date.now() - t0} ms`)
    assert.equal(forks.length, 5)
    for (const f of forks) {
      assert.ok(!(f instanceof Error), `a fork failed: ${f}`)
      children.push(f)
    }
    const ids = new Set([parent.sandboxId, ...children.map((c) => c.sandboxId)])
    assert.equal(ids.size, 6, 'every child has its own id')

    const rand = new Set()
    for (const [i, child] of children.entries()) {
      assert.equal(await ask(child), 3, `child ${i}: the in-memory counter continues from the fork point`)
      assert.equal(await child.files.read('/home/user/state.txt'), 'parent state')
      await child.files.write('/home/user/state.txt', `child ${i}`)
      await child.files.write(`/home/user/only-${i}.txt`, 'mine')
      assert.equal((await child.commands.run('hostname')).stdout.trim(), child.sandboxId)
      rand.add((await child.commands.run('head -c 32 /dev/urandom | od -An -tx1 | tr -d " \\n"')).stdout)
    }
    assert.equal(rand.size, 5, '/dev/urandom output differs between siblings')
    // Later writes stay private; the parent kept running with its own state.
    for (const [i, child] of children.entries()) {
      assert.equal(await child.files.read('/home/user/state.txt'), `child ${i}`)
      for (let j = 0; j < children.length; j++) {
        assert.equal(await child.files.exists(`/home/user/only-${j}.txt`), i === j)
      }
      assert.equal(await ask(child), 4, `child ${i}: its counter is its own`)
    }
    assert.equal(await parent.files.read('/home/user/state.txt'), 'parent state')
    assert.equal(await parent.files.exists('/home/user/only-0.txt'), false)
    assert.equal(await ask(parent), 3, 'the parent runs on with its own memory')
    // Tokens are per sandbox: a child's token does not open the parent.
    const detail = await (await fetch(`${url}/sandboxes/${children[0].sandboxId}`, { headers: { 'X-API-Key': opts.apiKey } })).json()
    const r = await fetch(`${url}/envs`, { headers: { 'E2b-Sandbox-Id': parent.sandboxId, 'X-Access-Token': detail.envdAccessToken } })
    assert.equal(r.status, 401)
  } finally {
    for (const c of children) await c.kill()
    await parent.kill()
  }
})

maybe('lifecycle onTimeout:pause pauses at TTL; autoResume resumes on data-plane traffic', { timeout: 300000 }, async () => {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 4000, lifecycle: { onTimeout: 'pause', autoResume: true } })
  try {
    await sbx.files.write('/home/user/auto.txt', 'kept across autoPause')
    const info = await sbx.getInfo()
    assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
    let state = 'running'
    const end = Date.now() + 60000
    while (state !== 'paused' && Date.now() < end) {
      await sleep(500)
      state = (await Sandbox.getInfo(sbx.sandboxId, opts)).state
    }
    assert.equal(state, 'paused', 'paused at TTL instead of killed')
    // Data-plane traffic (a file read through the same Sandbox object) resumes it.
    assert.equal(await sbx.files.read('/home/user/auto.txt'), 'kept across autoPause')
    assert.equal((await Sandbox.getInfo(sbx.sandboxId, opts)).state, 'running')
  } finally {
    await sbx.kill()
  }
})

maybe('named snapshots: create, list, start sandboxes from one, delete', { timeout: 300000 }, async () => {
  const src = await Sandbox.create('base', opts)
  let fromSnap = null
  const name = `e2e-${Date.now()}`
  try {
    await src.files.write('/home/user/snap.txt', 'in the snapshot')
    await src.commands.run(COUNTER, { background: true })
    assert.equal(await ask(src), 1)
    const snap = await src.createSnapshot({ name })
    assert.match(snap.snapshotId, /^snap-[0-9a-f]{16}$/)
    assert.deepEqual(snap.names, [name])
    assert.equal(await src.isRunning(), true, 'the source keeps running')
    const mine = await src.listSnapshots().nextItems()
    assert.deepEqual(mine.map((s) => s.snapshotId), [snap.snapshotId])
    const byName = await Sandbox.listSnapshots({ ...opts, name }).nextItems()
    assert.equal(byName.length, 1)
    // A snapshot is a template: by id here (the name works too).
    fromSnap = await Sandbox.create(snap.snapshotId, opts)
    assert.notEqual(fromSnap.sandboxId, src.sandboxId)
    assert.equal(await fromSnap.files.read('/home/user/snap.txt'), 'in the snapshot')
    assert.equal(await ask(fromSnap), 2, 'memory of the snapshot')
    await assert.rejects(Sandbox.deleteSnapshot(snap.snapshotId, opts), 'in use by a sandbox')
    await fromSnap.kill()
    fromSnap = null
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), false)
    await assert.rejects(Sandbox.create(snap.snapshotId, opts))
  } finally {
    if (fromSnap) await fromSnap.kill()
    await src.kill()
  }
})
