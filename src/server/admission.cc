#include "server/admission.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace airlock::server {

int64_t HostMemoryMib() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib / 1024;
  }
  return 0;
}

Admission::Admission(AdmissionConfig config) : config_(std::move(config)) {
  host_memory_mib_ = config_.host_memory_mib > 0 ? config_.host_memory_mib : HostMemoryMib();
}

void Admission::Refill(Bucket& b, double rate, double burst, Clock::time_point now) const {
  if (!b.init) {
    b.tokens = std::max(1.0, burst);
    b.last = now;
    b.init = true;
    return;
  }
  double dt = std::chrono::duration<double>(now - b.last).count();
  if (dt > 0) {
    b.tokens = std::min(std::max(1.0, burst), b.tokens + dt * rate);
    b.last = now;
  }
}

std::string Admission::MemoryProblem(int memory_mib) const {
  if (config_.memory_overcommit_ratio <= 0 || host_memory_mib_ <= 0) return "";
  double limit = config_.memory_overcommit_ratio * static_cast<double>(host_memory_mib_);
  if (static_cast<double>(committed_mib_ + memory_mib) <= limit) return "";
  std::ostringstream m;
  m << "refusing to overcommit host memory: " << committed_mib_ << " MiB committed to sandboxes + " << memory_mib
    << " MiB requested > " << config_.memory_overcommit_ratio << " x " << host_memory_mib_
    << " MiB of host memory (--memory-overcommit-ratio)";
  return m.str();
}

int Admission::RetryAfter(size_t waiting) const {
  // When a slot is likely: the creates ahead, through the boots allowed in
  // parallel, at the recent average create time; never sooner than the rate.
  double slots = config_.max_creates_in_flight > 0 ? config_.max_creates_in_flight : 4;
  double s = static_cast<double>(waiting + 1) * avg_create_s_ / slots;
  if (config_.creates_per_second_per_key > 0) s = std::max(s, 1.0 / config_.creates_per_second_per_key);
  return std::clamp(static_cast<int>(std::ceil(s)), 1, 60);
}

void Admission::Request(const std::string& key, int memory_mib, Clock::time_point now, Callback cb) {
  std::vector<std::pair<Callback, AdmissionDecision>> out;
  {
    std::lock_guard<std::mutex> l(mu_);
    AdmissionDecision d;
    if (std::string m = MemoryProblem(memory_mib); !m.empty()) {
      ++counters_.rejected_memory;
      d.http_status = 503;
      d.message = m;
      out.push_back({std::move(cb), d});
    } else if (queues_[key].size() >= config_.max_queue_per_key) {
      ++counters_.rejected_rate;
      d.http_status = 429;
      d.retry_after_s = RetryAfter(queues_[key].size());
      d.message = "too many creates waiting for this API key (" + std::to_string(config_.max_queue_per_key) +
                  "); retry after " + std::to_string(d.retry_after_s) + " s";
      out.push_back({std::move(cb), d});
    } else {
      auto& q = queues_[key];
      q.push_back({next_ticket_++, memory_mib, now + config_.queue_timeout, std::move(cb)});
      (void)PumpLocked(now, &out);
    }
  }
  for (auto& [fn, d] : out) fn(d);
}

std::optional<Admission::Clock::time_point> Admission::Pump(Clock::time_point now) {
  std::vector<std::pair<Callback, AdmissionDecision>> out;
  std::optional<Clock::time_point> next;
  {
    std::lock_guard<std::mutex> l(mu_);
    next = PumpLocked(now, &out);
  }
  for (auto& [fn, d] : out) fn(d);
  return next;
}

