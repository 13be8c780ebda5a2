// The form of E2B's Idempotency-Key header, which a node remembers
// (server/idempotency.h) and a cluster's front routes by
// (cluster/front.h): 1..kMaxIdempotencyKey visible ASCII characters
// (0x21..0x7e); anything else is a 400 at the node.
#pragma once

#include <cstddef>
#include <string>

namespace airlock::gateway {

inline constexpr size_t kMaxIdempotencyKey = 255;

inline bool ValidIdempotencyKey(const std::string& key) {
  if (key.empty() || key.size() > kMaxIdempotencyKey) return false;
  for (unsigned char ch : key) {
    if (ch < 0x21 || ch > 0x7e) return false;
  }
  return true;
}

}  // namespace airlock::gateway
