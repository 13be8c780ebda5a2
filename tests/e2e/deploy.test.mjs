// The deploy files (deploy/k8s, deploy/nomad; docs/multinode.md), checked
// statically: no Kubernetes or Nomad runs here. `kubectl kustomize` renders
// deploy/k8s; every object validates against the Kubernetes OpenAPI schemas
// (the kubernetes-models npm package); the Nomad job files parse as HCL2
// (@cdktf/hcl2json) with their job types and drivers asserted. Both ways,
// fronts and nodes run on the cluster's mutual TLS (--cluster-ca/-cert/-key
// from a Secret or Nomad variables), never --insecure-cluster.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

const ROOT = new URL('../..', import.meta.url).pathname
let kubectl = null
try {
  execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' })
  kubectl = 'kubectl'
} catch {}
let libs = null
try {
  libs = {
    yaml: await import('yaml'),
    hcl: await import('@cdktf/hcl2json'),
    apps: await import('kubernetes-models/apps/v1'),
    core: await import('kubernetes-models/v1'),
  }
} catch (e) {
  console.log(`# SKIP e2e: npm packages missing (npm ci in tests/e2e; scripts/setup does): ${e.message}`)
}
if (libs && !kubectl) console.log('# SKIP e2e: no kubectl (apt install kubernetes-client; scripts/setup does)')
const maybe = libs && kubectl ? test : test.skip

