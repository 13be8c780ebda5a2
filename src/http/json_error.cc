#include "http/json_error.h"

#include <cstdio>

namespace airlock::http {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the well-formed UTF-8 sequence `lead` starts (Unicode Table 3-7),
// with the allowed range of its second byte; 0 for a byte that cannot lead.
int SequenceLength(unsigned char lead, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead == 0xE0) return lo = 0xA0, 3;
  if (lead >= 0xE1 && lead <= 0xEC) return 3;
  if (lead == 0xED) return hi = 0x9F, 3;
  if (lead >= 0xEE && lead <= 0xEF) return 3;
  if (lead == 0xF0) return lo = 0x90, 4;
  if (lead >= 0xF1 && lead <= 0xF3) return 4;
  if (lead == 0xF4) return hi = 0x8F, 4;
  return 0;
}

}  // namespace

std::string JsonQuote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c <= 0x1F) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", c);
            out += esc;
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    // A multi-byte sequence: copied when well-formed; otherwise its longest
    // valid prefix (at least the lead byte) becomes one U+FFFD and decoding
    // resumes at the byte that broke it.
    unsigned char lo, hi;
    int len = SequenceLength(c, lo, hi);
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool ok = true;
    for (int k = 1; k < len; ++k, ++j) {
      if (j >= s.size()) {
        ok = false;
        break;
      }
      auto b = static_cast<unsigned char>(s[j]);
      unsigned char min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
      if (b < min || b > max) {
        ok = false;
        break;
      }
    }
    if (ok) {
      out.append(s.substr(i, static_cast<size_t>(len)));
    } else {
      out += kReplacement;
    }
    i = j;
  }
  out.push_back('"');
  return out;
}

std::string JsonError(int status, std::string_view message) {
  return "{\"code\":" + std::to_string(status) + ",\"message\":" + JsonQuote(message) + "}";
}

std::string JsonError(int status, std::string_view message, std::string_view error_code) {
  if (error_code.empty()) return JsonError(status, message);
  return "{\"code\":" + std::to_string(status) + ",\"error_code\":" + JsonQuote(error_code) +
         ",\"message\":" + JsonQuote(message) + "}";
}

}  // namespace airlock::http
