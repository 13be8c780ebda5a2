// libFuzzer target for POST /sandboxes/{id}/pause (server/requests/pause.h).
#include "server/requests/pause.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto body = fuzz::JsonObject(data, size);
  if (!body) return 0;
  auto r = server::requests::ParsePause(*body);
  if (!r.ok()) {
    fuzz::Check(r.status().code() == StatusCode::kInvalidArgument);
    return 0;
  }
  auto m = body->find("memory");
  fuzz::Check(r->keep_memory == (m == body->end() || m->is_null() || m->get<bool>()));
  return 0;
}
