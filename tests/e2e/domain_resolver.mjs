// Preloaded (node --import) into a Node process that plays a user of the
// official SDK with E2B_DOMAIN set: every name of that domain resolves to
// the daemon's TLS address (AIRLOCK_TLS_ADDR), which is what a wildcard DNS
// record for the domain does; every other name as before. Patched into
// node:dns before the SDK loads; the SDK itself is unmodified and gets no
// URL. Used by the SDK matrix (sdk_matrix.test.mjs).
import dns from 'node:dns'

const domain = process.env.E2B_DOMAIN
const addr = process.env.AIRLOCK_TLS_ADDR
if (!domain || !addr) throw new Error('domain_resolver.mjs needs E2B_DOMAIN and AIRLOCK_TLS_ADDR')
const lookup = dns.lookup
dns.lookup = (host, opts, cb) => {
  if (typeof opts === 'function') [opts, cb] = [{}, opts]
  if (host === domain || host.endsWith(`.${domain}`)) {
    return opts && opts.all ? process.nextTick(cb, null, [{ address: addr, family: 4 }]) : process.nextTick(cb, null, addr, 4)
  }
  return lookup(host, opts, cb)
}
