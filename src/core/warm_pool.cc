// The warm pool (core/warm_pool.h). A parked sandbox is warmed by one
// login-shell command (Manager::Park, bring_up.cc), so a create's first
// command runs on a warm guest. "Short of memory" is WarmPoolConfig::
// memory_short when set (the daemon's pressure policy), else MemAvailable <
// min_available_mib.
#include "core/warm_pool.h"

#include <fstream>

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

WarmPool::WarmPool(WarmPoolConfig config, WarmPoolHost& host) : config_(std::move(config)), host_(host) {}

WarmPool::~WarmPool() { Stop(); }

void WarmPool::Warm(const std::string& template_name, int vcpus, int memory_mib, const std::string& runtime) {
  if (!enabled()) return;
  bool added = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    added = shapes_.insert({template_name, vcpus, memory_mib, runtime.empty() ? config_.default_runtime : runtime}).second;
  }
  if (added) cv_.notify_all();
}

void WarmPool::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (!enabled() || thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void WarmPool::Stop() {
  std::thread t;
  std::map<std::string, std::deque<std::shared_ptr<Sandbox>>> parked;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    parked.swap(parked_);
  }
  for (auto& [dir, q] : parked) {
    for (auto& sb : q) host_.Discard(*sb);
  }
}

std::vector<pid_t> WarmPool::VmmPids() const {
  std::vector<pid_t> out;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [dir, q] : parked_) {
    for (const auto& sb : q) {
      if (sb->vmm_alive() && sb->vmm_pid() > 0) out.push_back(sb->vmm_pid());
    }
  }
  return out;
}

WarmPool::Stats WarmPool::stats() const {
  Stats s;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [dir, q] : parked_) s.parked += static_cast<int>(q.size());
  }
  s.hits = hits_.load();
  s.misses = misses_.load();
  return s;
}

std::shared_ptr<Sandbox> WarmPool::Take(const std::string& snapshot_dir) {
  std::shared_ptr<Sandbox> out;
  std::vector<std::shared_ptr<Sandbox>> dead;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = parked_.find(snapshot_dir);
    while (it != parked_.end() && !it->second.empty() && !out) {
      std::shared_ptr<Sandbox> sb = std::move(it->second.front());
      it->second.pop_front();
      if (sb->vmm_alive())
        out = std::move(sb);
      else
        dead.push_back(std::move(sb));
    }
  }
  cv_.notify_all();  // refill
  for (auto& sb : dead) host_.Discard(*sb);
  return out;
}

void WarmPool::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    l.unlock();
    Round();
    l.lock();
    // Woken by a take, a new shape or Stop; else a look every second
    // (a parked VMM that died, memory that came back).
    cv_.wait_for(l, std::chrono::seconds(1), [this] { return stop_; });
  }
}

bool WarmPool::ShortOfMemory(int64_t* available_mib) const {
  *available_mib = MemAvailableMib();
  if (config_.memory_short) return config_.memory_short();
  return *available_mib >= 0 && *available_mib < config_.min_available_mib;
}

void WarmPool::Round() {
  std::set<PoolShape> shapes;
  {
    std::lock_guard<std::mutex> l(mu_);
    shapes = shapes_;
  }
  // The current template snapshot of each shape; parked sandboxes of any
  // other are given back.
  std::map<std::string, std::pair<PoolShape, PoolSource>> wanted;
  for (const auto& shape : shapes) {
    auto source = host_.PoolSourceFor(shape);
    if (source.ok()) wanted[source->snapshot_dir] = {shape, *std::move(source)};
  }
  std::vector<std::shared_ptr<Sandbox>> drop;
  int64_t available = -1;
  const bool short_of_memory = ShortOfMemory(&available);
  std::string to_fill;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto& q = it->second;
      if (!wanted.count(it->first)) {
        for (auto& sb : q) drop.push_back(std::move(sb));
        it = parked_.erase(it);
        continue;
      }
      for (auto s = q.begin(); s != q.end();) {
        if (!(*s)->vmm_alive()) {
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
        if (static_cast<int>(parked_[dir].size()) < config_.size) {
          to_fill = dir;
          break;
        }
      }
    }
  }
  for (auto& sb : drop) {
    LOG_INFO("warm pool: sandbox={} given back", sb->id());
    host_.Discard(*sb);
  }
  if (short_of_memory && !drop.empty())
    LOG_WARN("warm pool: host short of memory (MemAvailable {} MiB): shrinking", available);
  if (to_fill.empty()) return;
  const auto& [shape, source] = wanted[to_fill];
  auto sb = host_.Park(shape, source);
  if (!sb.ok()) {
    LOG_WARN("warm pool: {}", sb.status().message());
    return;
  }
  LOG_INFO("warm pool: sandbox={} parked ({} {}c {}m on {})", (*sb)->id(), shape.template_name, shape.vcpus,
           shape.memory_mib, shape.runtime);
  std::unique_lock<std::mutex> l(mu_);
  if (stop_) {
    l.unlock();
    host_.Discard(**sb);
    return;
  }
  parked_[to_fill].push_back(std::move(sb).value());
}

}  // namespace airlock
