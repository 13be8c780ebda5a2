// Connect protocol v1 envelope framing (server-streaming calls).
//
// Wire shape: flags (1 byte) | length (uint32, big-endian) | payload.
// flags bit 0x01 = compressed (never produced, rejected when decoding),
// bit 0x02 = end-of-stream. The end-of-stream payload is a JSON object:
// `{}` on success or `{"error":{"code":"not_found","message":"..."}}`.
//
// The decoder sees untrusted bytes: it accepts input split anywhere and
// rejects any frame whose declared length exceeds max_message_bytes with
// resource_exhausted, before buffering the payload.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace airlock::envd {

inline constexpr uint8_t kFlagCompressed = 0x01;
inline constexpr uint8_t kFlagEndStream = 0x02;
inline constexpr size_t kEnvelopeHeaderBytes = 5;
inline constexpr size_t kDefaultMaxMessageBytes = 4 << 20;  // 4 MiB

struct Envelope {
  uint8_t flags = 0;
  std::string payload;
  bool end_stream() const { return (flags & kFlagEndStream) != 0; }
};

// flags | BE32(len) | payload.
std::string EncodeEnvelope(std::string_view payload, uint8_t flags = 0);
// Appends the same bytes to *out (avoids a copy for big payloads).
void AppendEnvelope(std::string* out, std::string_view payload, uint8_t flags = 0);

// End-of-stream frame: payload `{}` when status is OK, else
// `{"error":{"code":"<code>","message":"<message>"}}`.
std::string EndStreamPayload(const Status& status);
std::string EncodeEndStream(const Status& status);

// Parses an end-of-stream payload. Returns OK for `{}` (metadata ignored),
// the carried error for `{"error":...}`, and an internal error for
// anything that is not a JSON object (the payload itself was bad).
Status ParseEndStream(std::string_view payload);

// Incremental decoder. Feed() any number of bytes; complete envelopes are
// queued and taken with Next(). After an error the decoder stays failed.
class EnvelopeDecoder {
 public:
  explicit EnvelopeDecoder(size_t max_message_bytes = kDefaultMaxMessageBytes)
      : max_(max_message_bytes) {}

  // Errors: resource_exhausted (frame over the limit), invalid_argument
  // (compressed flag or unknown flag bits set).
  Status Feed(std::string_view bytes);
  std::optional<Envelope> Next();
  // True when no partial frame is buffered (a clean place for EOF).
  bool AtBoundary() const { return buf_.empty(); }
  // Bytes of a partially received frame.
  size_t buffered() const { return buf_.size(); }

 private:
  size_t max_;
  std::string buf_;
  std::deque<Envelope> ready_;
  Status error_;
};

}  // namespace airlock::envd
