// libFuzzer target for POST /sandboxes/{id}/rollback (server/requests/checkpoint.h).
#include "server/requests/checkpoint.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto body = fuzz::JsonObject(data, size);
  if (!body) return 0;
  auto r = server::requests::ParseRollback(*body);
  if (!r.ok()) fuzz::Check(r.status().code() == StatusCode::kInvalidArgument);
  if (r.ok()) fuzz::Check(!r->checkpoint_id.empty() && r->checkpoint_id.size() <= 64);
  return 0;
}
