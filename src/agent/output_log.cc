#include "agent/output_log.h"

namespace airlock::agent {

namespace {
const char* Name(size_t stream) { return envd::StreamName(static_cast<envd::DataEvent::Stream>(stream)); }
}  // namespace

uint64_t OutputLog::Append(envd::DataEvent::Stream stream, std::string_view data) {
  const size_t s = static_cast<size_t>(stream);
  const uint64_t offset = end_[s];
  if (data.empty()) return offset;
  end_[s] += data.size();
  // held_from_[s] needs no change: with nothing of this stream held it is
  // already End()[s], the offset this piece starts at.
  if (!pieces_.empty() && pieces_.back().stream == stream && pieces_.back().data.size() < kCoalesce) {
    std::string& back = pieces_.back().data;
    const size_t before = back.capacity();
    back.append(data);
    // Full: give back what geometric growth over-allocated (up to twice).
    if (back.size() >= kCoalesce) back.shrink_to_fit();
    held_ = held_ - before + back.capacity();
    return offset;
  }
  pieces_.push_back(Piece{stream, offset, std::string(data)});
  held_ += pieces_.back().data.capacity() + kPieceOverhead;
  return offset;
}

size_t OutputLog::Trim(size_t budget) {
  size_t released = 0;
  while (held_ > budget && !pieces_.empty()) {
    Piece& p = pieces_.front();
    const size_t s = static_cast<size_t>(p.stream);
    const size_t cost = p.data.capacity() + kPieceOverhead;
    held_ -= cost;
    released += cost;
    held_from_[s] = p.offset + p.data.size();
    pieces_.pop_front();
    ++dropped_pieces_;
  }
  return released;
}

Status OutputLog::Check(const envd::OutputOffsets& from) const {
  for (size_t s = 0; s < from.size(); ++s) {
    if (from[s] > end_[s]) {
      return OutOfRange(std::string("resumeFrom.") + Name(s) + " " + std::to_string(from[s]) + " is past the " +
                        std::to_string(end_[s]) + " bytes the process has written to " + Name(s));
    }
    if (from[s] < held_from_[s]) {
      return OutOfRange(std::string("the output of ") + Name(s) + " before byte " +
                        std::to_string(held_from_[s]) + " is no longer held (resumeFrom." + Name(s) + " " +
                        std::to_string(from[s]) + ")");
    }
  }
  return OkStatus();
}

StatusOr<std::optional<envd::DataEvent>> OutputLog::Next(Cursor* c) const {
  RETURN_IF_ERROR(Check(c->from));
  size_t i = c->piece > dropped_pieces_ ? static_cast<size_t>(c->piece - dropped_pieces_) : 0;
  for (; i < pieces_.size(); ++i) {
    const Piece& p = pieces_[i];
    const size_t s = static_cast<size_t>(p.stream);
    const uint64_t end = p.offset + p.data.size();
    if (end <= c->from[s]) continue;
    const size_t skip = c->from[s] > p.offset ? static_cast<size_t>(c->from[s] - p.offset) : 0;
    c->from[s] = end;
    // Stay on this piece: it may still grow (Append extends the newest).
    c->piece = dropped_pieces_ + i;
    return std::optional<envd::DataEvent>(envd::DataEvent{p.stream, p.data.substr(skip), p.offset + skip});
  }
  c->piece = dropped_pieces_ + (pieces_.empty() ? 0 : pieces_.size() - 1);
  return std::optional<envd::DataEvent>();
}

StatusOr<std::vector<envd::DataEvent>> OutputLog::Since(const envd::OutputOffsets& from) const {
  Cursor c{from, 0};
  std::vector<envd::DataEvent> out;
  while (true) {
    ASSIGN_OR_RETURN(auto ev, Next(&c));
    if (!ev) return out;
    out.push_back(std::move(*ev));
  }
}

}  // namespace airlock::agent
