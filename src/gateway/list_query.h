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

}  // namespace airlock::gateway
