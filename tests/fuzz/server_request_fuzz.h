// Shared by the server request-parser fuzz targets (server_*_fuzz.cc): the
// input as a JSON body (parsed without exceptions; only objects reach a
// parser, as ReadJson guarantees) or as a query string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace airlock::fuzz {

inline std::optional<nlohmann::json> JsonObject(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// "a=b&c=d" → {a: b, c: d} (the last of a repeated name wins, as
// HttpConn::Query answers the first; either is fine for a fuzzer).
inline std::map<std::string, std::string> QueryMap(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i <= in.size()) {
    size_t amp = in.find('&', i);
    if (amp == std::string_view::npos) amp = in.size();
    std::string_view kv = in.substr(i, amp - i);
    size_t eq = kv.find('=');
    out[std::string(kv.substr(0, eq))] = eq == std::string_view::npos ? "" : std::string(kv.substr(eq + 1));
    i = amp + 1;
  }
  return out;
}

// A parser promised something it did not keep: crash, so the fuzzer reports it.
inline void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace airlock::fuzz
