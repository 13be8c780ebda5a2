// AllowedOrigins: the browser origins that may call /mcp (docs/mcp.md;
// MCP spec 2025-06-18 "Transports": servers must check Origin against DNS
// rebinding).
//
// The allowed origins come from what the daemon was configured with, never
// from the request: a rebinding page at http://evil.example:PORT sends
// "Host: evil.example:PORT" too, so comparing Origin with Host lets it in.
//   - serve --listen IP:PORT (PORT: the port bound):
//       loopback IP (127.0.0.0/8, ::1) or a wildcard (0.0.0.0, ::, empty):
//         http://localhost:PORT, http://127.0.0.1:PORT, http://[::1]:PORT
//         (plus http://IP:PORT for another loopback IP);
//       any other IP: http://IP:PORT;
//   - serve --public-url URL: URL's origin (scheme, host, port).
// Origins compare after normalising: scheme and host lower-cased, the
// default port (80, 443) made explicit, IPv6 in brackets. An Origin that is
// not "scheme://host[:port]" with scheme http or https ("null", a path,
// user info) is never allowed.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace airlock::mcp {

class AllowedOrigins {
 public:
  // listen_host: the host part of --listen (brackets optional for IPv6);
  // port: the port the listener bound; public_url: "" or --public-url.
  static AllowedOrigins For(std::string_view listen_host, uint16_t port, std::string_view public_url);
  bool Allows(std::string_view origin) const;
  const std::set<std::string>& origins() const { return origins_; }  // normalised

  // "scheme://host:port" with the port explicit, or nullopt when `origin`
  // is not an http(s) origin. A URL's path, query and fragment are dropped
  // when `url` is true (--public-url); an Origin header must have none.
  static std::optional<std::string> Normalise(std::string_view origin, bool url = false);

 private:
  std::set<std::string> origins_;
};

}  // namespace airlock::mcp
