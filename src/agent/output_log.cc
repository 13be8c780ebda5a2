#include "agent/output_log.h"

namespace airlock::agent {

namespace {
constexpr const char* kNames[] = {"stdout", "stderr", "pty"};
}

uint64_t OutputLog::Append(envd::DataEvent::Stream stream, std::string_view data) {
  const size_t s = static_cast<size_t>(stream);
  const uint64_t offset = end_[s];
  if (data.empty()) return offset;
  end_[s] += data.size();
  if (!pieces_.empty() && pieces_.back().stream == stream && pieces_.back().data.size() < kCoalesce) {
    pieces_.back().data.append(data);
    held_ += data.size();
    return offset;
  }
  // held_from_[s] needs no change: with nothing of this stream held it is
  // already End()[s], the offset this piece starts at.
  pieces_.push_back(Piece{stream, offset, std::string(data)});
  held_ += data.size() + kPieceOverhead;
  return offset;
}

size_t OutputLog::Trim(size_t budget) {
  size_t released = 0;
  while (held_ > budget && !pieces_.empty()) {
    Piece& p = pieces_.front();
    const size_t s = static_cast<size_t>(p.stream);
    const size_t cost = p.data.size() + kPieceOverhead;
    held_ -= cost;
    released += cost;
    held_from_[s] = p.offset + p.data.size();
    pieces_.pop_front();
  }
  return released;
}

StatusOr<std::vector<envd::DataEvent>> OutputLog::Since(const envd::OutputOffsets& from) const {
  for (size_t s = 0; s < from.size(); ++s) {
    if (from[s] > end_[s]) {
      return OutOfRange(std::string("resumeFrom.") + kNames[s] + " " + std::to_string(from[s]) +
                        " is past the " + std::to_string(end_[s]) + " bytes the process has written to " +
                        kNames[s]);
    }
    if (from[s] < held_from_[s]) {
      return OutOfRange(std::string("the output of ") + kNames[s] + " before byte " +
                        std::to_string(held_from_[s]) + " is no longer held (resumeFrom." + kNames[s] + " " +
                        std::to_string(from[s]) + ")");
    }
  }
  std::vector<envd::DataEvent> out;
  for (const auto& p : pieces_) {
    const uint64_t start = from[static_cast<size_t>(p.stream)];
    const uint64_t end = p.offset + p.data.size();
    if (end <= start) continue;
    const size_t skip = start > p.offset ? static_cast<size_t>(start - p.offset) : 0;
    out.push_back(envd::DataEvent{p.stream, p.data.substr(skip), p.offset + skip});
  }
  return out;
}

}  // namespace airlock::agent
