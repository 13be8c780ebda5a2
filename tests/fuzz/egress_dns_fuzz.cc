// libFuzzer target for airlock's DNS message code (src/egress/dns_message):
// a guest's query (ParseQuery) and an upstream answer (ParseResponse), plus
// the property that whatever ParseQuery accepts, BuildResponse turns into a
// message ParseResponse accepts again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "egress/dns_message.h"
#include "egress/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock::egress;
  auto q = dns::ParseQuery(data, size);
  if (q.ok()) {
    if (q->name.size() > 253) std::abort();
    auto resp = dns::BuildResponse(*q, dns::kRcodeNoError, {{0xCB00710A, 30}});
    auto back = dns::ParseResponse(resp.data(), resp.size(), q->id, q->name, q->qtype);
    if (!back.ok()) std::abort();
    if (q->qtype == dns::kTypeA && (back->a.size() != 1 || back->a[0].ip != 0xCB00710A)) std::abort();
    (void)EgressPolicy().CheckName(q->name);
  }
  if (size >= 2) {
    uint16_t id = static_cast<uint16_t>((data[0] << 8) | data[1]);
    (void)dns::ParseResponse(data, size, id, "allowed.test", dns::kTypeA);
  }
  (void)dns::BuildFormErr(data, size);
  return 0;
}
