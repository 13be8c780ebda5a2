// Comparison of secrets (access tokens, signatures, upload tokens, a
// cluster's reservation secret) whose time does not depend on where the
// first difference is, so a caller cannot find a secret byte by byte from
// timings. The length is not secret (tokens have a fixed length).
#pragma once

#include <string_view>

namespace airlock {

inline bool SecureEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

}  // namespace airlock