maybe('deploy/k8s: kustomize renders it and every object is valid Kubernetes', () => {
  const text = execFileSync(kubectl, ['kustomize', join(ROOT, 'deploy/k8s')], { encoding: 'utf8' })
  const objects = libs.yaml.parseAllDocuments(text).map((d) => d.toJS())
  const byKind = {}
  for (const o of objects) {
    const Model = {
      'apps/v1:DaemonSet': libs.apps.DaemonSet,
      'apps/v1:Deployment': libs.apps.Deployment,
      'v1:Service': libs.core.Service,
      'v1:ConfigMap': libs.core.ConfigMap,
      'v1:Namespace': libs.core.Namespace,
    }[`${o.apiVersion}:${o.kind}`]
    assert.ok(Model, `an object kind the check knows: ${o.apiVersion} ${o.kind}`)
    new Model(o).validate()  // throws with the schema's error
    byKind[o.kind] = o
    if (o.kind !== 'Namespace') assert.equal(o.metadata.namespace, 'airlock', `${o.kind} in namespace airlock`)
  }
  const ds = byKind.DaemonSet.spec.template.spec
  const node = ds.containers[0]
  assert.equal(ds.hostNetwork, true)
  assert.equal(node.securityContext.privileged, true)
  const paths = ds.volumes.map((v) => v.hostPath?.path)
  for (const p of ['/dev/kvm', '/dev/net/tun', '/run/netns', '/sys/fs/cgroup', '/var/lib/airlock'])
    assert.ok(paths.includes(p), `the node mounts ${p}`)
  assert.ok(node.args.includes('--role=node'))
  assert.ok(node.args.some((a) => a.startsWith('--advertise=$(HOST_IP)')))
  const front = byKind.Deployment.spec
  assert.ok(front.replicas >= 2)
  assert.ok(front.template.spec.containers[0].args.includes('--role=front'))
  assert.equal(front.template.spec.containers[0].securityContext.privileged, undefined, 'fronts are not privileged')
  // The Service selects the fronts, and only them.
  const sel = byKind.Service.spec.selector
  for (const [k, v] of Object.entries(sel)) assert.equal(front.template.metadata.labels[k], v)
  assert.notEqual(byKind.DaemonSet.spec.template.metadata.labels['app.kubernetes.io/component'], sel['app.kubernetes.io/component'])
  // The ConfigMap the fronts read exists under its generated name.
  const cmRef = front.template.spec.containers[0].env.find((e) => e.name === 'AIRLOCK_DOMAIN').valueFrom.configMapKeyRef.name
  assert.equal(cmRef, byKind.ConfigMap.metadata.name)

  // The cluster's mutual TLS: both mount the Secret airlock-cluster-tls
  // read-only at /etc/airlock/cluster and pass the three flags into it.
  const DIR = '/etc/airlock/cluster'
  const tlsVolume = (podSpec, container, who) => {
    const mount = (container.volumeMounts ?? []).find((m) => m.mountPath === DIR)
    assert.ok(mount, `${who} mounts ${DIR}`)
    assert.equal(mount.readOnly, true, `${who} mounts ${DIR} read-only`)
    const vol = podSpec.volumes.find((v) => v.name === mount.name)
    assert.equal(vol?.secret?.secretName, 'airlock-cluster-tls', `${who}'s ${DIR} is the Secret airlock-cluster-tls`)
    assert.ok(vol.secret.defaultMode !== undefined && (vol.secret.defaultMode & 0o7337) === 0,
      `${who}: the keys are not writable, nor readable by others (defaultMode 0400 or 0440)`)
    for (const it of vol.secret.items ?? []) assert.notEqual(it.key, 'ca.key', `${who}: never the CA's key`)
    return vol.secret
  }
  const flag = (args, name) => {
    const hits = args.filter((a) => a.startsWith(`--${name}=`))
    assert.equal(hits.length, 1, `one --${name}= in ${JSON.stringify(args)}`)
    return hits[0].slice(name.length + 3)
  }
  tlsVolume(ds, node, 'the node')
  assert.equal(flag(node.args, 'cluster-ca'), `${DIR}/ca.pem`)
  assert.equal(flag(node.args, 'cluster-cert'), `${DIR}/$(NODE_NAME).pem`)
  assert.equal(flag(node.args, 'cluster-key'), `${DIR}/$(NODE_NAME).key`)
  // The nodes' key for the cluster's secrets: nodes only.
  assert.equal(flag(node.args, 'cluster-secrets-key'), `${DIR}/secrets.key`)
  assert.equal(node.env.find((e) => e.name === 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName')
  const nodeName = node.args.filter((a) => a.startsWith('--node-name'))
  assert.ok(nodeName.every((a) => a === '--node-name=$(NODE_NAME)'), 'a --node-name is the certificate\'s name')
  // The node's port speaks TLS to fronts only: no HTTP probe of it.
  for (const probe of [node.readinessProbe, node.livenessProbe].filter(Boolean))
    assert.equal(probe.httpGet, undefined, 'the node is probed by TCP, not HTTP')
  const fc = front.template.spec.containers[0]
  const fsec = tlsVolume(front.template.spec, fc, 'the front')
  const fca = flag(fc.args, 'cluster-ca'), fcert = flag(fc.args, 'cluster-cert'), fkey = flag(fc.args, 'cluster-key')
  for (const f of [fca, fcert, fkey]) {
    assert.ok(f.startsWith(`${DIR}/`), `${f} is in ${DIR}`)
    if (fsec.items) assert.ok(fsec.items.some((it) => `${DIR}/${it.path}` === f), `${f} is projected into the front`)
  }
  assert.ok(!fc.args.some((a) => a.startsWith('--cluster-secrets-key')), 'a front holds no secrets key')
  assert.ok(fsec.items && !fsec.items.some((it) => it.key === 'secrets.key'), 'the secrets key is not projected into a front')
  // The front runs non-root: its key must be readable by its group.
  const uid = fc.securityContext.runAsUser
  assert.notEqual(uid, 0)
  const fsGroup = front.template.spec.securityContext?.fsGroup
  assert.ok(fsGroup !== undefined && (fsec.defaultMode & 0o040), 'the non-root front reads its key by fsGroup')
  // Nowhere plain HTTP between fronts and nodes.
  assert.ok(!text.includes('--insecure-cluster'), 'no --insecure-cluster')
})

maybe('deploy/nomad: the job files parse; nodes are a system job, fronts a service job, both raw_exec', async () => {
  const parse = async (name) =>
    libs.hcl.parse(name, readFileSync(join(ROOT, 'deploy/nomad', name), 'utf8'))
  const node = await parse('airlock-node.nomad.hcl')
  const front = await parse('airlock-front.nomad.hcl')
  const job = (j, name) => j.job[name][0]
  const n = job(node, 'airlock-node'), f = job(front, 'airlock-front')
  assert.equal(n.type, 'system')
  assert.equal(f.type, 'service')
  const task = (j, group) => Object.values(j.group[group][0].task)[0][0]
  assert.equal(task(n, 'node').driver, 'raw_exec')
  assert.equal(task(f, 'front').driver, 'raw_exec')
  assert.ok(task(n, 'node').config[0].args.includes('node'))
  assert.ok(task(f, 'front').config[0].args.includes('front'))
  assert.ok(f.group.front[0].count >= 2)

  // The cluster's mutual TLS: each job renders its CA, certificate and key
  // into the task's secrets dir from Nomad variables and passes the flags.
  for (const [who, t] of [['node', task(n, 'node')], ['front', task(f, 'front')]]) {
    const args = t.config[0].args
    assert.ok(!args.includes('--insecure-cluster'), `${who}: no --insecure-cluster`)
    for (const name of ['cluster-ca', 'cluster-cert', 'cluster-key']) {
      const i = args.indexOf(`--${name}`)
      assert.ok(i >= 0, `${who} passes --${name}`)
      const m = /^\$\{NOMAD_SECRETS_DIR\}\/(.+)$/.exec(args[i + 1])
      assert.ok(m, `${who}: --${name} is in the secrets dir: ${args[i + 1]}`)
      const tpl = (t.template ?? []).find((x) => x.destination === `secrets/${m[1]}`)
      assert.ok(tpl, `${who} renders secrets/${m[1]} with a template`)
      assert.match(tpl.data, /nomadVar "nomad\/jobs\/airlock-/, `${who}: secrets/${m[1]} comes from a Nomad variable`)
      assert.equal(tpl.env ?? false, false, `${who}: secrets/${m[1]} is a file, not environment`)
      if (name === 'cluster-key') assert.match(tpl.perms ?? '', /^0?[46]00$/, `${who}: its key is readable by its owner only`)
    }
  }
  // The nodes' key for the cluster's secrets: rendered for nodes only, readable by its owner.
  {
    const t = task(n, 'node'), args = t.config[0].args
    const i = args.indexOf('--cluster-secrets-key')
    assert.ok(i >= 0, 'the node passes --cluster-secrets-key')
    const m = /^\$\{NOMAD_SECRETS_DIR\}\/(.+)$/.exec(args[i + 1])
    const tpl = m && t.template.find((x) => x.destination === `secrets/${m[1]}`)
    assert.ok(tpl, 'the node renders its secrets key')
    assert.match(tpl.perms ?? '', /^0?[46]00$/)
    assert.ok(!task(f, 'front').config[0].args.includes('--cluster-secrets-key'), 'a front holds no secrets key')
  }
  // A node's certificate and key are its own, by the client's name, the
  // same name as its --node-name.
  const nargs = task(n, 'node').config[0].args
  assert.equal(nargs[nargs.indexOf('--node-name') + 1], '${node.unique.name}')
  for (const dest of ['cluster.pem', 'cluster.key'])
    assert.match(task(n, 'node').template.find((x) => x.destination === `secrets/${dest}`).data, /env "node\.unique\.name"/)
  for (const name of ['airlock-node.nomad.hcl', 'airlock-front.nomad.hcl'])
    assert.ok(!readFileSync(join(ROOT, 'deploy/nomad', name), 'utf8').includes('--insecure-cluster'), `${name}: no --insecure-cluster`)
  // The node's port speaks TLS to fronts only: no HTTP check of it.
  for (const svc of task(n, 'node').service ?? [])
    for (const c of svc.check ?? []) assert.notEqual(c.type, 'http', 'the node is checked by TCP, not HTTP')
})
