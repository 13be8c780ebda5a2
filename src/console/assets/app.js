// airlock web console (docs/console.md). Plain JavaScript, no build step:
// served by `airlock serve --console-listen` at /console/ on its own origin
// (never the API's, which relays guest bytes on signed URLs), with xterm.js
// from npm. Every call is relative: the console's listener serves the
// control API and the agent's port (by header) too.
//
// Security rules this file keeps:
// - the API key lives in sessionStorage only (gone when the tab closes),
//   is sent as the X-API-Key header (never a cookie, never in a URL), so no
//   request the browser makes on its own carries it (nothing to forge: CSRF);
// - every value from the API or a guest reaches the page as text
//   (textContent / createTextNode / setAttribute of plain attributes), never
//   as HTML; no innerHTML, no inline script (the CSP forbids both);
// - the terminal is process.Process/Start with a PTY through the data plane,
//   so it is audited like any command (exec.start / exec records);
// - a guest's bytes are data: a downloaded file becomes an octet-stream
//   blob, whatever type the guest gave it.
'use strict'

const KEY_STORE = 'airlock.apiKey'
const REFRESH_MS = 5000
const AGENT_PORT = '49983'

// ---------- small helpers ----------

function h(tag, props, ...children) {
  const el = document.createElement(tag)
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null || v === false) continue
      if (k === 'class') el.className = v
      else if (k === 'text') el.textContent = String(v)
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v)
      else if (k === 'dataset') Object.assign(el.dataset, v)
      else el.setAttribute(k, v === true ? '' : String(v))
    }
  }
  append(el, children)
  return el
}
function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)))
  }
  return el
}
function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el }

let statusTimer = null
function say(message) {
  const s = document.getElementById('status')
  s.textContent = message
  clearTimeout(statusTimer)
  statusTimer = setTimeout(() => { s.textContent = '' }, 6000)
}

function fmtBytes(n) {
  if (n === undefined || n === null || n < 0) return ''
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++ }
  return (i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)) + ' ' + u[i]
}
function fmtDuration(ms) {
  if (!Number.isFinite(ms)) return ''
  const neg = ms < 0
  let s = Math.floor(Math.abs(ms) / 1000)
  const d = Math.floor(s / 86400); s -= d * 86400
  const hh = Math.floor(s / 3600); s -= hh * 3600
  const m = Math.floor(s / 60); s -= m * 60
  const t = d ? `${d}d ${hh}h` : hh ? `${hh}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`
  return neg ? '-' + t : t
}
function b64encode(bytes) {
  let bin = ''
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000))
  return btoa(bin)
}
function b64decode(text) {
  const bin = atob(text)
  const out = new Uint8Array(bin.length)
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i)
  return out
}

// ---------- the API ----------

function apiKey() { return sessionStorage.getItem(KEY_STORE) || '' }

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status }
}

async function api(method, path, body, extraHeaders) {
  const headers = { 'X-API-Key': apiKey(), ...(extraHeaders || {}) }
  const init = { method, headers, cache: 'no-store', credentials: 'omit' }
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json'
    init.body = JSON.stringify(body)
  }
  const r = await fetch(path, init)
  if (r.status === 401) {
    signOut('The API key was refused; sign in again.')
    throw new ApiError(401, 'unauthorized')
  }
  const text = await r.text()
  let data = null
  try { data = text ? JSON.parse(text) : null } catch { data = text }
  if (!r.ok) throw new ApiError(r.status, (data && data.message) || `HTTP ${r.status}`)
  return data
}

