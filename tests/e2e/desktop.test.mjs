// End-to-end: computer use through the official @e2b/desktop (2.4.0,
// unmodified) against a real `airlock serve` and the desktop template
// (docs/desktop.md): screenshots, mouse and keyboard, an editor typed into
// and its file read back, an application launched by its desktop entry, a
// click that changes the screen, window helpers, and the live view (stream.start, getUrl) opened in a real browser
// (Debian's chromium through puppeteer-core) at the URL the SDK gives, on
// the sandbox's own host `6080-<id>.<domain>` over TLS, with and without
// the stream's password. One sandbox for the file, plus one for a create
// that asks for another screen size.
//
// Prints `# measure:` lines: create (the SDK's, desktop already up in the
// template snapshot) and the first screenshot beside a `base` create and
// its first command in the same run, and the screenshot round trip.
// Env: AIRLOCK_BIN, AIRLOCK_STATE_DIR (see daemon.mjs); CHROMIUM;
// AIRLOCK_DESKTOP_SCREENSHOTS=DIR also saves, there, the sandbox's screen
// with the editor (editor.png) and the browser's live view (live-view.png):
// docs/desktop.md's and the README's pictures.
import assert from 'node:assert/strict'
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, test } from 'node:test'
import { inflateSync } from 'node:zlib'

import { e2b, makeDomainCert, STATE_DIR, skipReason as daemonSkip, startDaemon, tlsAddress, waitFor } from './daemon.mjs'

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium'
const SHOTS = process.env.AIRLOCK_DESKTOP_SCREENSHOTS || ''
let skipReason = daemonSkip
if (!skipReason && !existsSync(join(STATE_DIR, 'images', 'templates', 'desktop.json')))
  skipReason = `no desktop template in ${STATE_DIR} (make image builds it; or airlock image build --template desktop)`
let Desktop
if (!skipReason) {
  try {
    Desktop = (await import('@e2b/desktop')).Sandbox
  } catch (e) {
    skipReason = `@e2b/desktop is not installed (npm ci in tests/e2e): ${e.message}`
  }
}
if (skipReason && !daemonSkip) console.log(`# SKIP e2e: ${skipReason}`)
let browserSkip = skipReason
let puppeteer
if (!browserSkip && !existsSync(CHROMIUM)) browserSkip = `no chromium at ${CHROMIUM} (scripts/setup installs Debian's)`
if (!browserSkip) {
  try {
    puppeteer = (await import('puppeteer-core')).default
  } catch (e) {
    browserSkip = `puppeteer-core is not installed (npm ci in tests/e2e): ${e.message}`
  }
}
const maybe = skipReason ? test.skip : test
const maybeBrowser = browserSkip ? test.skip : test

const DOMAIN = 'desktop.airlock.test'
let d, addr, sb, browser
const others = []

before(async () => {
  if (skipReason) return
  const cert = makeDomainCert(DOMAIN)
  addr = tlsAddress()
  d = await startDaemon(['--domain', DOMAIN, '--tls-listen', `${addr}:443`, '--tls-cert', cert.certPath,
    '--tls-key', cert.keyPath])
})

after(async () => {
  if (browser) await browser.close().catch(() => {})
  for (const s of [sb, ...others]) if (s) await s.kill().catch(() => {})
  if (d) await d.stop()
})

// The SDK as a user configures it for a self-hosted server: API and
// sandbox URLs, and the domain its getHost() (hence stream.getUrl()) names.
const opts = () => ({ ...d.opts, domain: DOMAIN, timeoutMs: 600_000 })

