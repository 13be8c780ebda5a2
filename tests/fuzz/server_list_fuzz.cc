// libFuzzer target for the list query parsers (server/requests/list.h):
// sandboxes, snapshots and secrets, and the page-token and metadata-filter
// helpers they use.
#include "server/requests/list.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto q = fuzz::QueryMap(data, size);
  server::requests::QueryFn query = [&q](const std::string& name) -> std::optional<std::string> {
    auto it = q.find(name);
    if (it == q.end()) return std::nullopt;
    return it->second;
  };
  auto limit_ok = [](int limit) { return limit >= 1 && limit <= server::requests::kMaxPage; };
  if (auto r = server::requests::ParseListSandboxes(query); r.ok()) {
    fuzz::Check(limit_ok(r->limit));
  } else {
    fuzz::Check(r.status().code() == StatusCode::kInvalidArgument);
  }
  if (auto r = server::requests::ParseListSnapshots(query); r.ok()) fuzz::Check(limit_ok(r->limit));
  if (auto r = server::requests::ParseListSecrets(query); r.ok()) fuzz::Check(limit_ok(r->limit));
  std::string all(reinterpret_cast<const char*>(data), size);
  (void)server::ParseMetadataFilter(all);
  if (auto t = server::ParsePageToken(all)) fuzz::Check(!t->second.empty());
  return 0;
}
