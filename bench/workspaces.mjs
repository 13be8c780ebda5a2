// Workspaces (docs/volumes.md, docs/snapshots.md "Sleep when idle") through
// the official e2b SDK, in one run beside their raw primitives:
//   - sequential write and read of MB MiB (default 1024) on a mounted volume
//     (NFS on qemu, the gofer on gVisor) beside the same on the guest's own
//     disk, with dd (conv=fsync on write; the page cache dropped before each
//     read, so a read comes from the server or the disk);
//   - wake on request: the first commands.run('echo hi') to a sandbox asleep
//     (idle sleep, memory kept) beside a create from the warm pool (pool hit)
//     and commands.run in a running sandbox, N times each;
//   - what a sleeping sandbox holds: its pause snapshot on disk, and no
//     process (no host memory).
//
// Usage (root): node bench/workspaces.mjs [N] [MB]   (AIRLOCK_BIN, AIRLOCK_STATE_DIR,
// AIRLOCK_RUNTIME=qemu|gvisor). Run via `make bench-workspaces`. Starts its own daemon.
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '../tests/e2e/package.json'))
const { Sandbox, Volume } = require('e2b')
const N = Number(process.argv[2] || 10)
const MB = Number(process.argv[3] || 1024)
const RUNTIME = process.env.AIRLOCK_RUNTIME || 'qemu'
const row = (name, v, unit) => console.log(`| ${name.padEnd(58)} | ${pct(v, 50).toFixed(1).padStart(9)} | ${pct(v, 95).toFixed(1).padStart(9)} | ${unit.padEnd(5)} | ${String(v.length).padStart(3)} |`)
// Host memory (RSS, MiB) of the processes that name sandbox `id` on their
// command line or hold its run dir open as cwd (its VMM, its NFS server).
function hostRssMiB(id) {
  let kb = 0
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes(id)) continue
      kb += Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'latin1'))?.[1] ?? 0)
    } catch {}  // gone meanwhile
  }
  return kb / 1024
}
const ms = async (fn) => { const t = process.hrtime.bigint(); await fn(); return Number(process.hrtime.bigint() - t) / 1e6 }

const d = await startDaemon(['--runtime', RUNTIME, '--pool', '2', '--volume-size-mib', String(MB + 512)])
process.env.E2B_VOLUME_API_URL = d.url
const api = (method, path, body) => fetch(`${d.url}${path}`, { method, headers: { 'X-API-Key': d.opts.apiKey, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) }).then((r) => r.json())
try {
  console.log(`# ${RUNTIME}, ${MB} MiB, N=${N}; ${new Date().toISOString()}`)
  console.log('| measurement | p50 | p95 | unit | n |\n|---|---|---|---|---|')
  // Throughput: volume vs the guest's own disk, same dd, same sandbox.
  const vol = await Volume.create('bench', d.opts)
  const sbx = await Sandbox.create('base', { ...d.opts, timeoutMs: 3600000, volumeMounts: { '/mnt/vol': vol } })
  const dd = async (args) => {
    const r = await sbx.commands.run(`${args} 2>&1 | tail -1`, { user: 'root', timeoutMs: 0 })
    const m = /, ([\d.]+) s, /.exec(r.stdout)
    if (!m) throw new Error(`dd: ${r.stdout}`)
    return MB / Number(m[1])
  }
  for (const [name, dir] of [['guest disk', '/home/user'], ['volume', '/mnt/vol']]) {
    const w = [], rd = []
    for (let i = 0; i < Math.min(N, 3); i++) {
      w.push(await dd(`dd if=/dev/zero of=${dir}/bench.bin bs=1M count=${MB} conv=fsync`))
      rd.push(await dd(`sync; echo 3 > /proc/sys/vm/drop_caches; dd if=${dir}/bench.bin of=/dev/null bs=1M`))
      await sbx.commands.run(`rm -f ${dir}/bench.bin`, { user: 'root' })
    }
    row(`sequential write ${MB} MiB, ${name} (dd conv=fsync)`, w, 'MiB/s')
    row(`sequential read ${MB} MiB, ${name} (cold cache)`, rd, 'MiB/s')
  }
  await sbx.kill()
  // Wake on request vs a pool hit vs a running sandbox.
  const hit = [], wake = [], run = [], snap = [], awake = [], asleep = []
  for (let i = 0; i < N; i++) {
    while ((await d.parked()) < 1) await new Promise((r) => setTimeout(r, 200))
    let s
    hit.push(await ms(async () => { s = await Sandbox.create('base', d.opts); await s.commands.run('echo hi') }))
    await s.kill()
  }
  for (let i = 0; i < N; i++) {
    const c = await api('POST', '/v2/sandboxes', { templateID: 'base', timeout: 3600, lifecycle: { idleTimeout: 1 } })
    const s = await Sandbox.connect(c.sandboxID, d.opts)
    run.push(await ms(() => s.commands.run('echo hi')))
    awake.push(hostRssMiB(c.sandboxID))
    while ((await api('GET', `/sandboxes/${c.sandboxID}`)).state !== 'paused') await new Promise((r) => setTimeout(r, 200))
    // The API says paused from the start of the pause; the snapshot is committed (renamed) at its end.
    const dir = join(process.env.AIRLOCK_STATE_DIR || '/var/lib/airlock', 'snapshots/paused', c.sandboxID)
    while (!existsSync(dir) || hostRssMiB(c.sandboxID) > 0) await new Promise((r) => setTimeout(r, 200))
    snap.push(Number(execFileSync('du', ['-sk', dir]).toString().split('\t')[0]) / 1024)
    asleep.push(hostRssMiB(c.sandboxID))
    wake.push(await ms(() => s.commands.run('echo hi')))
    await s.kill()
  }
  row('TTI, warm pool hit: create + commands.run(echo hi)', hit, 'ms')
  row('wake on request: first commands.run(echo hi) to a sleeping sandbox', wake, 'ms')
  row('for scale: commands.run(echo hi) in a running sandbox', run, 'ms')
  row('disk per sleeping sandbox (its pause snapshot; 512 MiB guest)', snap, 'MiB')
  row('host memory (RSS of its processes) per sleeping sandbox', asleep, 'MiB')
  row('for scale: the same while it ran', awake, 'MiB')
} finally {
  await d.stop()
}
