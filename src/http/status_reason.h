// The one status-code → reason-phrase table (RFC 9110 §15, plus the de facto
// 499 "Client Closed Request"), used by every status line airlock writes.
#pragma once

#include <string_view>

namespace airlock::http {

// "OK", "Not Found", ...; "Status" for a code without a registered phrase
// (a reason phrase is informational only, RFC 9112 §4).
std::string_view ReasonPhrase(int status);

}  // namespace airlock::http
