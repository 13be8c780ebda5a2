// The two runtimes side by side (qemu: a microVM, TCG on a host without
// KVM; gvisor: runsc on the platform its probe picked, read from
// <state>/gvisor-platform), through the official e2b SDK
// (2.51.0, unmodified), all in one run on one daemon (default runtime qemu;
// the template name picks the runtime: 'base' runs on qemu, 'base-gvisor'
// on gVisor). Every loop interleaves the runtimes, the first of each
// iteration alternating:
//   - time to interactive: Sandbox.create() until a first
//     commands.run('true') answered (p50, p99);
//   - host memory of that sandbox idle: after the command, 2 s idle, the PSS
//     (/proc/PID/smaps_rollup) of its host processes: the VMM (the
//     registry's vmm_pid) for qemu; runsc-sandbox + runsc-gofer (the run
//     dir's runsc.json) for gvisor, and apart, the sandbox's stub
//     processes. One sandbox is alive at a time, so no other sandbox shares
//     its pages;
//   - in one running sandbox per runtime: the exec round trip of `true`;
//     a CPU-bound python loop (in-guest seconds and wall ms), beside the
//     same loop on the host (the raw primitive, native); `tar -xf` of
//     10,000 small files into a fresh directory (the tarball made first,
//     outside the timing);
//   - pause, then Sandbox.connect() to resume (qemu: a migration stream;
//     gvisor: runsc checkpoint, then runsc restore); a runtime that
//     answers an error is quoted in the table.
//
// Usage (root): node bench/runtimes.mjs [N]   (default 10; also env N;
// N_SLOW, default min(N, 5), for the CPU loop, untar and pause/resume
// rows: under gVisor here every exec costs seconds;
// AIRLOCK_BIN, AIRLOCK_STATE_DIR). Run via `make bench-runtimes`. Starts
// its own daemon on a free port with its own registry.
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pct, startDaemon } from './util.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '../tests/e2e/package.json'))
const { Sandbox } = require('e2b')
const N = Number(process.argv[2] || process.env.N || 10)
const N_SLOW = Number(process.env.N_SLOW || Math.min(N, 5))
const STATE_DIR = process.env.AIRLOCK_STATE_DIR || '/var/lib/airlock'
const RUNTIMES = [{ name: 'qemu', template: 'base' }, { name: 'gvisor', template: 'base-gvisor' }]
const FILES = 10000
const CPU_PROG = 'import time;t=time.time();s=0\nfor i in range(3000000): s+=i\nprint(time.time()-t)'
const HOST_PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3'
const RUN = { timeoutMs: 300000 }

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const time = async (f) => { const t0 = performance.now(); const v = await f(); return [performance.now() - t0, v] }
// The runtimes in iteration i's order: qemu first on even i, gvisor on odd.
const order = (i) => (i % 2 ? [...RUNTIMES].reverse() : RUNTIMES)
const short = (s, n = 90) => { s = String(s).replace(/\s+/g, ' ').trim(); return s.length > n ? s.slice(0, n - 1) + '…' : s }

