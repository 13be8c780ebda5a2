// libFuzzer target for POST /sandboxes/{id}/timeout, .../connect and
// .../refreshes (server/requests/timeout.h).
#include "server/requests/timeout.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto body = fuzz::JsonObject(data, size);
  if (!body) return 0;
  if (auto r = server::requests::ParseSetTimeout(*body); r.ok()) {
    fuzz::Check(r->timeout_s >= 0);
  } else {
    fuzz::Check(r.status().code() == StatusCode::kInvalidArgument);
  }
  if (auto r = server::requests::ParseConnect(*body); r.ok()) fuzz::Check(!r->timeout_s || *r->timeout_s >= 0);
  if (auto r = server::requests::ParseRefresh(*body); r.ok()) {
    fuzz::Check(r->duration_s >= 15 && r->duration_s <= 3600);
  } else {
    fuzz::Check(r.status().code() == StatusCode::kInvalidArgument);
  }
  return 0;
}
