// libFuzzer target for the list query parsers (gateway/list_query.h):
// sandboxes, snapshots, secrets and sandbox logs, and the page-token and metadata-filter
// helpers they use.
#include "gateway/list_query.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto q = fuzz::QueryMap(data, size);
  gateway::QueryFn query = [&q](const std::string& name) -> std::optional<std::string> {
    auto it = q.find(name);
    if (it == q.end()) return std::nullopt;
    return it->second;
  };
  auto limit_ok = [](int limit) { return limit >= 1 && limit <= gateway::kMaxPage; };
  if (auto r = gateway::ParseListSandboxes(query); r.ok()) {
    fuzz::Check(limit_ok(r->limit));
  } else {
    fuzz::Check(r.status().code() == StatusCode::kInvalidArgument);
  }
  if (auto r = gateway::ParseListSnapshots(query); r.ok()) fuzz::Check(limit_ok(r->limit));
  if (auto r = gateway::ParseListSecrets(query); r.ok()) fuzz::Check(limit_ok(r->limit));
  for (bool v2 : {false, true}) {
    if (auto r = gateway::ParseSandboxLogs(query, v2); r.ok()) {
      fuzz::Check(r->limit >= 0 && r->limit <= gateway::kMaxLogEntries);
      fuzz::Check(r->search.size() <= gateway::kMaxLogSearch);
      (void)r->Keeps(0, "info", "x");
    } else {
      fuzz::Check(r.status().code() == StatusCode::kInvalidArgument);
    }
  }
  std::string all(reinterpret_cast<const char*>(data), size);
  (void)gateway::ParseMetadataFilter(all);
  if (auto t = gateway::ParsePageToken(all)) fuzz::Check(!t->second.empty());
  return 0;
}
