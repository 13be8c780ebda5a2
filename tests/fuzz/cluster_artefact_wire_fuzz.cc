// libFuzzer target for the artefact wire a node reads from another node
// (cluster/artefacts.h "Wire"; the parsers in artefact_hash.h): the chunked
// framing and, inside it, the extent records, fed in two pieces split where
// the input says. Input: 1 byte split point, 2 bytes of logical size, the
// body. Whatever the bytes, the reader never passes the size, every byte it
// hands out is accounted for in its offset, and a refusal is Unavailable.
#include "cluster/artefact_hash.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  using namespace airlock::cluster::artefact_internal;
  if (size < 3) return 0;
  const size_t split = data[0];
  const int64_t logical = (int64_t{data[1]} << 8) | data[2];
  std::string_view body(reinterpret_cast<const char*>(data + 3), size - 3);
  for (bool chunked : {true, false}) {
    ChunkedDecoder chunks;
    ExtentReader reader(0, logical);
    int64_t handed = 0;
    ExtentReader::Sinks sinks{[&](std::string_view d) {
                                handed += static_cast<int64_t>(d.size());
                                return OkStatus();
                              },
                              [&](int64_t n) {
                                fuzz::Check(n > 0);
                                handed += n;
                                return OkStatus();
                              }};
    auto feed = [&](std::string_view piece) -> Status {
      if (!chunked) return reader.Feed(piece, sinks);
      return chunks.Feed(piece, [&](std::string_view d) { return reader.Feed(d, sinks); });
    };
    const size_t at = std::min(split, body.size());
    Status st = feed(body.substr(0, at));
    if (st.ok()) st = feed(body.substr(at));
    if (!st.ok()) fuzz::Check(st.code() == StatusCode::kUnavailable);
    fuzz::Check(reader.off() <= logical);
    fuzz::Check(handed <= reader.off());
    if (reader.done()) fuzz::Check(handed == logical);
  }
  return 0;
}
