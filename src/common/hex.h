// Hexadecimal encoding of bytes, header-only so that every library (the
// static guest agent's too) can use it without linking anything.
//
// Shapes: two characters per input byte, high nibble first; lower case
// ("0123456789abcdef") unless asked for upper case. No errors.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace airlock {

inline constexpr char kHexDigitsLower[] = "0123456789abcdef";
inline constexpr char kHexDigitsUpper[] = "0123456789ABCDEF";

// Appends the two hex digits of `byte` to `out`.
inline void AppendHexByte(std::string& out, unsigned char byte, bool upper = false) {
  const char* digits = upper ? kHexDigitsUpper : kHexDigitsLower;
  out.push_back(digits[byte >> 4]);
  out.push_back(digits[byte & 15]);
}

// Lower-case hex of the `n` bytes at `data` (2 * n characters).
inline std::string HexEncode(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) AppendHexByte(out, p[i]);
  return out;
}

inline std::string HexEncode(std::string_view bytes) { return HexEncode(bytes.data(), bytes.size()); }

}  // namespace airlock
