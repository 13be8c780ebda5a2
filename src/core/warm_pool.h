// The warm pool: per machine shape, up to WarmPoolConfig::size sandboxes
// restored from the template's snapshot ahead of demand and parked at
// "agent ready" (core/bring_up.h, BringUpPlan::park), so a create of that
// shape costs only egress, agent init and handover (docs/performance.md).
//
// It owns its lock, its filler thread and the parked sandboxes; what a
// parked sandbox is made of (the bring-up) stays with its owner, the Manager,
// behind WarmPoolHost. A parked sandbox is in no list, registry or API;
// parked sandboxes are the daemon's run dirs, so a restarted daemon finds
// them unregistered and removes them (Manager's orphan clean-up): none is
// leaked or handed out twice.
//
// Thread-safe. Take is called by creates on any thread; the filler parks
// one sandbox at a time, never while the host is short of memory (then it
// gives one back each round), and gives back parked sandboxes of a template
// snapshot that is no longer current. A shape includes its runtime, and
// parked sandboxes are kept by template snapshot directory, which names the
// runtime: "base" and "base-gvisor" never share a parked sandbox.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "image/image.h"

namespace airlock {

class Sandbox;

// What a parked sandbox is for: a template, a machine shape and a runtime.
struct PoolShape {
  std::string template_name;
  int vcpus = 1;
  int memory_mib = 512;
  std::string runtime;  // never empty (WarmPool::Warm fills in the default)
  bool operator<(const PoolShape& o) const {
    return std::tie(template_name, vcpus, memory_mib, runtime) <
           std::tie(o.template_name, o.vcpus, o.memory_mib, o.runtime);
  }
};

// The template snapshot a shape is parked from, and its image.
struct PoolSource {
  std::string snapshot_dir;
  image::GuestImage image;
};

// What the pool asks of the manager that owns it. Called on the filler
// thread (and Discard from Take and Stop), never with the pool's lock held.
class WarmPoolHost {
 public:
  virtual ~WarmPoolHost() = default;
  // The current, usable template snapshot of `shape`; an error when there
  // is none (the shape is then not filled).
  virtual StatusOr<PoolSource> PoolSourceFor(const PoolShape& shape) const = 0;
  // A sandbox of `shape` brought up from `source` to agent-ready, warmed.
  virtual StatusOr<std::shared_ptr<Sandbox>> Park(const PoolShape& shape, const PoolSource& source) = 0;
  // Tears a parked sandbox down for good (it is no one's to adopt).
  virtual void Discard(Sandbox& sb) = 0;
};

struct WarmPoolConfig {
  int size = 0;  // parked sandboxes per shape; 0: no pool
  // The runtime of a shape that names none.
  std::string default_runtime = "qemu";
  // The pool refills only while the host has this much MemAvailable, and
  // gives back one parked sandbox a round below it.
  int64_t min_available_mib = 2048;
  // When set, the pool asks this instead of reading MemAvailable itself
  // (the daemon's memory-pressure policy, control/memory_pressure.h: one
  // policy for refusing creates, shrinking the pool and pausing).
  std::function<bool()> memory_short;
};

class WarmPool {
 public:
  // `host` must outlive the pool.
  WarmPool(WarmPoolConfig config, WarmPoolHost& host);
  ~WarmPool();  // Stop()
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  bool enabled() const { return config_.size > 0; }
  // Keeps `size` parked sandboxes of (template, shape, runtime; "" = the
  // default) from now on.
  void Warm(const std::string& template_name, int vcpus, int memory_mib, const std::string& runtime = "");
  // The filler thread; Stop (also the destructor) joins it and discards
  // every parked sandbox.
  void Start();
  void Stop();
  // A live parked sandbox restored from `snapshot_dir`, or nullptr (dead
  // ones found on the way are discarded). The filler is woken to refill.
  std::shared_ptr<Sandbox> Take(const std::string& snapshot_dir);
  // A create of a pooled shape: it took a parked sandbox (hit) or found none
  // (miss); the counters of the daemon's metrics.
  void Count(bool hit) { (hit ? hits_ : misses_).fetch_add(1); }

  struct Stats {
    int parked = 0;
    uint64_t hits = 0, misses = 0;  // creates that took a parked sandbox / found none
  };
  Stats stats() const;
  // The VMM pids of the parked sandboxes (the daemon's memory sampler).
  std::vector<pid_t> VmmPids() const;

 private:
  void Loop();
  void Round();
  bool ShortOfMemory(int64_t* available_mib) const;

  const WarmPoolConfig config_;
  WarmPoolHost& host_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                                                   // guarded by mu_
  std::set<PoolShape> shapes_;                                          // guarded by mu_
  std::map<std::string, std::deque<std::shared_ptr<Sandbox>>> parked_;  // by snapshot dir; guarded by mu_
  std::thread thread_;
  std::atomic<uint64_t> hits_{0}, misses_{0};
};

}  // namespace airlock
