// The web console (issue 18, docs/console.md) in a real browser: Debian's
// chromium, headless, driven by puppeteer-core, against a real daemon and
// real microVMs, with a sandbox made through the official e2b SDK.
//
// AIRLOCK_CONSOLE_SCREENSHOTS=DIR also saves the main pages as PNGs there
// (docs/console.md's pictures).
import assert from 'node:assert/strict'
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'

import { e2b, freePort, skipReason as daemonSkip, startDaemon, waitFor } from './daemon.mjs'

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium'
const SHOTS = process.env.AIRLOCK_CONSOLE_SCREENSHOTS || ''
let skipReason = daemonSkip
let puppeteer
if (!skipReason && !existsSync(CHROMIUM)) skipReason = `no chromium at ${CHROMIUM} (scripts/setup installs Debian's)`
if (!skipReason) {
  try {
    puppeteer = (await import('puppeteer-core')).default
  } catch (e) {
    skipReason = `puppeteer-core is not installed (npm ci in tests/e2e): ${e.message}`
  }
}

// The daemon's own reasons are printed by daemon.mjs; these are this suite's.
if (skipReason && !daemonSkip) console.log(`# SKIP e2e: ${skipReason}`)

const XSS = '<img src=x onerror="window.__xss=1">'

describe('web console', { skip: skipReason || false }, () => {
  // C: the console's own origin (serve --console-listen); d.url: the API's.
  let d, browser, page, sbx, C
  const problems = []
  before(async () => {
    const consolePort = await freePort()
    C = `http://127.0.0.1:${consolePort}`
    d = await startDaemon(['--console-listen', `127.0.0.1:${consolePort}`])
    browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      // Root in a test VM: chromium's own sandbox needs user namespaces it may not get.
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--window-size=1400,1000'],
      defaultViewport: { width: 1400, height: 1000 },
    })
    page = await browser.newPage()
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`))
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console: ${m.text()}`)
    })
    page.on('dialog', (dialog) => dialog.accept())
  })
  after(async () => {
    if (browser) await browser.close()
    if (sbx) await sbx.kill().catch(() => {})
    if (d) await d.stop()
  })

  const shot = async (name) => {
    if (SHOTS) await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: name === 'sandbox' })
  }
  const termText = () => page.evaluate(() => {
    const t = window.airlockTerminal
    if (!t) return ''
    const b = t.buffer.active
    const lines = []
    for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true))
    return lines.join('\n')
  })
  const typeInTerminal = async (line) => {
    await page.focus('#terminal .xterm-helper-textarea')
    await page.keyboard.type(line)
    await page.keyboard.press('Enter')
  }

  test('sign-in refuses a wrong key, then the list shows an SDK sandbox with its metadata as text', async () => {
    sbx = await e2b.Sandbox.create('base', { ...d.opts, timeoutMs: 300_000, metadata: { owner: 'console-e2e', note: XSS } })
    const resp = await page.goto(`${C}/console/`)
    const csp = resp.headers()['content-security-policy']
    assert.match(csp, /script-src 'self'(;|$)/)
    assert.match(csp, /frame-ancestors 'none'/)
    await page.waitForSelector('#apikey')
    await page.type('#apikey', 'e2b_' + 'f'.repeat(40))
    await page.click('#signin-submit')
    await page.waitForFunction(() => /refused/.test(document.querySelector('#signin-error').textContent))
    assert.equal(await page.evaluate(() => sessionStorage.getItem('airlock.apiKey')), null)
    await shot('signin')

    await page.click('#apikey', { clickCount: 3 })
    await page.type('#apikey', d.apiKey)
    await page.click('#signin-submit')
    const row = `#sandbox-rows [data-id="${sbx.sandboxId}"]`
    await page.waitForSelector(row, { timeout: 20000 })
    // The key stays in the tab: no cookie, not in the URL.
    assert.equal(await page.evaluate(() => document.cookie), '')
    assert.ok(!page.url().includes(d.apiKey))
    const cells = await page.$eval(row, (r) => [...r.children].map((cell) => cell.textContent))
    assert.equal(cells[1], 'base')
    assert.equal(cells[3], 'running')
    // XSS in metadata renders as text: no element made from it, no script ran.
    const meta = await page.$$eval(`${row} .meta`, (spans) => spans.map((s) => s.textContent))
    assert.ok(meta.includes(`note=${XSS}`), JSON.stringify(meta))
    assert.equal(await page.$$eval(`${row} img`, (imgs) => imgs.length), 0)
    assert.equal(await page.evaluate(() => window.__xss), undefined)
    // Filter: a word that matches nothing hides the row; the metadata value finds it.
    await page.type('#filter', 'no-such-sandbox-anywhere')
    await page.waitForSelector(row, { hidden: true })
    await page.click('#filter', { clickCount: 3 })
    await page.type('#filter', 'console-e2e')
    await page.waitForSelector(row)
    // Every control has a name a screen reader can say.
    const unnamed = await page.evaluate(() => [...document.querySelectorAll('input, select, button, a')].filter((el) => {
      const label = el.id && document.querySelector(`label[for="${el.id}"]`)
      return !(el.getAttribute('aria-label') || label || el.textContent.trim())
    }).map((el) => el.outerHTML))
    assert.deepEqual(unnamed, [])
    await shot('sandboxes')
  })

  test('no other origin may call the API with the key (CSRF, CORS)', async () => {
    // No cookie carries the key, and no CORS header lets another site's page
    // send X-API-Key (its preflight gets no Access-Control-Allow-Origin):
    // neither on the console's origin nor on the API's.
    for (const base of [C, d.url]) {
      const pre = await fetch(`${base}/v2/sandboxes`, { method: 'OPTIONS', headers: {
        Origin: 'http://evil.example', 'Access-Control-Request-Method': 'DELETE', 'Access-Control-Request-Headers': 'x-api-key' } })
      assert.equal(pre.headers.get('access-control-allow-origin'), null)
      const get = await fetch(`${base}/v2/sandboxes`, { headers: { Origin: 'http://evil.example', 'X-API-Key': d.apiKey } })
      assert.equal(get.status, 200)
      assert.equal(get.headers.get('access-control-allow-origin'), null)
      assert.equal(get.headers.get('set-cookie'), null)
    }
  })

  test("the console has its own origin, and no guest's file is a page of the API's", async () => {
    // Issue 32: root in a guest answers /files with a page and a service
    // worker; an operator who opens the signed link must get a download.
    const redirect = await fetch(`${d.url}/console/#/audit`, { redirect: 'manual' })
    assert.equal(redirect.status, 308)
    assert.equal(redirect.headers.get('location'), `${C}/console/`)
    await sbx.files.write('/home/user/page.html', '<script>navigator.serviceWorker.register("/files")</script>')
    const url = await sbx.downloadUrl('/home/user/page.html')  // the SDK's default: no expiration
    const g = await fetch(url)
    assert.equal(g.status, 200)
    assert.equal(g.headers.get('content-type'), 'application/octet-stream')
    assert.equal(g.headers.get('content-disposition'), 'attachment')
    assert.equal(g.headers.get('x-content-type-options'), 'nosniff')
    assert.equal(g.headers.get('content-security-policy'), "sandbox; default-src 'none'")
    assert.match(await g.text(), /serviceWorker/)
    // A parameter the signature does not cover, a signature for two days, a
    // service worker's fetch: refused. A day is fine.
    assert.equal((await fetch(url + '&next=%2Fconsole%2F')).status, 401)
    assert.equal((await fetch(await sbx.downloadUrl('/home/user/page.html', { useSignatureExpiration: 2 * 86400 }))).status, 401)
    assert.equal((await fetch(await sbx.downloadUrl('/home/user/page.html', { useSignatureExpiration: 86400 }))).status, 200)
    assert.equal((await fetch(url, { headers: { 'Service-Worker': 'script' } })).status, 403)
    // The console's origin relays no signed URL, no other guest port and no
    // service worker's script; the agent by header only (as the page calls it).
    assert.equal((await fetch(C + new URL(url).pathname + new URL(url).search)).status, 403)
    assert.equal((await fetch(`${C}/console/app.js`, { headers: { 'Service-Worker': 'script' } })).status, 403)
    const other = await fetch(`${C}/health`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8080' } })
    assert.equal(other.status, 403)
    const agent = await fetch(`${C}/health`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' } })
    assert.equal(agent.status, 204)
  })

  test("a team key reads only its own part of the trail and not the host", async () => {
    const other = d.createKey('console-other-team')
    const h = { 'X-API-Key': other }
    assert.equal((await fetch(`${d.url}/v2/sandboxes`, { headers: h })).status, 200)
    const all = await (await fetch(`${d.url}/audit?limit=10000`, { headers: { 'X-API-Key': d.apiKey } })).json()
    assert.ok(all.some((r) => r.sandbox === sbx.sandboxId), 'the admin key sees the sandbox\'s records')
    const adminKeyId = all.find((r) => r.action === 'sandbox.create').api_key_id
    // Its own calls only (the list above), none of the admin's or the sandbox's.
    const mine = await (await fetch(`${d.url}/audit?limit=10000`, { headers: h })).json()
    assert.ok(mine.some((r) => r.action === 'sandbox.list'), JSON.stringify(mine))
    assert.equal(new Set(mine.map((r) => r.api_key_id)).size, 1)
    assert.ok(mine.every((r) => r.api_key_id !== adminKeyId && r.sandbox !== sbx.sandboxId))
    assert.equal((await fetch(`${d.url}/audit/verify`, { headers: h })).status, 403)
    assert.equal((await fetch(`${d.url}/host`, { headers: h })).status, 403)
    const m = await (await fetch(`${d.url}/sandboxes/metrics?sandbox_ids=${sbx.sandboxId}`, { headers: h })).json()
    assert.deepEqual(m, { sandboxes: {} })
  })

  test('the terminal runs echo hi, an uploaded file is found with ls, and the shell is audited', async () => {
    await page.click(`#sandbox-rows [data-id="${sbx.sandboxId}"] a`)
    await page.waitForFunction(() => /pid \d+/.test(document.querySelector('#terminal-status')?.textContent || ''), { timeout: 30000 })
    await typeInTerminal('echo hi')
    const shown = await waitFor(async () => (await termText()).split('\n').some((l) => l.trim() === 'hi'), 20000)
    assert.ok(shown, `terminal:\n${await termText()}`)

    // The stream drops (a pause ends every data-plane stream of the sandbox,
    // as a network drop would); once the sandbox answers again the console
    // re-attaches to the same shell (process.Process/Connect).
    const pid = await page.$eval('#terminal-status', (el) => el.textContent.match(/pid (\d+)/)[1])
    await sbx.pause()
    await page.waitForFunction(() => /dropped|reconnect/.test(document.querySelector('#terminal-status').textContent), { timeout: 20000 })
    await e2b.Sandbox.connect(sbx.sandboxId, d.opts)
    await page.waitForFunction((p) => document.querySelector('#terminal-status').textContent === `(pid ${p})`, { timeout: 30000 }, pid)
    await typeInTerminal('echo $((40+2))')
    assert.ok(await waitFor(async () => (await termText()).split('\n').some((l) => l.trim() === '42'), 20000),
      `terminal after the drop:\n${await termText()}`)

    const dir = mkdtempSync(join(tmpdir(), 'console-upload-'))
    const file = join(dir, 'from-browser.txt')
    writeFileSync(file, 'uploaded through the console\n')
    const input = await page.$('#files-upload')
    await input.uploadFile(file)
    await page.waitForFunction(() => /from-browser\.txt/.test(document.querySelector('#files-rows').textContent), { timeout: 20000 })
    await typeInTerminal('ls /home/user && cat /home/user/from-browser.txt')
    const listed = await waitFor(async () => {
      const t = await termText()
      return t.split('\n').some((l) => l.includes('from-browser.txt')) && t.includes('uploaded through the console')
    }, 20000)
    assert.ok(listed, `terminal:\n${await termText()}`)
    assert.equal(await sbx.files.read('/home/user/from-browser.txt'), 'uploaded through the console\n')

    // A sealed sandbox: the name is refused by airlock's resolver (never
    // asked upstream), and the decision shows in the egress panel.
    await typeInTerminal('curl -sS -m 5 http://blocked.example/ ; echo rc=$?')
    await page.waitForFunction(() => /blocked\.example/.test(document.querySelector('#egress-rows').textContent) &&
      /deny/.test(document.querySelector('#egress-rows').textContent), { timeout: 30000 })
    await page.waitForFunction(() => /\/bin\/bash -l/.test(document.querySelector('#history-rows').textContent), { timeout: 20000 })

    // The terminal is a data-plane session audited like a command.
    const recs = await (await fetch(`${d.url}/sandboxes/${sbx.sandboxId}/audit`, { headers: { 'X-API-Key': d.apiKey } })).json()
    assert.ok(recs.some((r) => r.action === 'exec.start' && r.cmd === '/bin/bash'), 'exec.start of the terminal shell')
    assert.ok(recs.some((r) => r.action === 'file.write' && JSON.stringify(r.files).includes('from-browser.txt')))
    await page.waitForFunction(() => document.querySelector('#cpu-now')?.textContent, { timeout: 20000 })
    await shot('sandbox')
  })

  test('templates (a live build log, delete), audit (verify) and host pages', async () => {
    // A one-step custom template built with the SDK while the page watches its log.
    const { Template } = e2b
    const building = Template.build(Template().fromBaseImage().runCmd('echo built-by-console-test'), 'console-e2e',
      { apiKey: d.apiKey, apiUrl: d.url })
    const tplId = await waitFor(async () => {
      const list = await (await fetch(`${d.url}/templates`, { headers: { 'X-API-Key': d.apiKey } })).json()
      return list.find((t) => (t.aliases || []).includes('console-e2e'))?.templateID
    }, 30000, 200)
    assert.ok(tplId, 'the build request made the template')
    await page.goto(`${C}/console/#/templates`)
    await page.waitForSelector(`#template-rows tr[data-id="${tplId}"] button`)
    await page.click(`#template-rows tr[data-id="${tplId}"] button`)
    await page.waitForFunction(() => /built-by-console-test/.test(document.querySelector('#build-log').textContent), { timeout: 120000 })
    await page.waitForFunction(() => /\[ready\]/.test(document.querySelector('#build-log').textContent), { timeout: 120000 })
    await building
    // The list refreshes itself when the build ends: wait for it before clicking in it.
    await page.waitForFunction((id) => document.querySelector(`#template-rows tr[data-id="${id}"] td:nth-child(4)`)?.textContent === 'ready',
      { timeout: 20000 }, tplId)
    await shot('templates')
    await page.click(`#template-rows tr[data-id="${tplId}"] button.danger`)
    await page.waitForSelector(`#template-rows tr[data-id="${tplId}"]`, { hidden: true })
    assert.equal((await fetch(`${d.url}/templates/${tplId}`, { headers: { 'X-API-Key': d.apiKey } })).status, 404)

    await page.goto(`${C}/console/#/audit`)
    await page.waitForFunction(() => document.querySelectorAll('#audit-rows tr').length > 1)
    await page.click('#audit-verify')
    await page.waitForFunction(() => /intact: \d+ records/.test(document.querySelector('#audit-verify-result').textContent))
    await shot('audit')
    await page.goto(`${C}/console/#/host`)
    await page.waitForSelector('#host-view')
    const host = await page.$eval('#host-view', (el) => el.textContent)
    assert.match(host, /qemu \(default\)/)
    assert.match(host, /Running1/)
    await shot('host')
  })

  test('kill from the console ends the sandbox for the SDK too', async () => {
    await page.goto(`${C}/console/#/sandbox/${sbx.sandboxId}`)
    await page.waitForSelector('#action-kill')
    await page.click('#action-kill')
    await page.waitForFunction(() => location.hash === '#/sandboxes')
    assert.equal(await waitFor(async () => !(await sbx.isRunning()), 20000), true)
    await page.waitForSelector(`#sandbox-rows [data-id="${sbx.sandboxId}"]`, { hidden: true })
    sbx = null
    // Chromium logs every failed or non-2xx fetch ("Failed to load resource"):
    // the refused key (401), the terminal stream cut by the kill. Anything
    // else (an exception, a CSP violation) is a defect.
    assert.deepEqual(problems.filter((p) => !/Failed to load resource/.test(p)), [])
  })
})
