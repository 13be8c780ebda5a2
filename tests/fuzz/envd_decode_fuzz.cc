// libFuzzer target for the untrusted-byte parsers of airlock_envd: the
// envelope decoder (fed in two pieces split at the first byte), the
// end-of-stream parser and the event/entry/request JSON parsers.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "envd/envelope.h"
#include "envd/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock::envd;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t split = size ? data[0] % (size + 1) : 0;
  EnvelopeDecoder dec(1 << 16);
  if (dec.Feed(in.substr(0, split)).ok() && dec.Feed(in.substr(split)).ok()) {
    while (auto e = dec.Next()) {
      if (e->end_stream()) {
        (void)ParseEndStream(e->payload);
      } else {
        (void)ParseEventResponse(e->payload);
      }
    }
  }
  if (auto j = ParseJsonObject(in); j.ok()) {
    (void)StartRequestFromJson(*j);
    (void)SendInputRequestFromJson(*j);
    (void)EntryInfoFromJson(*j);
    (void)ProcessEventFromJson(*j);
  }
  (void)Base64Decode(in);
  (void)ParseTimestamp(in);
  return 0;
}
