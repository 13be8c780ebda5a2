// End-to-end: checkpoints and rollback in place (docs/snapshots.md
// "Checkpoints and rollback"), an airlock extension reached with plain fetch,
// verified through the official e2b SDK's own sandbox object (unmodified):
// after a rollback the same Sandbox (same id, same envd token) reads the
// checkpoint's files and sees its background process again.
//
// Env: AIRLOCK_BIN (required), AIRLOCK_STATE_DIR (default /var/lib/airlock).
// Skips (with the reason) when not root or when no guest image exists.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { e2b, skipReason, startDaemon } from './daemon.mjs'

const { Sandbox } = e2b

let d, url, opts

before(async () => {
  if (skipReason) return
  d = await startDaemon([])
  ;({ url, opts } = d)
})

after(async () => {
  if (d) await d.stop()
})

const maybe = skipReason ? test.skip : test

async function api(method, path, body) {
  const r = await fetch(`${url}${path}`, {
    method,
    headers: { 'X-API-Key': opts.apiKey, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await r.text()
  return { status: r.status, body: text ? JSON.parse(text) : null }
}

maybe('checkpoint, wreck, rollback: the SDK sandbox sees its files and process again', { timeout: 600000 }, async () => {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 300000 })
  try {
    const data = randomBytes(256 << 10).toString('hex')
    await sbx.files.write('/home/user/notes.txt', data)
    const loop = await sbx.commands.run("bash -c 'while :; do sleep 0.2; done'", { background: true })

    const cp = await api('POST', `/sandboxes/${sbx.sandboxId}/checkpoints`, {})
    assert.equal(cp.status, 201, JSON.stringify(cp.body))
    assert.match(cp.body.checkpointID, /^ckpt-[0-9a-f]{16}$/)
    assert.equal(cp.body.sandboxID, sbx.sandboxId)
    const list = await api('GET', `/sandboxes/${sbx.sandboxId}/checkpoints`)
    assert.deepEqual(list.body.map((c) => c.checkpointID), [cp.body.checkpointID])

    // The destructive command an agent regrets.
    await sbx.commands.kill(loop.pid)
    await sbx.commands.run('rm -f /home/user/notes.txt && echo oops > /home/user/oops.txt')
    assert.equal(await sbx.files.exists('/home/user/notes.txt'), false)

    const rb = await api('POST', `/sandboxes/${sbx.sandboxId}/rollback`, { checkpointID: cp.body.checkpointID })
    assert.equal(rb.status, 200, JSON.stringify(rb.body))
    assert.equal(rb.body.sandboxID, sbx.sandboxId)

    // The same SDK object works on: the data plane still takes the token the
    // SDK got at create (a changed token would be refused with 401).
    assert.equal(await sbx.files.read('/home/user/notes.txt'), data)
    assert.equal(await sbx.files.exists('/home/user/oops.txt'), false)
    const procs = await sbx.commands.list()
    assert.ok(procs.some((p) => p.pid === loop.pid), 'the background process is back')
    const hi = await sbx.commands.run('echo hi')
    assert.equal(hi.stdout, 'hi\n')
    assert.equal((await Sandbox.getInfo(sbx.sandboxId, opts)).state, 'running')

    const missing = await api('POST', `/sandboxes/${sbx.sandboxId}/rollback`, { checkpointID: 'ckpt-0000000000000000' })
    assert.equal(missing.status, 404)
    assert.equal(missing.body.code, 404)
    const del = await fetch(`${url}/sandboxes/${sbx.sandboxId}/checkpoints/${cp.body.checkpointID}`, {
      method: 'DELETE', headers: { 'X-API-Key': opts.apiKey } })
    assert.equal(del.status, 204)
  } finally {
    await sbx.kill()
  }
})
