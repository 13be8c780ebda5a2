#include "gateway/list_query.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "common/clock.h"
#include "http/url.h"

namespace airlock::gateway {
namespace {

using http::UrlDecode;

// How an empty ?limit= is read: as absent (sandboxes, snapshots) or as a
// bad value (secrets).
enum class EmptyLimit { kDefault, kInvalid };

// ?limit=: a positive integer, capped at `max`; `max` when absent.
StatusOr<int> PageLimit(const std::optional<std::string>& value, int max, EmptyLimit empty = EmptyLimit::kDefault) {
  if (!value || (value->empty() && empty == EmptyLimit::kDefault)) return max;
  char* end = nullptr;
  long v = std::strtol(value->c_str(), &end, 10);
  if (value->empty() || *end != '\0' || v < 1) return InvalidArgument("limit must be a positive integer");
  return static_cast<int>(std::min<long>(v, max));
}

}  // namespace

std::map<std::string, std::string> ParseMetadataFilter(const std::string& value) {
  std::map<std::string, std::string> out;
  std::string once = UrlDecode(value, false);
  size_t i = 0;
  while (i <= once.size()) {
    size_t amp = once.find('&', i);
    if (amp == std::string::npos) amp = once.size();
    std::string kv = once.substr(i, amp - i);
    if (!kv.empty()) {
      size_t eq = kv.find('=');
      std::string k = UrlDecode(kv.substr(0, eq), true);
      std::string v = eq == std::string::npos ? "" : UrlDecode(kv.substr(eq + 1), true);
      out[k] = v;
    }
    i = amp + 1;
  }
  return out;
}

std::optional<std::pair<int64_t, std::string>> ParsePageToken(const std::string& token) {
  size_t u = token.find('_');
  if (u == std::string::npos || u == 0 || u + 1 >= token.size()) return std::nullopt;
  char* end = nullptr;
  long long ms = std::strtoll(token.c_str(), &end, 10);
  if (end != token.c_str() + u) return std::nullopt;
  return std::make_pair(static_cast<int64_t>(ms), token.substr(u + 1));
}

StatusOr<ListSandboxesRequest> ParseListSandboxes(const QueryFn& query) {
  ListSandboxesRequest r;
  if (auto m = query("metadata"); m && !m->empty()) r.metadata = ParseMetadataFilter(*m);
  if (auto st = query("state"); st && !st->empty()) {
    r.want_running = ("," + *st + ",").find(",running,") != std::string::npos;
    r.want_paused = ("," + *st + ",").find(",paused,") != std::string::npos;
  }
  r.template_id = query("template").value_or("");
  r.ascending = query("order").value_or("desc") == "asc";
  ASSIGN_OR_RETURN(r.limit, PageLimit(query("limit"), kMaxPage));
  if (auto t = query("nextToken"); t && !t->empty()) {
    r.after = ParsePageToken(*t);
    if (!r.after) return InvalidArgument("invalid nextToken");
  }
  for (auto [name, out] :
       {std::pair{"startedAfter", &r.started_after_us}, std::pair{"startedBefore", &r.started_before_us}}) {
    auto v = query(name);
    if (!v) continue;
    auto us = ParseRfc3339Us(*v);
    if (!us.ok()) return InvalidArgument(std::string("invalid ") + name + ": " + us.status().message());
    *out = *us;
  }
  return r;
}

StatusOr<ListSnapshotsRequest> ParseListSnapshots(const QueryFn& query) {
  ListSnapshotsRequest r;
  r.sandbox_id = query("sandboxID").value_or("");
  r.name = query("name").value_or("");
  r.after = query("nextToken").value_or("");
  ASSIGN_OR_RETURN(r.limit, PageLimit(query("limit"), kMaxPage));
  return r;
}

StatusOr<ListSecretsRequest> ParseListSecrets(const QueryFn& query) {
  ListSecretsRequest r;
  ASSIGN_OR_RETURN(r.limit, PageLimit(query("limit"), kMaxPage, EmptyLimit::kInvalid));
  r.after = query("nextToken").value_or("");
  return r;
}

std::optional<LogLevel> ParseLogLevel(std::string_view level) {
  if (level == "debug") return LogLevel::kDebug;
  if (level == "info") return LogLevel::kInfo;
  if (level == "warn" || level == "warning") return LogLevel::kWarn;
  if (level == "error") return LogLevel::kError;
  return std::nullopt;
}

bool SandboxLogsRequest::Keeps(int64_t ts_ms, std::string_view level, std::string_view message) const {
  if (cursor_ms && (backward ? ts_ms > *cursor_ms : ts_ms < *cursor_ms)) return false;
  if (ParseLogLevel(level).value_or(LogLevel::kInfo) < min_level) return false;
  return search.empty() || message.find(search) != std::string_view::npos;
}

StatusOr<SandboxLogsRequest> ParseSandboxLogs(const QueryFn& query, bool v2) {
  SandboxLogsRequest r;
  auto integer = [](const std::string& name, const std::string& v, int64_t max) -> StatusOr<int64_t> {
    char* end = nullptr;
    errno = 0;
    long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno == ERANGE || n < 0 || n > max)
      return InvalidArgument(name + " must be an integer from 0 to " + std::to_string(max));
    return static_cast<int64_t>(n);
  };
  if (auto v = query(v2 ? "cursor" : "start")) {
    ASSIGN_OR_RETURN(r.cursor_ms, integer(v2 ? "cursor" : "start", *v, std::numeric_limits<int64_t>::max()));
  }
  if (auto v = query("limit")) {
    ASSIGN_OR_RETURN(int64_t n, integer("limit", *v, kMaxLogEntries));
    r.limit = static_cast<int>(n);
  }
  if (!v2) return r;
  r.backward = true;
  if (auto v = query("direction")) {
    if (*v != "forward" && *v != "backward") return InvalidArgument("direction must be forward or backward");
    r.backward = *v == "backward";
  }
  if (auto v = query("level")) {
    auto level = ParseLogLevel(*v);
    if (!level || *v == "warning") return InvalidArgument("level must be debug, info, warn or error");
    r.min_level = *level;
  }
  if (auto v = query("search")) {
    if (v->size() > kMaxLogSearch) return InvalidArgument("search must be at most 256 bytes");
    r.search = *v;
  }
  return r;
}

}  // namespace airlock::gateway
