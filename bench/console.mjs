// The web console's sandbox list at 500 sandboxes (issue 18: "renders in
// under 200 ms"), in Debian's chromium (headless, puppeteer-core), on the
// console the daemon serves. 500 live microVMs do not fit this host, so the
// list is 500 records in the exact shape GET /v2/sandboxes answers (ids,
// templates, times, three metadata pairs each) with a metrics sample each,
// handed to the console's own renderer (window.airlockConsole
// .renderSandboxRows, what the Sandboxes page calls on every refresh).
// Measured inside the page, per iteration:
//   - console: JSON.parse of the list body + renderSandboxRows + the layout
//     the browser must do before it can paint (forced by reading
//     offsetHeight): the time until the table can be shown;
//   - raw primitive, same run, same page: a plain <table> of 500 rows of 10
//     text cells built with createElement/textContent and laid out, nothing
//     else (what any DOM table of this size costs here).
// Usage (root): node bench/console.mjs [N]   (default 20; AIRLOCK_BIN,
// AIRLOCK_STATE_DIR, CHROMIUM). `make bench-console`.
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { freePort, pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '../tests/e2e/package.json'))
const puppeteer = require('puppeteer-core')
const N = Number(process.argv[2] || process.env.N || 20)
const ROWS = 500

// The console has its own origin (serve --console-listen, docs/console.md).
const consolePort = await freePort()
const d = await startDaemon(['--pool', '0', '--console-listen', `127.0.0.1:${consolePort}`])
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  defaultViewport: { width: 1400, height: 900 },
})
try {
  const page = await browser.newPage()
  await page.goto(`http://127.0.0.1:${consolePort}/console/`)
  await page.waitForFunction(() => window.airlockConsole)
  const times = await page.evaluate((rows, n) => {
    const now = Date.now()
    const list = []
    const metrics = {}
    for (let i = 0; i < rows; i++) {
      const id = 'i' + i.toString(36).padStart(19, 'x')
      list.push({
        sandboxID: id, templateID: i % 3 ? 'base' : 'code-interpreter', runtime: i % 2 ? 'qemu' : 'gvisor',
        clientID: 'airlock', startedAt: new Date(now - i * 1000).toISOString(), endAt: new Date(now + 300000 - i * 100).toISOString(),
        state: i % 7 ? 'running' : 'paused', cpuCount: 1, memoryMB: 512, diskSizeMB: 2682, envdVersion: '0.6.13',
        metadata: { owner: 'agent-' + (i % 17), task: 'job-' + i, note: '<b>not html</b> #' + i }, volumeMounts: [],
      })
      metrics[id] = { cpuUsedPct: (i * 7) % 100, memUsed: 100e6 + i * 1e5, memTotal: 512e6 }
    }
    const body = JSON.stringify(list)
    // The page's own list container (role=table of grid rows, app.css).
    const table = document.createElement('div')
    table.setAttribute('role', 'table')
    table.className = 'gtable'
    const tbody = document.createElement('div')
    tbody.id = 'sandbox-rows'
    table.appendChild(tbody)
    document.getElementById('main').appendChild(table)
    const rawTable = document.createElement('table')
    const rawBody = document.createElement('tbody')
    rawTable.appendChild(rawBody)
    document.getElementById('main').appendChild(rawTable)
    const out = { console: [], raw: [] }
    for (let k = 0; k < n; k++) {
      let t0 = performance.now()
      window.airlockConsole.renderSandboxRows(tbody, JSON.parse(body), metrics, Date.now())
      void table.offsetHeight
      out.console.push(performance.now() - t0)
      t0 = performance.now()
      while (rawBody.firstChild) rawBody.removeChild(rawBody.firstChild)
      const frag = document.createDocumentFragment()
      for (const s of list) {
        const tr = document.createElement('tr')
        for (const v of [s.sandboxID, s.templateID, s.runtime, s.state, s.startedAt, s.endAt, '1', '2', s.metadata.owner, 'x']) {
          const td = document.createElement('td')
          td.textContent = v
          tr.appendChild(td)
        }
        frag.appendChild(tr)
      }
      rawBody.appendChild(frag)
      void rawTable.offsetHeight
      out.raw.push(performance.now() - t0)
    }
    return out
  }, ROWS, N)
  const row = (name, v) => `| ${name} | ${pct(v, 50).toFixed(1)} | ${pct(v, 99).toFixed(1)} |`
  console.log(`\nSandbox list of ${ROWS} sandboxes in chromium (N=${N}; goal: under 200 ms)\n`)
  console.log('| what | p50 ms | p99 ms |')
  console.log('|---|---|---|')
  console.log(row('console: parse + render + layout', times.console))
  console.log(row('raw primitive: 500 plain rows + layout', times.raw))
  console.log(`\nfirst render (cold page): console ${times.console[0].toFixed(1)} ms, raw ${times.raw[0].toFixed(1)} ms`)
} finally {
  await browser.close()
  await d.stop()
}
