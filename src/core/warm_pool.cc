// The warm pool (Manager::WarmPool, manager.h): per machine shape, up to
// ManagerConfig::pool_size sandboxes restored from the template's snapshot,
// parked at "agent ready" (core/bring_up.h, BringUpPlan::park) and warmed by
// one login-shell command, so a create costs only egress, agent init and
// handover, and its first command runs on a warm guest. One filler thread
// parks one sandbox at a time, never while the host is short of memory
// (then it gives one back each round), and drops parked sandboxes of a
// template snapshot that is no longer current. "Short of memory" is
// ManagerConfig::memory_short when set (the daemon's pressure policy), else
// MemAvailable < pool_min_available_mib. A shape includes its runtime, and
// parked sandboxes are kept by template snapshot directory, which names the
// runtime: "base" and "base-gvisor" never share a parked sandbox.
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "core/manager.h"

namespace airlock {

namespace {

// MemAvailable from /proc/meminfo in MiB; -1 when unreadable.
int64_t MemAvailableMib() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kib / 1024;
  }
  return -1;
}

}  // namespace

void Manager::WarmPool(const std::string& template_name, int vcpus, int memory_mib, const std::string& runtime) {
  if (config_.pool_size <= 0) return;
  bool added = false;
  {
    std::lock_guard<std::mutex> l(pool_mu_);
    added = pool_shapes_.insert({template_name, vcpus, memory_mib, runtime.empty() ? config_.runtime : runtime}).second;
  }
  if (added) pool_cv_.notify_all();
}

void Manager::StartPool() {
  std::lock_guard<std::mutex> l(pool_mu_);
  if (config_.pool_size <= 0 || pool_thread_.joinable()) return;
  pool_stop_ = false;
  pool_thread_ = std::thread([this] { PoolLoop(); });
}

void Manager::StopPool() {
  std::thread t;
  std::map<std::string, std::deque<std::shared_ptr<Sandbox>>> parked;
  {
    std::lock_guard<std::mutex> l(pool_mu_);
    pool_stop_ = true;
    t = std::move(pool_thread_);
  }
  pool_cv_.notify_all();
  if (t.joinable()) t.join();
  {
    std::lock_guard<std::mutex> l(pool_mu_);
    parked.swap(parked_);
  }
  for (auto& [dir, q] : parked) {
    for (auto& sb : q) {
      if (Status st = sb->TearDown(); !st.ok()) LOG_WARN("warm pool: sandbox={} teardown: {}", sb->id(), st.message());
      sb->released_ = true;  // torn down already
    }
  }
}

std::vector<pid_t> Manager::ParkedVmmPids() const {
  std::vector<pid_t> out;
  std::lock_guard<std::mutex> l(pool_mu_);
  for (const auto& [dir, q] : parked_) {
    for (const auto& sb : q) {
      if (sb->vm_ && sb->vm_->alive() && sb->vm_->pid() > 0) out.push_back(sb->vm_->pid());
    }
  }
  return out;
}

Manager::PoolStats Manager::pool_stats() const {
  PoolStats s;
  {
    std::lock_guard<std::mutex> l(pool_mu_);
    for (const auto& [dir, q] : parked_) s.parked += static_cast<int>(q.size());
  }
  s.hits = pool_hits_.load();
  s.misses = pool_misses_.load();
  return s;
}

std::shared_ptr<Sandbox> Manager::TakeParked(const std::string& snapshot_dir) {
  std::shared_ptr<Sandbox> out;
  std::vector<std::shared_ptr<Sandbox>> dead;
  {
    std::lock_guard<std::mutex> l(pool_mu_);
    auto it = parked_.find(snapshot_dir);
    while (it != parked_.end() && !it->second.empty() && !out) {
      std::shared_ptr<Sandbox> sb = std::move(it->second.front());
      it->second.pop_front();
      if (sb->vm_ && sb->vm_->alive())
        out = std::move(sb);
      else
        dead.push_back(std::move(sb));
    }
  }
  pool_cv_.notify_all();  // refill
  for (auto& sb : dead) (void)sb->TearDown();
  return out;
}