// The data plane: requests to a sandbox's agent, routed by header, with its
// envd access token (from GET /sandboxes/{id}), as the E2B SDK sends them.
function dataHeaders(sb, extra) {
  return {
    'E2b-Sandbox-Id': sb.sandboxID,
    'E2b-Sandbox-Port': AGENT_PORT,
    'X-Access-Token': sb.envdAccessToken || '',
    Authorization: 'Basic ' + btoa('user:'),
    ...(extra || {}),
  }
}
async function rpc(sb, method, body) {
  const r = await fetch('/' + method, {
    method: 'POST', cache: 'no-store', credentials: 'omit',
    headers: dataHeaders(sb, { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' }),
    body: JSON.stringify(body),
  })
  const text = await r.text()
  let data = null
  try { data = text ? JSON.parse(text) : null } catch { data = null }
  if (!r.ok) throw new ApiError(r.status, (data && data.message) || `HTTP ${r.status}`)
  return data
}

// Connect streaming: 5-byte envelopes (flags, big-endian length) + JSON.
function envelope(obj) {
  const json = new TextEncoder().encode(JSON.stringify(obj))
  const buf = new Uint8Array(5 + json.length)
  new DataView(buf.buffer).setUint32(1, json.length)
  buf.set(json, 5)
  return buf
}
async function* envelopes(body) {
  const reader = body.getReader()
  let buf = new Uint8Array(0)
  for (;;) {
    while (buf.length >= 5) {
      const len = new DataView(buf.buffer, buf.byteOffset).getUint32(1)
      if (len > 16 << 20) throw new Error('stream message too large')
      if (buf.length < 5 + len) break
      const flags = buf[0]
      const msg = JSON.parse(new TextDecoder().decode(buf.subarray(5, 5 + len)) || '{}')
      buf = buf.slice(5 + len)
      yield { flags, msg }
    }
    const { value, done } = await reader.read()
    if (done) return
    const next = new Uint8Array(buf.length + value.length)
    next.set(buf); next.set(value, buf.length)
    buf = next
  }
}

// ---------- shell ----------

let current = { cleanup: [] }
function onLeave(fn) { current.cleanup.push(fn) }
function leave() {
  for (const fn of current.cleanup.splice(0)) { try { fn() } catch {} }
}
function every(ms, fn) {
  const t = setInterval(fn, ms)
  onLeave(() => clearInterval(t))
}

function signOut(message) {
  sessionStorage.removeItem(KEY_STORE)
  location.hash = '#/signin'
  route(message)
}

function setNav() {
  const nav = document.getElementById('nav')
  nav.hidden = !apiKey()
  const page = (location.hash.split('/')[1] || '')
  for (const a of nav.querySelectorAll('a')) {
    const target = a.getAttribute('href').split('/')[1]
    if (target === page || (page === 'sandbox' && target === 'sandboxes')) a.setAttribute('aria-current', 'page')
    else a.removeAttribute('aria-current')
  }
}

function main() { return clear(document.getElementById('main')) }

// Bumped on every navigation: a view that awaited the API checks it before
// it draws, so a page the user has left never draws over the next one.
let routeGen = 0

function route(message) {
  routeGen++
  leave()
  setNav()
  const parts = location.hash.replace(/^#\/?/, '').split('/')
  if (!apiKey()) return viewSignIn(message)
  const [page, arg] = parts
  if (page === 'sandbox' && arg) {
    let id = arg
    try { id = decodeURIComponent(arg) } catch { /* a malformed escape: looked up as typed */ }
    return viewSandbox(id)
  }
  if (page === 'templates') return viewTemplates()
  if (page === 'audit') return viewAudit()
  if (page === 'host') return viewHost()
  return viewSandboxes()
}

// ---------- sign in ----------

function viewSignIn(message) {
  const m = main()
  const err = h('p', { class: 'error', id: 'signin-error', role: 'alert' }, message || '')
  const input = h('input', { id: 'apikey', name: 'apikey', type: 'password', autocomplete: 'off', spellcheck: 'false',
    required: true, 'aria-describedby': 'signin-help signin-error' })
  const form = h('form', { class: 'signin', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title' }, 'Sign in to airlock'),
    h('label', { for: 'apikey' }, 'API key'),
    input,
    h('p', { class: 'note', id: 'signin-help' },
      'A key from `airlock apikey create` (or the daemon\'s cli.key). It is kept in this tab only and sent as a header, never stored in a cookie or a URL.'),
    h('button', { type: 'submit', class: 'primary', id: 'signin-submit' }, 'Sign in'),
    err)
  form.addEventListener('submit', async (e) => {
    e.preventDefault()
    const key = input.value.trim()
    err.textContent = ''
    let r
    try {
      r = await fetch('/v2/sandboxes?limit=1', { headers: { 'X-API-Key': key }, cache: 'no-store', credentials: 'omit' })
    } catch (x) {
      err.textContent = 'The daemon did not answer: ' + x.message
      return
    }
    if (r.status === 401) { err.textContent = 'The API key was refused.'; input.focus(); return }
    if (!r.ok) { err.textContent = `The daemon answered HTTP ${r.status}.`; return }
    sessionStorage.setItem(KEY_STORE, key)
    location.hash = '#/sandboxes'
    route()
  })
  m.appendChild(form)
  input.focus()
}

// ---------- sandboxes ----------

function metaText(meta) {
  return Object.entries(meta || {}).map(([k, v]) => `${k}=${v}`).join(' ')
}

// Builds the rows of the sandbox list (also used by bench/console.mjs with
// 500 sandboxes). `metrics`: {id: {cpuUsedPct, memUsed, memTotal}}.
// The list is an ARIA table of CSS-grid rows rather than a <table>: each row
// lays out alone (fixed column tracks) and rows off screen skip layout and
// paint until scrolled to (content-visibility: auto), so 500 rows cost about
// what one screenful does; every row stays in the DOM (find, screen readers).
const COLUMNS = ['Sandbox', 'Template', 'Runtime', 'State', 'Age', 'TTL left', 'CPU', 'Memory', 'Metadata', 'Actions']
function renderSandboxRows(body, list, metrics, now) {
  const frag = document.createDocumentFragment()
  let index = 1
  for (const s of list) {
    const m = metrics[s.sandboxID]
    const row = document.createElement('div')
    row.className = 'grow'
    row.setAttribute('role', 'row')
    row.setAttribute('aria-rowindex', String(++index))
    row.dataset.id = s.sandboxID
    const cell = (text, cls) => {
      const c = document.createElement('div')
      c.setAttribute('role', 'cell')
      if (cls) c.className = cls
      if (text) c.textContent = text
      row.appendChild(c)
      return c
    }
    const link = document.createElement('a')
    link.href = '#/sandbox/' + encodeURIComponent(s.sandboxID)
    link.className = 'mono'
    link.textContent = s.sandboxID
    cell('').appendChild(link)
    cell(s.templateID)
    cell(s.runtime || '')
    cell(s.state, 'state-' + s.state)
    cell(fmtDuration(now - Date.parse(s.startedAt)), 'num')
    cell(fmtDuration(Date.parse(s.endAt) - now), 'num')
    cell(m ? m.cpuUsedPct.toFixed(1) + ' %' : '', 'num')
    cell(m ? fmtBytes(m.memUsed) + ' / ' + fmtBytes(m.memTotal) : '', 'num')
    const metaCell = cell('', 'metas')
    for (const [k, v] of Object.entries(s.metadata || {})) {
      const span = document.createElement('span')
      span.className = 'meta'
      span.textContent = `${k}=${v}`
      span.title = `${k}=${v}`
      metaCell.appendChild(span)
    }
    const actions = cell('', 'actions')
    const btn = (label, action, extra) => {
      const b = document.createElement('button')
      b.type = 'button'
      b.textContent = label
      b.dataset.action = action
      b.setAttribute('aria-label', `${label} ${s.sandboxID}`)
      if (extra) b.className = extra
      actions.appendChild(b)
    }
    if (s.state === 'paused') btn('Resume', 'resume')
    else btn('Pause', 'pause')
    // A paused sandbox has no timeout to extend (the API answers 404, as E2B).
    if (s.state !== 'paused') btn('+5 min', 'extend')
    if (s.state !== 'paused') btn('Fork', 'fork')
    btn('Kill', 'kill', 'danger')
    frag.appendChild(row)
  }
  clear(body).appendChild(frag)
  const table = body.closest('[role="table"]')
  if (table) table.setAttribute('aria-rowcount', String(list.length + 1))
}

async function sandboxAction(id, action, endAt) {
  const p = '/sandboxes/' + encodeURIComponent(id)
  if (action === 'kill') {
    if (!confirm(`Kill sandbox ${id}? Its processes and files are gone for good.`)) return false
    await api('DELETE', p)
    say(`Killed ${id}`)
  } else if (action === 'pause') {
    await api('POST', p + '/pause')
    say(`Paused ${id}`)
  } else if (action === 'resume') {
    await api('POST', p + '/connect', { timeout: 300 })
    say(`Resumed ${id}`)
  } else if (action === 'extend') {
    const left = Math.max(0, (Date.parse(endAt) - Date.now()) / 1000)
    await api('POST', p + '/timeout', { timeout: Math.round(left + 300) })
    say(`Extended ${id} by 5 minutes`)
  } else if (action === 'fork') {
    const r = await api('POST', p + '/fork', {})
    const child = Array.isArray(r) && r[0] && r[0].sandboxID
    say(child ? `Forked ${id} into ${child}` : `Fork of ${id}: ${JSON.stringify(r)}`)
  }
  return true
}

function viewSandboxes() {
  const m = main()
  const filter = h('input', { id: 'filter', type: 'search', placeholder: 'id, template, metadata…' })
  const state = h('select', { id: 'state-filter' },
    h('option', { value: 'running,paused' }, 'running and paused'),
    h('option', { value: 'running' }, 'running'),
    h('option', { value: 'paused' }, 'paused'))
  const count = h('span', { class: 'note', id: 'sandbox-count', 'aria-live': 'polite' })
  const tbody = h('div', { role: 'rowgroup', id: 'sandbox-rows' })
  const table = h('div', { role: 'table', class: 'gtable', 'aria-label': 'Sandboxes', 'aria-describedby': 'sandbox-count' },
    h('div', { role: 'rowgroup' }, h('div', { role: 'row', class: 'grow ghead', 'aria-rowindex': '1' },
      COLUMNS.map((t, i) => h('div', { role: 'columnheader', class: i >= 4 && i <= 7 ? 'num' : null }, t)))),
    tbody)
  m.append(h('h1', null, 'Sandboxes'),
    h('div', { class: 'toolbar' },
      h('label', { for: 'filter' }, 'Filter'), filter,
      h('label', { for: 'state-filter' }, 'State'), state,
      h('button', { type: 'button', id: 'refresh', onclick: () => load() }, 'Refresh'),
      h('span', { class: 'grow' }), count),
    table)
  let list = []
  let metrics = {}
  const draw = () => {
    const q = filter.value.trim().toLowerCase()
    const shown = q ? list.filter((s) =>
      [s.sandboxID, s.templateID, s.runtime, metaText(s.metadata)].join(' ').toLowerCase().includes(q)) : list
    renderSandboxRows(tbody, shown, metrics, Date.now())
    count.textContent = `${shown.length} of ${list.length} sandboxes`
  }
  const load = async () => {
    try {
      list = await api('GET', '/v2/sandboxes?limit=1000&state=' + encodeURIComponent(state.value))
      list.sort((a, b) => Date.parse(b.startedAt) - Date.parse(a.startedAt))
      draw()
      const ids = list.map((s) => s.sandboxID)
      const next = {}
      for (let i = 0; i < ids.length; i += 100) {
        const r = await api('GET', '/sandboxes/metrics?sandbox_ids=' + ids.slice(i, i + 100).map(encodeURIComponent).join(','))
        Object.assign(next, r.sandboxes || {})
      }
      metrics = next
      draw()
    } catch (e) {
      if (e.status !== 401) say('Could not list sandboxes: ' + e.message)
    }
  }
  filter.addEventListener('input', draw)
  state.addEventListener('change', load)
  tbody.addEventListener('click', async (e) => {
    const b = e.target.closest('button[data-action]')
    if (!b) return
    const id = b.closest('[data-id]').dataset.id
    const s = list.find((x) => x.sandboxID === id)
    b.disabled = true
    try {
      await sandboxAction(id, b.dataset.action, s && s.endAt)
    } catch (x) {
      say(`${b.dataset.action} ${id}: ${x.message}`)
    }
    b.disabled = false
    load()
  })
  load()
  every(REFRESH_MS, load)
}

// ---------- one sandbox ----------

async function viewSandbox(id) {
  const gen = routeGen
  const m = main()
  m.append(h('p', null, h('a', { href: '#/sandboxes' }, '← Sandboxes')), h('h1', null, 'Sandbox ', h('span', { class: 'mono' }, id)))
  let sb
  try {
    sb = await api('GET', '/sandboxes/' + encodeURIComponent(id))
  } catch (e) {
    if (gen !== routeGen) return
    m.append(h('p', { class: 'error', role: 'alert' }, e.status === 404 ? `Sandbox ${id} does not exist (or has ended).` : e.message))
    return
  }
  if (gen !== routeGen) return
  const info = h('dl', { class: 'kv', id: 'sandbox-info' })
  const fill = (s) => {
    clear(info)
    const row = (k, v) => info.append(h('dt', null, k), h('dd', null, v))
    row('State', h('span', { class: 'state-' + s.state, id: 'sandbox-state' }, s.state))
    row('Template', s.templateID)
    row('Runtime', s.runtime || '')
    row('Started', s.startedAt)
    row('Ends', `${s.endAt} (in ${fmtDuration(Date.parse(s.endAt) - Date.now())})`)
    row('Shape', `${s.cpuCount} vCPU, ${s.memoryMB} MiB memory, ${s.diskSizeMB} MiB disk`)
    row('Metadata', Object.entries(s.metadata || {}).map(([k, v]) => h('span', { class: 'meta' }, `${k}=${v}`)))
    for (const [action, shown] of [['pause', s.state === 'running'], ['resume', s.state === 'paused'], ['fork', s.state === 'running'], ['checkpoint', s.state === 'running']]) {
      const b = document.getElementById('action-' + action)
      if (b) b.hidden = !shown
    }
  }
  fill(sb)
  const actions = h('div', { class: 'toolbar' })
  const act = (label, action, cls) => h('button', { type: 'button', class: cls, id: 'action-' + action, onclick: async (e) => {
    e.target.disabled = true
    try {
      const done = await sandboxAction(id, action, sb.endAt)
      if (done && action === 'kill') { location.hash = '#/sandboxes'; return }
      sb = await api('GET', '/sandboxes/' + encodeURIComponent(id))
      fill(sb)
    } catch (x) { say(`${action}: ${x.message}`) }
    e.target.disabled = false
  } }, label)
  const ckSelect = h('select', { id: 'checkpoint-select', 'aria-label': 'Checkpoint to roll back to' })
  actions.append(act('Pause', 'pause'), act('Resume', 'resume'), act('+5 min', 'extend'), act('Fork', 'fork'),
    h('button', { type: 'button', id: 'action-checkpoint', onclick: async () => {
      try { const c = await api('POST', `/sandboxes/${encodeURIComponent(id)}/checkpoints`, {}); say(`Checkpoint ${c.checkpointID || ''} taken`); loadCheckpoints() } catch (x) { say('checkpoint: ' + x.message) }
    } }, 'Checkpoint'),
    ckSelect,
    h('button', { type: 'button', id: 'action-rollback', onclick: async () => {
      if (!ckSelect.value) return say('No checkpoint to roll back to')
      if (!confirm(`Roll ${id} back to ${ckSelect.value}? Everything since is lost.`)) return
      try { await api('POST', `/sandboxes/${encodeURIComponent(id)}/rollback`, { checkpointID: ckSelect.value }); say('Rolled back') } catch (x) { say('rollback: ' + x.message) }
    } }, 'Roll back'),
    act('Kill', 'kill', 'danger'))
  const loadCheckpoints = async () => {
    try {
      const list = await api('GET', `/sandboxes/${encodeURIComponent(id)}/checkpoints`)
      clear(ckSelect)
      for (const c of (Array.isArray(list) ? list : list.checkpoints || [])) {
        ckSelect.append(h('option', { value: c.checkpointID }, `${c.checkpointID} (${c.createdAt || ''})`))
      }
    } catch { /* a runtime without checkpoints: the select stays empty */ }
  }
  loadCheckpoints()

  const termBox = h('div', { class: 'terminal', id: 'terminal', 'aria-label': 'Terminal' })
  const termStatus = h('span', { class: 'note', id: 'terminal-status', 'aria-live': 'polite' })
  const files = h('section', { class: 'panel', 'aria-labelledby': 'files-title' })
  const history = h('section', { class: 'panel', 'aria-labelledby': 'history-title' })
  const egress = h('section', { class: 'panel', 'aria-labelledby': 'egress-title' })
  const charts = h('section', { class: 'panel', 'aria-labelledby': 'charts-title' })
  m.append(info, actions,
    h('section', { class: 'panel', 'aria-labelledby': 'term-title' },
      h('h2', { id: 'term-title' }, 'Terminal ', termStatus),
      h('p', { class: 'note' }, 'A login shell as user, through the data plane (audited as a command). Keyboard focus stays in the terminal until you press Escape then Tab.'),
      termBox),
    h('div', { class: 'grid2' }, files, charts),
    h('div', { class: 'grid2' }, history, egress))
  fill(sb)  // now that the action buttons are in the page
  if (sb.state === 'running') openTerminal(sb, termBox, termStatus)
  else termStatus.textContent = '(resume the sandbox to open a terminal)'
  fileBrowser(sb, files)
  metricsCharts(id, charts)
  auditPanels(id, history, egress)
}

// The terminal: a PTY through process.Process/Start, input with SendInput,
// size with Update, and Connect to re-attach after the stream drops.
function openTerminal(sb, box, status) {
  if (!window.Terminal) { status.textContent = '(xterm.js did not load)'; return }
  const term = new window.Terminal({ cursorBlink: true, fontFamily: 'DejaVu Sans Mono, monospace', fontSize: 14, scrollback: 5000 })
  const fit = new window.FitAddon.FitAddon()
  term.loadAddon(fit)
  term.open(box)
  try { fit.fit() } catch {}
  window.airlockTerminal = term  // for tests: the screen's text is read from its buffer
  let pid = 0
  let ended = false
  let closing = false
  const abort = new AbortController()
  let sending = Promise.resolve()
  const enc = new TextEncoder()
  const send = (data) => {
    if (!pid || ended) return
    const bytes = enc.encode(data)
    sending = sending.then(() => rpc(sb, 'process.Process/SendInput', { process: { pid }, input: { pty: b64encode(bytes) } }))
      .catch((e) => { status.textContent = 'input not delivered: ' + e.message })
  }
  term.onData(send)
  term.onResize(({ cols, rows }) => {
    if (pid && !ended) rpc(sb, 'process.Process/Update', { process: { pid }, pty: { size: { cols, rows } } }).catch(() => {})
  })
  const onWindowResize = () => { try { fit.fit() } catch {} }
  window.addEventListener('resize', onWindowResize)
  const consume = async (resp) => {
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`)
    let events = 0
    for await (const { flags, msg } of envelopes(resp.body)) {
      if (flags & 2) {
        if (msg.error) {
          // Re-attached after the shell ended: the agent has forgotten it (as envd).
          if (msg.error.code === 'not_found' && events === 0) { ended = true; status.textContent = '(the shell ended)'; return }
          throw new Error(msg.error.message || msg.error.code)
        }
        return
      }
      const ev = msg.event || {}
      events++
      if (ev.start) {
        pid = ev.start.pid
        status.textContent = `(pid ${pid})`
        rpc(sb, 'process.Process/Update', { process: { pid }, pty: { size: { cols: term.cols, rows: term.rows } } }).catch(() => {})
      }
      if (ev.data && ev.data.pty) term.write(b64decode(ev.data.pty))
      if (ev.end) {
        ended = true
        status.textContent = `(shell ended: ${ev.end.status || ev.end.exitCode || ''})`
        term.write('\r\n[shell ended]\r\n')
      }
    }
  }
  const stream = (method, body) => fetch('/' + method, {
    method: 'POST', cache: 'no-store', credentials: 'omit', signal: abort.signal,
    headers: dataHeaders(sb, { 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' }),
    body: envelope(body),
  })
  const run = async () => {
    status.textContent = '(connecting…)'
    try {
      await consume(await stream('process.Process/Start', {
        process: { cmd: '/bin/bash', args: ['-l'], envs: { TERM: 'xterm-256color', LANG: 'C.UTF-8' } },
        pty: { size: { cols: term.cols, rows: term.rows } },
      }))
    } catch (e) {
      if (closing) return
      status.textContent = '(stream dropped: ' + e.message + ')'
    }
    // Re-attach while the shell lives (a dropped network, a proxy restart).
    for (let attempt = 1; pid && !ended && !closing && attempt <= 30; attempt++) {
      await new Promise((r) => setTimeout(r, Math.min(5000, 250 * attempt)))
      if (closing) return
      status.textContent = `(reconnecting, attempt ${attempt}…)`
      try {
        await consume(await stream('process.Process/Connect', { process: { pid } }))
        attempt = 0
      } catch (e) {
        status.textContent = '(reconnect failed: ' + e.message + ')'
      }
    }
  }
  run()
  onLeave(() => {
    closing = true
    abort.abort()
    window.removeEventListener('resize', onWindowResize)
    if (pid && !ended) rpc(sb, 'process.Process/SendSignal', { process: { pid }, signal: 'SIGNAL_SIGKILL' }).catch(() => {})
    term.dispose()
    if (window.airlockTerminal === term) window.airlockTerminal = null
  })
  term.focus()
}

function fileBrowser(sb, panel) {
  const pathInput = h('input', { id: 'files-path', value: '/home/user', 'aria-label': 'Directory' })
  const tbody = h('tbody', { id: 'files-rows' })
  const upload = h('input', { type: 'file', id: 'files-upload', multiple: true })
  panel.append(h('h2', { id: 'files-title' }, 'Files'),
    h('div', { class: 'toolbar' }, pathInput,
      h('button', { type: 'button', id: 'files-go', onclick: () => list() }, 'List'),
      h('button', { type: 'button', onclick: () => { const p = pathInput.value.replace(/\/[^/]*\/?$/, '') || '/'; pathInput.value = p; list() } }, 'Up')),
    h('div', { class: 'toolbar' }, h('label', { for: 'files-upload' }, 'Upload to this directory'), upload),
    h('div', { class: 'scroll' }, h('table', null,
      h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Name'), h('th', { scope: 'col', class: 'num' }, 'Size'),
        h('th', { scope: 'col' }, 'Mode'), h('th', { scope: 'col' }, 'Modified'), h('th', { scope: 'col' }, ''))),
      tbody)))
  pathInput.addEventListener('keydown', (e) => { if (e.key === 'Enter') list() })
  const list = async () => {
    const dir = pathInput.value || '/'
    try {
      const r = await rpc(sb, 'filesystem.Filesystem/ListDir', { path: dir, depth: 1 })
      const entries = (r.entries || []).sort((a, b) => (a.type === b.type ? a.name.localeCompare(b.name) : a.type === 'FILE_TYPE_DIRECTORY' ? -1 : 1))
      clear(tbody)
      for (const e of entries) {
        const isDir = e.type === 'FILE_TYPE_DIRECTORY'
        const name = isDir
          ? h('button', { type: 'button', class: 'link', onclick: () => { pathInput.value = e.path; list() } }, e.name + '/')
          : h('span', { class: 'mono' }, e.name)
        const dl = isDir ? '' : h('button', { type: 'button', 'aria-label': 'Download ' + e.name, onclick: () => download(e) }, 'Download')
        tbody.append(h('tr', null, h('td', null, name), h('td', { class: 'num' }, isDir ? '' : fmtBytes(Number(e.size))),
          h('td', { class: 'mono' }, e.permissions || ''), h('td', null, e.modifiedTime || ''), h('td', null, dl)))
      }
      if (!entries.length) tbody.append(h('tr', null, h('td', { colspan: 5, class: 'note' }, '(empty)')))
    } catch (e) {
      clear(tbody).append(h('tr', null, h('td', { colspan: 5, class: 'error' }, `${dir}: ${e.message}`)))
    }
  }
  const download = async (e) => {
    try {
      const r = await fetch('/files?path=' + encodeURIComponent(e.path) + '&username=user',
        { headers: dataHeaders(sb), cache: 'no-store', credentials: 'omit' })
      if (!r.ok) throw new Error(`HTTP ${r.status}`)
      // Always a download: a blob: URL is of this origin, so the guest's own
      // Content-Type (an HTML page, say) must never come with it.
      const url = URL.createObjectURL(new Blob([await r.arrayBuffer()], { type: 'application/octet-stream' }))
      const a = h('a', { href: url, download: e.name })
      document.body.appendChild(a)
      a.click()
      a.remove()
      setTimeout(() => URL.revokeObjectURL(url), 10000)
    } catch (x) { say(`download ${e.path}: ${x.message}`) }
  }
  upload.addEventListener('change', async () => {
    const dir = (pathInput.value || '/').replace(/\/$/, '')
    for (const f of upload.files) {
      const form = new FormData()
      form.append('file', f, f.name)
      try {
        const r = await fetch('/files?path=' + encodeURIComponent(dir + '/' + f.name) + '&username=user',
          { method: 'POST', headers: dataHeaders(sb), body: form, cache: 'no-store', credentials: 'omit' })
        if (!r.ok) throw new Error(`HTTP ${r.status}`)
        say(`Uploaded ${f.name} (${fmtBytes(f.size)}) to ${dir}`)
      } catch (x) { say(`upload ${f.name}: ${x.message}`) }
    }
    upload.value = ''
    list()
  })
  list()
}

// CPU and memory over time, from GET /sandboxes/{id}/metrics, as SVG.
function metricsCharts(id, panel) {
  const svgNS = 'http://www.w3.org/2000/svg'
  const mk = (cls, label) => {
    const svg = document.createElementNS(svgNS, 'svg')
    svg.setAttribute('class', 'chart')
    svg.setAttribute('viewBox', '0 0 400 120')
    svg.setAttribute('preserveAspectRatio', 'none')
    svg.setAttribute('role', 'img')
    svg.setAttribute('aria-label', label)
    const line = document.createElementNS(svgNS, 'polyline')
    line.setAttribute('class', cls)
    svg.appendChild(line)
    return { svg, line }
  }
  const cpu = mk('line-cpu', 'CPU use over time')
  const mem = mk('line-mem', 'Memory use over time')
  const cpuNow = h('span', { class: 'note', id: 'cpu-now' })
  const memNow = h('span', { class: 'note', id: 'mem-now' })
  panel.append(h('h2', { id: 'charts-title' }, 'Resources'),
    h('p', null, h('strong', null, 'CPU '), cpuNow), cpu.svg,
    h('p', null, h('strong', null, 'Memory '), memNow), mem.svg)
  const plot = (line, values, max) => {
    const n = values.length
    line.setAttribute('points', values.map((v, i) => `${n > 1 ? (i * 400) / (n - 1) : 0},${120 - (Math.min(v, max) / (max || 1)) * 115}`).join(' '))
  }
  const load = async () => {
    try {
      const pts = await api('GET', `/sandboxes/${encodeURIComponent(id)}/metrics`)
      if (!Array.isArray(pts) || !pts.length) return
      plot(cpu.line, pts.map((p) => p.cpuUsedPct), 100)
      const total = pts[pts.length - 1].memTotal
      plot(mem.line, pts.map((p) => p.memUsed), total)
      const last = pts[pts.length - 1]
      cpuNow.textContent = `${last.cpuUsedPct.toFixed(1)} % of ${last.cpuCount} vCPU`
      memNow.textContent = `${fmtBytes(last.memUsed)} of ${fmtBytes(last.memTotal)}`
    } catch {}
  }
  load()
  every(REFRESH_MS, load)
}

// Command history (exec records) and egress decisions from the audit trail.
function auditPanels(id, history, egress) {
  const hRows = h('tbody', { id: 'history-rows' })
  const eRows = h('tbody', { id: 'egress-rows' })
  const th = (...names) => h('thead', null, h('tr', null, names.map((n) => h('th', { scope: 'col' }, n))))
  history.append(h('h2', { id: 'history-title' }, 'Command history'),
    h('div', { class: 'scroll' }, h('table', null, th('Started', 'Command', 'User', 'Exit', 'Duration', 'Output'), hRows)))
  egress.append(h('h2', { id: 'egress-title' }, 'Egress decisions'),
    h('div', { class: 'scroll' }, h('table', null, th('Time', 'Decision', 'Destination', 'Rule', 'Bytes out/in'), eRows)))
  const load = async () => {
    try {
      const recs = await api('GET', `/sandboxes/${encodeURIComponent(id)}/audit?limit=2000`)
      // Ended commands (exec) and those still running (an exec.start with no exec yet).
      const ended = new Set(recs.filter((r) => r.action === 'exec').map((r) => `${r.pid}@${r.started_at_ms}`))
      const execs = recs.filter((r) => r.action === 'exec' ||
        (r.action === 'exec.start' && !ended.has(`${r.pid}@${r.started_at_ms}`))).reverse()
      clear(hRows)
      for (const r of execs) {
        const exit = r.action === 'exec.start' ? 'running' : r.exit_code !== undefined ? String(r.exit_code) : r.signal ? 'signal ' + r.signal : (r.outcome || '')
        hRows.append(h('tr', null,
          h('td', null, r.started_at_ms ? new Date(r.started_at_ms).toISOString() : r.ts),
          h('td', { class: 'mono' }, [r.cmd, ...(r.args || [])].join(' ')),
          h('td', null, r.user || ''),
          h('td', { class: 'num' }, exit),
          h('td', { class: 'num' }, r.ended_at_ms && r.started_at_ms ? fmtDuration(r.ended_at_ms - r.started_at_ms) : ''),
          h('td', { class: 'num' }, `${fmtBytes(r.stdout_bytes || 0)} / ${fmtBytes(r.stderr_bytes || 0)}`)))
      }
      if (!execs.length) hRows.append(h('tr', null, h('td', { colspan: 6, class: 'note' }, '(no commands yet)')))
      const egs = recs.filter((r) => r.action === 'egress').reverse()
      clear(eRows)
      for (const r of egs) {
        const d = r.destination || {}
        eRows.append(h('tr', null,
          h('td', null, r.ts),
          h('td', { class: r.decision === 'allow' ? 'allow' : 'deny' }, r.decision || ''),
          h('td', { class: 'mono' }, `${d.name || d.ip || ''}${d.port ? ':' + d.port : ''} (${r.protocol || ''})`),
          h('td', null, `${r.rule || ''}${r.reason ? ': ' + r.reason : ''}`),
          h('td', { class: 'num' }, r.bytesOut !== undefined ? `${fmtBytes(r.bytesOut)} / ${fmtBytes(r.bytesIn)}` : '')))
      }
      if (!egs.length) eRows.append(h('tr', null, h('td', { colspan: 5, class: 'note' }, '(no egress attempts)')))
    } catch {}
  }
  load()
  every(REFRESH_MS, load)
}

// ---------- templates ----------

function viewTemplates() {
  const m = main()
  const tbody = h('tbody', { id: 'template-rows' })
  const log = h('pre', { class: 'log', id: 'build-log', 'aria-live': 'polite', hidden: true })
  const logTitle = h('h2', { id: 'build-log-title', hidden: true })
  m.append(h('h1', null, 'Templates'),
    h('p', { class: 'note' }, 'Custom templates, built with E2B\'s Template SDK or `airlock template build`. The built-in templates (base, code-interpreter, and their -gvisor forms) are always there.'),
    h('table', null, h('thead', null, h('tr', null,
      ['Template', 'Aliases', 'Builds', 'Status', 'Shape', 'Updated', ''].map((t) => h('th', { scope: 'col' }, t)))), tbody),
    logTitle, log)
  let stopLog = null
  // Polls a build's status from logsOffset on: the log grows live while it
  // builds (GET /templates/{id}/builds/{build}/status, spec e2b-templates).
  const showLog = (templateID, buildID) => {
    if (stopLog) stopLog()
    let offset = 0
    let stopped = false
    stopLog = () => { stopped = true }
    onLeave(stopLog)
    logTitle.hidden = false
    log.hidden = false
    logTitle.textContent = `Build ${buildID} of ${templateID}`
    log.textContent = ''
    const poll = async () => {
      if (stopped) return
      try {
        const s = await api('GET', `/templates/${encodeURIComponent(templateID)}/builds/${encodeURIComponent(buildID)}/status?logsOffset=${offset}`)
        const entries = s.logEntries || []
        for (const e of entries) log.append(`${e.timestamp || ''} ${e.level || ''} ${e.message}\n`)
        offset += entries.length
        log.scrollTop = log.scrollHeight
        if (s.status === 'building' || s.status === 'waiting') setTimeout(poll, 1000)
        else {
          log.append(`[${s.status}${s.reason && s.reason.message ? ': ' + s.reason.message : ''}]\n`)
          load()  // the row's status and shape
        }
      } catch (e) { log.append(`[${e.message}]\n`) }
    }
    poll()
  }
  // The template's builds, newest first, each with its log; the newest opens.
  const showBuilds = async (t, cell) => {
    try {
      const full = await api('GET', '/templates/' + encodeURIComponent(t.templateID))
      const builds = (full.builds || []).sort((a, b) => Date.parse(b.createdAt) - Date.parse(a.createdAt))
      const list = h('ul', { class: 'builds' }, builds.map((b) => h('li', null,
        h('button', { type: 'button', class: 'link', onclick: () => showLog(t.templateID, b.buildID) }, `${b.buildID.slice(0, 8)} ${b.status}`),
        ` ${b.createdAt}`)))
      cell.append(list)
      if (builds.length) showLog(t.templateID, builds[0].buildID)
    } catch (e) { say('builds: ' + e.message) }
  }
  const load = async () => {
    try {
      const list = await api('GET', '/templates')
      clear(tbody)
      for (const t of list) {
        const del = h('button', { type: 'button', class: 'danger', 'aria-label': 'Delete ' + t.templateID, onclick: async () => {
          if (!confirm(`Delete template ${t.templateID}?`)) return
          try { await api('DELETE', '/templates/' + encodeURIComponent(t.templateID)); say('Deleted ' + t.templateID); load() } catch (e) { say('delete: ' + e.message) }
        } }, 'Delete')
        const buildsCell = h('td', { class: 'mono' })
        const logs = h('button', { type: 'button', 'aria-label': 'Builds and logs of ' + t.templateID, onclick: (e) => { e.target.disabled = true; showBuilds(t, buildsCell) } }, 'Builds & logs')
        tbody.append(h('tr', { dataset: { id: t.templateID } }, h('td', { class: 'mono' }, t.templateID), h('td', null, (t.aliases || []).join(', ')),
          buildsCell, h('td', null, t.buildStatus || ''),
          h('td', null, t.cpuCount ? `${t.cpuCount} vCPU, ${t.memoryMB} MiB` : ''), h('td', null, t.updatedAt || ''),
          h('td', { class: 'actions' }, logs, del)))
      }
      if (!list.length) tbody.append(h('tr', null, h('td', { colspan: 7, class: 'note' }, '(no custom templates)')))
    } catch (e) { if (e.status !== 401) say('templates: ' + e.message) }
  }
  load()
}

// ---------- audit ----------

function viewAudit() {
  const m = main()
  const sandbox = h('input', { id: 'audit-sandbox', placeholder: 'sandbox id' })
  const action = h('input', { id: 'audit-action', placeholder: 'e.g. exec, sandbox., egress' })
  const since = h('input', { id: 'audit-since', value: '-1d', size: 12 })
  const verdict = h('span', { id: 'audit-verify-result', 'aria-live': 'polite' })
  const tbody = h('tbody', { id: 'audit-rows' })
  m.append(h('h1', null, 'Audit trail'),
    h('div', { class: 'toolbar' },
      h('label', { for: 'audit-sandbox' }, 'Sandbox'), sandbox,
      h('label', { for: 'audit-action' }, 'Action'), action,
      h('label', { for: 'audit-since' }, 'Since'), since,
      h('button', { type: 'button', class: 'primary', onclick: () => load() }, 'Show'),
      h('span', { class: 'grow' }),
      h('button', { type: 'button', id: 'audit-verify', onclick: () => verify() }, 'Verify the chain'), verdict),
    h('table', null, h('thead', null, h('tr', null,
      ['#', 'Time', 'Action', 'Sandbox', 'Key', 'Details'].map((t) => h('th', { scope: 'col' }, t)))), tbody))
  const load = async () => {
    const q = new URLSearchParams({ limit: '500' })
    if (sandbox.value.trim()) q.set('sandbox', sandbox.value.trim())
    if (action.value.trim()) q.set('action', action.value.trim())
    if (since.value.trim()) q.set('since', since.value.trim())
    try {
      const recs = await api('GET', '/audit?' + q.toString())
      clear(tbody)
      for (const r of recs.reverse()) {
        const { seq, ts, action: a, sandbox: s, api_key_id: k, prev, hash, ...rest } = r
        tbody.append(h('tr', null, h('td', { class: 'num' }, seq), h('td', null, ts), h('td', { class: 'mono' }, a),
          h('td', { class: 'mono' }, s || ''), h('td', { class: 'mono' }, k || ''),
          h('td', { class: 'mono details' }, JSON.stringify(rest).slice(0, 400))))
      }
      if (!recs.length) tbody.append(h('tr', null, h('td', { colspan: 6, class: 'note' }, '(no records)')))
    } catch (e) { if (e.status !== 401) say('audit: ' + e.message) }
  }
  const verify = async () => {
    verdict.textContent = 'verifying…'
    verdict.className = ''
    try {
      const v = await api('GET', '/audit/verify')
      verdict.textContent = v.ok ? `intact: ${v.records} records in ${v.files} files` :
        `${v.tampered ? 'TAMPERED' : 'damaged'}: ${v.problems.length} problem(s); first: ${v.problems[0].file}:${v.problems[0].line} ${v.problems[0].what}`
      verdict.className = v.ok ? 'badge-ok' : 'badge-bad'
    } catch (e) { verdict.textContent = e.status === 403 ? 'verifying needs an admin key' : e.message }
  }
  load()
}

// ---------- host ----------

async function viewHost() {
  const gen = routeGen
  const m = main()
  m.append(h('h1', null, 'Host'))
  let v
  try { v = await api('GET', '/host') } catch (e) {
    if (gen !== routeGen) return
    m.append(h('p', { class: e.status === 403 ? 'note' : 'error' }, e.status === 403 ? 'The host view needs an admin key.' : e.message))
    return
  }
  if (gen !== routeGen) return
  const dl = (rows) => h('dl', { class: 'kv' }, rows.map(([k, val]) => [h('dt', null, k), h('dd', null, val)]))
  const mib = (n) => (n < 0 ? 'unknown' : fmtBytes(n * 1048576))
  m.append(h('div', { class: 'grid2', id: 'host-view' },
    h('section', { class: 'panel' }, h('h2', null, 'Sandboxes'), dl([
      ['Running', v.sandboxes.running], ['Paused', v.sandboxes.paused], ['Being created', v.sandboxes.creating],
      ['Cap', v.sandboxes.max || 'none'], ['Admission queue', v.queue.length]])),
    h('section', { class: 'panel' }, h('h2', null, 'Memory'), dl([
      ['Budget for sandboxes', mib(v.memory.budgetMiB)], ['Held by sandboxes', mib(v.memory.heldMiB)],
      ['Committed (memoryMB)', mib(v.memory.committedMiB)], ['Available on host', mib(v.memory.availableMiB)],
      ['Warm pool holds', mib(v.memory.poolHeldMiB)], ['Pressure', v.memory.pressure ? 'yes' : 'no']])),
    h('section', { class: 'panel' }, h('h2', null, 'Disk'), dl([
      ['State dir', v.disk.stateDir], ['Free', `${mib(v.disk.stateFreeMiB)} of ${mib(v.disk.stateTotalMiB)}`],
      ['Registry free', `${mib(v.disk.registryFreeMiB)} of ${mib(v.disk.registryTotalMiB)}`]])),
    h('section', { class: 'panel' }, h('h2', null, 'Runtimes and pool'), dl([
      ...v.runtimes.map((r) => [r.name + (r.default ? ' (default)' : ''), r.accelerator || 'available']),
      ['Pool parked', v.pool.parked], ['Pool hits / misses', `${v.pool.hits} / ${v.pool.misses}`],
      ['Version', v.version]]))))
}

// ---------- start ----------

window.airlockConsole = { renderSandboxRows }
document.getElementById('signout').addEventListener('click', () => signOut('Signed out.'))
window.addEventListener('hashchange', () => route())
route()
