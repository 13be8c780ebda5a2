// End-to-end: the official e2b SDK (2.51.0, unmodified) against a real
// `airlock serve` started here with a temp port, a fresh registry (so a fresh
// API key) and the real state dir for images. Every SDK call of
// shared/spec/e2b-wire.md §6 that airlock supports is exercised.
//
// Env: AIRLOCK_BIN (the airlock binary, required), AIRLOCK_STATE_DIR
// (default /var/lib/airlock). Skips (with the reason) when not root or when
// no guest image exists.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { e2b, skipReason, startDaemon } from './daemon.mjs'

const { Sandbox, CommandExitError, SandboxNotFoundError } = e2b

let d, url, opts, apiKey

before(async () => {
  if (skipReason) return
  d = await startDaemon([])
  ;({ url, opts, apiKey } = d)
})

after(async () => {
  if (d) await d.stop()
})

const maybe = skipReason ? test.skip : test

maybe('sandbox lifecycle, commands and files through the official SDK', { timeout: 600000 }, async (t) => {
  const c0 = Date.now()
  const sbx = await Sandbox.create('base', { ...opts, metadata: { suite: 'e2e', n: '1' }, envs: { FOO: 'bar' }, timeoutMs: 120000 })
  const createMs = Date.now() - c0
  console.log(`# create latency ${createMs} ms`)
  const tti0 = Date.now()
  const first = await sbx.commands.run('echo ready')
  console.log(`# first command after create ${Date.now() - tti0} ms (TTI create+run ${createMs + Date.now() - tti0} ms)`)
  assert.equal(first.stdout, 'ready\n')
  try {
    await t.test('commands.run foreground with onStdout/onStderr', async () => {
      const out = [], err = []
      const r = await sbx.commands.run('echo hi; echo err >&2', { onStdout: (d) => out.push(d), onStderr: (d) => err.push(d) })
      assert.equal(r.exitCode, 0)
      assert.equal(r.stdout, 'hi\n')
      assert.equal(r.stderr, 'err\n')
      assert.equal(out.join(''), 'hi\n')
      assert.equal(err.join(''), 'err\n')
    })
    await t.test('non-zero exit throws CommandExitError', async () => {
      await assert.rejects(sbx.commands.run('exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3)
    })
    await t.test('sandbox-wide envVars, cwd, env and user', async () => {
      assert.equal((await sbx.commands.run('echo $FOO')).stdout, 'bar\n')
      const r = await sbx.commands.run('pwd; echo $X; whoami', { cwd: '/tmp', envs: { X: 'y' }, user: 'root' })
      assert.equal(r.stdout, '/tmp\ny\nroot\n')
      assert.equal((await sbx.commands.run('whoami')).stdout, 'user\n')
    })
    await t.test('background + kill', async () => {
      const h = await sbx.commands.run('sleep 30', { background: true })
      assert.ok(h.pid > 0)
      assert.equal(await h.kill(), true)
      await assert.rejects(h.wait(), (e) => e instanceof CommandExitError)
    })
    await t.test('stdin: sendStdin + closeStdin', async () => {
      const h = await sbx.commands.run('cat', { background: true, stdin: true })
      await h.sendStdin('abc\n')
      await h.closeStdin()
      const r = await h.wait()
      assert.equal(r.stdout, 'abc\n')
    })
    await t.test('files: write/read/list/exists/makeDir/rename/remove', async () => {
      const w = await sbx.files.write('/home/user/a.txt', 'hello')
      assert.equal(w.path, '/home/user/a.txt')
      assert.equal(await sbx.files.read('/home/user/a.txt'), 'hello')
      const multi = await sbx.files.write([{ path: '/home/user/b.txt', data: 'B' }, { path: 'c.txt', data: 'C' }])
      assert.deepEqual(multi.map((e) => e.path), ['/home/user/b.txt', '/home/user/c.txt'])
      assert.equal(await sbx.files.read('/home/user/c.txt'), 'C')
      const stream = new ReadableStream({
        start(c) { c.enqueue(new TextEncoder().encode('stream-')); c.enqueue(new TextEncoder().encode('data')); c.close() },
      })
      await sbx.files.write('/home/user/s.bin', stream)
      assert.equal(await sbx.files.read('/home/user/s.bin'), 'stream-data')
      await sbx.files.write('/home/user/g.txt', 'gzipped', { gzip: true })
      assert.equal(await sbx.files.read('/home/user/g.txt'), 'gzipped')
      const big = 'x'.repeat(3 * 1024 * 1024)
      await sbx.files.write('/home/user/big.txt', big)
      assert.equal((await sbx.files.read('/home/user/big.txt')).length, big.length)
      const names = (await sbx.files.list('/home/user')).map((e) => e.name)
      for (const n of ['a.txt', 'b.txt', 'c.txt', 's.bin', 'g.txt']) assert.ok(names.includes(n), n)
      assert.equal(await sbx.files.exists('/home/user/a.txt'), true)
      assert.equal(await sbx.files.exists('/home/user/nope'), false)
      assert.equal(await sbx.files.makeDir('/home/user/dir'), true)
      assert.equal(await sbx.files.makeDir('/home/user/dir'), false)
      const moved = await sbx.files.rename('/home/user/dir', '/home/user/dir2')
      assert.equal(moved.path, '/home/user/dir2')
      await sbx.files.remove('/home/user/a.txt')
      assert.equal(await sbx.files.exists('/home/user/a.txt'), false)
      await assert.rejects(sbx.files.read('/home/user/a.txt'))
    })
    await t.test('getInfo, setTimeout, getMetrics, isRunning, connect', async () => {
      const info = await sbx.getInfo()
      assert.equal(info.sandboxId, sbx.sandboxId)
      assert.equal(info.templateId, 'base')
      assert.deepEqual(info.metadata, { suite: 'e2e', n: '1' })
      assert.equal(info.state, 'running')
      await sbx.setTimeout(600000)
      const info2 = await sbx.getInfo()
      assert.ok(info2.endAt.getTime() - Date.now() > 500000, 'setTimeout moved endAt')
      const m = await sbx.getMetrics()
      assert.ok(m.length >= 1 && m[0].memTotal > 0 && m[0].cpuCount >= 1)
      assert.equal(await sbx.isRunning(), true)
      const again = await Sandbox.connect(sbx.sandboxId, opts)
      assert.equal((await again.commands.run('echo again')).stdout, 'again\n')
      await assert.rejects(Sandbox.connect('nosuchsandbox0000000', opts), (e) => e instanceof SandboxNotFoundError)
    })
    await t.test('sealed network: default deny, updateNetwork, bad rules', async () => {
      // Nothing leaves by default: NXDOMAIN from airlock's resolver, nothing asked upstream.
      await assert.rejects(sbx.commands.run('curl -sS --max-time 5 http://example.invalid/'),
        (e) => e instanceof CommandExitError && e.exitCode === 6)
      await sbx.updateNetwork({ allowOut: ['allowed.invalid', '*.allowed.invalid'], denyOut: ['203.0.113.0/24'] })
      await assert.rejects(sbx.updateNetwork({ allowOut: ['bad rule'] }), /400/)
      await assert.rejects(Sandbox.updateNetwork('nosuchsandbox0000000', { allowOut: [] }, opts),
        (e) => e instanceof SandboxNotFoundError)
      // network.rules (header transforms), live through the SDK: the guest gets a
      // sandbox CA covering the host; the API never returns a rule's value.
      await sbx.updateNetwork({
        allowOut: ['api.allowed.invalid'],
        rules: { 'api.allowed.invalid': [{ transform: { headers: { Authorization: 'Bearer e2e-rule-value' } } }] },
      })
      const info = await sbx.getInfo()
      assert.deepEqual(info.network.rules,
        { 'api.allowed.invalid': [{ transform: { headers: { Authorization: '[hidden]' } } }] })
      const ca = await sbx.commands.run('openssl x509 -in /usr/local/share/ca-certificates/airlock-sandbox.crt ' +
        '-noout -ext nameConstraints; echo "$NODE_EXTRA_CA_CERTS"')
      assert.match(ca.stdout, /DNS:api\.allowed\.invalid/)
      assert.match(ca.stdout, /airlock-sandbox\.crt/)
      await assert.rejects(sbx.updateNetwork({ rules: { 'x.invalid': [{ transform: { headers: { Host: 'y' } } }] } }), /400/)
      await sbx.updateNetwork({ allowOut: [], allowInternetAccess: false })
      const logs = await (await fetch(`${url}/v2/sandboxes/${sbx.sandboxId}/logs`, { headers: { 'X-API-Key': opts.apiKey } })).json()
      assert.ok(logs.logs.some((e) => /egress deny dns example\.invalid/.test(e.message)), JSON.stringify(logs))
    })
    await t.test('list, metadata filter and paging', async () => {
      const other = await Sandbox.create('base', { ...opts, metadata: { suite: 'e2e', n: '2' } })
      try {
        const all = await Sandbox.list({ ...opts, query: { metadata: { suite: 'e2e' } } }).nextItems()
        assert.deepEqual(new Set(all.map((s) => s.sandboxId)), new Set([sbx.sandboxId, other.sandboxId]))
        const only = await Sandbox.list({ ...opts, query: { metadata: { n: '2' } } }).nextItems()
        assert.deepEqual(only.map((s) => s.sandboxId), [other.sandboxId])
        const p = Sandbox.list({ ...opts, limit: 1, query: { metadata: { suite: 'e2e' } } })
        const seen = []
        while (p.hasNext) seen.push(...(await p.nextItems()))
        assert.equal(seen.length, 2)
        // One sandbox's token does not open another sandbox.
        const detail = await (await fetch(`${url}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-Key': opts.apiKey } })).json()
        assert.match(detail.envdAccessToken, /^[0-9a-f]{64}$/)
        const mine = await fetch(`${url}/envs`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': detail.envdAccessToken } })
        assert.equal(mine.status, 200)
        const r = await fetch(`${url}/envs`, { headers: { 'E2b-Sandbox-Id': other.sandboxId, 'X-Access-Token': detail.envdAccessToken } })
        assert.equal(r.status, 401)
      } finally {
        await other.kill()
      }
    })
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await Sandbox.kill(sbx.sandboxId, opts), false)
  assert.equal(await sbx.isRunning(), false)
})
