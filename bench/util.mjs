// Helpers shared by the Node benchmarks (tti.mjs, code_interpreter.mjs).
import { createServer } from 'node:net'

// A free loopback TCP port (bound, read, released).
export const freePort = () => new Promise((res, rej) => {
  const s = createServer().once('error', rej)
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)) })
})

// The p-th percentile (nearest rank) of the values `v`.
export const pct = (v, p) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.ceil(p / 100 * s.length) - 1)] }
