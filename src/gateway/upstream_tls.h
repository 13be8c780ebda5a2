// TLS to a guest port that serves TLS itself (E2B's network.httpsPorts):
// "traffic is still terminated at the proxy and re-encrypted on the hop to
// the sandbox; the backend certificate is not verified, so self-signed
// certificates work" (E2B's SDK docs). The relay (relay.cc) speaks plain
// HTTP on the socket this returns; a bridge copies bytes between it and a
// TLS client connection over `guest`.
//
// BridgeToTls: the TLS handshake over the connected `guest` socket first
// (TLS >= 1.2, ALPN http/1.1 offered, no SNI, no verification), within
// kHandshakeTimeout; then `done` gets one end of a socketpair (held as a
// tcp::socket: reads and writes only) whose other end is bridged both ways.
// The relay's half-close (EOF on its end) becomes a TCP half-close towards
// the guest, whose answer still flows back; the guest's EOF (or TLS close)
// becomes EOF on the relay's end; an error either way closes both. Errors:
// `done` gets Unavailable naming the TLS failure (the relay answers 502).
// Returns the closer: it ends the bridge at once (the guest connection,
// the socketpair), during the handshake too; the relay calls it whenever
// it closes its end, so a guest that stops reading holds nothing. Called
// on the socket's executor; `done` and the closer run there.
//
// With `verified` (a cluster's front to its nodes, cluster/cluster_tls.h)
// the handshake is made with its context instead (the front's client
// certificate, the cluster CA as the only trust, the peer's chain
// verified) and `verified->check` then decides on the peer's certificate
// (is it the node the registry names at that address?): a failure is
// Unavailable naming it, and nothing was sent.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

struct ssl_st;

namespace boost::asio::ssl {
class context;
}

namespace airlock::gateway {

inline constexpr std::chrono::seconds kHandshakeTimeout{10};

struct UpstreamTls {
  std::shared_ptr<boost::asio::ssl::context> ctx;  // verify_peer, a client certificate
  std::function<Status(ssl_st* ssl)> check;        // after the handshake; required
  std::string what = "TLS";                        // names the hop in errors
};

std::function<void()> BridgeToTls(boost::asio::ip::tcp::socket guest,
                                  std::function<void(StatusOr<boost::asio::ip::tcp::socket>)> done,
                                  std::shared_ptr<const UpstreamTls> verified = nullptr);

}  // namespace airlock::gateway
