// What the daemon's own origin never serves from a guest (docs/server.md
// "Guest bytes on the daemon's origin", docs/console.md "Security"). A guest
// is hostile: root in it can replace the agent and answer anything, and it
// knows its own access token, so it can sign any /files URL.
//
//   - A signed /files URL (spec §4.2) carries only what the E2B SDK sends:
//     path, username, signature_expiration (all three signed) and signature,
//     each at most once; any other parameter would ride along unsigned and
//     is refused. signature_expiration, when present, is Unix seconds in
//     digits, not past, and at most kMaxSignedUrlLifetime ahead (plus
//     kSignedUrlClockSkew for the client's clock). No expiration at all stays
//     valid (the SDK's default: downloadUrl()/uploadUrl() without
//     useSignatureExpiration sign none) for as long as the sandbox's token.
//   - A request a browser makes for a service worker's script
//     (Service-Worker: script) is refused on the daemon's origin.
//   - Every answer relayed from a guest loses Service-Worker-Allowed and
//     gets X-Content-Type-Options: nosniff. An answer to /files on the
//     agent's port (any method, any status, signed or not) is a download the
//     browser never renders: Content-Type application/octet-stream (JSON
//     kept only for a non-GET answer that says application/json, such as an
//     upload's result), Content-Disposition: attachment and
//     Content-Security-Policy: sandbox; default-src 'none'. The guest's own
//     values of those headers are dropped.
//   - One origin serves every sandbox, chosen by request headers
//     (E2b-Sandbox-Id and -Port, or X-Access-Token alone): every guest answer
//     gets Vary on those three, so no shared or browser cache hands one
//     sandbox's answer to a request for another; an agent /files answer
//     (private bytes) also gets Cache-Control: no-store, replacing the
//     guest's.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "http/conn.h"

namespace airlock::gateway {

// The longest a signed URL's explicit expiration may lie ahead: one day, the
// longest TTL `serve` gives by default (--max-timeout 86400) and E2B's
// longest sandbox lifetime, while the SDK's own examples ask for minutes.
inline constexpr std::chrono::seconds kMaxSignedUrlLifetime{24 * 3600};
inline constexpr std::chrono::seconds kSignedUrlClockSkew{300};

// The raw query of a signed /files request ("a=1&b=2", as sent) checked as
// above; returns its expiration (nullopt: none). Errors (unauthenticated)
// name the fault: an unsigned or repeated parameter, a malformed, past or
// too distant expiration, a missing signature.
StatusOr<std::optional<int64_t>> CheckSignedFileQuery(std::string_view raw_query, int64_t now_s);

// "v1_" + unpadded base64 of SHA-256("<path>:<operation>:<user>:<token>[:<expiration>]")
// (spec §4.2; operation "read" for GET, "write" otherwise).
std::string FileUrlSignature(const std::string& path, const std::string& operation, const std::string& user,
                             const std::string& token, std::optional<int64_t> expiration);

// A signed GET/POST /files request (`c`) checked against the sandbox's
// access token: its query as CheckSignedFileQuery, then the signature
// (constant time). Errors: unauthenticated, naming the fault.
Status CheckFileSignature(const http::Conn& c, const std::string& token, int64_t now_s);

// The request is a browser's fetch of a service worker's script.
bool IsServiceWorkerScript(const http::Conn& c);

// How a relayed answer's head is rewritten.
enum class RelayGuard {
  kNone,       // not a guest's answer (a cluster node's, which guarded it already)
  kGuest,      // any answer of a guest: no Service-Worker-Allowed, nosniff
  kGuestFile,  // /files on the agent's port: kGuest and a forced download
};
RelayGuard GuardForGuest(uint16_t port, std::string_view path);

// Whether the guest's header `name` is dropped under `guard` (its
// Content-Type is read first by the caller, for GuardHeaders).
bool DropsRelayedHeader(RelayGuard guard, std::string_view name);
// The headers added to the relayed head under `guard`.
http::HeaderList GuardHeaders(RelayGuard guard, http::Method method, std::string_view guest_content_type);

}  // namespace airlock::gateway
