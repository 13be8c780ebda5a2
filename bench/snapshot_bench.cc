// airlock-snapshot-bench: the snapshot numbers of docs/snapshots.md and the
// README, in one run, printed as a table with ratios:
//   - create TTI (create → first command answered): cold boot vs template snapshot, p50/p95
//   - pause time (total, and per GiB of guest memory), resume time
//   - fork time for 1 and for 5 children
//   - disk used per paused sandbox beyond the template (blocks on disk)
//   - checkpoint and rollback in place: 20 cycles, beside the create above
//   - template snapshots with RAM in the stream vs RAM in a shared file
//     (docs/snapshots.md "Shared-RAM templates"), interleaved: snapshot
//     written, restore, create, create → first command, PSS per clone of 8
//     side by side; beside the raw primitives (bare QEMU spawn → QMP ready,
//     agent /health round trip)
// Runs the Manager in-process against real microVMs (root, QEMU, an image).
// Usage: airlock-snapshot-bench [--state-dir DIR] [--n N] [--only-ram]
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "common/subprocess.h"
#include "core/manager.h"
#include "runtime/qemu/qmp_client.h"
#include "runtime/qemu/snapshot.h"

using namespace airlock;
using namespace airlock::bench;
namespace fs = std::filesystem;

namespace {

uint64_t DiskUsed(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += uint64_t(st.st_blocks) * 512;
  }
  return total;
}

bool Run(Sandbox& sb) {
  ExecRequest r;
  r.cmd = "/bin/true";
  auto res = sb.agent().Exec(r, {});
  if (!res.ok()) std::fprintf(stderr, "exec: %s\n", res.status().ToString().c_str());
  return res.ok() && res->exit_code == 0;
}

void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "airlock-snapshot-bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

double StepMs(const CreateTimings& t, const std::string& step) {
  for (const auto& s : t.steps)
    if (s.step == step) return s.ms;
  return 0;
}

