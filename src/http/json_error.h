// The JSON error body of every plain HTTP endpoint of airlock (daemon and
// agent; spec §1.3): {"code":<status>,"message":"..."}. Written by hand so
// the static agent needs no JSON library here; the output is byte-for-byte
// what nlohmann::json::dump(-1, ' ', false, error_handler_t::replace) gives
// (invalid UTF-8 → U+FFFD, control characters escaped; tests/unit/http_test.cc).
#pragma once

#include <string>
#include <string_view>

namespace airlock::http {

// A JSON string literal, quotes included.
std::string JsonQuote(std::string_view s);

std::string JsonError(int status, std::string_view message);
// With E2B's machine-readable `error_code` (its API's Error schema: an open
// set of snake_case strings, e.g. "sandbox_capacity_unavailable"), when
// not empty: {"code":...,"error_code":"...","message":"..."}.
std::string JsonError(int status, std::string_view message, std::string_view error_code);

}  // namespace airlock::http
