// Run by dataplane.test.mjs ("TLS with --domain") as its own Node process, as
// a user of the official SDK would run: E2B_DOMAIN and E2B_API_KEY in the
// environment, the daemon's CA in NODE_EXTRA_CA_CERTS, and a resolver that
// maps every name of the domain to the daemon's TLS address
// (AIRLOCK_TLS_ADDR; what a DNS record for the domain would do; patched
// into node:dns before the SDK loads). The SDK gets no URL. Prints one JSON
// line with what it saw.
import dns from 'node:dns'

const domain = process.env.E2B_DOMAIN
const addr = process.env.AIRLOCK_TLS_ADDR
const lookup = dns.lookup
dns.lookup = (host, opts, cb) => {
  if (typeof opts === 'function') [opts, cb] = [{}, opts]
  if (host === domain || host.endsWith(`.${domain}`)) {
    return opts && opts.all ? process.nextTick(cb, null, [{ address: addr, family: 4 }]) : process.nextTick(cb, null, addr, 4)
  }
  return lookup(host, opts, cb)
}

const { Sandbox } = await import('e2b')
const out = {}
const sbx = await Sandbox.create({ requestTimeoutMs: 120000 })
try {
  out.sandboxId = sbx.sandboxId
  out.stdout = (await sbx.commands.run('echo over-tls')).stdout
  await sbx.files.write('/home/user/tls.txt', 'through https')
  out.read = await sbx.files.read('/home/user/tls.txt')
  out.url = await sbx.downloadUrl('/home/user/tls.txt')
  out.download = await (await fetch(out.url)).text()
  out.listed = (await Sandbox.list().nextItems()).some((s) => s.sandboxId === sbx.sandboxId)
} finally {
  await sbx.kill()
}
console.log(JSON.stringify(out))
