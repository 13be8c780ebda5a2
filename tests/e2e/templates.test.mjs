// Custom templates (issue 16) through the official e2b SDK (2.51.0,
// unmodified): Template.build with runCmd as user and root, copy of a tree
// (nested, unicode names, a symlink, modes), setEnvs, setWorkdir, setUser
// and setStartCmd(waitForPort); Sandbox.create(name) finds every file, the
// default user and workdir as built, and the server already up. Then the
// layer cache (an identical rebuild is all cached and >= 5x faster; a
// changed COPY source re-runs that step and the later ones only; skipCache
// rebuilds all), a failing step, tags, buildInBackground + getBuildStatus,
// exists/list/delete, and bad input (hostile archives, oversized uploads,
// malformed steps).
//
// Env: AIRLOCK_BIN (required), AIRLOCK_STATE_DIR (default /var/lib/airlock).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, mkdirSync, writeFileSync, symlinkSync, chmodSync, rmSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { e2b, skipReason, startDaemon } from './daemon.mjs'

const { Sandbox, Template, waitForPort, BuildError } = e2b

let d, opts, url, ctxDir
// --build-timeout: a daemon of its own and a build that outlives it, started
// here so its wait runs beside the other cases (checked in the queue case).
// The deadline counts from the build's start and covers the build VM's boot,
// so it is generous: a loaded host (the schedule runs this suite beside
// others) must still reach step 1 before it ends.
const BUILD_TIMEOUT_S = 60
let dt, timedOut
const maybe = skipReason ? test.skip : test

before(async () => {
  if (skipReason) return
  ;[d, dt] = await Promise.all([startDaemon(['--max-upload', '1']),
    startDaemon(['--build-timeout', String(BUILD_TIMEOUT_S)])])
  ;({ opts, url } = d)
  const t0 = Date.now()
  timedOut = { t0, build: await Template.buildInBackground(Template().fromBaseImage().runCmd('sleep 600'), 'timeout-e2e', dt.opts) }
  ctxDir = mkdtempSync(join(tmpdir(), 'airlock-tpl-ctx-'))
  mkdirSync(join(ctxDir, 'app/sub/deeper'), { recursive: true })
  writeFileSync(join(ctxDir, 'app/main.py'), 'print("hello from main")\n')
  chmodSync(join(ctxDir, 'app/main.py'), 0o755)
  writeFileSync(join(ctxDir, 'app/sub/deeper/data.txt'), 'deep\n')
  writeFileSync(join(ctxDir, 'app/sub/ünïcödé €.txt'), 'unicode\n')
  chmodSync(join(ctxDir, 'app/sub/ünïcödé €.txt'), 0o640)
  symlinkSync('main.py', join(ctxDir, 'app/link.py'))
  writeFileSync(join(ctxDir, 'version.txt'), 'v1\n')
})

after(async () => {
  if (d) await d.stop()
  if (dt) await dt.stop()
  if (ctxDir) rmSync(ctxDir, { recursive: true, force: true })
})

// The template of the main test: every builder method the issue names.
function appTemplate() {
  return Template({ fileContextPath: ctxDir })
    .fromBaseImage()
    .runCmd('whoami > /home/user/built-by.txt')
    .runCmd('mkdir -p /opt/root-only && echo root > /opt/root-only/who.txt', { user: 'root' })
    .copy('app', '/app/')
    .copy('version.txt', '/opt/version.txt', { mode: 0o600, user: 'root' })
    .setEnvs({ GREETING: 'hello', EXTRA_PATH: '$PATH:/opt/bin' })
    .runCmd('echo "$GREETING|$EXTRA_PATH" > /opt/env.txt', { user: 'root' })
    .setWorkdir('/app')
    .setUser('user')
    .setStartCmd('python3 -m http.server 8000 --directory /app', waitForPort(8000))
}

async function build(t, name, extra = {}) {
  const logs = []
  const t0 = Date.now()
  const info = await Template.build(t, name, { ...opts, ...extra, onBuildLogs: (l) => logs.push(l.message) })
  return { info, logs, ms: Date.now() - t0 }
}

