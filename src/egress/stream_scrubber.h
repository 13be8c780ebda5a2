// StreamScrubber: masks byte patterns (the forms of brokered secret values,
// request_broker.h) in a stream read in arbitrary pieces, such as a
// response body relayed to a guest (docs/secrets.md "Responses").
//
// Contract:
//   - a pattern is masked wherever it occurs in the stream, also when it is
//     split across Feed() calls;
//   - masking keeps the length: each byte of a match becomes a byte of the
//     marker "[REDACTED]", then '*' (a match shorter than the marker is all
//     '*'), so Content-Length and chunk sizes stay true without re-framing;
//   - Feed() returns every byte that can no longer be part of a match and
//     holds back only the longest tail that is the start of some pattern
//     (text ending "\n\n" is released at once unless a pattern starts with
//     "\n"), so a streamed answer is not delayed;
//   - Flush() releases the held tail (the end of a body or of the stream).
// Patterns shorter than 4 bytes are ignored. Not thread-safe (one per
// connection, loop thread).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::egress {

class StreamScrubber {
 public:
  StreamScrubber() = default;
  explicit StreamScrubber(std::vector<std::string> patterns);
  bool empty() const { return patterns_.empty(); }
  std::string Feed(std::string_view in);
  std::string Flush();
  // Masks every pattern in `text` at once (a header value).
  std::string ScrubAll(std::string_view text) const;
  static constexpr std::string_view kMarker = "[REDACTED]";

 private:
  struct Match {
    uint64_t start, end;  // absolute stream offsets
  };
  std::string Release(size_t n);

  std::vector<std::string> patterns_;
  std::string pending_;       // bytes held back, unmasked
  uint64_t base_ = 0;         // stream offset of pending_[0]
  std::vector<Match> masks_;  // matches reaching into pending_ or beyond
};

}  // namespace airlock::egress
