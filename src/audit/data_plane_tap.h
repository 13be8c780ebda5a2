// DataPlaneTap: watches one proxied data-plane exchange (client → agent) and
// emits one audit record when it ends. It sees the bytes the proxy already
// moves and never changes them; it keeps O(1) memory besides a bounded copy
// of the request body of a process start (≤ kMaxStartRequest).
//
// What it records (docs/audit.md):
//   POST /process.Process/Start  action "exec.start" when the agent reports
//       the pid (cmd, args, cwd, user, env names, pid), then action "exec": cmd, args, cwd, user, env
//       var NAMES (never values), pid, started_at/ended_at, exit_code or
//       signal, status text, stdout/stderr byte counts and SHA-256 of the
//       decoded output, outcome ("ended" | "stream closed before the end").
//   POST /files                  action "file.write": per part path (query
//       path, else the part's filename), size, SHA-256; HTTP status.
//   GET /files                   action "file.read": path, size, SHA-256 of
//       the bytes sent to the client; HTTP status.
// Other paths: no record (Create returns nullptr).
//
// All input is untrusted (client and guest): parse failures end up as an
// "error" field of the record, never as a crash or unbounded buffering.
#pragma once

#include <openssl/evp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "audit/audit_log.h"
#include "envd/envelope.h"

namespace airlock::agent {
class MultipartParser;
}

namespace airlock::audit {

class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;
  void Update(std::string_view data);
  std::string HexDigest();  // once
  uint64_t bytes() const { return bytes_; }

 private:
  EVP_MD_CTX* ctx_;
  uint64_t bytes_ = 0;
};

// Decodes an HTTP/1.1 chunked body incrementally (extensions and trailers
// ignored). Errors: invalid_argument on a malformed size line.
class ChunkedDecoder {
 public:
  // Appends decoded bytes to *out.
  Status Feed(std::string_view in, std::string* out);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataCrlf, kTrailer, kDone };
  State state_ = State::kSize;
  std::string line_;
  uint64_t remaining_ = 0;
};

struct TapRequest {
  std::string sandbox;
  std::string api_key_id;  // empty on the data plane (sandbox token auth)
  std::string method;      // "GET", "POST", ...
  std::string path;        // decoded, no query
  std::map<std::string, std::string> query;
  std::string authorization;  // the request's Authorization header ("" if none)
  std::string content_type;
};

class DataPlaneTap {
 public:
  static constexpr size_t kMaxStartRequest = 256 * 1024;
  // nullptr when the request is not one that is audited.
  static std::unique_ptr<DataPlaneTap> Create(const TapRequest& req, AuditSink sink);
  ~DataPlaneTap();  // emits the record if Finish was not called

  void OnRequestBody(std::string_view decoded);
  void OnResponseHead(int status, bool chunked);
  void OnResponseBytes(std::string_view framed);  // as received from the agent
  void Finish(const std::string& error = "");
  // An exec stream whose end has not been seen: worth reading to its end
  // after the client left, so the record gets the exit code or signal.
  bool WantsDrain() const { return kind_ == Kind::kExec && !finished_ && status_ == 200 && !end_; }

 private:
  enum class Kind { kExec, kFileWrite, kFileRead };
  DataPlaneTap(Kind kind, TapRequest req, AuditSink sink);
  void OnRequestBodyImpl(std::string_view decoded);
  void OnResponseBytesImpl(std::string_view framed);
  void FinishImpl(const std::string& error);
  void OnResponsePayload(std::string_view data);
  void OnMessage(const std::string& payload);
  void ParseStartRequest();

  Kind kind_;
  TapRequest req_;
  AuditSink sink_;
  bool finished_ = false;
  int64_t started_ms_ = 0;
  int status_ = 0;
  bool chunked_ = false;
  std::string errors_;
  ChunkedDecoder dechunk_;
  // exec
  std::string start_body_;
  bool start_truncated_ = false;
  bool start_parsed_ = false;
  nlohmann::json exec_fields_ = nlohmann::json::object();  // cmd, args, cwd, env_names
  envd::EnvelopeDecoder response_frames_{envd::kDefaultMaxMessageBytes};
  Sha256Stream out_hash_, err_hash_;
  std::optional<int64_t> pid_;
  std::optional<nlohmann::json> end_;
  // files
  Sha256Stream body_hash_;
  std::unique_ptr<agent::MultipartParser> multipart_;
  nlohmann::json parts_ = nlohmann::json::array();
  std::unique_ptr<Sha256Stream> part_hash_;
  std::string part_path_;
};

}  // namespace airlock::audit
