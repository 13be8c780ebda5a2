// End-to-end: Docker inside a sandbox (docs/docker.md) through the official
// e2b SDK (unmodified) against a real `airlock serve` and the docker
// template: dockerd already answering for `user`, an image made from a
// tarball inside the guest (no registry), `docker run`, `docker build` of a
// two-line Dockerfile, a port a container publishes reached through the
// data plane; and on gVisor a clear refusal, not a hang. One sandbox.
//
// Prints a `# measure:` line: the create, and `docker run` of a tiny image
// the first and the second time.
// Env: AIRLOCK_BIN, AIRLOCK_STATE_DIR (see daemon.mjs).
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, test } from 'node:test'

import { e2b, STATE_DIR, skipReason as daemonSkip, startDaemon } from './daemon.mjs'

let skipReason = daemonSkip
if (!skipReason && !existsSync(join(STATE_DIR, 'images', 'templates', 'docker.json')))
  skipReason = `no docker template in ${STATE_DIR} (make image builds it; or airlock image build --template docker)`
if (skipReason && !daemonSkip) console.log(`# SKIP e2e: ${skipReason}`)
const maybe = skipReason ? test.skip : test

let d, sb
before(async () => {
  if (skipReason) return
  d = await startDaemon([])
})
after(async () => {
  if (sb) await sb.kill().catch(() => {})
  if (d) await d.stop()
})

// A command as `user` (the SDK's default); its stdout, or the failure with
// its output.
async function sh(cmd, opts = {}) {
  try {
    return (await sb.commands.run(cmd, { timeoutMs: 300_000, ...opts })).stdout
  } catch (e) {
    throw new Error(`${cmd}: ${e.message}\n${e.result?.stdout ?? ''}${e.result?.stderr ?? ''}`)
  }
}

const timed = async (f) => {
  const t0 = Date.now()
  const v = await f()
  return [v, Date.now() - t0]
}

let createMs = 0
maybe('a docker sandbox has dockerd answering, for user without sudo, on overlay2 and cgroup v2', { timeout: 300_000 }, async () => {
  ;[sb, createMs] = await timed(() => e2b.Sandbox.create('docker', { ...d.opts, timeoutMs: 600_000 }))
  assert.match(await sh('id -nG'), /\bdocker\b/)
  const info = (await sh('docker info --format "{{.Driver}} {{.CgroupVersion}} {{.OSType}}"')).trim()
  assert.equal(info, 'overlay2 2 linux')
  // The guest's own kernel, with the template's modules loaded by dockerd's start.
  assert.match(await sh('lsmod'), /^overlay\s/m)
})

maybe('an image made from a tarball in the guest runs: docker run, first and second time', { timeout: 300_000 }, async () => {
  assert.ok(sb, 'the docker sandbox was created')
  // A root filesystem of one static busybox, imported: no registry involved.
  await sh('set -e; rm -rf /tmp/img; mkdir -p /tmp/img/bin /tmp/img/www; cp /bin/busybox /tmp/img/bin/; ' +
    'for a in sh echo cat httpd; do ln -s busybox /tmp/img/bin/$a; done; ' +
    'echo served-by-a-container > /tmp/img/www/index.html; tar -C /tmp/img -c . | docker import - tiny:1')
  const [first, firstMs] = await timed(() => sh('docker run --rm tiny:1 echo hello from a container'))
  assert.equal(first, 'hello from a container\n')
  const [second, secondMs] = await timed(() => sh('docker run --rm tiny:1 echo hello again'))
  assert.equal(second, 'hello again\n')
  // The container is a process of the guest's kernel, in a cgroup docker made.
  assert.match(await sh('docker run --rm --cgroupns=host tiny:1 cat /proc/self/cgroup'), /^0::\/docker\/[0-9a-f]{64}$/m)
  console.log(`# measure: docker create ${createMs} ms; docker run of a tiny image: first ${firstMs} ms, second ${secondMs} ms`)
})

maybe('docker build of a two-line Dockerfile, then a run of what it built', { timeout: 300_000 }, async () => {
  assert.ok(sb, 'the docker sandbox was created')
  await sh('mkdir -p /tmp/b && printf "FROM tiny:1\\nRUN echo built-in-the-guest > /built\\n" > /tmp/b/Dockerfile')
  await sh('docker build -q -t built:1 /tmp/b')
  assert.equal(await sh('docker run --rm built:1 cat /built'), 'built-in-the-guest\n')
})

maybe('a port a container publishes is reached through the data plane, as any guest port', { timeout: 300_000 }, async () => {
  assert.ok(sb, 'the docker sandbox was created')
  await sh('docker run -d --name web -p 8080:80 tiny:1 httpd -f -p 80 -h /www')
  // The guest itself, then the data plane (the header form of getHost(8080)).
  let body = ''
  for (let i = 0; i < 100 && body !== 'served-by-a-container\n'; i++) {
    body = await sh('curl -s localhost:8080/ || true')
  }
  assert.equal(body, 'served-by-a-container\n')
  const r = await fetch(`${d.url}/`, { headers: { 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '8080' } })
  assert.equal(r.status, 200)
  assert.equal(await r.text(), 'served-by-a-container\n')
  await sh('docker rm -f web')
})

maybe('on gVisor the docker template is refused at once, saying why', { timeout: 60_000 }, async () => {
  for (const [name, doc] of [['docker-gvisor', 'docs/docker.md']]) {
    const t0 = Date.now()
    const r = await fetch(`${d.url}/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-Key': d.apiKey, 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID: name }),
    })
    const text = await r.text()
    assert.equal(r.status, 400, text)
    assert.match(text, /runs on the qemu runtime only, not gvisor/)
    assert.ok(text.includes(doc), text)
    assert.ok(Date.now() - t0 < 10_000, 'answered at once')
  }
})
