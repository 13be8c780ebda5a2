// OtlpExporter: ships audit records to an OpenTelemetry collector as OTLP
// logs over HTTP with the JSON encoding (POST <endpoint>, default path
// /v1/logs, Content-Type: application/json). One log record per audit
// record: body = the record's canonical JSON, attributes airlock.action,
// airlock.sandbox_id, airlock.seq, airlock.hash; resource service.name
// "airlock".
//
// Never blocks the caller: Enqueue() only appends to a bounded queue; when
// the queue is full the OLDEST record is dropped and counted. A background
// thread sends batches (≤ batch_size records, or whatever is there after
// flush_interval), retrying a failed batch with exponential backoff (base
// 200 ms, capped at max_backoff) on transport errors, 429 and 5xx; other
// statuses drop the batch (counted as failed). Plain http:// only (a local
// collector or sidecar). Stop() (and the destructor) sends what is queued
// within a short deadline, then returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace airlock::audit {

struct OtlpConfig {
  std::string endpoint;                                      // "http://host:port[/path]"; path default /v1/logs
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. an auth header for the collector
  size_t batch_size = 100;
  size_t queue_capacity = 10000;
  std::chrono::milliseconds flush_interval{1000};
  std::chrono::milliseconds max_backoff{30000};
  std::chrono::milliseconds request_timeout{5000};
};

struct OtlpStats {
  uint64_t exported = 0, dropped = 0, failed_batches = 0, queued = 0;
};

class OtlpExporter {
 public:
  // invalid_argument for an endpoint that is not http://host:port[/path].
  static StatusOr<std::unique_ptr<OtlpExporter>> Start(OtlpConfig config);
  ~OtlpExporter();
  void Enqueue(const nlohmann::json& record);
  void Stop();
  OtlpStats stats() const;

  // The OTLP/JSON request body for `records` (exposed for tests).
  static nlohmann::json Body(const std::vector<nlohmann::json>& records);

 private:
  OtlpExporter() = default;
  void Loop();
  Status Send(const std::vector<nlohmann::json>& batch, bool* retryable);

  OtlpConfig config_;
  std::string host_, path_;
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> queue_;
  bool stop_ = false;
  OtlpStats stats_;
  std::thread thread_;
};

}  // namespace airlock::audit