// A PNG's size and pixels (8-bit RGB or RGBA, not interlaced: what scrot
// writes), decoded here so a test can compare regions of two screenshots.
function decodePng(bytes) {
  const buf = Buffer.from(bytes)
  assert.equal(buf.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'a PNG signature')
  let i = 8
  let width = 0, height = 0, type = 0
  const idat = []
  while (i < buf.length) {
    const len = buf.readUInt32BE(i)
    const kind = buf.toString('latin1', i + 4, i + 8)
    const data = buf.subarray(i + 8, i + 8 + len)
    if (kind === 'IHDR') {
      width = data.readUInt32BE(0)
      height = data.readUInt32BE(4)
      assert.equal(data[8], 8, 'bit depth 8')
      type = data[9]
      assert.ok(type === 2 || type === 6, `colour type ${type}`)
      assert.equal(data[12], 0, 'not interlaced')
    }
    if (kind === 'IDAT') idat.push(data)
    i += 12 + len
  }
  const bpp = type === 6 ? 4 : 3
  const raw = inflateSync(Buffer.concat(idat))
  const stride = width * bpp
  const px = Buffer.alloc(stride * height)
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)]
    const row = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1))
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? px[y * stride + x - bpp] : 0
      const b = y > 0 ? px[(y - 1) * stride + x] : 0
      const c = x >= bpp && y > 0 ? px[(y - 1) * stride + x - bpp] : 0
      let v = row[x]
      if (f === 1) v += a
      else if (f === 2) v += b
      else if (f === 3) v += (a + b) >> 1
      else if (f === 4) {
        const p = a + b - c
        const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c)
        v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c
      }
      px[y * stride + x] = v & 0xff
    }
  }
  return { width, height, bpp, px }
}

// How many pixels differ between two screenshots inside [x0,x1)×[y0,y1).
function changedPixels(a, b, x0, y0, x1, y1) {
  let n = 0
  for (let y = y0; y < y1; y++) {
    for (let x = x0; x < x1; x++) {
      const i = (y * a.width + x) * a.bpp, j = (y * b.width + x) * b.bpp
      if (a.px[i] !== b.px[j] || a.px[i + 1] !== b.px[j + 1] || a.px[i + 2] !== b.px[j + 2]) n++
    }
  }
  return n
}

const sh = async (cmd) => (await sb.commands.run(cmd)).stdout
const windowsOf = async (cls, box = sb) => {
  try {
    const ids = (await box.getApplicationWindows(cls)).filter(Boolean)
    return ids.length ? ids : null
  } catch {
    return null // xdotool search exits 1 when nothing matches
  }
}

maybe('create from the desktop template: its screen, a PNG screenshot of that size, the cursor', { timeout: 300_000 }, async () => {
  // A base sandbox's create and first command in the same run, for the measure line.
  let t0 = Date.now()
  const base = await e2b.Sandbox.create('base', { ...d.opts })
  await base.commands.run('echo hi')
  const baseMs = Date.now() - t0
  await base.kill()

  t0 = Date.now()
  sb = await Desktop.create(opts())
  const createMs = Date.now() - t0
  const png = await sb.screenshot()
  const firstShotMs = Date.now() - t0
  assert.deepEqual(await sb.getScreenSize(), { width: 1024, height: 768 })
  const img = decodePng(png)
  assert.equal(img.width, 1024)
  assert.equal(img.height, 768)
  // The SDK's own start found the template's X server and session and
  // started no second one.
  assert.equal((await sh('pgrep -c -x Xvfb')).trim(), '1')
  assert.equal((await sh('pgrep -c -x xfce4-session')).trim(), '1')
  // Key autorepeat is off (src/image/desktop/keyboards.xml): a key's release
  // that a busy host delivers late repeats nothing.
  assert.match(await sh('xset -display :0 q'), /auto repeat:\s+off/)
  await sb.moveMouse(200, 300)
  assert.deepEqual(await sb.getCursorPosition(), { x: 200, y: 300 })
  const rt = []
  for (let i = 0; i < 5; i++) {
    const s = Date.now()
    await sb.screenshot()
    rt.push(Date.now() - s)
  }
  rt.sort((a, b) => a - b)
  console.log(`# measure: desktop create ${createMs} ms, create to first screenshot ${firstShotMs} ms; ` +
    `base create to first command ${baseMs} ms (same run); screenshot round trip p50 ${rt[2]} ms`)
})

