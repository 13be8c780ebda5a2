// SHA-256 helpers and the cache keys built from them.
//
// A cache key is the SHA-256 of a canonical serialisation of named inputs
// ("name" NUL "value" NUL, in insertion order), so the same inputs always give
// the same key and no two different input lists collide by concatenation.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace airlock::image {

// Lower-case hex SHA-256 (64 chars) of `data`.
std::string Sha256Hex(std::string_view data);
// Lower-case hex SHA-256 of a file's bytes; errors name the path.
StatusOr<std::string> Sha256File(const std::string& path);

class KeyBuilder {
 public:
  KeyBuilder& Add(std::string_view name, std::string_view value);
  KeyBuilder& Add(std::string_view name, const std::vector<std::string>& values);
  // Full 64-char hex digest.
  std::string Digest() const;
  // The first 20 hex chars (80 bits): what directory names use.
  std::string ShortDigest() const { return Digest().substr(0, 20); }

 private:
  std::string buf_;
};

}  // namespace airlock::image
