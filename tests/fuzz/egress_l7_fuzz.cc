// libFuzzer target for the egress proxy's first-bytes parsers
// (src/egress/l7_parse): TLS ClientHello SNI and HTTP request head (Host).
// Properties: a name they return is already normalised, and a parser never
// changes its mind about a prefix it called complete.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "egress/l7_parse.h"
#include "egress/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock::egress;
  for (auto parse : {&ParseClientHello, &ParseHttpRequestHead}) {
    L7Result r = parse(data, size);
    if (r.kind == L7Result::Kind::kOk) {
      if (r.host.empty() || NormalizeName(r.host) != r.host) std::abort();
      if (r.consumed == 0 || r.consumed > size) std::abort();
      // The same bytes plus anything after them give the same answer.
      L7Result again = parse(data, r.consumed);
      if (again.kind != L7Result::Kind::kOk || again.host != r.host) std::abort();
    }
  }
  return 0;
}
