// Placements per second that two fronts sustain against one PostgreSQL
// (issue 19; docs/multinode.md "Measured"). The creates themselves are
// stubbed out: each cycle is exactly the registry work of one create through
// a front (ClusterRegistry::Place: the candidate SELECT and the conditional
// reservation UPDATE; the node's AddSandbox) plus the end of that sandbox
// (RemoveSandbox), so the registry is what is measured. Beside it, in the
// same run: the raw primitive, a `SELECT 1` round trip on the same
// connections.
//
// usage: airlock-placement-bench --database URL [--seconds 10] [--fronts 2] [--nodes 10]
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "cluster/cluster_registry.h"

using namespace airlock;
using airlock::bench::Ms;
using airlock::bench::Pct;

namespace {

struct Result {
  uint64_t ops = 0;
  std::vector<double> ms;
  uint64_t refused = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string url;
  int seconds = 10, fronts = 2, nodes = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--database") url = argv[i + 1];
    else if (a == "--seconds") seconds = std::atoi(argv[i + 1]);
    else if (a == "--fronts") fronts = std::atoi(argv[i + 1]);
    else if (a == "--nodes") nodes = std::atoi(argv[i + 1]);
  }
  if (url.empty() || seconds < 1 || fronts < 1 || nodes < 1) {
    std::fprintf(stderr, "usage: airlock-placement-bench --database URL [--seconds N] [--fronts N] [--nodes N]\n");
    return 2;
  }
  auto admin = cluster::ClusterRegistry::Open(url, 1);
  if (!admin.ok()) {
    std::fprintf(stderr, "placement-bench: %s\n", admin.status().message().c_str());
    return 1;
  }
  // Fake nodes: registered with room for everything, heartbeats kept fresh
  // by this process; no daemon behind them (nothing is created).
  for (int n = 0; n < nodes; ++n) {
    cluster::NodeInfo info;
    info.name = "bench-" + std::to_string(n);
    info.address = "192.0.2.1:" + std::to_string(3000 + n);  // never connected to
    info.boot_id = RandomHex(8);
    info.capacity = 100000;
    info.templates = {"base"};
    if (Status st = (*admin)->RegisterNode(info, {}); !st.ok()) {
      std::fprintf(stderr, "placement-bench: register: %s\n", st.message().c_str());
      return 1;
    }
  }
  auto run = [&](bool placement) {
    std::vector<Result> results(static_cast<size_t>(fronts));
    std::vector<std::thread> threads;
    std::atomic<bool> failed{false};
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    for (int f = 0; f < fronts; ++f) {
      threads.emplace_back([&, f] {
        auto reg = cluster::ClusterRegistry::Open(url, 1);  // a front's own connection
        if (!reg.ok()) return (void)(failed = true);
        Result& r = results[static_cast<size_t>(f)];
        uint64_t seq = 0;
        while (std::chrono::steady_clock::now() < end) {
          auto t0 = std::chrono::steady_clock::now();
          if (placement) {
            auto p = (*reg)->Place("base", 3, std::chrono::seconds(3600));
            if (!p.ok()) {
              ++r.refused;
              continue;
            }
            r.ms.push_back(Ms(t0));
            const std::string id = "f" + std::to_string(f) + "-" + std::to_string(seq++);
            if (!(*reg)->AddSandbox(id, p->node, true).ok() || !(*reg)->RemoveSandbox(id, p->node).ok()) {
              failed = true;
              return;
            }
          } else {
            if (!(*reg)->pool().Exec("SELECT 1").ok()) return (void)(failed = true);
            r.ms.push_back(Ms(t0));
          }
          ++r.ops;
        }
      });
    }
    for (auto& t : threads) t.join();
    Result all;
    for (auto& r : results) {
      all.ops += r.ops;
      all.refused += r.refused;
      all.ms.insert(all.ms.end(), r.ms.begin(), r.ms.end());
    }
    if (failed) std::fprintf(stderr, "placement-bench: a registry call failed\n");
    return all;
  };
  Result raw = run(false);
  Result placed = run(true);
  std::printf("\n%d fronts, %d nodes, one PostgreSQL, %d s each\n\n", fronts, nodes, seconds);
  std::printf("| what | per second | p50 ms | p99 ms |\n|---|---|---|---|\n");
  std::printf("| create's registry work through a front (Place + node's AddSandbox + RemoveSandbox) | %.0f | %.2f | %.2f |\n",
              placed.ops / double(seconds), Pct(placed.ms, 0.5), Pct(placed.ms, 0.99));
  std::printf("| raw primitive: `SELECT 1` round trip, same connections | %.0f | %.3f | %.3f |\n",
              raw.ops / double(seconds), Pct(raw.ms, 0.5), Pct(raw.ms, 0.99));
  std::printf("\n(p50/p99 of the placement row: Place alone; refused placements: %llu)\n",
              static_cast<unsigned long long>(placed.refused));
  // The fake nodes go again.
  (void)(*admin)->pool().Exec("DELETE FROM nodes WHERE name LIKE 'bench-%'");
  return 0;
}
