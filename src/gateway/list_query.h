// The query strings of the list routes → immutable requests, or
// InvalidArgument naming the parameter (answered 400). Shared by a node's
// API (server/) and a cluster's front (cluster/front.cc), hence here:
//
//   GET /sandboxes, /v2/sandboxes (spec §1.5.5)
//     state=running,paused   metadata=<k=v&...> (escaped once more)
//     template=NAME          order=asc|desc (default desc, by start)
//     limit=1.. (capped at 100)   nextToken=<created_ms>_<id>
//     startedAfter (at or after), startedBefore (airlock: strictly before),
//     RFC 3339, compared on the microsecond grid
//   GET /snapshots?sandboxID=&name=&limit=&nextToken=<snapshot id>
//   GET /secrets?limit=&nextToken=<name>   (an empty limit is refused)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/status.h"

namespace airlock::gateway {

// A query parameter's decoded value (nullopt: not in the query), as
// HttpConn::Query answers it. The parsers take one so that they run without
// a connection (unit tests, fuzzers).
using QueryFn = std::function<std::optional<std::string>(const std::string& name)>;

// Spec §1.5.5 metadata filter: the decoded query value is unescaped once
// more, split on '&' and '=', and each key and value unescaped again.
std::map<std::string, std::string> ParseMetadataFilter(const std::string& value);
// Parses "<created_ms>_<id>" page tokens; nullopt when malformed.
std::optional<std::pair<int64_t, std::string>> ParsePageToken(const std::string& token);

inline constexpr int kMaxPage = 100;

struct ListSandboxesRequest {
  std::map<std::string, std::string> metadata;  // every pair must match
  bool want_running = true, want_paused = true;
  std::string template_id;  // "" : any
  bool ascending = false;
  int limit = kMaxPage;
  std::optional<std::pair<int64_t, std::string>> after;  // the page token
  std::optional<int64_t> started_after_us, started_before_us;
};
StatusOr<ListSandboxesRequest> ParseListSandboxes(const QueryFn& query);

struct ListSnapshotsRequest {
  std::string sandbox_id, name;  // "" : any
  std::string after;             // the last snapshot id of the previous page
  int limit = kMaxPage;
};
StatusOr<ListSnapshotsRequest> ParseListSnapshots(const QueryFn& query);

struct ListSecretsRequest {
  std::string after;  // the last name of the previous page
  int limit = kMaxPage;
};
StatusOr<ListSecretsRequest> ParseListSecrets(const QueryFn& query);

// GET /v2/sandboxes/{id}/logs (E2B's spec and its handler, sandbox_logs.go
// and clusters.LogQueryWindow): `cursor` (Unix ms, >= 0), `direction`
// (`backward`, the default: the newest entries at or before the cursor,
// newest first; `forward`: at or after it, oldest first), `limit` (0..1000,
// default 1000), `level` (the lowest level kept: debug < info < warn <
// error), `search` (a case-sensitive substring of the message, at most 256
// bytes). GET /sandboxes/{id}/logs (v1): `start` (Unix ms) and `limit`,
// oldest first. A bad value is InvalidArgument naming the parameter.
enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
// "debug", "info", "warn" (or "warning"), "error"; nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(std::string_view level);
inline constexpr int kMaxLogEntries = 1000;
inline constexpr size_t kMaxLogSearch = 256;
struct SandboxLogsRequest {
  std::optional<int64_t> cursor_ms;
  bool backward = false;
  int limit = kMaxLogEntries;
  LogLevel min_level = LogLevel::kDebug;
  std::string search;  // "" : any
  // Does an entry at `ts_ms` with `level` and `message` pass every filter
  // but the limit?
  bool Keeps(int64_t ts_ms, std::string_view level, std::string_view message) const;
};
StatusOr<SandboxLogsRequest> ParseSandboxLogs(const QueryFn& query, bool v2);

}  // namespace airlock::gateway
