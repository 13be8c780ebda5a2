// airlock-density-bench: issue 14's table (README "Shared memory, warm pool,
// forks, checkpoints"), one run, each measure beside the goal it is held to
// and the raw primitives measured in the same run:
//   - create from the warm pool (pool hit) and the create → first command
//     time, the yardstick of the ratios below;
//   - fork of a sandbox holding 32 MiB of its own: 1 child vs 5 children
//     (time; and the 5 children's PSS beside their RSS);
//   - checkpoint and rollback in place;
//   - pause / resume of a sandbox that dirtied 10 MiB since its last resume
//     (bytes the pause wrote, times);
//   - host memory per idle sandbox with --idle N (default 100) idle 512 MiB
//     sandboxes side by side: PSS of each VMM (its share of the template's
//     RAM included) plus its share of this process (the manager), and how
//     many such sandboxes this host's memory holds;
//   - raw: bare QEMU spawn → QMP ready, agent /health round trip.
// The SDK's own numbers (TTI with the pool hit and empty, `echo hi`) are
// bench/tti.mjs's. Runs the Manager in-process against real microVMs (root,
// QEMU, an image). Usage: airlock-density-bench [--state-dir DIR] [--n N] [--idle N]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "core/manager.h"

using namespace airlock;
using namespace airlock::bench;

namespace {

void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "airlock-density-bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

std::string RunIn(Sandbox& sb, const std::string& script) {
  ExecRequest r;
  r.cmd = "/bin/bash";
  r.args = {"-c", script};
  std::string out;
  ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view s) { out.append(s); };
  auto res = sb.agent().Exec(r, cb);
  if (!res.ok()) Die("exec " + script, res.status());
  if (res->exit_code != 0) Die("exec " + script, Internal("exit " + std::to_string(res->exit_code)));
  return out;
}

uint64_t MemInfoKib(const std::string& field) {
  std::ifstream f("/proc/meminfo");
  std::string k;
  uint64_t v;
  std::string unit;
  while (f >> k >> v) {
    std::getline(f, unit);
    if (k == field + ":") return v;
  }
  return 0;
}

// Where an idle VMM's anonymous memory is, from /proc/PID/smaps (KiB):
// TCG's translated code (the one anonymous executable mapping, tb-size
// long), the guest pages it wrote (anonymous pages inside the guest RAM
// mapping, the only mapping of memory_mib or more), and the rest (QEMU's heap,
// thread arenas and stacks, its libraries' written pages).
struct AnonSplit {
  double tcg_code = 0, guest_written = 0, rest = 0;
};
AnonSplit SplitAnonymous(pid_t pid, int memory_mib) {
  AnonSplit out;
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps");
  std::string line;
  enum { kOther, kCode, kGuest } kind = kOther;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    // A mapping's header ("lo-hi perms offset dev inode [path]"), not one of its
    // "Field: N kB" lines.
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && std::strlen(perms) == 4) {
      const bool anon_map = line.find('/') == std::string::npos && line.find('[') == std::string::npos;
      if (hi - lo >= (uint64_t(memory_mib) << 20)) kind = kGuest;
      else if (anon_map && perms[2] == 'x') kind = kCode;
      else kind = kOther;
      continue;
    }
    unsigned long kb = 0;
    if (std::sscanf(line.c_str(), "Anonymous: %lu kB", &kb) == 1) {
      (kind == kCode ? out.tcg_code : kind == kGuest ? out.guest_written : out.rest) += kb / 1024.0;
    }
  }
  return out;
}

