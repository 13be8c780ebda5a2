// URL helpers shared by every HTTP endpoint of airlock (daemon, agent, CLI):
// percent-decoding, query-string parsing and percent-encoding (RFC 3986).
// Pure functions on bytes; no allocation beyond the returned value, no errors
// (malformed escapes are kept literally, as browsers and Go's net/url do).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::http {

// Decodes %XX escapes (either hex case); an incomplete or non-hex escape is
// kept as is. `plus_is_space`: '+' → ' ' (query strings, forms), else kept.
std::string UrlDecode(std::string_view s, bool plus_is_space);

// "a=1&b=x%20y&c" → {a:"1", b:"x y", c:""}; keys and values decoded with
// plus_is_space; empty pairs skipped; a repeated key keeps its first value.
std::map<std::string, std::string> ParseQuery(std::string_view query);

// Splits a request target "/p%20ath?q" into the percent-decoded path ("/p ath";
// '+' kept) and the raw query ("q"; empty when there is no '?').
std::pair<std::string, std::string_view> SplitTarget(std::string_view target);

// "/a//b/c" → {"a","b","c"} (empty segments dropped; nothing decoded).
std::vector<std::string> PathSegments(std::string_view path);

// Percent-encodes everything except unreserved characters (RFC 3986 §2.3).
std::string UrlEncodeComponent(std::string_view s);

}  // namespace airlock::http
