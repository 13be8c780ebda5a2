// Redactor: removes secret values from anything airlock writes (daemon log
// lines, audit records, API error bodies, metrics labels).
//
// For each registered value it matches, case-sensitively:
//   - the raw bytes;
//   - URL-encoded forms (RFC 3986 percent-encoding with upper- and lower-case
//     hex, and form encoding with '+' for space);
//   - base64, standard and URL-safe alphabets, at each of the three byte
//     alignments the value can have inside a longer encoded stream (only the
//     characters determined by the value's own bits are matched, so a secret
//     embedded in a base64 blob is found too).
// Every match becomes "[REDACTED:<name>]". Values shorter than
// kMinSecretBytes are refused by Add (their encodings would match noise).
// Thread-safe: Add and the Redact calls may race.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::secrets {

inline constexpr size_t kMinSecretBytes = 8;

class Redactor {
 public:
  // invalid_argument when `value` is shorter than kMinSecretBytes.
  Status Add(const std::string& name, const std::string& value);
  std::string Redact(std::string_view text) const;
  // Redacts every string value and every object key, recursively.
  void RedactJson(nlohmann::json* j) const;
  bool empty() const;

  // The patterns registered for one value (exposed for tests).
  static std::vector<std::string> Forms(const std::string& value);

 private:
  struct Pattern {
    std::string text;
    std::string replacement;
  };
  mutable std::shared_mutex mu_;
  std::vector<Pattern> patterns_;  // longest first
};

}  // namespace airlock::secrets
