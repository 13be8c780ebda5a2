#include "control/metrics_sampler.h"

#include <algorithm>

#include "common/agent_port.h"
#include "common/clock.h"
#include "common/log.h"
#include "core/http_client.h"
#include "core/manager.h"

namespace airlock::control {

using nlohmann::json;

namespace {

// Unix seconds up to 9999-12-31T23:59:59Z; InvalidArgument naming `name`.
StatusOr<int64_t> UnixSeconds(const std::string& name, const std::string& v) {
  constexpr int64_t kMax = 253402300799;
  if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("invalid " + name + ": must be a non-negative integer (Unix seconds)");
  }
  int64_t n = std::stoll(v);
  if (n > kMax) return InvalidArgument("invalid " + name + ": after the year 9999");
  return n;
}

// One sample from the agent at rec's address; the agent's numbers, the
// daemon's time. Errors: the agent's status or transport error.
StatusOr<MetricSample> SampleAgent(const SandboxRecord& rec, std::chrono::seconds timeout) {
  HttpCall call;
  call.host = rec.netns_ip;
  call.port = kAgentPort;
  call.target = "/metrics";
  call.headers = {{"X-Access-Token", rec.access_token}};
  call.timeout = timeout;
  call.max_body = 64 * 1024;
  auto reply = HttpDo(call);
  if (!reply.ok()) return Status(StatusCode::kUnavailable, "agent /metrics: " + reply.status().message());
  if (reply->status != 200) {
    return Status(StatusCode::kUnavailable, "agent /metrics answered " + std::to_string(reply->status));
  }
  json m = json::parse(reply->body, nullptr, false);
  if (!m.is_object()) return Status(StatusCode::kUnavailable, "agent /metrics: not a JSON object");
  auto i64 = [&](const char* k) -> int64_t {
    auto it = m.find(k);
    return it != m.end() && it->is_number() ? std::max<int64_t>(0, it->get<int64_t>()) : 0;
  };
  MetricSample s;
  s.ts_s = NowUnixMs() / 1000;
  s.cpu_count = static_cast<int>(std::min<int64_t>(i64("cpu_count"), 1024));
  auto pct = m.find("cpu_used_pct");
  s.cpu_used_pct = pct != m.end() && pct->is_number() ? std::clamp(pct->get<double>(), 0.0, 100.0) : 0.0;
  s.mem_used = i64("mem_used");
  s.mem_total = i64("mem_total");
  s.mem_cache = i64("mem_cache");
  s.disk_used = i64("disk_used");
  s.disk_total = i64("disk_total");
  return s;
}

}  // namespace

StatusOr<MetricsRange> ParseMetricsRange(const std::optional<std::string>& start, const std::optional<std::string>& end,
                                         int64_t sandbox_start_s, int64_t now_s) {
  MetricsRange r{sandbox_start_s, now_s};
  if (start) {
    ASSIGN_OR_RETURN(r.start_s, UnixSeconds("start", *start));
  }
  if (end) {
    ASSIGN_OR_RETURN(r.end_s, UnixSeconds("end", *end));
  }
  if (r.start_s > r.end_s) {
    return InvalidArgument("invalid time range for metrics: start (" + std::to_string(r.start_s) + ") is after end (" +
                           std::to_string(r.end_s) + ")");
  }
  return r;
}

int64_t MetricsStep(int64_t range_s) {
  constexpr int64_t kHour = 3600;
  if (range_s < kHour) return 5;
  if (range_s < 6 * kHour) return 30;
  if (range_s < 12 * kHour) return 60;
  if (range_s < 24 * kHour) return 120;
  if (range_s < 7 * 24 * kHour) return 300;
  return 900;
}

std::vector<MetricSample> SelectMetrics(const std::deque<MetricSample>& history, const MetricsRange& range) {
  std::vector<MetricSample> out;
  const int64_t step = MetricsStep(range.end_s - range.start_s);
  int64_t bucket = -1;
  for (const auto& m : history) {
    if (m.ts_s < range.start_s || m.ts_s > range.end_s) continue;
    int64_t b = (m.ts_s - range.start_s) / step;
    if (b == bucket && !out.empty()) {
      out.back() = m;  // the newest of its bucket
    } else {
      out.push_back(m);
      bucket = b;
    }
  }
  return out;
}

json MetricJson(const MetricSample& m) {
  return json{{"timestamp", FormatRfc3339Ms(m.ts_s * 1000)},
              {"timestampUnix", m.ts_s},
              {"cpuCount", m.cpu_count},
              {"cpuUsedPct", m.cpu_used_pct},
              {"memUsed", m.mem_used},
              {"memTotal", m.mem_total},
              {"memCache", m.mem_cache},
              {"diskUsed", m.disk_used},
              {"diskTotal", m.disk_total}};
}

MetricsSampler::MetricsSampler(Manager& manager, boost::asio::io_context& io, std::chrono::milliseconds interval,
                               std::function<void(std::function<void()>)> run_blocking)
    : manager_(manager), interval_(interval), run_blocking_(std::move(run_blocking)), timer_(io) {}

void MetricsSampler::Start() { Schedule(); }

void MetricsSampler::Stop() { timer_.cancel(); }

void MetricsSampler::Record(const std::string& id, const MetricSample& m) {
  if (!manager_.Visible(id)) return;  // ended meanwhile
  std::lock_guard<std::mutex> l(mu_);
  auto& h = history_[id];
  if (!h.empty() && h.back().ts_s >= m.ts_s) {
    h.back() = m;  // one sample per second at most
    return;
  }
  if (h.size() >= kMaxSamples) h.pop_front();
  h.push_back(m);
}

void MetricsSampler::Schedule() {
  if (interval_.count() <= 0) return;
  timer_.expires_after(interval_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    // One sweep at a time: a slow agent delays the next sweep, never stacks them.
    if (!sweeping_.exchange(true)) run_blocking_([this] { SweepAll(); });
    Schedule();
  });
}

void MetricsSampler::SweepAll() {
  std::vector<SandboxRecord> running;
  for (const auto& sb : manager_.VisibleList()) {
    if (sb->state() == SandboxState::kRunning) running.push_back(sb->Record());
  }
  for (const auto& rec : running) {
    auto s = SampleAgent(rec, std::chrono::seconds(3));
    if (s.ok()) {
      Record(rec.id, *s);
    } else {
      LOG_DEBUG("sandbox={} metrics sample: {}", rec.id, s.status().message());
    }
  }
  sweeping_ = false;
}

StatusOr<MetricSample> MetricsSampler::SampleNow(const SandboxRecord& rec, std::chrono::seconds timeout) {
  auto s = SampleAgent(rec, timeout);
  if (s.ok()) Record(rec.id, *s);
  return s;
}

std::optional<std::vector<MetricSample>> MetricsSampler::Points(const std::string& id, const MetricsRange& range) {
  if (!manager_.Visible(id)) return std::nullopt;
  std::lock_guard<std::mutex> l(mu_);
  auto it = history_.find(id);
  if (it == history_.end()) return std::vector<MetricSample>{};
  return SelectMetrics(it->second, range);
}

std::optional<MetricSample> MetricsSampler::Latest(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = history_.find(id);
  if (it == history_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

void MetricsSampler::Forget(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  history_.erase(id);
}

}  // namespace airlock::control
