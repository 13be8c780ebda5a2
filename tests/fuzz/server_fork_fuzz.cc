// libFuzzer target for POST /sandboxes/{id}/fork (server/requests/fork.h).
#include "server/requests/fork.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto body = fuzz::JsonObject(data, size);
  if (!body) return 0;
  auto r = server::requests::ParseFork(*body);
  if (!r.ok()) {
    fuzz::Check(r.status().code() == StatusCode::kInvalidArgument);
    return 0;
  }
  fuzz::Check(r->count >= 1 && r->count <= server::requests::kMaxForkCount);
  fuzz::Check(!r->timeout_s || *r->timeout_s >= 0);
  return 0;
}
