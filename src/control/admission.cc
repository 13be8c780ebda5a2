#include "control/admission.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace airlock::control {

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

int64_t Admission::Charge(const Holder& h) const {
  if (h.held_mib < 0) return h.memory_mib;
  auto floor = static_cast<int64_t>(std::ceil(config_.memory_growth_reserve * h.memory_mib));
  return std::max(h.held_mib, floor);
}

void Admission::Account(const Holder& h, int64_t sign) {
  committed_mib_ += sign * h.memory_mib;
  charged_mib_ += sign * Charge(h);
  if (h.held_mib < 0) {
    unmeasured_mib_ += sign * h.memory_mib;
    unmeasured_ += static_cast<int>(sign);
  } else {
    held_sum_mib_ += sign * h.held_mib;
  }
}

std::string Admission::MemoryProblem(int memory_mib, std::string* reason) const {
  std::ostringstream m;
  if (pressure_) {
    *reason = "pressure";
    m << "refusing create: the host is short of memory: " << available_mib_
      << " MiB available (MemAvailable), creates resume once it is back above " << config_.memory_pressure_mib
      << " MiB (serve --memory-pressure)";
    return m.str();
  }
  if (available_mib_ >= 0 && available_mib_ - unmeasured_mib_ - memory_mib < config_.memory_pressure_mib) {
    *reason = "pressure";
    m << "refusing create: not enough memory available on the host: " << available_mib_
      << " MiB available (MemAvailable) - " << unmeasured_mib_ << " MiB for " << unmeasured_
      << " sandbox(es) not yet measured - " << memory_mib << " MiB asked < " << config_.memory_pressure_mib
      << " MiB kept free (serve --memory-pressure)";
    return m.str();
  }
  if (config_.held_memory && host_memory_mib_ > 0) {
    const int64_t budget = host_memory_mib_ - config_.memory_host_reserve_mib;
    if (charged_mib_ + memory_mib > budget) {
      *reason = "held_memory";
      const int64_t growth = charged_mib_ - held_sum_mib_ - unmeasured_mib_;
      m << "refusing create: not enough host memory: sandboxes hold " << held_sum_mib_ << " MiB, " << growth
        << " MiB is reserved for their growth (each counts at least " << config_.memory_growth_reserve
        << " x its memoryMB), " << unmeasured_mib_ << " MiB for " << unmeasured_ << " not yet measured, " << memory_mib
        << " MiB asked > " << host_memory_mib_ << " MiB of host memory - " << config_.memory_host_reserve_mib
        << " MiB kept for the host = " << budget
        << " MiB (serve --host-memory, --memory-host-reserve, --memory-growth-reserve)";
      return m.str();
    }
  }
  if (config_.memory_overcommit_ratio > 0 && host_memory_mib_ > 0) {
    double limit = config_.memory_overcommit_ratio * static_cast<double>(host_memory_mib_);
    if (static_cast<double>(committed_mib_ + memory_mib) > limit) {
      *reason = "memory";
      m << "refusing to overcommit host memory: " << committed_mib_ << " MiB committed to sandboxes + " << memory_mib
        << " MiB requested > " << config_.memory_overcommit_ratio << " x " << host_memory_mib_
        << " MiB of host memory (--memory-overcommit-ratio)";
      return m.str();
    }
  }
  return "";
}

void Admission::UpdateMemory(const MemoryReading& reading) {
  std::lock_guard<std::mutex> l(mu_);
  available_mib_ = reading.available_mib;
  pressure_ = reading.pressure;
  for (auto& [id, h] : live_) {
    auto it = reading.held_mib.find(id);
    if (it == reading.held_mib.end()) continue;
    Account(h, -1);
    h.held_mib = std::max<int64_t>(0, it->second);
    Account(h, 1);
  }
}

void Admission::CountMemoryRefusal(const std::string& reason) {
  if (reason == "pressure")
    ++counters_.rejected_pressure;
  else if (reason == "held_memory")
    ++counters_.rejected_held;
  else
    ++counters_.rejected_memory;
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
    if (std::string m = MemoryProblem(memory_mib, &d.reason); !m.empty()) {
      CountMemoryRefusal(d.reason);
      d.http_status = 503;
      d.message = m;
      out.push_back({std::move(cb), d});
    } else if (queues_[key].size() >= config_.max_queue_per_key) {
      ++counters_.rejected_rate;
      d.http_status = 429;
      d.retry_after_s = RetryAfter(queues_[key].size());
      d.reason = "limit";
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
      d.reason = "limit";
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
      AdmissionDecision refusal;
      if (std::string m = MemoryProblem(w.memory_mib, &refusal.reason); !m.empty()) {
        CountMemoryRefusal(refusal.reason);
        AdmissionDecision d = refusal;
        d.http_status = 503;
        d.message = m;
        out->push_back({std::move(w.cb), d});
      } else {
        if (config_.creates_per_second > 0) global_.tokens -= 1.0;
        if (config_.creates_per_second_per_key > 0) kb.tokens -= 1.0;
        Holder h{key, w.memory_mib, now};
        in_flight_[w.ticket] = h;
        ++per_key_[key];
        Account(h, 1);
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
      Account(h, -1);
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
    Account(it->second, -1);
    live_.erase(it);
  }
  (void)Pump(now);
}

void Admission::Adopt(const std::string& sandbox_id, const std::string& key, int memory_mib) {
  std::lock_guard<std::mutex> l(mu_);
  if (live_.count(sandbox_id)) return;
  Holder h{key, memory_mib, {}};
  live_[sandbox_id] = h;
  ++per_key_[key];
  Account(h, 1);
}

std::string Admission::CheckMemory(int memory_mib, std::string* reason) {
  std::lock_guard<std::mutex> l(mu_);
  std::string m = MemoryProblem(memory_mib, reason);
  if (!m.empty()) CountMemoryRefusal(*reason);
  return m;
}

AdmissionStats Admission::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  AdmissionStats s = counters_;
  s.live = static_cast<int>(live_.size());
  s.in_flight = static_cast<int>(in_flight_.size());
  for (auto& [k, q] : queues_) s.queued += q.size();
  s.committed_memory_mib = committed_mib_;
  s.held_mib = held_sum_mib_;
  s.growth_reserve_mib = charged_mib_ - held_sum_mib_ - unmeasured_mib_;
  s.unmeasured_mib = unmeasured_mib_;
  s.unmeasured = unmeasured_;
  s.budget_mib = host_memory_mib_ > 0 ? host_memory_mib_ - config_.memory_host_reserve_mib : 0;
  s.available_mib = available_mib_;
  s.pressure = pressure_;
  return s;
}

}  // namespace airlock::control