// ---- host memory of one sandbox ---------------------------------------------------------------
const pssKib = (pid) => {
  const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))
  if (!m) throw new Error(`/proc/${pid}/smaps_rollup: no Pss line`)
  return Number(m[1])
}
const cmdline = (pid) => { try { return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ') } catch { return '' } }
const ppid = (pid) => { try { return Number(/\) \S+ (\d+)/.exec(readFileSync(`/proc/${pid}/stat`, 'utf8'))[1]) } catch { return -1 } }
const descendants = (root) => {
  const all = readdirSync('/proc').filter((e) => /^\d+$/.test(e)).map(Number)
  const out = [], todo = [root]
  while (todo.length) {
    const p = todo.pop()
    for (const c of all) if (ppid(c) === p) { out.push(c); todo.push(c) }
  }
  return out
}
// { main: KiB the brief's processes hold, extra: KiB of the gVisor sandbox's
// child (systrap or ptrace stub) processes, pids }.
function sandboxPss(runtime, id) {
  const runDir = join(STATE_DIR, 'run', id)
  if (runtime === 'gvisor') {
    const s = JSON.parse(readFileSync(join(runDir, 'vm', 'runsc.json'), 'utf8'))
    if (!(s.sandbox_pid > 0) || !(s.gofer_pid > 0)) throw new Error(`${runDir}/vm/runsc.json: no sandbox_pid/gofer_pid`)
    const stubs = descendants(s.sandbox_pid).filter((p) => p !== s.gofer_pid)
    let extra = 0
    for (const p of stubs) try { extra += pssKib(p) } catch {}  // a stub may exit between listing and reading
    return { main: pssKib(s.sandbox_pid) + pssKib(s.gofer_pid), extra, pids: [s.sandbox_pid, s.gofer_pid], stubs: stubs.length }
  }
  // qemu: the registry the run dir's owner file names holds the VMM's pid.
  const registry = /^registry (.+)$/m.exec(readFileSync(join(runDir, 'owner'), 'utf8'))?.[1]
  if (!registry) throw new Error(`${runDir}/owner names no registry`)
  if (!/^[A-Za-z0-9-]+$/.test(id)) throw new Error(`unexpected sandbox id ${id}`)
  const pid = Number(execFileSync('sqlite3', ['-readonly', registry, `SELECT vmm_pid FROM sandboxes WHERE id='${id}'`],
    { encoding: 'utf8' }).trim())
  // The daemon's own check (ProcessMatches): the pid's command line names the run dir.
  if (!(pid > 0) || !cmdline(pid).includes(runDir + '/')) throw new Error(`vmm_pid ${pid} of ${id} is not its VMM`)
  return { main: pssKib(pid), extra: 0, pids: [pid], stubs: 0 }
}

// ---- the run ----------------------------------------------------------------------------------
const live = new Set()
const d = await startDaemon(['--pool', '0'])
const opts = { ...d.opts, timeoutMs: 900000 }
const create = async (rt) => { const sb = await Sandbox.create(rt.template, opts); live.add(sb); return sb }
const kill = async (sb) => { live.delete(sb); await sb.kill() }
const must = (r, what) => { if (r.exitCode !== 0) throw new Error(`${what}: exit ${r.exitCode}: ${short(r.stderr)}`); return r }
const R = Object.fromEntries(RUNTIMES.map((rt) => [rt.name, {
  tti: [], create: [], shell: [], mem: [], memStubs: [], stubs: 0, exec: [], cpuIn: [], cpuWall: [], tarIn: [], tarWall: [], pause: [], resume: [],
  pauseError: null,
}]))
const native = { cpuIn: [], cpuWall: [] }
const t0 = performance.now()
const phase = (s) => console.error(`[${((performance.now() - t0) / 1000).toFixed(0).padStart(4)} s] ${s}`)
try {
  // Each runtime's template snapshot / tree exists before anything is timed.
  for (const rt of RUNTIMES) {
    phase(`warm-up create ${rt.template}`)
    const sb = await create(rt)
    must(await sb.commands.run('true', RUN), 'warm-up')
    await kill(sb)
  }

  phase(`TTI + idle memory, ${N} x 2 sandboxes`)
  for (let i = 0; i < N; i++) {
    for (const rt of order(i)) {
      const r = R[rt.name]
      const t0 = performance.now()
      const sb = await create(rt)
      r.create.push(performance.now() - t0)
      must(await sb.commands.run('true', RUN), 'first command')
      r.tti.push(performance.now() - t0)
      await sleep(2000)
      const m = sandboxPss(rt.name, sb.sandboxId)
      r.mem.push(m.main / 1024)
      r.memStubs.push((m.main + m.extra) / 1024)
      r.stubs = Math.max(r.stubs, m.stubs)
      await kill(sb)
    }
  }

  phase('one running sandbox per runtime: exec, CPU loop, untar')
  const sbs = {}
  for (const rt of RUNTIMES) sbs[rt.name] = await create(rt)
  for (const rt of RUNTIMES) {
    // The tarball: FILES files of 100 bytes in 100 directories, made outside the timing.
    must(await sbs[rt.name].commands.run(
      `rm -rf /tmp/bench-src && mkdir -p /tmp/bench-src && python3 -c "import os
for d in range(100):
    os.mkdir(f'/tmp/bench-src/d{d:02d}')
    for f in range(${FILES / 100}):
        open(f'/tmp/bench-src/d{d:02d}/f{f:03d}', 'w').write('x' * 100)" &&
       tar -cf /tmp/bench-files.tar -C /tmp/bench-src . && rm -rf /tmp/bench-src &&
       test $(tar -tf /tmp/bench-files.tar | grep -c '/f') -eq ${FILES} && mkdir /tmp/bench-x0 && sync`, RUN), 'make the tarball')
  }
  // The exec's raw primitive: what commands.run starts (bash -l -c true),
  // timed inside the guest, N times in one command.
  for (const rt of RUNTIMES) {
    const r = must(await sbs[rt.name].commands.run(`for i in $(seq ${N}); do s=$(date +%s%N); bash -l -c true; ` +
      `e=$(date +%s%N); echo $(( (e - s) / 1000 )); done`, RUN), 'bash -l -c true in the guest')
    R[rt.name].shell = r.stdout.trim().split('\n').map((us) => Number(us) / 1000)
  }
  for (let i = 0; i < N; i++) {
    for (const rt of order(i)) {
      const [t] = await time(async () => must(await sbs[rt.name].commands.run('true', RUN), 'exec true'))
      R[rt.name].exec.push(t)
    }
  }
  for (let i = 0; i < N_SLOW; i++) {
    for (const rt of order(i)) {
      const [t, r] = await time(async () => must(await sbs[rt.name].commands.run(`python3 -c '${CPU_PROG}'`, RUN), 'cpu loop'))
      R[rt.name].cpuIn.push(Number(r.stdout.trim()))
      R[rt.name].cpuWall.push(t)
    }
    const [t, out] = await time(async () => execFileSync(HOST_PYTHON, ['-c', CPU_PROG], { encoding: 'utf8' }))
    native.cpuIn.push(Number(out.trim()))
    native.cpuWall.push(t)
    for (const rt of order(i)) {
      // Into a fresh directory (made, with the page cache written back, by
      // the previous untimed command); then checked, removed, the next made.
      const sb = sbs[rt.name]
      const dir = `/tmp/bench-x${i}`
      const [t, r] = await time(async () => must(await sb.commands.run(
        `s=$(date +%s%N); tar -xf /tmp/bench-files.tar -C ${dir}; rc=$?; e=$(date +%s%N); echo $(( (e - s) / 1000 )); exit $rc`,
        RUN), 'tar -xf'))
      R[rt.name].tarIn.push(Number(r.stdout.trim()) / 1000)
      R[rt.name].tarWall.push(t)
      must(await sb.commands.run(`test $(find ${dir} -type f | wc -l) -eq ${FILES} && rm -rf ${dir} && ` +
        `mkdir /tmp/bench-x${i + 1} && sync`, RUN), 'check, clean, next dir')
    }
  }
  for (const rt of RUNTIMES) await kill(sbs[rt.name])

  phase('pause / Sandbox.connect()')
  for (const rt of RUNTIMES) {
    const r = R[rt.name]
    const sb = await create(rt)
    must(await sb.commands.run('true', RUN), 'first command')
    for (let i = 0; i < N_SLOW; i++) {
      let ok, tp
      try {
        [tp, ok] = await time(() => sb.pause())
      } catch (e) {
        r.pauseError = e.message
        break
      }
      if (ok !== true) throw new Error(`${rt.name}: pause() answered ${ok}`)
      r.pause.push(tp)
      const [tr, again] = await time(() => Sandbox.connect(sb.sandboxId, opts))
      r.resume.push(tr)
      must(await again.commands.run('true', RUN), 'command after resume')
    }
    await kill(sb)
  }
} finally {
  for (const sb of live) await sb.kill().catch((e) => console.error(`kill ${sb.sandboxId}: ${e.message}`))
  await d.stop()
}
phase('done')

// ---- the table --------------------------------------------------------------------------------
const p50 = (v) => pct(v, 50)
const q = R.qemu, g = R.gvisor
const fmt = (x, digits = 1) => (x === undefined || Number.isNaN(x) ? '' : x.toFixed(digits))
const ratio = (a, b) => (typeof a === 'number' && typeof b === 'number' ? `${(a / b).toFixed(2)}x` : '')
const rows = []
const row = (metric, qv, gv, nv = '', digits = 1) => rows.push([metric,
  typeof qv === 'number' ? fmt(qv, digits) : qv, typeof gv === 'number' ? fmt(gv, digits) : gv,
  typeof nv === 'number' ? fmt(nv, digits) : nv, ratio(qv, gv)])
row(`TTI: create + commands.run('true'), p50 ms (n=${N})`, p50(q.tti), p50(g.tti))
row(`TTI: create + commands.run('true'), p99 ms (n=${N})`, pct(q.tti, 99), pct(g.tti, 99))
row(`  of which Sandbox.create(), p50 ms (n=${N})`, p50(q.create), p50(g.create))
row(`exec round trip of \`true\`, p50 ms (n=${q.exec.length})`, p50(q.exec), p50(g.exec))
row(`  of which in-guest \`bash -l -c true\` (what it starts), p50 ms (n=${q.shell.length})`, p50(q.shell), p50(g.shell))
row(`CPU loop (3e6 adds), in-guest s, p50 (n=${N_SLOW})`, p50(q.cpuIn), p50(g.cpuIn), p50(native.cpuIn), 3)
row(`CPU loop, wall ms incl. exec, p50 (n=${N_SLOW})`, p50(q.cpuWall), p50(g.cpuWall), p50(native.cpuWall))
row(`untar ${FILES} files, in-guest ms, p50 (n=${N_SLOW})`, p50(q.tarIn), p50(g.tarIn))
row(`untar ${FILES} files, wall ms incl. exec, p50 (n=${N_SLOW})`, p50(q.tarWall), p50(g.tarWall))
row(`host PSS per idle sandbox, MiB, p50 (n=${N})`, p50(q.mem), p50(g.mem))
row(`  the same, gvisor with its ${g.stubs} stub processes`, p50(q.memStubs), p50(g.memStubs))
// An error's first two clauses ("501: pause is not supported by ..."); the whole text under the table.
const unsupported = (e) => `unsupported (${short(e.split(': ').slice(0, 2).join(': '), 70)})`
row(`pause(), p50 ms (n=${q.pause.length})`, q.pauseError ? unsupported(q.pauseError) : p50(q.pause),
  g.pauseError ? unsupported(g.pauseError) : p50(g.pause))
row(`resume: Sandbox.connect(), p50 ms (n=${q.resume.length})`, q.pauseError ? 'unsupported' : p50(q.resume),
  g.pauseError ? 'unsupported' : p50(g.resume))

// The platform the daemon's gVisor runtime probed and cached (first line).
let platform = '?'
try { platform = readFileSync(join(STATE_DIR, 'gvisor-platform'), 'utf8').split('\n')[0] } catch {}
const head = ['metric', 'qemu (TCG)', `gvisor (${platform})`, 'native', 'qemu/gvisor']
const w = head.map((h, c) => Math.max(h.length, ...rows.map((r) => String(r[c]).length)))
const line = (cells) => `| ${cells.map((x, c) => (c ? String(x).padStart(w[c]) : String(x).padEnd(w[c]))).join(' | ')} |`
console.log(`\n${line(head)}\n|${w.map((n, c) => (c ? '-'.repeat(n + 1) + ':' : '-'.repeat(n + 2))).join('|')}|`)
for (const r of rows) console.log(line(r))
console.log(`\nraw primitive, same run: the CPU loop on the host (${HOST_PYTHON}): ${fmt(p50(native.cpuIn), 3)} s ` +
  `(wall ${fmt(p50(native.cpuWall))} ms incl. process start); in-guest / native: qemu ${ratio(p50(q.cpuIn), p50(native.cpuIn))}, ` +
  `gvisor ${ratio(p50(g.cpuIn), p50(native.cpuIn))}`)
if (N_SLOW !== N) console.log(`the CPU loop, untar and pause/resume rows ran N_SLOW=${N_SLOW} iterations (N=${N})`)
console.log(`host PSS: qemu = the QEMU process (registry vmm_pid); gvisor = runsc-sandbox + runsc-gofer (run dir runsc.json)`)
for (const rt of RUNTIMES) if (R[rt.name].pauseError) console.log(`${rt.name} pause(): ${R[rt.name].pauseError}`)
console.log(`total wall time: ${((performance.now() - t0) / 1000).toFixed(0)} s`)