maybe('open a file in the editor, type into it, save it: the file holds what was typed', { timeout: 300_000 }, async () => {
  assert.ok(sb, 'the desktop sandbox was created')
  await sb.files.write('/home/user/notes.txt', '')
  await sb.open('/home/user/notes.txt')
  const wins = await waitFor(() => windowsOf('mousepad'), 90_000, 500)
  assert.ok(wins, 'a mousepad window appeared')
  const title = await waitFor(async () => {
    const t = await sb.getWindowTitle(wins[0])
    return t.includes('notes.txt') ? t : ''
  }, 30_000, 500)
  assert.match(title, /notes\.txt/)
  await waitFor(async () => (await sb.getCurrentWindowId()) === wins[0], 30_000, 500)
  await sb.write('typed by an agent, 42!')
  await sb.press(['ctrl', 's'])
  const saved = await waitFor(async () => {
    const text = await sb.files.read('/home/user/notes.txt')
    return text.includes('42!') ? text : ''
  }, 30_000, 500)
  assert.equal(saved.trim(), 'typed by an agent, 42!')
  if (SHOTS) writeFileSync(join(SHOTS, 'editor.png'), await sb.screenshot())
  await sb.press(['ctrl', 'q'])
  assert.ok(await waitFor(async () => (await windowsOf('mousepad')) === null, 30_000, 500), 'the editor closed')
})

maybe('launch() starts an application by its desktop entry', { timeout: 300_000 }, async () => {
  assert.ok(sb, 'the desktop sandbox was created')
  await sb.launch('xfce4-terminal')
  const wins = await waitFor(() => windowsOf('xfce4-terminal'), 90_000, 500)
  assert.ok(wins, 'a terminal window appeared')
  await sh('pkill -x xfce4-terminal')
  assert.ok(await waitFor(async () => (await windowsOf('xfce4-terminal')) === null, 30_000, 500), 'the terminal closed')
})

maybe('a right click on the desktop opens its menu where it was clicked; Escape closes it', { timeout: 300_000 }, async () => {
  assert.ok(sb, 'the desktop sandbox was created')
  await sb.moveMouse(900, 100)
  const before = decodePng(await sb.screenshot())
  await sb.rightClick(600, 300)
  // The menu opens below and right of the click; the pointer is left at the click.
  const region = [610, 310, 760, 460]
  const opened = await waitFor(async () => {
    const now = decodePng(await sb.screenshot())
    return changedPixels(before, now, ...region) > 5000 ? now : null
  }, 30_000, 500)
  assert.ok(opened, 'the screen changed where the menu opens')
  assert.equal(changedPixels(before, opened, 0, 500, 400, 700), 0, 'and nowhere far from it')
  await sb.press('escape')
  await sb.moveMouse(900, 100)
  const closed = await waitFor(async () => {
    const now = decodePng(await sb.screenshot())
    return changedPixels(before, now, ...region) === 0
  }, 30_000, 500)
  assert.ok(closed, 'Escape closed the menu')
})

maybe('the other mouse and keyboard calls reach the X server', { timeout: 300_000 }, async () => {
  assert.ok(sb, 'the desktop sandbox was created')
  await sb.drag([100, 600], [300, 650])
  assert.deepEqual(await sb.getCursorPosition(), { x: 300, y: 650 })
  await sb.doubleClick(500, 600)
  await sb.middleClick(510, 600)
  await sb.scroll('down', 2)
  await sb.scroll('up', 1)
  await sb.mousePress('left')
  await sb.mouseRelease('left')
  await sb.press('escape')
  await sb.wait(100)
  assert.deepEqual(await sb.getCursorPosition(), { x: 510, y: 600 })
  await sb.leftClick(520, 610)
  assert.deepEqual(await sb.getCursorPosition(), { x: 520, y: 610 })
})

