// A control-plane poller for bench/burst.mjs, in a process of its own so the
// burst's own SDK work in the bench's event loop does not count against the
// daemon: GET URL+PATH with X-API-Key every EVERY_MS until SIGTERM, then the
// latencies (ms, JSON array) to OUT. Fails on any answer but 200.
// Usage: node bench/poll.mjs URL API_KEY PATH EVERY_MS OUT
import { writeFileSync } from 'node:fs'

const [url, key, path, every, out] = process.argv.slice(2)
const lat = []
let on = true
process.on('SIGTERM', () => { on = false })
while (on) {
  const t0 = performance.now()
  const r = await fetch(url + path, { headers: { 'X-API-Key': key } })
  await r.arrayBuffer()
  if (r.status !== 200) throw new Error(`GET ${path}: ${r.status}`)
  lat.push(performance.now() - t0)
  await new Promise((res) => setTimeout(res, Number(every)))
}
writeFileSync(out, JSON.stringify(lat))
