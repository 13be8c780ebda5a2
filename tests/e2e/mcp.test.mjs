// MCP (issue 18, docs/mcp.md) through the official @modelcontextprotocol/sdk
// client, over both transports airlock offers: stdio (`airlock mcp`, bridged
// to the daemon) and streamable HTTP at /mcp. Real daemon, real microVMs.
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { after, before, describe, test } from 'node:test'

import { BIN, STATE_DIR, e2b, skipReason, startDaemon, waitFor } from './daemon.mjs'

let Client, StdioClientTransport, StreamableHTTPClientTransport
if (!skipReason) {
  ;({ Client } = await import('@modelcontextprotocol/sdk/client/index.js'))
  ;({ StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js'))
  ;({ StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js'))
}

const TOOLS = ['create_sandbox', 'run_command', 'run_code', 'read_file', 'write_file', 'list_files', 'download_file',
  'kill_sandbox', 'list_sandboxes']

// Connects a client named `name` over `transport`, runs `fn(client)`, closes it.
async function withClient(name, transport, fn) {
  const client = new Client({ name, version: '1.0.0' })
  await client.connect(transport)
  try {
    return await fn(client)
  } finally {
    await client.close()
  }
}

function text(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n')
}

describe('MCP server', { skip: skipReason || false }, () => {
  let d
  before(async () => {
    d = await startDaemon()
  })
  after(async () => {
    if (d) await d.stop()
  })

  const transports = {
    stdio: (d) => new StdioClientTransport({
      command: BIN,
      args: ['--state-dir', STATE_DIR, 'mcp', '--server', d.url.replace('http://', '')],
      env: { ...process.env, AIRLOCK_API_KEY: d.apiKey },
      stderr: 'inherit',
    }),
    http: (d) => new StreamableHTTPClientTransport(new URL(d.url + '/mcp'), {
      requestInit: { headers: { 'X-API-Key': d.apiKey } },
    }),
  }

  for (const [name, make] of Object.entries(transports)) {
    test(`tools over ${name}: create, run, files, errors, kill`, async () => {
      await withClient(`airlock-e2e-${name}`, make(d), async (client) => {
        const { tools } = await client.listTools()
        assert.deepEqual(tools.map((t) => t.name).sort(), [...TOOLS].sort())
        const run = tools.find((t) => t.name === 'run_command')
        assert.deepEqual(run.inputSchema.required, ['sandbox_id', 'command'])
        assert.equal(run.inputSchema.additionalProperties, false)

        const created = await client.callTool({ name: 'create_sandbox', arguments: { template: 'base', timeout_seconds: 300, metadata: { via: name } } })
        assert.equal(created.isError, false, text(created))
        const id = created.structuredContent.sandbox_id
        assert.match(id, /^[a-z0-9]+$/)

        const py = await client.callTool({ name: 'run_command', arguments: { sandbox_id: id, command: "python3 -c 'print(6*7)'" } })
        assert.equal(py.isError, false, text(py))
        assert.equal(py.structuredContent.stdout, '42\n')
        assert.equal(py.structuredContent.exit_code, 0)
        assert.match(text(py), /exit code: 0[\s\S]*42/)

        const body = `héllo from ${name}\nline 2\n`
        const w = await client.callTool({ name: 'write_file', arguments: { sandbox_id: id, path: '/home/user/out/notes.txt', content: body } })
        assert.equal(w.isError, false, text(w))
        const r = await client.callTool({ name: 'read_file', arguments: { sandbox_id: id, path: '/home/user/out/notes.txt' } })
        assert.equal(r.isError, false, text(r))
        assert.equal(text(r), body)
        const ls = await client.callTool({ name: 'list_files', arguments: { sandbox_id: id, path: '/home/user/out' } })
        assert.deepEqual(ls.structuredContent.entries.map((e) => [e.name, e.type, e.size]), [['notes.txt', 'file', Buffer.byteLength(body)]])
        const bin = Buffer.from([0, 1, 2, 255, 254])
        await client.callTool({ name: 'write_file', arguments: { sandbox_id: id, path: 'blob.bin', content: bin.toString('base64'), encoding: 'base64' } })
        const dl = await client.callTool({ name: 'download_file', arguments: { sandbox_id: id, path: 'blob.bin' } })
        assert.equal(dl.isError, false, text(dl))
        const res = dl.content.find((c) => c.type === 'resource')
        assert.deepEqual(Buffer.from(res.resource.blob, 'base64'), bin)
        const notText = await client.callTool({ name: 'read_file', arguments: { sandbox_id: id, path: 'blob.bin' } })
        assert.equal(notText.isError, true)
        assert.match(text(notText), /not UTF-8 text/)

        const fail = await client.callTool({ name: 'run_command', arguments: { sandbox_id: id, command: 'echo oops >&2; exit 3' } })
        assert.equal(fail.isError, false, 'a failing command is a result, not a tool error')
        assert.equal(fail.structuredContent.exit_code, 3)
        assert.equal(fail.structuredContent.stderr, 'oops\n')

        // Bad arguments: a tool error naming the field, never a crash or a protocol error.
        const bad = await client.callTool({ name: 'run_command', arguments: { sandbox_id: id } })
        assert.equal(bad.isError, true)
        assert.match(text(bad), /arguments\.command: is required/)
        const badType = await client.callTool({ name: 'run_command', arguments: { sandbox_id: id, command: 'ls', timeout_seconds: 'soon' } })
        assert.equal(badType.isError, true)
        assert.match(text(badType), /timeout_seconds: must be an integer/)
        const missing = await client.callTool({ name: 'read_file', arguments: { sandbox_id: id, path: '/nope/none' } })
        assert.equal(missing.isError, true)
        // A sandbox of no one: the API's 404, as a tool error.
        const ghost = await client.callTool({ name: 'run_command', arguments: { sandbox_id: 'nosuchsandbox', command: 'true' } })
        assert.equal(ghost.isError, true)
        assert.match(text(ghost), /404/)
        // run_code needs a template with the code interpreter: a clear tool error on base.
        const code = await client.callTool({ name: 'run_code', arguments: { sandbox_id: id, code: '6*7' } })
        assert.equal(code.isError, true)
        assert.match(text(code), /code interpreter/)

        const listed = await client.callTool({ name: 'list_sandboxes', arguments: {} })
        assert.ok(listed.structuredContent.sandboxes.some((s) => s.sandbox_id === id && s.metadata.via === name))
        const killed = await client.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: id } })
        assert.equal(killed.isError, false, text(killed))
        const after = await client.callTool({ name: 'list_sandboxes', arguments: {} })
        assert.ok(!after.structuredContent.sandboxes.some((s) => s.sandbox_id === id))
        const gone = await client.callTool({ name: 'run_command', arguments: { sandbox_id: id, command: 'true' } })
        assert.equal(gone.isError, true)
        const sdkGone = await fetch(`${d.url}/sandboxes/${id}`, { headers: { 'X-API-Key': d.apiKey } })
        assert.equal(sdkGone.status, 404)

        // Every tool call is on the audit trail with the client's name.
        const recs = await (await fetch(`${d.url}/audit?action=mcp.tool_call&limit=1000`, { headers: { 'X-API-Key': d.apiKey } })).json()
        const mine = recs.filter((x) => x.client === `airlock-e2e-${name}`)
        assert.ok(mine.length >= 14, `audited calls: ${mine.length}`)
        assert.ok(mine.some((x) => x.tool === 'create_sandbox' && x.sandbox === id && x.is_error === false))
        assert.ok(mine.some((x) => x.tool === 'run_command' && x.is_error === true && /command: is required/.test(x.error)))
        assert.ok(mine.every((x) => !JSON.stringify(x).includes('print(6*7)')), 'arguments are not copied into the trail')
      })
    })
  }

  test('run_code in a code-interpreter sandbox keeps state and returns results and errors', async () => {
    await withClient('airlock-e2e-code', transports.http(d), async (client) => {
      const created = await client.callTool({ name: 'create_sandbox', arguments: { template: 'code-interpreter' } })
      assert.equal(created.isError, false, text(created))
      const id = created.structuredContent.sandbox_id
      const a = await client.callTool({ name: 'run_code', arguments: { sandbox_id: id, code: 'x = 6\nprint("side")\nx * 7' } })
      assert.equal(a.isError, false, text(a))
      assert.equal(a.structuredContent.stdout, 'side\n')
      assert.equal(a.structuredContent.results[0].text, '42')
      const b = await client.callTool({ name: 'run_code', arguments: { sandbox_id: id, code: '1 / (x - 6)' } })
      assert.equal(b.structuredContent.error.name, 'ZeroDivisionError')
      assert.match(text(b), /ZeroDivisionError/)
      // A timeout interrupts the execution; the kernel and its state stay.
      const spin = await client.callTool({ name: 'run_code', arguments: { sandbox_id: id, code: 'while True: pass', timeout_seconds: 3 } })
      assert.equal(spin.isError, true)
      assert.match(text(spin), /interrupted after 3 s/)
      const kept = await client.callTool({ name: 'run_code', arguments: { sandbox_id: id, code: 'x + 1' } })
      assert.equal(kept.structuredContent.results[0].text, '7', text(kept))
      await client.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: id } })
    })
  })

  test('airlock mcp opens a new session when the daemon forgot its own', async () => {
    await withClient('airlock-e2e-forgotten', transports.stdio(d), async (client) => {
      assert.equal((await client.listTools()).tools.length, TOOLS.length)
      // The daemon forgets the bridge's session (as after a restart): found
      // through its mcp.initialize record, ended with DELETE.
      const recs = await (await fetch(`${d.url}/audit?action=mcp.initialize`, { headers: { 'X-API-Key': d.apiKey } })).json()
      const sid = recs.filter((r) => r.client === 'airlock-e2e-forgotten').pop().session
      assert.equal((await fetch(`${d.url}/mcp`, { method: 'DELETE', headers: { 'X-API-Key': d.apiKey, 'Mcp-Session-Id': sid } })).status, 204)
      const listed = await client.callTool({ name: 'list_sandboxes', arguments: {} })
      assert.equal(listed.isError, false, text(listed))
      const again = await (await fetch(`${d.url}/audit?action=mcp.initialize`, { headers: { 'X-API-Key': d.apiKey } })).json()
      assert.equal(again.filter((r) => r.client === 'airlock-e2e-forgotten').length, 2)
    })
  })

  test('/mcp refuses a wrong key, a foreign origin and a missing session', async () => {
    const bad = new Client({ name: 'intruder', version: '1' })
    await assert.rejects(bad.connect(new StreamableHTTPClientTransport(new URL(d.url + '/mcp'), {
      requestInit: { headers: { 'X-API-Key': 'e2b_' + '0'.repeat(40) } },
    })))
    const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }
    const post = (body, headers = {}) => fetch(`${d.url}/mcp`, {
      method: 'POST', body: JSON.stringify(body),
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${d.apiKey}`, ...headers },
    })
    assert.equal((await post(init, { Origin: 'http://evil.example' })).status, 403)
    // DNS rebinding: evil.example now resolves to this daemon, so the browser
    // sends Origin and Host both naming it. The daemon's own origin is allowed.
    const port = new URL(d.url).port
    const raw = (headers) => new Promise((resolve, reject) => {
      const r = request({ host: '127.0.0.1', port, path: '/mcp', method: 'POST', headers: { 'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream', Authorization: `Bearer ${d.apiKey}`, ...headers } }, (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode))
      })
      r.on('error', reject)
      r.end(JSON.stringify(init))
    })
    assert.equal(await raw({ Host: `evil.example:${port}`, Origin: `http://evil.example:${port}` }), 403)
    assert.equal(await raw({ Origin: `http://localhost:${port}` }), 200)
    assert.equal((await post({ jsonrpc: '2.0', id: 2, method: 'tools/list' })).status, 400)
    assert.equal((await post({ jsonrpc: '2.0', id: 2, method: 'tools/list' }, { 'Mcp-Session-Id': 'nope' })).status, 404)
    const ok = await post(init)
    assert.equal(ok.status, 200)
    const sid = ok.headers.get('mcp-session-id')
    assert.match(sid, /^[0-9a-f]{32}$/)
    // Another team's key cannot ride the session.
    const other = d.createKey('other-team')
    assert.equal((await post({ jsonrpc: '2.0', id: 3, method: 'tools/list' }, { 'Mcp-Session-Id': sid, Authorization: `Bearer ${other}` })).status, 404)
    const parse = await fetch(`${d.url}/mcp`, { method: 'POST', body: '{not json', headers: { 'X-API-Key': d.apiKey, 'Mcp-Session-Id': sid } })
    assert.equal(parse.status, 400)
    assert.equal((await parse.json()).error.code, -32700)
    // One team cannot hold every tool thread: past 7 calls in flight (below
    // half of the 16 threads), the next is refused at once. Each of the 7
    // marks that it runs, then waits in the guest until the test opens its
    // gate (a file it writes through the SDK), so all 7 are in flight for
    // as long as the checks take, however slow the guest is to start them
    // (TCG, a busy host), and no guest clock decides when they end.
    const sbx = await e2b.Sandbox.create('base', d.opts)
    const gate = '/tmp/mcp-gate'
    const ended = []
    const slow = Array.from({ length: 7 }, (_, i) => post({ jsonrpc: '2.0', id: 100 + i, method: 'tools/call',
      params: { name: 'run_command', arguments: { sandbox_id: sbx.sandboxId, timeout_seconds: 300,
        command: `touch /tmp/mcp-in-${i}; until [ -e ${gate} ]; do sleep 0.1; done` } } }, { 'Mcp-Session-Id': sid })
      .then(async (r) => {
        const body = await r.text()
        ended.push(`call ${i}: HTTP ${r.status} ${body.slice(0, 300)}`)
        return { status: r.status, body }
      }))
    // All 7 running in the guest first (seen through the SDK, not MCP): a
    // ping sent while they are still on their way would take a place
    // itself (CI saw the 7th refused that way, then every ping answered).
    const started = async () => Number((await sbx.commands.run('ls /tmp | grep -c "^mcp-in-" || true')).stdout.trim())
    assert.ok(await waitFor(async () => ended.length > 0 || (await started()) === 7, 120000, 200),
      `all 7 calls run in the guest: ${await started()} started; calls ended: ${ended.join('; ') || 'none'}`)
    assert.deepEqual(ended, [], 'no call ended before the gate opened')
    const refused = await post({ jsonrpc: '2.0', id: 99, method: 'ping' }, { 'Mcp-Session-Id': sid })
    assert.equal(refused.status, 429, `an eighth call in flight is refused; calls ended: ${ended.join('; ') || 'none'}`)
    assert.match((await refused.json()).error.message, /too many MCP calls in flight/)
    // Meanwhile another team is served at once.
    const theirs = await post(init, { Authorization: `Bearer ${other}` })
    assert.equal(theirs.status, 200)
    assert.equal((await post({ jsonrpc: '2.0', id: 5, method: 'ping' },
      { Authorization: `Bearer ${other}`, 'Mcp-Session-Id': theirs.headers.get('mcp-session-id') })).status, 200)
    assert.deepEqual(ended, [], 'no call ended before the gate opened')
    await sbx.files.write(gate, '')
    for (const r of await Promise.all(slow)) {
      assert.equal(r.status, 200, r.body)
      assert.equal(JSON.parse(r.body).result.structuredContent.exit_code, 0, r.body)
    }
    assert.equal((await post({ jsonrpc: '2.0', id: 98, method: 'ping' }, { 'Mcp-Session-Id': sid })).status, 200)
    await sbx.kill()
    assert.equal((await fetch(`${d.url}/mcp`, { method: 'DELETE', headers: { 'X-API-Key': d.apiKey, 'Mcp-Session-Id': sid } })).status, 204)
    assert.equal((await post({ jsonrpc: '2.0', id: 4, method: 'ping' }, { 'Mcp-Session-Id': sid })).status, 404)
  })
})