// The live view as a person opens it: the URL stream.getUrl() gives, in a
// browser that resolves the domain to the daemon (a wildcard DNS record's
// job) and trusts its certificate.
async function openViewer(url) {
  if (!browser) {
    browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      acceptInsecureCerts: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', `--host-resolver-rules=MAP *.${DOMAIN} ${addr}`,
        '--ignore-certificate-errors', '--window-size=1200,900'],
      defaultViewport: { width: 1200, height: 900 },
    })
  }
  const page = await browser.newPage()
  // What the page said, for a failure's message.
  page.notes = []
  page.on('console', (m) => page.notes.push(`console ${m.type()}: ${m.text()}`))
  page.on('pageerror', (e) => page.notes.push(`page error: ${e.message}`))
  page.on('requestfailed', (r) => {
    const why = r.failure()?.errorText ?? ''
    page.notes.push(`request failed: ${r.url()} ${why}`)
    if (why.includes('ERR_NETWORK_CHANGED')) page.networkChanged = true
  })
  await page.goto(url, { waitUntil: 'load', timeout: 60_000 })
  return page
}

// waitFor(cond) on a viewer page, reloading it when chromium dropped some
// of its loads with ERR_NETWORK_CHANGED: chromium aborts what is in flight
// whenever the host's interfaces change, and on a test host other suites'
// sandboxes add and remove veths all the time (seen in CI: noVNC's modules
// half loaded, the viewer never started). A person would press reload.
async function waitOnViewer(page, cond, ms) {
  return waitFor(async () => {
    const v = await cond()
    if (v) return v
    if (page.networkChanged) {
      page.networkChanged = false
      page.notes.push('reloaded: a load failed with ERR_NETWORK_CHANGED')
      await page.reload({ waitUntil: 'load', timeout: 60_000 }).catch((e) => page.notes.push(`reload: ${e.message}`))
    }
    return null
  }, ms, 500)
}

// noVNC's status line and what the page logged: why a viewer shows nothing.
const viewerNotes = async (page) => {
  const status = await page.evaluate(() => document.getElementById('noVNC_status')?.textContent ?? '').catch((e) => `${e}`)
  return `noVNC status: ${JSON.stringify(status)}\n${page.notes.slice(-20).join('\n')}`
}

// The viewer's canvas once it shows the remote screen: its size and how many
// colours a sample of its pixels has (a blank canvas has one).
const canvasState = (page) => page.evaluate(() => {
  const c = document.querySelector('#noVNC_container canvas')
  if (!c || !c.width) return null
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data
  const colours = new Set()
  for (let i = 0; i < px.length; i += 4 * 101) colours.add((px[i] << 16) | (px[i + 1] << 8) | px[i + 2])
  const r = c.getBoundingClientRect()
  return { width: c.width, height: c.height, colours: colours.size, left: r.left, top: r.top, scale: r.width / c.width }
})

maybeBrowser('the live view: stream.getUrl() opens in a browser, shows the screen, and a person can take the mouse', { timeout: 300_000 }, async () => {
  assert.ok(sb, 'the desktop sandbox was created')
  await sb.stream.start()
  const url = sb.stream.getUrl()
  assert.ok(url.startsWith(`https://6080-${sb.sandboxId}.${DOMAIN}/vnc.html?`), url)
  const page = await openViewer(url)
  try {
    await liveView(page)
  } finally {
    await page.close().catch(() => {})
    await sb.stream.stop()
  }
  assert.equal((await sh('pgrep -x x11vnc || true')).trim(), '', 'stop ended x11vnc')
})

