// libFuzzer target for POST /sandboxes/{id}/snapshots (server/requests/snapshot.h).
#include "server/requests/snapshot.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto body = fuzz::JsonObject(data, size);
  if (!body) return 0;
  auto r = server::requests::ParseSnapshot(*body);
  if (!r.ok()) fuzz::Check(r.status().code() == StatusCode::kInvalidArgument);
  return 0;
}