async function sh(sb, cmd, user) {
  const r = await sb.commands.run(cmd, user ? { user } : {})
  return r.stdout.trim()
}

let first
maybe('a template built with the SDK has every file, package, default and a running start command', async () => {
  first = await build(appTemplate(), 'app-e2e')
  assert.equal(first.info.name, 'app-e2e')
  assert.match(first.info.buildId, /^[0-9a-f-]{36}$/)
  assert.ok(!first.logs.some((l) => l.startsWith('CACHED')), 'a first build has nothing cached')
  const sb = await Sandbox.create('app-e2e', opts)
  try {
    // The API names the template by its id and alias, not the internal image.
    const info = await sb.getInfo()
    assert.equal(info.templateId, first.info.templateId)
    assert.equal(await sh(sb, 'cat /home/user/built-by.txt'), 'user')
    assert.equal(await sh(sb, 'cat /opt/root-only/who.txt; stat -c %U /opt/root-only/who.txt'), 'root\nroot')
    // The tree: nested, unicode, the symlink kept, modes kept, owned by the build user
    // (the directory COPY made too).
    assert.equal(await sh(sb, 'stat -c %U /app'), 'user')
    assert.equal(await sh(sb, 'cat /app/sub/deeper/data.txt'), 'deep')
    assert.equal(await sh(sb, 'stat -c "%a %U" "/app/sub/ünïcödé €.txt"'), '640 user')
    assert.equal(await sh(sb, 'readlink /app/link.py; stat -c %a /app/main.py'), 'main.py\n755')
    assert.equal(await sh(sb, 'stat -c "%a %U" /opt/version.txt', 'root'), '600 root')
    // ENV values expanded in the build VM; runtime sandboxes do not get them (E2B).
    assert.equal(await sh(sb, 'cat /opt/env.txt'), 'hello|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/bin')
    // Default user and workdir as built.
    assert.equal(await sh(sb, 'whoami; pwd'), 'user\n/app')
    // The start command runs (nobody started it) and serves /app.
    assert.equal(await sh(sb, 'curl -s localhost:8000/sub/deeper/data.txt'), 'deep')
    const host = sb.getHost(8000)
    const r = await fetch(`http://${host}/main.py`, { headers: { 'E2B-Traffic-Access-Token': sb.trafficAccessToken ?? '' } }).catch(() => null)
    if (r) assert.ok(r.status === 200 || r.status === 403 || r.status === 502)
  } finally {
    await sb.kill()
  }
})