void WaitForParked(Manager& m, int want) {
  for (auto t0 = std::chrono::steady_clock::now(); m.warm_pool().stats().parked < want;) {
    if (Ms(t0) > 120000) Die("warm pool", DeadlineExceeded("never refilled"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string state_dir = "/var/lib/airlock";
  int n = 10, idle = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--state-dir") state_dir = argv[i + 1];
    if (a == "--n") n = std::max(2, std::atoi(argv[i + 1]));
    if (a == "--idle") idle = std::max(1, std::atoi(argv[i + 1]));
  }
  ManagerConfig c;
  c.state_dir = state_dir;
  c.build_image_if_missing = false;
  c.template_snapshots = true;
  c.template_shared_memory = true;
  c.pool.size = 2;
  auto mm = Manager::Open(c);
  if (!mm.ok()) Die("open", mm.status());
  Manager& m = **mm;
  CreateOptions opts;  // base, 1 vCPU, 512 MiB
  opts.detach = true;  // as the daemon runs them (fork children start in parallel)
  if (Status st = m.template_snapshots().Ensure("base", opts.vcpus, opts.memory_mib); !st.ok()) Die("template", st);
  m.warm_pool().Warm("base", opts.vcpus, opts.memory_mib);
  m.warm_pool().Start();

  // Pool hit: create, and create → first command (the yardstick).
  std::vector<double> hit, hit_tti;
  for (int i = 0; i < n; ++i) {
    WaitForParked(m, 1);
    const auto hits = m.warm_pool().stats().hits;
    auto t0 = std::chrono::steady_clock::now();
    auto sb = m.Create(opts);
    if (!sb.ok()) Die("create", sb.status());
    hit.push_back(Ms(t0));
    RunIn(**sb, "echo hi");
    hit_tti.push_back(Ms(t0));
    if (m.warm_pool().stats().hits == hits) Die("create", Internal("missed the pool"));
    (void)m.Destroy((*sb)->id());
  }
  const double create = Pct(hit, .5), tti = Pct(hit_tti, .5);

  // Fork: a parent with 32 MiB of its own, 1 child then 5.
  auto parent = m.Create(opts);
  if (!parent.ok()) Die("create", parent.status());
  RunIn(**parent, "head -c 32M /dev/urandom > /dev/shm/blob");
  std::vector<double> fork1, fork5;
  double kids_pss = 0, kids_rss = 0;
  for (int i = 0; i < std::max(3, n / 3); ++i) {
    for (int count : {1, 5}) {
      auto t0 = std::chrono::steady_clock::now();
      auto kids = m.Fork((*parent)->id(), count);
      if (!kids.ok()) Die("fork", kids.status());
      (count == 1 ? fork1 : fork5).push_back(Ms(t0));
      for (auto& k : *kids) {
        if (!k.ok()) Die("fork child", k.status());
        RunIn(**k, "sha256sum /dev/shm/blob > /dev/null");
      }
      if (count == 5 && i == 0) {
        for (auto& k : *kids) {
          auto kb = ReadSmapsRollupKib((*k)->vmm_pid());
          kids_pss += kb["Pss"] / 1024.0;
          kids_rss += kb["Rss"] / 1024.0;
        }
      }
      for (auto& k : *kids) (void)m.Destroy((*k)->id());
    }
  }
  (void)m.Destroy((*parent)->id());

  // Checkpoint and rollback in place.
  std::vector<double> ckpt, rollback;
  uint64_t ckpt_bytes = 0;
  {
    auto sb = m.Create(opts);
    if (!sb.ok()) Die("create", sb.status());
    const std::string id = (*sb)->id();
    for (int i = 0; i < n; ++i) {
      RunIn(**sb, "echo round " + std::to_string(i) + " > /tmp/round");
      auto t0 = std::chrono::steady_clock::now();
      auto cp = m.CreateCheckpoint(id);
      if (!cp.ok()) Die("checkpoint", cp.status());
      ckpt.push_back(Ms(t0));
      ckpt_bytes = cp->memory_bytes + cp->disk_bytes;
      RunIn(**sb, "rm /tmp/round");
      t0 = std::chrono::steady_clock::now();
      auto rb = m.Rollback(id, cp->checkpoint_id);
      if (!rb.ok()) Die("rollback", rb.status());
      rollback.push_back(Ms(t0));
      if (RunIn(**sb, "cat /tmp/round") != "round " + std::to_string(i) + "\n")
        Die("rollback", Internal("the file is not back"));
      if (Status st = m.DeleteCheckpoint(id, cp->checkpoint_id); !st.ok()) Die("delete checkpoint", st);
    }
    (void)m.Destroy(id);
  }

  // Pause / resume after 10 MiB dirtied since the last resume.
  std::vector<double> pause, resume, written;
  {
    auto sb = m.Create(opts);
    if (!sb.ok()) Die("create", sb.status());
    const std::string id = (*sb)->id();
    for (int i = 0; i < n; ++i) {
      RunIn(**sb, "head -c 10M /dev/urandom > /dev/shm/dirty");
      auto t0 = std::chrono::steady_clock::now();
      auto p = m.Pause(id);
      if (!p.ok()) Die("pause", p.status());
      pause.push_back(Ms(t0));
      written.push_back((p->snapshot.memory_bytes + p->snapshot.disk_bytes) / 1048576.0);
      t0 = std::chrono::steady_clock::now();
      auto r = m.Resume(id);
      if (!r.ok()) Die("resume", r.status());
      resume.push_back(Ms(t0));
    }
    (void)m.Destroy(id);
  }

  // Raw primitives.
  std::vector<double> spawn, health;
  for (int i = 0; i < std::max(n, 5); ++i) spawn.push_back(BareQemuSpawnMs());
  {
    auto sb = m.Create(opts);
    if (!sb.ok()) Die("create", sb.status());
    for (int i = 0; i < 20; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (Status st = (*sb)->agent().Health(std::chrono::seconds(2)); !st.ok()) Die("health", st);
      health.push_back(Ms(t0));
    }
    (void)m.Destroy((*sb)->id());
  }

  // Idle sandboxes side by side (the pool stops refilling: only these count).
  m.warm_pool().Stop();
  std::vector<std::shared_ptr<Sandbox>> idles;
  auto t_idle = std::chrono::steady_clock::now();
  for (int i = 0; i < idle; ++i) {
    auto sb = m.Create(opts);
    if (!sb.ok()) {
      std::fprintf(stderr, "idle sandbox %d: %s\n", i, sb.status().ToString().c_str());
      break;
    }
    RunIn(**sb, "true");
    idles.push_back(*sb);
  }
  const double idle_create_s = Ms(t_idle) / 1000;
  double vmm_pss = 0, anon = 0, shmem = 0, file = 0;
  AnonSplit split;
  for (auto& sb : idles) {
    AnonSplit one = SplitAnonymous(sb->vmm_pid(), opts.memory_mib);
    split.tcg_code += one.tcg_code;
    split.guest_written += one.guest_written;
    split.rest += one.rest;
    auto kb = ReadSmapsRollupKib(sb->vmm_pid());
    vmm_pss += kb["Pss"] / 1024.0;
    anon += kb["Pss_Anon"] / 1024.0;
    shmem += kb["Pss_Shmem"] / 1024.0;
    file += kb["Pss_File"] / 1024.0;
  }
  const double self_pss = PssKib(::getpid()) / 1024.0;
  const double per = idles.empty() ? 0 : (vmm_pss + self_pss) / idles.size();
  const double host_mib = MemInfoKib("MemTotal") / 1024.0;
  const int made = static_cast<int>(idles.size());
  for (auto& sb : idles) (void)m.Destroy(sb->id());

  std::printf("\n| measure (TCG, 1 vCPU, 512 MiB guests; n=%d) | p50 | p95 | ratio | goal |\n|---|---|---|---|---|\n",
              n);
  std::printf("| create, pool hit (Manager::Create) | %.0f ms | %.0f ms | 1.00 | |\n", create, Pct(hit, .95));
  std::printf("| create → first command, pool hit | %.0f ms | %.0f ms | %.2f | |\n", tti, Pct(hit_tti, .95),
              tti / create);
  std::printf("| fork, 1 child (all answering) | %.0f ms | %.0f ms | 1.00 | |\n", Pct(fork1, .5), Pct(fork1, .95));
  std::printf("| fork, 5 children (all answering) | %.0f ms | %.0f ms | %.2f of 1 child | ≤ 1.5 |\n", Pct(fork5, .5),
              Pct(fork5, .95), Pct(fork5, .5) / Pct(fork1, .5));
  std::printf("| 5 fork children's memory: PSS / RSS | %.0f / %.0f MiB | | %.2f | (sharing) |\n", kids_pss, kids_rss,
              kids_pss / std::max(1.0, kids_rss));
  std::printf("| checkpoint (sandbox keeps running) | %.0f ms | %.0f ms | %.2f of a pool-hit create | ≤ 2 |\n",
              Pct(ckpt, .5), Pct(ckpt, .95), Pct(ckpt, .5) / create);
  std::printf("| rollback (same sandbox, back to it) | %.0f ms | %.0f ms | %.2f of a pool-hit create | ≤ 2 |\n",
              Pct(rollback, .5), Pct(rollback, .95), Pct(rollback, .5) / create);
  std::printf("| checkpoint on disk | %.1f MiB | | | |\n", ckpt_bytes / 1048576.0);
  std::printf("| pause after 10 MiB dirtied: bytes written | %.1f MiB | %.1f MiB | %.2f of the dirtied | ≤ 2 |\n",
              Pct(written, .5), Pct(written, .95), Pct(written, .5) / 10);
  std::printf("| pause after 10 MiB dirtied | %.0f ms | %.0f ms | | |\n", Pct(pause, .5), Pct(pause, .95));
  std::printf("| resume of it | %.0f ms | %.0f ms | %.2f of a pool-hit create | ≤ 2 |\n", Pct(resume, .5),
              Pct(resume, .95), Pct(resume, .5) / create);
  std::printf(
      "| host memory per idle sandbox, %d side by side (VMM PSS + share of the manager) | %.1f MiB | | %d fit in "
      "this host's %.0f MiB | ≤ 24 MiB (1,000 in 24 GiB) |\n",
      made, per, per > 0 ? static_cast<int>(host_mib / per) : 0, host_mib);
  if (made > 0)
    std::printf(
        "| of which per VMM: anonymous (its own guest pages, TCG code, heap) / template RAM share / files | %.1f / "
        "%.1f / %.1f MiB | | made in %.0f s | |\n",
        anon / made, shmem / made, file / made, idle_create_s);
  if (made > 0)
    std::printf(
        "| of which anonymous: TCG's translated code / guest pages written / QEMU's heap, arenas, stacks, library "
        "data | %.1f / %.1f / %.1f MiB | | | (no translated code under KVM) |\n",
        split.tcg_code / made, split.guest_written / made, split.rest / made);
  std::printf("| raw: bare QEMU spawn → QMP ready | %.0f ms | %.0f ms | | |\n", Pct(spawn, .5), Pct(spawn, .95));
  std::printf("| raw: agent /health round trip | %.1f ms | %.1f ms | | |\n", Pct(health, .5), Pct(health, .95));
  return 0;
}
