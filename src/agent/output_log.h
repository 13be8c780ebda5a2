// The output a process has written, held so that a client whose stream
// dropped can resume where it stopped (process.Process/Connect with
// resumeFrom; docs/agent.md "Resumable output").
//
// Shape: the pieces in the order the agent read them (stdout and stderr
// interleaved as they came), each with its stream and the offset of its
// first byte within that stream. Offsets count every byte the process wrote
// to a stream since it started, held or not.
//
// Bounds: Held() counts each piece's allocated capacity plus
// kPieceOverhead, so neither a flood of one-byte writes nor a string's
// geometric growth holds more memory than the budget says; a piece shorter
// than kCoalesce is extended by the next read of the same stream. Trim
// drops the oldest pieces first; what was dropped can no longer be resumed
// from (out_of_range).
//
// Reading: Next hands out one piece at a time from a cursor (the offsets
// read so far and a piece sequence number), so a slow reader holds no copy
// and each call costs O(1) amortized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "envd/messages.h"

namespace airlock::agent {

class OutputLog {
 public:
  static constexpr size_t kPieceOverhead = 64;  // a deque slot and a std::string header, rounded up
  static constexpr size_t kCoalesce = 32 * 1024;

  // Appends what was read from `stream`; returns the offset of its first byte.
  uint64_t Append(envd::DataEvent::Stream stream, std::string_view data);
  // Bytes held, overhead included.
  size_t Held() const { return held_; }
  // Drops the oldest pieces until Held() <= budget; returns the bytes released.
  size_t Trim(size_t budget);
  // Bytes written per stream since the start.
  const envd::OutputOffsets& End() const { return end_; }
  // The first offset per stream that is still held (End() when none is).
  const envd::OutputOffsets& HeldFrom() const { return held_from_; }

  // Where a reader stands: the bytes of each stream it has, and the
  // sequence number of the piece to look at next (pieces are numbered from
  // 0 in the order they were made, dropped ones included).
  struct Cursor {
    envd::OutputOffsets from{};
    uint64_t piece = 0;
  };
  // out_of_range when some stream's offset in `from` is before what is held
  // or after its end; OK when reading from there can start.
  Status Check(const envd::OutputOffsets& from) const;
  // The next held output after the cursor, as a data event with its offset,
  // advancing the cursor; nullopt when the reader has everything written so
  // far. out_of_range when some stream's offset is before what is held
  // (dropped, perhaps while the reader was slow) or after its end (never
  // written).
  StatusOr<std::optional<envd::DataEvent>> Next(Cursor* cursor) const;
  // All of it at once (Next until nullopt).
  StatusOr<std::vector<envd::DataEvent>> Since(const envd::OutputOffsets& from) const;

 private:
  struct Piece {
    envd::DataEvent::Stream stream;
    uint64_t offset;
    std::string data;
  };
  std::deque<Piece> pieces_;
  uint64_t dropped_pieces_ = 0;  // the sequence number of pieces_.front()
  size_t held_ = 0;
  envd::OutputOffsets end_{};
  envd::OutputOffsets held_from_{};
};

}  // namespace airlock::agent