maybe('an identical rebuild is all cached and at least 5x faster; a changed COPY re-runs it and the later steps only', async () => {
  assert.ok(first, 'the first build ran')
  const again = await build(appTemplate(), 'app-e2e')
  assert.equal(again.info.templateId, first.info.templateId, 'a rebuild keeps the template id')
  const steps = again.logs.filter((l) => /\[builder \d+\/\d+\]/.test(l) && !l.includes('[stdout]') && !l.includes('[stderr]'))
  assert.equal(steps.length, 8, steps.join('\n'))
  assert.ok(steps.every((l) => l.startsWith('CACHED')), steps.join('\n'))
  assert.ok(again.ms * 5 <= first.ms, `cached ${again.ms} ms vs cold ${first.ms} ms`)

  writeFileSync(join(ctxDir, 'version.txt'), 'v2\n')
  const changed = await build(appTemplate(), 'app-e2e')
  const lines = changed.logs.filter((l) => /\[builder \d+\/\d+\]/.test(l) && !l.includes('[stdout]') && !l.includes('[stderr]'))
  const n = (l) => Number(l.match(/\[builder (\d+)\//)[1])
  // Steps: 1 user phase... the SDK's steps are 1 runCmd, 2 runCmd, 3 copy app, 4 copy version.txt, ...
  for (const l of lines) {
    if (n(l) < 4) assert.ok(l.startsWith('CACHED'), l)
    else assert.ok(!l.startsWith('CACHED'), l)
  }
  const sb = await Sandbox.create('app-e2e', opts)
  try {
    assert.equal(await sh(sb, 'cat /opt/version.txt', 'root'), 'v2')
  } finally {
    await sb.kill()
  }

  const forced = await build(appTemplate(), 'app-e2e', { skipCache: true })
  assert.ok(!forced.logs.some((l) => l.startsWith('CACHED')), forced.logs.join('\n'))
})

maybe('a failing step raises the build error naming it; the template stays unusable', async () => {
  const t = Template().fromBaseImage().runCmd('true').runCmd('echo about to fail; exit 3')
  await assert.rejects(Template.build(t, 'broken-e2e', opts), (e) => {
    assert.ok(e instanceof BuildError, String(e))
    assert.match(e.message, /exit status 3/)
    return true
  })
  await assert.rejects(Sandbox.create('broken-e2e', opts), /not found|no ready build|does not exist/i)
  // Nothing of it is left running.
  const list = await Sandbox.list({ ...opts }).nextItems()
  assert.equal(list.length, 0)
})

maybe('tags: app:v1 and app:v2 each create their own build; a tag moves', async () => {
  const v1 = await build(Template().fromBaseImage().runCmd('echo one > /home/user/v.txt'), 'tagged-e2e:v1')
  const v2 = await build(Template().fromBaseImage().runCmd('echo two > /home/user/v.txt'), 'tagged-e2e:v2')
  assert.deepEqual(v1.info.tags, ['v1'])
  assert.equal(v1.info.templateId, v2.info.templateId)
  for (const [ref, want] of [['tagged-e2e:v1', 'one'], ['tagged-e2e:v2', 'two']]) {
    const sb = await Sandbox.create(ref, opts)
    try {
      assert.equal(await sh(sb, 'cat /home/user/v.txt'), want)
    } finally {
      await sb.kill()
    }
  }
  const moved = await Template.assignTags('tagged-e2e:v1', ['prod'], opts)
  assert.equal(moved.buildId, v1.info.buildId)
  const sb = await Sandbox.create('tagged-e2e:prod', opts)
  try {
    assert.equal(await sh(sb, 'cat /home/user/v.txt'), 'one')
  } finally {
    await sb.kill()
  }
  const tags = (await Template.getTags('tagged-e2e', opts)).map((t) => t.tag).sort()
  assert.deepEqual(tags, ['prod', 'v1', 'v2'])
  await Template.removeTags('tagged-e2e', ['prod'], opts)
  await assert.rejects(Sandbox.create('tagged-e2e:prod', opts))
  assert.equal(await Template.exists('tagged-e2e:v2', opts), true)
  assert.equal(await Template.exists('nothing-here-e2e', opts), false)
  // Built-in templates exist, as E2B's own do: public, tag "default" only.
  for (const builtin of ['base', 'code-interpreter-v1', 'base:default']) {
    assert.equal(await Template.exists(builtin, opts), true, builtin)
  }
  assert.equal(await Template.exists('base:v9', opts), false)
  const r = await fetch(`${d.url}/templates/aliases/base`, { headers: { 'X-API-KEY': opts.apiKey } })
  assert.equal(r.status, 200)
  assert.deepEqual(await r.json(), { templateID: 'base', public: true })
})

maybe('buildInBackground + getBuildStatus page the logs by offset; list and delete', async () => {
  const bg = await Template.buildInBackground(Template().fromTemplate('tagged-e2e:v2').runCmd('cat /home/user/v.txt'), 'child-e2e', opts)
  let offset = 0
  const seen = []
  let status
  for (let i = 0; i < 600; i++) {
    status = await Template.getBuildStatus(bg, { ...opts, logsOffset: offset })
    offset += status.logEntries.length
    seen.push(...status.logEntries.map((l) => l.message))
    if (status.status === 'ready' || status.status === 'error') {
      if (status.logEntries.length === 0) break
      continue
    }
    await new Promise((r) => setTimeout(r, 500))
  }
  assert.equal(status.status, 'ready', seen.join('\n'))
  assert.ok(seen.some((l) => l.includes('[stdout]: two')), seen.join('\n'))
  assert.equal(new Set(seen).size, seen.length, 'no entry twice')
  // The child inherits its parent's files.
  const sb = await Sandbox.create('child-e2e', opts)
  try {
    assert.equal(await sh(sb, 'cat /home/user/v.txt'), 'two')
  } finally {
    await sb.kill()
  }
  // The official `e2b template` CLI (2.19.0) lists and deletes.
  const cli = (...args) => execFileSync(join(import.meta.dirname, 'node_modules/.bin/e2b'), ['template', ...args], {
    encoding: 'utf8',
    env: { ...process.env, E2B_API_KEY: opts.apiKey, E2B_API_URL: url, NO_UPDATE_NOTIFIER: '1' },
  })
  const listed = JSON.parse(cli('list', '-f', 'json'))
  const mine = listed.find((t) => (t.aliases || []).includes('child-e2e'))
  assert.ok(mine, JSON.stringify(listed))
  assert.equal(mine.buildStatus, 'ready')
  assert.ok(mine.diskSizeMB > 0)
  cli('delete', mine.templateID, '-y')
  assert.equal(await Template.exists('child-e2e', opts), false)
  await assert.rejects(Sandbox.create('child-e2e', opts))
})

// Raw API calls: what the SDK never sends.
async function api(method, path, body) {
  const r = await fetch(`${url}${path}`, {
    method,
    headers: { 'X-API-KEY': opts.apiKey, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await r.text()
  return { status: r.status, body: text ? JSON.parse(text) : null }
}

maybe('bad input: malformed steps, hostile archives and oversized uploads are refused or fail the step; the host is untouched', async () => {
  const req = await api('POST', '/v3/templates', { name: 'hostile-e2e' })
  assert.equal(req.status, 202)
  const { templateID, buildID } = req.body
  for (const steps of [
    [{ type: 'FROB', args: ['x'] }],
    [{ type: 'ENV', args: ['A'] }],
    [{ type: 'RUN', args: ['a', 'b', 'c'] }],
    [{ type: 'COPY', args: ['a', 'b'] }],
  ]) {
    const r = await api('POST', `/v2/templates/${templateID}/builds/${buildID}`, { fromTemplate: 'base', steps })
    assert.equal(r.status, 400, JSON.stringify(steps))
  }
  assert.equal((await api('POST', '/v3/templates', { name: '../etc' })).status, 400)
  assert.equal((await api('POST', '/v3/templates', { name: 'base' })).status, 409)

  // A tar with "../" entries, an absolute path, an absolute symlink and a
  // device node: extracted inside the build VM only, never on the host.
  const work = mkdtempSync(join(tmpdir(), 'airlock-hostile-'))
  const marker = `/tmp/airlock-hostile-marker-${process.pid}`
  try {
    mkdirSync(join(work, 'in/app'), { recursive: true })
    writeFileSync(join(work, 'in/app/ok.txt'), 'ok\n')
    writeFileSync(join(work, 'in/evil.txt'), 'evil\n')
    symlinkSync('/etc/shadow', join(work, 'in/app/shadow-link'))
    execFileSync('tar', ['-cf', join(work, 'a.tar'), '-C', join(work, 'in'), 'app'])
    execFileSync('tar', ['-rf', join(work, 'a.tar'), '-C', join(work, 'in'), '--transform', `s|evil.txt|../../../../..${marker}|`, 'evil.txt'])
    execFileSync('tar', ['-rf', join(work, 'a.tar'), '-P', '-C', join(work, 'in'), '--transform', `s|evil.txt|${marker}-abs|`, 'evil.txt'])
    const hash = 'ab'.repeat(32)
    const link = await api('GET', `/templates/${templateID}/files/${hash}`)
    assert.equal(link.status, 201)
    assert.equal(link.body.present, false)
    const tarBytes = readFileSync(join(work, 'a.tar'))
    // A wrong token is refused.
    const bad = await fetch(link.body.url.replace(/token=[0-9a-f]+/, 'token=' + '0'.repeat(64)), { method: 'PUT', body: tarBytes })
    assert.equal(bad.status, 403)
    const put = await fetch(link.body.url, { method: 'PUT', body: tarBytes })
    assert.equal(put.status, 200)
    assert.equal((await api('GET', `/templates/${templateID}/files/${hash}`)).body.present, true)
    // Over --max-upload (1 MiB): 413.
    const big = await api('GET', `/templates/${templateID}/files/${'cd'.repeat(32)}`)
    // The server answers 413 from the Content-Length without reading the
    // body, so the client may see the answer or a reset mid-send; either
    // way nothing is stored.
    const tooBig = await fetch(big.body.url, { method: 'PUT', body: Buffer.alloc(2 << 20) }).catch((e) => e)
    if (!(tooBig instanceof Error)) assert.equal(tooBig.status, 413)
    assert.equal((await api('GET', `/templates/${templateID}/files/${'cd'.repeat(32)}`)).body.present, false)
    const start = await api('POST', `/v2/templates/${templateID}/builds/${buildID}`, {
      fromTemplate: 'base',
      steps: [{ type: 'COPY', args: ['app', '/srv/app/', '', ''], filesHash: hash, force: false }],
    })
    assert.equal(start.status, 202)
    let st
    for (let i = 0; i < 600; i++) {
      st = await api('GET', `/templates/${templateID}/builds/${buildID}/status`)
      if (st.body.status === 'ready' || st.body.status === 'error') break
      await new Promise((r) => setTimeout(r, 500))
    }
    // GNU tar in the guest refuses the "../" member (exit 2): the step fails,
    // naming itself; its stderr is in the log.
    assert.equal(st.body.status, 'error', JSON.stringify(st.body))
    assert.equal(st.body.reason.step, '1')
    assert.match(st.body.reason.message, /COPY app/)
    const logs = await api('GET', `/templates/${templateID}/builds/${buildID}/status?logsOffset=0`)
    assert.ok(logs.body.logEntries.some((e) => /\.\./.test(e.message) && e.message.includes('[stderr]')), JSON.stringify(logs.body))
    // The host never saw the hostile entries.
    assert.throws(() => readFileSync(marker))
    assert.throws(() => readFileSync(`${marker}-abs`))
    await assert.rejects(Sandbox.create('hostile-e2e', opts))
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
})

maybe('a daemon killed -9 mid-build: the build is failed on restart and nothing half-written is left', async () => {
  const d1 = await startDaemon()
  let d2
  try {
    const o1 = d1.opts
    const bg = await Template.buildInBackground(
      Template().fromBaseImage().runCmd('echo step-one > /home/user/one.txt').runCmd('echo started-two; sleep 600'),
      'killed-e2e', o1)
    // Wait until step 2 runs (step 1's layer exists by then).
    let seen = false
    for (let i = 0; i < 600 && !seen; i++) {
      const st = await Template.getBuildStatus(bg, { ...o1, logsOffset: 0 })
      seen = st.logEntries.some((l) => l.message.includes('started-two'))
      if (!seen) await new Promise((r) => setTimeout(r, 500))
    }
    assert.ok(seen, 'step 2 started')
    await d1.kill9()
    d2 = await startDaemon([], d1)
    const st = await Template.getBuildStatus(bg, { ...d2.opts, logsOffset: 0 })
    assert.equal(st.status, 'error')
    assert.match(st.reason.message, /interrupted/)
    // Its layers (step 1's was saved) are gone, its image never installed.
    const owner = execFileSync('readlink', ['-f', join(d1.tmp, 'airlock.db')], { encoding: 'utf8' }).trim()
    const hash = (await import('node:crypto')).createHash('sha256').update(owner).digest('hex').slice(0, 16)
    const root = join(process.env.AIRLOCK_STATE_DIR || '/var/lib/airlock', 'snapshots/layers', hash)
    const left = execFileSync('find', [root, '-mindepth', '1', '-maxdepth', '1', '-type', 'd'], { encoding: 'utf8' }).trim()
    assert.equal(left, '', `layers left: ${left}`)
    await assert.rejects(Sandbox.create('killed-e2e', d2.opts))
    // And the template can be built again.
    const again = await Template.build(Template().fromBaseImage().runCmd('echo ok'), 'killed-e2e', d2.opts)
    assert.equal(again.templateId, bg.templateId)
  } finally {
    if (d2) await d2.stop()
    else await d1.stop()
  }
})

maybe('builds queue past --max-builds, deleting a template cancels its running build, --build-timeout ends a build', async () => {
  const dq = await startDaemon(['--max-builds', '1'])
  try {
    const o = dq.opts
    const status = (b) => Template.getBuildStatus(b, { ...o, logsOffset: 0 })
    const a = await Template.buildInBackground(Template().fromBaseImage().runCmd('echo a-started; sleep 600'), 'queue-a', o)
    let running = false
    for (let i = 0; i < 600 && !running; i++) {
      running = (await status(a)).logEntries.some((l) => l.message.includes('[stdout]: a-started'))
      if (!running) await new Promise((r) => setTimeout(r, 250))
    }
    assert.ok(running, 'build a runs its step')
    const b = await Template.buildInBackground(Template().fromBaseImage().runCmd('echo b-ran'), 'queue-b', o)
    assert.equal((await status(b)).status, 'waiting')
    const del = await fetch(`${dq.url}/templates/queue-a`, { method: 'DELETE', headers: { 'X-API-KEY': o.apiKey } })
    assert.equal(del.status, 204)
    let sb
    for (let i = 0; i < 1200; i++) {
      sb = await status(b)
      if (sb.status === 'ready' || sb.status === 'error') break
      await new Promise((r) => setTimeout(r, 250))
    }
    assert.equal(sb.status, 'ready', JSON.stringify(sb))
    // Nothing of a's build is left running.
    assert.equal((await Sandbox.list(o).nextItems()).length, 0)
    // The build before() started on the --build-timeout daemon: its step
    // sleeps 600 s, the deadline ends it (by now, or soon).
    let sc
    for (let i = 0; i < 1200; i++) {
      sc = await Template.getBuildStatus(timedOut.build, { ...dt.opts, logsOffset: 0 })
      if (sc.status === 'ready' || sc.status === 'error') break
      await new Promise((r) => setTimeout(r, 500))
    }
    assert.equal(sc.status, 'error', JSON.stringify(sc))
    assert.match(sc.reason.message, /timed out/)
    assert.equal(sc.reason.step, '1')
    assert.ok(Date.now() - timedOut.t0 >= BUILD_TIMEOUT_S * 1000, 'it ended before its deadline')
  } finally {
    await dq.stop()
  }
})

maybe('fromDebianImage builds on the host mirror\'s bookworm (other suites are refused); minFreeDiskMb grows the disk', async () => {
  // A start command that finishes (exit 0) before its ready command is no
  // failure, as in E2B; it runs once, not again.
  const t = Template().fromDebianImage('bookworm').runCmd('cat /etc/debian_version > /home/user/debian_version')
    .setStartCmd('echo ran >> /home/user/start_runs', 'sleep 2; test -s /home/user/start_runs')
  const r = await build(t, 'debian-e2e', { minFreeDiskMb: 3072 })
  assert.ok(r.logs.some((l) => l.includes('Growing the disk by 3072 MiB')), r.logs.join('\n'))
  const sb = await Sandbox.create('debian-e2e', opts)
  try {
    assert.match(await sh(sb, 'cat /home/user/debian_version'), /^12\./)
    assert.equal(await sh(sb, 'cat /home/user/start_runs'), 'ran')
    const avail = Number(await sh(sb, "df -m --output=avail / | tail -1"))
    assert.ok(avail >= 3072, `free MiB: ${avail}`)
  } finally {
    await sb.kill()
  }
  await assert.rejects(Template.build(Template().fromDebianImage('trixie').runCmd('true'), 'trixie-e2e', opts),
    (e) => e instanceof BuildError && /bookworm/.test(e.message))
})
