// The audit trail: append-only JSONL files, one per UTC day
// (<dir>/YYYY-MM-DD.jsonl), hash-chained across records and days.
//
// Record shape (docs/audit.md): a JSON object carrying whatever the caller
// put in it (action, sandbox, api_key_id, ...) plus fields the log adds:
//   "seq"  : 1, 2, 3, ... over the whole trail (never reset by a new day)
//   "ts"   : RFC 3339 UTC with milliseconds, when the record was appended
//   "prev" : the "hash" of the previous record (64 '0' for the first one)
//   "writer": 8 hex, random per AuditLog::Open (Verify tells two interleaved
//            writers from an edit by it); one writer at a time holds <dir>/LOCK
//   "hash" : lower-case hex SHA-256 of the record's canonical form without
//            the "hash" field.
// Canonical form: nlohmann::json::dump() with no indentation: keys sorted
// (byte order), no whitespace, non-ASCII as UTF-8, invalid UTF-8 replaced by
// U+FFFD. A line is the canonical form of the record with "hash", then '\n'.
//
// Appends are serialized by a mutex and written with one write(2) per
// record on an O_APPEND fd; fdatasync(2) runs at most once a second and on
// Close. On Open, a last line without '\n' (a torn write after a crash) is
// moved to "<file>.torn-<offset>", the file is truncated to its last whole
// line and an "audit.torn_tail" record saying so is appended; Verify reports
// a torn line it finds as an error. <dir>/HEAD holds "seq hash" of the last
// record so that removing records at the end is detected as well.
//
// Secret values are removed (Redactor) from every string before hashing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/state_lock.h"
#include "common/status.h"

namespace airlock::secrets {
class Redactor;
}

namespace airlock::audit {

// The sink other modules emit audit records through (e.g. egress decisions).
using AuditSink = std::function<void(const nlohmann::json&)>;

class AuditLog {
 public:
  // Creates `dir` (0700) if needed and continues the chain found there.
  // Errors: the failing syscall and path; DataLoss when the last record or
  // HEAD cannot be parsed (run `airlock audit verify`).
  static StatusOr<std::unique_ptr<AuditLog>> Open(std::string dir,
                                                  std::shared_ptr<const secrets::Redactor> redactor = nullptr);
  ~AuditLog();

  // Appends one record (must be a JSON object; its "seq", "ts", "prev" and
  // "hash" are overwritten). Thread-safe. invalid_argument for non-objects;
  // the errno error of a failed write (the record is then not in the chain).
  Status Append(nlohmann::json record);
  // A sink that appends and logs (rate-limited) failures.
  AuditSink Sink();
  // Called with each record after it is written (OTLP export). Set once, before use.
  void SetObserver(std::function<void(const nlohmann::json&)> fn) { observer_ = std::move(fn); }
  Status Flush();  // fdatasync now
  const std::string& dir() const { return dir_; }
  uint64_t last_seq() const;

 private:
  AuditLog() = default;
  Status OpenDay(const std::string& day);
  Status WriteHead();
  std::string dir_;
  std::shared_ptr<const secrets::Redactor> redactor_;
  std::function<void(const nlohmann::json&)> observer_;
  mutable std::mutex mu_;
  std::string day_;
  UniqueFd fd_;
  UniqueFd head_fd_;
  StateLock lock_;      // <dir>/LOCK, exclusive, for the log's life
  std::string writer_;  // this Open's "writer" field
  uint64_t seq_ = 0;
  std::string prev_;
  int64_t last_sync_ms_ = 0;
};

// j[key] when it is a string, else `fallback` (never throws: records and
// streams are untrusted input).
std::string StringField(const nlohmann::json& j, const char* key, const std::string& fallback = "");

// The canonical serialisation (see above) and the record hash.
std::string Canonical(const nlohmann::json& record);
std::string RecordHash(const nlohmann::json& record_without_hash);
std::string Sha256Hex(std::string_view data);

struct VerifyProblem {
  std::string file;  // base name, e.g. "2026-11-30.jsonl"
  size_t line = 0;   // 1-based; 0 for file-level problems
  std::string what;
  // false: damage that needs no attacker (two writers interleaved, a torn
  // write); true: a record was edited, removed, reordered or added by hand.
  bool tampering = true;
};
struct VerifyReport {
  size_t files = 0;
  size_t records = 0;
  std::vector<VerifyProblem> problems;  // empty: the chain is intact
  std::vector<std::string> notes;       // e.g. recovered torn tails
  bool ok() const { return problems.empty(); }
  bool tampered() const {
    for (const auto& p : problems)
      if (p.tampering) return true;
    return false;
  }
};
// Re-reads the whole trail and checks every record's hash, the chain, seq
// continuity, canonical form and HEAD. Errors only when `dir` is unreadable.
StatusOr<VerifyReport> Verify(const std::string& dir);

struct QueryFilter {
  std::string sandbox;   // empty: all
  int64_t since_ms = 0;  // records with ts >= since
  size_t limit = 1000;   // newest `limit` matches are returned, oldest first
};
// Reads records matching `filter` (files older than since's day are skipped).
StatusOr<std::vector<nlohmann::json>> Query(const std::string& dir, const QueryFilter& filter);

// RFC 3339 (…Z or offset) or Unix seconds → Unix ms; also "-10m", "-2h", "-1d".
StatusOr<int64_t> ParseSince(const std::string& text, int64_t now_ms);

}  // namespace airlock::audit
