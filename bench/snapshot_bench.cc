// airlock-snapshot-bench: the snapshot numbers of docs/snapshots.md and the
// README, in one run, printed as a table with ratios:
//   - create TTI (create → first command answered): cold boot vs template snapshot, p50/p95
//   - pause time (total, and per GiB of guest memory), resume time
//   - fork time for 1 and for 5 children
//   - disk used per paused sandbox beyond the template (blocks on disk)
//   - checkpoint and rollback in place: 20 cycles, beside the create above
// Runs the Manager in-process against real microVMs (root, QEMU, an image).
// Usage: airlock-snapshot-bench [--state-dir DIR] [--n N]
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/manager.h"

using namespace airlock;
namespace fs = std::filesystem;

namespace {

double Ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

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

}  // namespace

int main(int argc, char** argv) {
  std::string state_dir = "/var/lib/airlock";
  int n = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--state-dir")
      state_dir = argv[i + 1];
    else if (a == "--n")
      n = std::max(2, std::atoi(argv[i + 1]));
  }
  ManagerConfig c;
  c.state_dir = state_dir;
  c.build_image_if_missing = false;
  c.template_snapshots = true;
  auto m = Manager::Open(c);
  if (!m.ok()) Die("open", m.status());
  Manager& mgr = **m;
  CreateOptions opts;  // 1 vCPU, 512 MiB
  opts.detach = true;  // as the daemon runs them (fork children start in parallel)
  auto t = std::chrono::steady_clock::now();
  if (Status st = mgr.EnsureTemplateSnapshot("base", opts.vcpus, opts.memory_mib); !st.ok())
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
    paused_disk = DiskUsed(mgr.paused_dir() + "/" + (*sb)->id());
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
  return 0;
}
