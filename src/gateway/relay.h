// The relay: a request on a client connection forwarded to host:port over
// a fresh upstream connection and its answer streamed back (the data
// plane's proxy and a cluster front's forwarding; the protocol details are
// in relay.cc's header comment).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "audit/data_plane_tap.h"
#include "gateway/http_conn.h"
#include "gateway/relay_guard.h"
#include "gateway/stream_table.h"

namespace airlock::gateway {

struct UpstreamTls;

// What a caller of ForwardRequest adds to a plain relay (a cluster's front,
// cluster/front.h).
struct ForwardExtras {
  HeaderList headers;               // added to the request head
  std::optional<std::string> body;  // sent instead of the client's body (already read by the caller)
  // The upstream's status as soon as its head arrives; 0 when none came
  // (unreachable, dropped, cut). Called once, on the io thread.
  std::function<void(int)> on_status;
  std::string upstream_name;  // for "<name> unreachable" (default: "sandbox port N")
  // How the upstream's answer head is guarded (relay_guard.h); a sandbox's
  // relay in the data plane is always GuardForGuest's.
  RelayGuard guard = RelayGuard::kNone;
  // A sandbox's exchange (the data plane): its id (for the 502 when it goes
  // away, and GuardForGuest), and the audit observer of the exchange (exec,
  // file reads and writes); both empty for any other upstream.
  std::string sandbox_id;
  std::shared_ptr<audit::DataPlaneTap> tap;
  // The upstream serves TLS itself (network.httpsPorts): the relay speaks
  // HTTP over a TLS client connection to it (upstream_tls.h; not verified).
  bool upstream_tls = false;
  // The upstream is a cluster node: the relay speaks HTTP over a verified
  // mutual-TLS connection to it (upstream_tls.h's `verified`); a handshake
  // or identity failure is a 502 naming upstream_name.
  std::shared_ptr<const UpstreamTls> upstream_verified;
};
// Relays the request on `c` to host:port (an IP literal; the Host header
// sent is `host_header`, "" for host:port) and its answer back, streamed
// both ways (the data plane's proxy: chunked and WebSocket included).
void ForwardRequest(std::shared_ptr<HttpConn> c, const std::string& host, uint16_t port, std::string host_header,
                    ForwardExtras extras = {}, std::function<void(std::weak_ptr<DataPlaneStream>)> track = nullptr);
// E2B proxy's answer for a sandbox that is not (or no longer) there: 502
// {"code":502,"message":"The sandbox was not found","sandboxId":…}.
void RespondSandboxNotFound(HttpConn& c, const std::string& id);

}  // namespace airlock::gateway
