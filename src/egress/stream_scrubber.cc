#include "egress/stream_scrubber.h"

#include <algorithm>
#include <cstring>

namespace airlock::egress {

StreamScrubber::StreamScrubber(std::vector<std::string> patterns) {
  for (auto& p : patterns)
    if (p.size() >= 4) patterns_.push_back(std::move(p));
  std::sort(patterns_.begin(), patterns_.end());
  patterns_.erase(std::unique(patterns_.begin(), patterns_.end()), patterns_.end());
}

std::string StreamScrubber::Feed(std::string_view in) {
  pending_.append(in);
  if (patterns_.empty()) return Release(pending_.size());
  for (const auto& p : patterns_) {
    for (size_t pos = pending_.find(p); pos != std::string::npos; pos = pending_.find(p, pos + 1))
      masks_.push_back({base_ + pos, base_ + pos + p.size()});
  }
  // One interval per run of overlapping matches, so each run reads as one
  // marker. A run's start never moves (earlier matches come first).
  std::sort(masks_.begin(), masks_.end(), [](const Match& a, const Match& b) { return a.start < b.start; });
  std::vector<Match> merged;
  for (const auto& m : masks_) {
    if (!merged.empty() && m.start <= merged.back().end)
      merged.back().end = std::max(merged.back().end, m.end);
    else
      merged.push_back(m);
  }
  masks_ = std::move(merged);
  // Hold back the longest tail that is a proper prefix of a pattern.
  size_t hold = 0;
  for (const auto& p : patterns_) {
    for (size_t k = std::min(p.size() - 1, pending_.size()); k > hold; --k) {
      if (std::memcmp(pending_.data() + pending_.size() - k, p.data(), k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return Release(pending_.size() - hold);
}

std::string StreamScrubber::Flush() { return Release(pending_.size()); }

std::string StreamScrubber::Release(size_t n) {
  std::string out = pending_.substr(0, n);
  const uint64_t end = base_ + n;
  for (const auto& m : masks_) {
    const uint64_t len = m.end - m.start;
    for (uint64_t at = std::max(m.start, base_); at < std::min(m.end, end); ++at) {
      const uint64_t j = at - m.start;
      out[at - base_] = len >= kMarker.size() && j < kMarker.size() ? kMarker[j] : '*';
    }
  }
  pending_.erase(0, n);
  base_ = end;
  // A match that ends right here is kept: one that starts here continues its marker.
  std::erase_if(masks_, [&](const Match& m) { return m.end < base_; });
  return out;
}

std::string StreamScrubber::ScrubAll(std::string_view text) const {
  StreamScrubber once;
  once.patterns_ = patterns_;
  std::string out = once.Feed(text);
  return out + once.Flush();
}

}  // namespace airlock::egress