std::optional<Admission::Clock::time_point> Admission::PumpLocked(
    Clock::time_point now, std::vector<std::pair<Callback, AdmissionDecision>>* out) {
  std::optional<Clock::time_point> wake;
  auto want = [&](Clock::time_point t) {
    if (!wake || t < *wake) wake = t;
  };
  // 1. Expire waiters past their deadline.
  for (auto& [key, q] : queues_) {
    while (!q.empty() && q.front().deadline <= now) {
      ++counters_.queue_timeouts;
      AdmissionDecision d;
      d.http_status = 429;
      d.retry_after_s = RetryAfter(q.size() - 1);
      d.message = "sandbox limits reached and no slot freed within " +
                  std::to_string(config_.queue_timeout.count() / 1000) + " s; retry after " +
                  std::to_string(d.retry_after_s) + " s";
      out->push_back({std::move(q.front().cb), d});
      q.pop_front();
    }
  }
  // 2. Grant while anything fits, always to the least recently served key
  //    that has a waiter and fits (a burst of one key cannot starve another).
  Refill(global_, config_.creates_per_second, config_.create_burst, now);
  bool progress = true;
  while (progress) {
    progress = false;
    std::vector<std::string> keys;
    for (auto& [k, q] : queues_) {
      if (!q.empty()) keys.push_back(k);
    }
    std::stable_sort(keys.begin(), keys.end(),
                     [&](const std::string& a, const std::string& b) { return last_served_[a] < last_served_[b]; });
    for (const auto& key : keys) {
      auto& q = queues_[key];
      Waiter& w = q.front();
      auto& kb = key_buckets_[key];
      Refill(kb, config_.creates_per_second_per_key, config_.create_burst_per_key, now);
      int total = static_cast<int>(live_.size() + in_flight_.size());
      bool fits =
          (config_.max_sandboxes <= 0 || total < config_.max_sandboxes) &&
          (config_.max_sandboxes_per_key <= 0 || per_key_[key] < config_.max_sandboxes_per_key) &&
          (config_.max_creates_in_flight <= 0 || static_cast<int>(in_flight_.size()) < config_.max_creates_in_flight);
      bool rate_ok = (config_.creates_per_second <= 0 || global_.tokens >= 1.0) &&
                     (config_.creates_per_second_per_key <= 0 || kb.tokens >= 1.0);
      if (fits && !rate_ok) {
        auto refill_at = [&](const Bucket& b, double rate) {
          return now + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>((1.0 - b.tokens) / std::max(rate, 1e-6)));
        };
        if (config_.creates_per_second > 0 && global_.tokens < 1.0)
          want(refill_at(global_, config_.creates_per_second));
        if (config_.creates_per_second_per_key > 0 && kb.tokens < 1.0)
          want(refill_at(kb, config_.creates_per_second_per_key));
      }
      if (!fits || !rate_ok) continue;
      if (std::string m = MemoryProblem(w.memory_mib); !m.empty()) {
        ++counters_.rejected_memory;
        AdmissionDecision d;
        d.http_status = 503;
        d.message = m;
        out->push_back({std::move(w.cb), d});
      } else {
        if (config_.creates_per_second > 0) global_.tokens -= 1.0;
        if (config_.creates_per_second_per_key > 0) kb.tokens -= 1.0;
        in_flight_[w.ticket] = {key, w.memory_mib, now};
        ++per_key_[key];
        committed_mib_ += w.memory_mib;
        ++counters_.granted;
        AdmissionDecision d;
        d.granted = true;
        d.ticket = w.ticket;
        out->push_back({std::move(w.cb), d});
      }
      q.pop_front();
      last_served_[key] = ++serve_clock_;
      progress = true;
      break;
    }
  }
  for (auto& [key, q] : queues_) {
    if (!q.empty()) want(q.front().deadline);
  }
  return wake;
}

void Admission::CreateDone(uint64_t ticket, const std::string& sandbox_id, Clock::time_point now) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = in_flight_.find(ticket);
    if (it == in_flight_.end()) return;
    Holder h = it->second;
    in_flight_.erase(it);
    if (!sandbox_id.empty()) {
      double took = std::chrono::duration<double>(now - h.granted_at).count();
      if (took > 0) avg_create_s_ = 0.7 * avg_create_s_ + 0.3 * took;
    }
    if (!sandbox_id.empty()) {
      live_[sandbox_id] = h;
    } else {
      --per_key_[h.key];
      committed_mib_ -= h.memory_mib;
    }
  }
  (void)Pump(now);
}

void Admission::SandboxGone(const std::string& sandbox_id, Clock::time_point now) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(sandbox_id);
    if (it == live_.end()) return;
    --per_key_[it->second.key];
    committed_mib_ -= it->second.memory_mib;
    live_.erase(it);
  }
  (void)Pump(now);
}

void Admission::Adopt(const std::string& sandbox_id, const std::string& key, int memory_mib) {
  std::lock_guard<std::mutex> l(mu_);
  if (live_.count(sandbox_id)) return;
  live_[sandbox_id] = {key, memory_mib, {}};
  ++per_key_[key];
  committed_mib_ += memory_mib;
}

AdmissionStats Admission::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  AdmissionStats s = counters_;
  s.live = static_cast<int>(live_.size());
  s.in_flight = static_cast<int>(in_flight_.size());
  for (auto& [k, q] : queues_) s.queued += q.size();
  s.committed_memory_mib = committed_mib_;
  return s;
}

}  // namespace airlock::server
