// Run by tests/integration/template_packages_test.cc inside its daemon's
// network namespace (behind a fake internet whose allowed.test serves a
// local apt repository, a PyPI-style simple index with one wheel and an npm
// tarball under /pkg/): the official e2b SDK (2.51.0) builds a template with
// aptInstall, pipInstall and npmInstall through `serve --build-allow
// allowed.test`, tries a host that is not allowed, then creates a sandbox
// of it and prints what it finds as one JSON line.
//
// Env: E2B_API_URL, E2B_API_KEY (the daemon's).
import { Sandbox, Template } from 'e2b'

const opts = { apiUrl: process.env.E2B_API_URL, sandboxUrl: process.env.E2B_API_URL, apiKey: process.env.E2B_API_KEY,
  requestTimeoutMs: 300000 }
const MIRROR = 'http://allowed.test/pkg'
const out = { logs: [] }
try {
  const t = Template()
    .fromBaseImage()
    // The base's own sources point at the real mirror, which builds here may
    // not reach: the local repository only.
    .runCmd(`rm -f /etc/apt/sources.list /etc/apt/sources.list.d/* && ` +
      `echo "deb [trusted=yes] ${MIRROR}/apt ./" > /etc/apt/sources.list.d/airlock-test.list`, { user: 'root' })
    .aptInstall(['airlock-test-apt'])
    .pipInstall(['--index-url', `${MIRROR}/simple`, '--trusted-host', 'allowed.test', 'airlock-test-wheel'])
    .npmInstall([`${MIRROR}/npm/airlock-test-npm-1.0.0.tgz`], { g: true })
    // Not on the build allowlist: refused (and audited).
    .runCmd('curl -sS -m 10 -o /dev/null http://denied.test/ && echo denied-reached || echo denied-refused')
  const info = await Template.build(t, 'packages-it', { ...opts, onBuildLogs: (l) => out.logs.push(l.message) })
  out.templateId = info.templateId
  const sb = await Sandbox.create('packages-it', opts)
  const run = async (cmd) => {
    const r = await sb.commands.run(cmd).catch((e) => e.result ?? { stdout: '', stderr: String(e) })
    return (r.stdout + r.stderr).trim()
  }
  out.apt = await run("cat /usr/share/airlock-test-apt/hello.txt; dpkg-query -W -f '${Version}' airlock-test-apt")
  out.pip = await run('python3 -c "import airlock_test_wheel as w; print(w.VALUE)"')
  out.npm = await run('airlock-test-npm')
  await sb.kill()
} catch (e) {
  out.error = String(e && e.stack ? e.stack : e)
}
console.log(JSON.stringify(out))
