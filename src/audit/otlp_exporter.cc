#include "audit/otlp_exporter.h"

#include <algorithm>

#include "audit/audit_log.h"
#include "common/log.h"
#include "core/http_client.h"
#include "envd/proto_json.h"

namespace airlock::audit {

using nlohmann::json;

namespace {

json Str(const std::string& k, const std::string& v) { return {{"key", k}, {"value", {{"stringValue", v}}}}; }

}  // namespace

StatusOr<std::unique_ptr<OtlpExporter>> OtlpExporter::Start(OtlpConfig config) {
  std::string e = config.endpoint;
  if (e.rfind("http://", 0) != 0) return InvalidArgument("OTLP endpoint must start with http:// (got '" + e + "')");
  e = e.substr(7);
  size_t slash = e.find('/');
  std::string hostport = e.substr(0, slash);
  std::string path = slash == std::string::npos ? "/v1/logs" : e.substr(slash);
  auto hp = ParseHostPort(hostport);
  if (!hp.ok()) return InvalidArgument("OTLP endpoint: " + hp.status().message());
  if (config.batch_size == 0 || config.queue_capacity == 0)
    return InvalidArgument("OTLP batch and queue sizes must be positive");
  std::unique_ptr<OtlpExporter> x(new OtlpExporter());
  x->config_ = std::move(config);
  x->host_ = hp->first;
  x->port_ = hp->second;
  x->path_ = path;
  x->thread_ = std::thread([p = x.get()] { p->Loop(); });
  return x;
}

OtlpExporter::~OtlpExporter() { Stop(); }

void OtlpExporter::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OtlpExporter::Enqueue(const json& record) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    if (queue_.size() >= config_.queue_capacity) {
      queue_.pop_front();
      ++stats_.dropped;
    }
    queue_.push_back(record);
    if (queue_.size() < config_.batch_size) return;
  }
  cv_.notify_one();
}

OtlpStats OtlpExporter::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  OtlpStats s = stats_;
  s.queued = queue_.size();
  return s;
}

json OtlpExporter::Body(const std::vector<json>& records) {
  json logs = json::array();
  for (const auto& r : records) {
    int64_t ns = 0;
    if (r.contains("ts") && r["ts"].is_string()) {
      if (auto ts = envd::ParseTimestamp(r["ts"].get<std::string>()); ts.ok()) {
        ns = ts->seconds * 1000000000 + ts->nanos;
      }
    }
    json attrs = json::array({Str("airlock.action", StringField(r, "action"))});
    if (r.contains("sandbox") && r["sandbox"].is_string()) attrs.push_back(Str("airlock.sandbox_id", r["sandbox"]));
    if (r.contains("seq")) attrs.push_back({{"key", "airlock.seq"}, {"value", {{"intValue", r["seq"].dump()}}}});
    if (r.contains("hash") && r["hash"].is_string()) attrs.push_back(Str("airlock.hash", r["hash"]));
    bool failed =
        r.contains("error") || (r.contains("status") && r["status"].is_number() && r["status"].get<int>() >= 400);
    logs.push_back({{"timeUnixNano", std::to_string(ns)},
                    {"observedTimeUnixNano", std::to_string(ns)},
                    {"severityNumber", failed ? 13 : 9},
                    {"severityText", failed ? "WARN" : "INFO"},
                    {"body", {{"stringValue", Canonical(r)}}},
                    {"attributes", attrs}});
  }
  return {
      {"resourceLogs",
       json::array({{{"resource", {{"attributes", json::array({Str("service.name", "airlock")})}}},
                     {"scopeLogs", json::array({{{"scope", {{"name", "airlock.audit"}}}, {"logRecords", logs}}})}}})}};
}

Status OtlpExporter::Send(const std::vector<json>& batch, bool* retryable) {
  HttpCall call;
  call.host = host_;
  call.port = port_;
  call.method = "POST";
  call.target = path_;
  call.headers = config_.headers;
  call.headers.push_back({"Content-Type", "application/json"});
  call.body = Body(batch).dump(-1, ' ', false, json::error_handler_t::replace);
  call.timeout = config_.request_timeout;
  call.max_body = 64 * 1024;
  auto r = HttpDo(call);
  if (!r.ok()) {
    *retryable = true;
    return r.status();
  }
  if (r->status >= 200 && r->status < 300) return OkStatus();
  *retryable = r->status == 429 || r->status >= 500;
  return Unavailable("collector answered HTTP " + std::to_string(r->status));
}

void OtlpExporter::Loop() {
  std::chrono::milliseconds backoff{0};
  std::vector<json> batch;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (batch.empty()) {
        cv_.wait_for(l, config_.flush_interval, [&] { return stop_ || queue_.size() >= config_.batch_size; });
        if (stop_ && stop_deadline == std::chrono::steady_clock::time_point::max()) {
          stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        }
        if (queue_.empty()) {
          if (stop_) return;
          continue;
        }
        size_t n = std::min(config_.batch_size, queue_.size());
        batch.assign(queue_.begin(), queue_.begin() + static_cast<long>(n));
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<long>(n));
      } else if (backoff.count() > 0) {
        cv_.wait_for(l, backoff, [&] { return stop_; });
        if (stop_ && stop_deadline == std::chrono::steady_clock::time_point::max()) {
          stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        }
      }
    }
    if (std::chrono::steady_clock::now() > stop_deadline) return;
    bool retryable = false;
    Status st = Send(batch, &retryable);
    std::lock_guard<std::mutex> l(mu_);
    if (st.ok()) {
      stats_.exported += batch.size();
      batch.clear();
      backoff = std::chrono::milliseconds(0);
      continue;
    }
    ++stats_.failed_batches;
    if (stop_) {  // shutting down: one last attempt only
      stats_.dropped += batch.size() + queue_.size();
      queue_.clear();
      return;
    }
    if (!retryable) {
      LOG_WARN("otlp: dropping a batch of {}: {}", batch.size(), st.message());
      stats_.dropped += batch.size();
      batch.clear();
      continue;
    }
    backoff = std::min(config_.max_backoff, backoff.count() == 0 ? std::chrono::milliseconds(200) : backoff * 2);
    LOG_DEBUG("otlp: export failed ({}), retrying in {} ms", st.message(), backoff.count());
  }
}

}  // namespace airlock::audit
