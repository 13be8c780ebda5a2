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
//   POST /execute on port 49999 (the code interpreter, docs/code-interpreter.md)
//       action "interpreter.execute": the code's size and SHA-256 (never the
//       code), language, context_id, per-call env var NAMES; from the NDJSON
//       response: stdout/stderr text bytes, results (count, bytes, MIME
//       keys), error name and value (≤ 256 bytes), execution_count, outcome
//       ("ended" | "stream closed before the end").
// Other paths and ports: no record (Create returns nullptr).
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

namespace airlock::envd {
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
  uint16_t port = 49983;  // the guest port: the agent's, or the interpreter's 49999
};

class DataPlaneTap {
 public:
  static constexpr size_t kMaxStartRequest = 256 * 1024;
  // An /execute body kept for parsing (the code is hashed from it); longer
  // bodies are hashed whole and recorded as unparsed.
  static constexpr size_t kMaxExecuteRequest = 1 << 20;
  // An NDJSON line kept whole for parsing; a longer one (a big PNG result,
  // a huge print) is only counted, its type taken from its first bytes.
  static constexpr size_t kMaxNdjsonLine = 1 << 20;
  // nullptr when the request is not one that is audited.
  static std::unique_ptr<DataPlaneTap> Create(const TapRequest& req, AuditSink sink);
  ~DataPlaneTap();  // emits the record if Finish was not called

  void OnRequestBody(std::string_view decoded);
  void OnResponseHead(int status, bool chunked);
  void OnResponseBytes(std::string_view framed);  // as received from the agent
  void Finish(const std::string& error = "");
  // An exec stream whose end has not been seen: worth reading to its end
  // after the client left, so the record gets the exit code or signal.
  bool WantsDrain() const {
    return kind_ == Kind::kExec && !finished_ && status_ == 200 && !end_ && !deadline_exceeded_;
  }

 private:
  enum class Kind { kExec, kFileWrite, kFileRead, kFileCompose, kInterpreterExecute };
  DataPlaneTap(Kind kind, TapRequest req, AuditSink sink);
  void OnRequestBodyImpl(std::string_view decoded);
  void OnResponseBytesImpl(std::string_view framed);
  void FinishImpl(const std::string& error);
  void OnResponsePayload(std::string_view data);
  void OnMessage(const std::string& payload);
  void ParseStartRequest();
  void OnNdjson(std::string_view data);
  void OnNdjsonLine(std::string_view line, uint64_t full_size);
  void FinishInterpreter(nlohmann::json& r);

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
  // The agent ended the exec stream with deadline_exceeded: its Start's
  // Connect-Timeout-Ms passed and the agent killed the process group.
  bool deadline_exceeded_ = false;
  // files
  Sha256Stream body_hash_;
  std::unique_ptr<envd::MultipartParser> multipart_;
  nlohmann::json parts_ = nlohmann::json::array();
  std::unique_ptr<Sha256Stream> part_hash_;
  std::string part_path_;
  // interpreter
  std::string line_;          // the NDJSON line being read (≤ kMaxNdjsonLine)
  uint64_t line_size_ = 0;    // its full size so far
  uint64_t stdout_bytes_ = 0, stderr_bytes_ = 0, result_bytes_ = 0, results_ = 0, lines_ = 0;
  nlohmann::json result_formats_ = nlohmann::json::array();
  std::optional<nlohmann::json> error_;
  std::optional<int64_t> execution_count_;
  bool end_of_execution_ = false;
};

}  // namespace airlock::audit
