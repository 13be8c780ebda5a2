// TLS for the daemon's API listener (serve --tls-listen, --tls-cert,
// --tls-key): the address E2B's SDKs reach as https://api.<domain> and
// https://<port>-<id>.<domain> (the 1.x and 2.0 SDKs know nothing else).
//
// Each accepted connection is a TLS server handshake (TLS 1.2 or 1.3, the
// certificate chain and key read at start; ALPN: http/1.1, the only protocol
// offered), then its plaintext is relayed both ways to the API listener
// (`backend`, the daemon's own "ip:port"), so every route, the data plane
// and WebSockets behave as on the plain listener. The API then sees the
// connection coming from the daemon's own address: audit records of
// requests over TLS name no client address.
//
// With a TlsClientAuth (a cluster node's listener, cluster/cluster_tls.h)
// the client must present a certificate that chains to `ca_file` (verified
// for TLS client use) and that `check` accepts (a front's): otherwise the
// handshake fails or the connection is closed at once, nothing reaches the
// API, and the refusal is logged. No session is resumed (no cache, no
// tickets), so every connection is checked with its certificate.
//
// A second class of clients (a cluster's other nodes, fetching artefacts:
// cluster/artefacts.h) may be routed to another backend on loopback,
// 127.0.0.1:peer_backend_port, when `peer_check` is set:
//   - a client that negotiated the ALPN protocol `peer_alpn` (when not
//     empty) goes there if peer_check accepts it, and nowhere otherwise
//     (a member with both roles names which side it wants);
//   - any other client goes to `backend` if `check` accepts it, else
//     there if peer_check accepts it, else is refused.
// ALPN offers peer_alpn (when set) besides http/1.1.
//
// Bounds: a handshake must finish within 10 s; at most kMaxConnections at
// once (more are closed at accept); with a TlsClientAuth, at most 128 in
// their handshake from one address (more are closed at accept), and
// refusals logged 10 per 10 s at most. Out of descriptors, accepting pauses
// 100 ms. Threads: the io_context it is given.
// Errors: Start's InvalidArgument for unreadable or mismatched files,
// Unavailable when the address cannot be bound.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace boost::asio {
class io_context;
}

struct ssl_st;

namespace airlock::gateway {

struct TlsClientAuth {
  std::string ca_file;                       // PEM: the only CA a client certificate may chain to
  std::function<Status(ssl_st* ssl)> check;  // after the handshake; required: → backend
  // Optional: the peers' backend (see above); peer_backend_port required with it.
  std::function<Status(ssl_st* ssl)> peer_check;
  uint16_t peer_backend_port = 0;
  std::string peer_alpn;  // 1..255 bytes, or empty
};

class TlsFront {
 public:
  static constexpr int kMaxConnections = 4096;
  TlsFront(boost::asio::io_context& io, std::string backend_host, uint16_t backend_port);
  ~TlsFront();
  TlsFront(const TlsFront&) = delete;
  TlsFront& operator=(const TlsFront&) = delete;
  // "ip:port" (port 0: a free one, see port()).
  Status Start(const std::string& listen, const std::string& cert_file, const std::string& key_file,
               std::shared_ptr<const TlsClientAuth> client_auth = nullptr);
  uint16_t port() const;
  void Stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace airlock::gateway