// Stream vs shared-file template snapshots, in one run, interleaved.
void CompareRamLayouts(const ManagerConfig& base, const CreateOptions& opts, int n) {
  struct Mode {
    const char* name;
    bool shared;
    std::unique_ptr<Manager> mgr;
    std::string dir;
    qemu::SnapshotManifest manifest;
    std::vector<double> restore, create, tti, pss, network, agent;
  };
  Mode modes[2] = {{"stream", false, nullptr, "", {}, {}, {}, {}, {}, {}, {}},
                   {"shared file", true, nullptr, "", {}, {}, {}, {}, {}, {}, {}}};
  // Both managers first: each start sweeps templates of the other layout that nothing uses.
  for (auto& md : modes) {
    ManagerConfig mc = base;
    mc.template_snapshots = true;
    mc.template_shared_memory = md.shared;
    auto mm = Manager::Open(mc);
    if (!mm.ok()) Die("open", mm.status());
    md.mgr = std::move(*mm);
  }
  auto img = image::FindImage(base.state_dir, "base");
  if (!img.ok()) Die("image", img.status());
  for (auto& md : modes) {
    // Made in this run, so "snapshot written" is measured beside the rest.
    if (auto d = md.mgr->template_snapshots().DirFor(*img, opts.vcpus, opts.memory_mib);
        d.ok() && !md.mgr->snapshot_dirs().InUse(*d))
      (void)md.mgr->runtime().snapshots().Delete(*d);
    if (Status st = md.mgr->template_snapshots().Ensure("base", opts.vcpus, opts.memory_mib); !st.ok())
      Die(std::string("template snapshot, ") + md.name, st);
    auto d = md.mgr->template_snapshots().DirFor(*img, opts.vcpus, opts.memory_mib);
    if (!d.ok()) Die("template dir", d.status());
    md.dir = *d;
    auto m = qemu::ReadSnapshot(md.dir);
    if (!m.ok()) Die("manifest", m.status());
    md.manifest = *m;
  }
  for (int i = 0; i < n; ++i) {
    for (auto& md : modes) {
      auto t0 = std::chrono::steady_clock::now();
      auto sb = md.mgr->Create(opts);
      if (!sb.ok()) Die("create", sb.status());
      double created = Ms(t0);
      if (!Run(**sb)) Die("first command", Internal("failed"));
      md.tti.push_back(Ms(t0));
      md.create.push_back(created);
      const CreateTimings& ct = (*sb)->timings();
      md.restore.push_back(StepMs(ct, kStepVmm));
      md.network.push_back(StepMs(ct, kStepNetwork) + StepMs(ct, kStepEgress) + StepMs(ct, kStepLease));
      md.agent.push_back(StepMs(ct, kStepAgentReady) + StepMs(ct, kStepAgentInit));
      if (!(*sb)->timings().from_snapshot) Die("create", Internal(std::string(md.name) + ": not from the snapshot"));
      (void)md.mgr->Destroy((*sb)->id());
    }
  }
  // 8 clones side by side, one layout at a time.
  constexpr int kSideBySide = 8;
  for (auto& md : modes) {
    std::vector<std::shared_ptr<Sandbox>> sbs;
    for (int i = 0; i < kSideBySide; ++i) {
      auto sb = md.mgr->Create(opts);
      if (!sb.ok()) Die("create", sb.status());
      if (!Run(**sb)) Die("command", Internal("failed"));
      sbs.push_back(*sb);
    }
    for (auto& sb : sbs) md.pss.push_back(PssKib(sb->vmm_pid()) / 1024.0);
    for (auto& sb : sbs) (void)md.mgr->Destroy(sb->id());
  }
  // Raw primitives, same run.
  std::vector<double> spawn, health;
  for (int i = 0; i < std::max(n, 5); ++i) spawn.push_back(BareQemuSpawnMs());
  {
    auto sb = modes[1].mgr->Create(opts);
    if (!sb.ok()) Die("create", sb.status());
    for (int i = 0; i < 20; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (Status st = (*sb)->agent().Health(std::chrono::seconds(2)); !st.ok()) Die("health", st);
      health.push_back(Ms(t0));
    }
    (void)modes[1].mgr->Destroy((*sb)->id());
  }

  const Mode &st = modes[0], &sh = modes[1];
  auto avg = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / v.size();
  };
  std::printf(
      "\n| template snapshot (TCG, 1 vCPU, %d MiB, n=%d interleaved) | stream (RAM in the migration stream) | "
      "shared file (RAM mapped copy-on-write) | shared / stream |\n|---|---|---|---|\n",
      opts.memory_mib, n);
  std::printf(
      "| snapshot written (stream bytes; migration ms, save ms: stop → manifest, shared: also ends the VMM and "
      "CRCs the RAM file) | %.2f MB; %llu ms, %llu ms | %.2f MB; %llu ms, %llu ms (+ RAM file: %.1f MB of data in "
      "%d MiB) | %.3f of the bytes |\n",
      st.manifest.memory_bytes / 1e6, static_cast<unsigned long long>(st.manifest.migrate_ms),
      static_cast<unsigned long long>(st.manifest.save_ms), sh.manifest.memory_bytes / 1e6,
      static_cast<unsigned long long>(sh.manifest.migrate_ms), static_cast<unsigned long long>(sh.manifest.save_ms),
      sh.manifest.ram_data_bytes / 1e6, opts.memory_mib,
      double(sh.manifest.memory_bytes) / double(std::max<uint64_t>(1, st.manifest.memory_bytes)));
  auto row = [&](const char* what, const std::vector<double>& a, const std::vector<double>& b) {
    std::printf("| %s, p50 / p95 | %.0f / %.0f ms | %.0f / %.0f ms | %.2f |\n", what, Pct(a, .5), Pct(a, .95),
                Pct(b, .5), Pct(b, .95), Pct(b, .5) / std::max(1e-9, Pct(a, .5)));
  };
  row("restore (vmm step: QEMU launch + migration + cont)", st.restore, sh.restore);
  row("create: network + egress + lease steps", st.network, sh.network);
  row("create: agent ready + agent init steps", st.agent, sh.agent);
  row("create → agent /health + /init (pool empty: clone restore)", st.create, sh.create);
  row("create → first command answered", st.tti, sh.tti);
  std::printf(
      "| PSS per clone, %d side by side (avg; min–max) | %.1f MiB (%.1f–%.1f) | %.1f MiB (%.1f–%.1f) | %.2f |\n",
      kSideBySide, avg(st.pss), Pct(st.pss, 0), Pct(st.pss, 1), avg(sh.pss), Pct(sh.pss, 0), Pct(sh.pss, 1),
      avg(sh.pss) / std::max(1e-9, avg(st.pss)));
  std::printf("| raw: bare QEMU spawn → QMP ready, p50 | %.0f ms | | |\n", Pct(spawn, .5));
  std::printf("| raw: agent /health round trip, p50 | %.1f ms | | |\n", Pct(health, .5));
}

}  // namespace

