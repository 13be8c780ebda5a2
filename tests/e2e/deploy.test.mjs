// The deploy files (deploy/k8s, deploy/nomad; docs/multinode.md), checked
// statically: no Kubernetes or Nomad runs here. `kubectl kustomize` renders
// deploy/k8s; every object validates against the Kubernetes OpenAPI schemas
// (the kubernetes-models npm package); the Nomad job files parse as HCL2
// (@cdktf/hcl2json) with their job types and drivers asserted.
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
})