StatusOr<std::shared_ptr<Sandbox>> Manager::Park(const PoolShape& shape, const image::GuestImage& img,
                                                 const std::string& snapshot_dir) {
  BringUpPlan plan;
  plan.id = NewSandboxId();
  plan.template_name = shape.template_name;
  plan.runtime = shape.runtime;
  plan.vcpus = shape.vcpus;
  plan.memory_mib = shape.memory_mib;
  plan.detach = true;
  plan.owner = config_.owner;
  plan.source = MachineSource::kTemplateSnapshot;
  plan.image = img;
  plan.snapshot_dir = snapshot_dir;
  plan.park = true;
  plan.ready_timeout = std::chrono::seconds(60);
  plan.what = "warm pool " + shape.template_name + " (" + shape.runtime + ")";
  std::shared_ptr<Sandbox> sb = SandboxFor(plan);
  CreateTimings timings;
  RETURN_IF_ERROR(BringUp(*sb, plan, &timings));  // a failed step undid the ones before it
  if (!timings.from_snapshot) {
    // The restore failed and it booted instead: not what a pool is for.
    (void)sb->TearDown();
    sb->released_ = true;
    return FailedPrecondition("warm pool: the template snapshot " + snapshot_dir + " did not restore");
  }
  // Past its first steps: the guest runs what a create's first command runs
  // (a login shell as the default user, as the SDK's commands.run does), so
  // its kernel, the agent's exec path and, under TCG, QEMU's translation of
  // that code are warm when the user's first command arrives. It leaves no
  // file or process (the e2e pool test looks for both).
  ExecRequest warm;
  warm.cmd = "/bin/bash";
  warm.args = {"-l", "-c", "true"};
  warm.timeout = std::chrono::seconds(30);
  if (auto r = sb->agent_->Exec(warm, {}); !r.ok() || r->exit_code != 0)
    LOG_WARN("warm pool: sandbox={} warm-up command: {}", sb->id(), r.ok() ? r->status : r.status().message());
  sb->timings_ = timings;
  return sb;
}

void Manager::PoolLoop() {
  std::unique_lock<std::mutex> l(pool_mu_);
  while (!pool_stop_) {
    l.unlock();
    PoolRound();
    l.lock();
    // Woken by a take, a new shape or StopPool; else a look every second
    // (a parked VMM that died, memory that came back).
    pool_cv_.wait_for(l, std::chrono::seconds(1), [this] { return pool_stop_; });
  }
}

void Manager::PoolRound() {
  std::set<PoolShape> shapes;
  {
    std::lock_guard<std::mutex> l(pool_mu_);
    shapes = pool_shapes_;
  }
  // The current template snapshot of each shape; parked sandboxes of any
  // other are given back.
  std::map<std::string, std::pair<PoolShape, image::GuestImage>> wanted;
  for (const auto& shape : shapes) {
    auto img = image::FindImage(config_.state_dir, shape.template_name);
    if (!img.ok()) continue;
    auto dir = TemplateSnapshotDir(*img, shape.vcpus, shape.memory_mib, shape.runtime);
    if (!dir.ok() || !TemplateSnapshotUsable(*dir)) continue;
    wanted[*dir] = {shape, *img};
  }
  std::vector<std::shared_ptr<Sandbox>> drop;
  const int64_t available = MemAvailableMib();
  const bool short_of_memory =
      config_.memory_short ? config_.memory_short() : available >= 0 && available < config_.pool_min_available_mib;
  std::string to_fill;
  {
    std::lock_guard<std::mutex> l(pool_mu_);
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto& q = it->second;
      if (!wanted.count(it->first)) {
        for (auto& sb : q) drop.push_back(std::move(sb));
        it = parked_.erase(it);
        continue;
      }
      for (auto s = q.begin(); s != q.end();) {
        if (!(*s)->vm_ || !(*s)->vm_->alive()) {
          drop.push_back(std::move(*s));
          s = q.erase(s);
        } else {
          ++s;
        }
      }
      ++it;
    }
    if (short_of_memory) {
      // Memory pressure: give one back a round, refill nothing.
      for (auto& [dir, q] : parked_) {
        if (!q.empty()) {
          drop.push_back(std::move(q.back()));
          q.pop_back();
          break;
        }
      }
    } else {
      for (const auto& [dir, _] : wanted) {
        if (static_cast<int>(parked_[dir].size()) < config_.pool_size) {
          to_fill = dir;
          break;
        }
      }
    }
  }
  for (auto& sb : drop) {
    LOG_INFO("warm pool: sandbox={} given back", sb->id());
    (void)sb->TearDown();
    sb->released_ = true;
  }
  if (short_of_memory && !drop.empty())
    LOG_WARN("warm pool: host short of memory (MemAvailable {} MiB): shrinking", available);
  if (to_fill.empty()) return;
  const auto& [shape, img] = wanted[to_fill];
  auto sb = Park(shape, img, to_fill);
  if (!sb.ok()) {
    LOG_WARN("warm pool: {}", sb.status().message());
    return;
  }
  LOG_INFO("warm pool: sandbox={} parked ({} {}c {}m on {})", (*sb)->id(), shape.template_name, shape.vcpus,
           shape.memory_mib, shape.runtime);
  std::lock_guard<std::mutex> l(pool_mu_);
  if (pool_stop_) {
    (void)(*sb)->TearDown();
    (*sb)->released_ = true;
    return;
  }
  parked_[to_fill].push_back(std::move(sb).value());
}

}  // namespace airlock