int main(int argc, char** argv) {
  std::string state_dir = "/var/lib/airlock";
  int n = 5;
  bool only_ram = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--only-ram") {
      only_ram = true;
    } else if (i + 1 < argc && a == "--state-dir") {
      state_dir = argv[++i];
    } else if (i + 1 < argc && a == "--n") {
      n = std::max(2, std::atoi(argv[++i]));
    }
  }
  ManagerConfig c;
  c.state_dir = state_dir;
  c.build_image_if_missing = false;
  c.template_snapshots = true;
  CreateOptions ram_opts;  // 1 vCPU, 512 MiB
  if (only_ram) {
    CompareRamLayouts(c, ram_opts, n);
    return 0;
  }
  auto m = Manager::Open(c);
  if (!m.ok()) Die("open", m.status());
  Manager& mgr = **m;
  CreateOptions opts;  // 1 vCPU, 512 MiB
  opts.detach = true;  // as the daemon runs them (fork children start in parallel)
  auto t = std::chrono::steady_clock::now();
  if (Status st = mgr.template_snapshots().Ensure("base", opts.vcpus, opts.memory_mib); !st.ok())
    Die("template snapshot", st);
  double template_ms = Ms(t);

  auto tti = [&](bool snapshot) {
    std::vector<double> out;
    ManagerConfig cc = c;
    cc.template_snapshots = snapshot;
    auto mm = Manager::Open(cc);
    if (!mm.ok()) Die("open", mm.status());
    for (int i = 0; i < n; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto sb = (*mm)->Create(opts);
      if (!sb.ok()) Die("create", sb.status());
      if (!Run(**sb)) Die("first command", Internal("failed"));
      out.push_back(Ms(t0));
      if ((*sb)->timings().from_snapshot != snapshot) Die("create", Internal("took the wrong path"));
      (void)(*mm)->Destroy((*sb)->id());
    }
    return out;
  };
  std::vector<double> cold = tti(false), warm = tti(true);

  // Pause / resume of one sandbox, n times.
  auto sb = mgr.Create(opts);
  if (!sb.ok()) Die("create", sb.status());
  std::vector<double> pause, resume;
  uint64_t paused_disk = 0, memory_bytes = 0;
  for (int i = 0; i < n; ++i) {
    auto p = mgr.Pause((*sb)->id());
    if (!p.ok()) Die("pause", p.status());
    pause.push_back(p->total_ms);
    memory_bytes = p->snapshot.memory_bytes;
    paused_disk = DiskUsed(mgr.snapshot_dirs().paused() + "/" + (*sb)->id());
    auto r = mgr.Resume((*sb)->id());
    if (!r.ok()) Die("resume", r.status());
    if (!Run(**sb)) Die("command after resume", Internal("failed"));
    resume.push_back(r->total_ms);
  }
  // Fork 1 and 5.
  auto fork = [&](int count) {
    auto t0 = std::chrono::steady_clock::now();
    auto kids = mgr.Fork((*sb)->id(), count);
    double ms = Ms(t0);
    if (!kids.ok()) Die("fork", kids.status());
    for (auto& k : *kids) {
      if (!k.ok()) Die("fork child", k.status());
      if (!Run(**k)) Die("command in child", Internal("failed"));
      (void)mgr.Destroy((*k)->id());
    }
    return ms;
  };
  double fork1 = fork(1), fork5 = fork(5);
  (void)mgr.Destroy((*sb)->id());

  double gib = opts.memory_mib / 1024.0;
  std::printf("\n| measure (TCG, 1 vCPU, %d MiB guest, n=%d) | p50 | p95 | ratio |\n|---|---|---|---|\n",
              opts.memory_mib, n);
  std::printf("| create TTI, cold boot | %.0f ms | %.0f ms | 1.00 |\n", Pct(cold, .5), Pct(cold, .95));
  std::printf("| create TTI, from template snapshot | %.0f ms | %.0f ms | %.2f (%.1fx faster) |\n", Pct(warm, .5),
              Pct(warm, .95), Pct(warm, .5) / Pct(cold, .5), Pct(cold, .5) / Pct(warm, .5));
  std::printf("| pause (save + stop VMM + network) | %.0f ms | %.0f ms | %.0f ms per GiB of guest RAM |\n",
              Pct(pause, .5), Pct(pause, .95), Pct(pause, .5) / gib);
  std::printf("| resume (connect → agent ready) | %.0f ms | %.0f ms | %.2f of cold boot |\n", Pct(resume, .5),
              Pct(resume, .95), Pct(resume, .5) / Pct(cold, .5));
  std::printf("| fork, 1 child (checkpoint + restore + agent) | %.0f ms | | |\n", fork1);
  std::printf("| fork, 5 children | %.0f ms | | %.2f of 5x one |\n", fork5, fork5 / (5 * fork1));
  std::printf("| disk per paused sandbox beyond the template | %.1f MiB | | memory stream %.1f MiB of %d MiB RAM |\n",
              paused_disk / 1048576.0, memory_bytes / 1048576.0, opts.memory_mib);
  std::printf("| template snapshot, made once per image | %.0f ms | | %s |\n", template_ms,
              template_ms < 100 ? "already made" : "built in this run");

  // Checkpoint and rollback in place (core/checkpoints.cc), 20 cycles on one
  // sandbox: checkpoint, roll back to it, first command, delete it. Compared
  // with the template-snapshot create TTI measured above in this run.
  {
    auto cs = mgr.Create(opts);
    if (!cs.ok()) Die("create", cs.status());
    const std::string id = (*cs)->id();
    std::vector<double> ckpt, rollback, rollback_tti;
    uint64_t ckpt_memory = 0, ckpt_disk = 0;
    for (int i = 0; i < 20; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto cp = mgr.CreateCheckpoint(id);
      if (!cp.ok()) Die("checkpoint", cp.status());
      ckpt.push_back(Ms(t0));
      ckpt_memory = cp->memory_bytes;
      ckpt_disk = DiskUsed(cp->dir);
      t0 = std::chrono::steady_clock::now();
      auto rb = mgr.Rollback(id, cp->checkpoint_id);
      if (!rb.ok()) Die("rollback", rb.status());
      rollback.push_back(Ms(t0));
      if (!Run(**cs)) Die("command after rollback", Internal("failed"));
      rollback_tti.push_back(Ms(t0));
      if (Status st = mgr.DeleteCheckpoint(id, cp->checkpoint_id); !st.ok()) Die("delete checkpoint", st);
    }
    (void)mgr.Destroy(id);
    const double create = Pct(warm, .5);
    std::printf(
        "\n| checkpoint / rollback in place (n=20, one sandbox) | p50 | p95 | ratio to a template-snapshot create "
        "(%.0f ms p50) |\n"
        "|---|---|---|---|\n",
        create);
    std::printf("| checkpoint (sandbox keeps running) | %.0f ms | %.0f ms | %.2f |\n", Pct(ckpt, .5), Pct(ckpt, .95),
                Pct(ckpt, .5) / create);
    std::printf("| rollback (stop VMM → restore → agent /init) | %.0f ms | %.0f ms | %.2f |\n", Pct(rollback, .5),
                Pct(rollback, .95), Pct(rollback, .5) / create);
    std::printf("| rollback → first command answered | %.0f ms | %.0f ms | %.2f |\n", Pct(rollback_tti, .5),
                Pct(rollback_tti, .95), Pct(rollback_tti, .5) / create);
    std::printf("| disk per checkpoint | %.1f MiB | | memory stream %.1f MiB of %d MiB RAM |\n", ckpt_disk / 1048576.0,
                ckpt_memory / 1048576.0, opts.memory_mib);
  }
  m->reset();
  CompareRamLayouts(c, ram_opts, n);
  return 0;
}