async function liveView(page) {
  const shown = await waitOnViewer(page, async () => {
    const s = await canvasState(page)
    return s && s.width === 1024 && s.height === 768 && s.colours > 3 ? s : null
  }, 120_000)
  assert.ok(shown, `the viewer shows the 1024×768 screen; ${await viewerNotes(page)}`)
  // The person moves the mouse in the viewer; the sandbox's pointer follows.
  await page.mouse.move(shown.left + 333 * shown.scale, shown.top + 222 * shown.scale)
  const at = await waitFor(async () => {
    const p = await sb.getCursorPosition()
    return Math.abs(p.x - 333) <= 2 && Math.abs(p.y - 222) <= 2 ? p : null
  }, 30_000, 500)
  assert.ok(at, 'the pointer followed the viewer')
  if (SHOTS) await page.screenshot({ path: join(SHOTS, 'live-view.png') })
}

maybeBrowser('the live view with requireAuth: without the key the viewer asks for it, with it the screen shows', { timeout: 300_000 }, async () => {
  assert.ok(sb, 'the desktop sandbox was created')
  await sb.stream.start({ requireAuth: true })
  try {
    await liveViewWithKey()
  } finally {
    await sb.stream.stop()
  }
})

async function liveViewWithKey() {
  const key = sb.stream.getAuthKey()
  assert.match(key, /^[A-Za-z0-9]{16}$/)
  const locked = await openViewer(sb.stream.getUrl())
  const asked = await waitOnViewer(locked, () => locked.evaluate(() =>
    document.getElementById('noVNC_credentials_dlg')?.classList.contains('noVNC_open')), 120_000)
  assert.ok(asked, `the viewer asks for the password; ${await viewerNotes(locked)}`)
  const blank = await canvasState(locked)
  assert.ok(!blank || blank.colours <= 1, `no screen before the password: ${JSON.stringify(blank)}`)
  await locked.close()
  const open = await openViewer(sb.stream.getUrl({ authKey: key }))
  const shown = await waitOnViewer(open, async () => {
    const s = await canvasState(open)
    return s && s.width === 1024 && s.colours > 3 ? s : null
  }, 120_000)
  assert.ok(shown, `with the key the screen shows; ${await viewerNotes(open)}`)
  await open.close()
}

maybe('on gVisor too: a desktop-gvisor sandbox shows its desktop, and a program it starts opens a window', { timeout: 300_000 }, async () => {
  const g = await Desktop.create('desktop-gvisor', opts())
  others.push(g)
  const img = decodePng(await g.screenshot())
  assert.equal(img.width, 1024)
  // XFCE started its programs (under this runsc only with the template's
  // close_range clamp: docs/desktop.md "Runtimes").
  assert.equal((await g.commands.run('pgrep -x xfwm4 >/dev/null && pgrep -x xfce4-panel >/dev/null && echo up')).stdout, 'up\n')
  await g.launch('xfce4-terminal')
  assert.ok(await waitFor(() => windowsOf('xfce4-terminal', g), 90_000, 500), 'a terminal window appeared')
  await g.kill()
})

maybe('a create that asks for another screen size gets it (the template\'s session is replaced)', { timeout: 300_000 }, async () => {
  const small = await Desktop.create({ ...opts(), resolution: [800, 600], dpi: 120 })
  others.push(small)
  assert.deepEqual(await small.getScreenSize(), { width: 800, height: 600 })
  const img = decodePng(await small.screenshot())
  assert.equal(img.width, 800)
  assert.equal(img.height, 600)
  const out = (await small.commands.run('pgrep -a -x Xvfb; pgrep -c -x xfce4-session')).stdout.trim().split('\n')
  assert.equal(out.length, 2, out.join('\n'))
  assert.match(out[0], /Xvfb :0 -ac -screen 0 800x600x24 -retro -dpi 120 /)
  assert.equal(out[1], '1')
  // The new session's settings daemon turns key autorepeat off too.
  const repeat = async () => (await small.commands.run('xset -display :0 q')).stdout
  assert.ok(await waitFor(async () => /auto repeat:\s+off/.test(await repeat()), 60_000, 500), await repeat())
  await small.kill()
})
