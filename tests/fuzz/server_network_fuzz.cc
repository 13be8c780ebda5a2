// libFuzzer target for PUT /sandboxes/{id}/network (server/requests/network.h)
// and the egress fields of a create body.
#include "server/requests/network.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto body = fuzz::JsonObject(data, size);
  if (!body) return 0;
  bool internet = size > 0 && (data[0] & 1);
  if (auto r = server::requests::ParseNetworkUpdate(*body, internet); r.ok()) {
    (void)r->policy.ToJson();
  } else {
    fuzz::Check(!r.status().message().empty());
  }
  (void)server::PolicyFromCreateBody(*body);
  return 0;
}
