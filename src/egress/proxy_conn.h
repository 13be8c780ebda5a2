// One proxied TCP connection from a guest (loop thread only):
//   read first bytes (HTTP head / ClientHello, ≤ 16 KiB, within a deadline)
//   → decide (policy at the name and port, name resolved by this sandbox)
//   → choose the relay:
//       raw:       TLS to a host without rules or secrets: bytes both ways;
//       http:      plain HTTP: each request head is parsed (l7_parse.h) and
//                  must name the connection's host, network.rules headers
//                  are set, bodies are re-framed by Beast; responses are
//                  relayed as bytes;
//       intercept: TLS to a host with rules or brokered secrets: the guest's
//                  TLS ends here (a leaf of its sandbox CA), a verified TLS
//                  connection goes upstream, then as http plus placeholder
//                  substitution (request_broker.h); when the sandbox has
//                  brokered values, responses are parsed too and every
//                  form of a value is masked (stream_scrubber.h);
//   → connect to a pinned address, or with network.egressProxy open a
//     tunnel to the name through the customer's proxy (upstream_tunnel.cc)
//   → relay (bandwidth shared per sandbox)
//   → one audit record when it ends.
// A request head naming another host, or one that does not parse, closes
// the connection (responses may be in flight, so no 403 can be slotted in).
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <string>

#include <boost/beast/core/flat_buffer.hpp>
#include <set>

#include "egress/egress_internal.h"
#include "egress/stream_scrubber.h"

namespace airlock::egress {

// "socks5 <address>" / "http-connect <address>" (audit records' "via"); ""
// for none.
std::string ViaOf(const std::optional<UpstreamProxy>& proxy);
// The proxy's name (upstream_tunnel.cc): answers kept this long; lookups
// of one sandbox in flight at once.
inline constexpr std::chrono::seconds kProxyDnsTtl{60};
inline constexpr int kMaxProxyLookups = 4;

class ProxyConn : public std::enable_shared_from_this<ProxyConn> {
 public:
  ProxyConn(EgressService::Impl& svc, std::shared_ptr<SandboxEgress> sb, tcp::socket client, bool tls);
  void Start();
  // Closes the connection (policy update, sandbox removal); the record says why.
  void Abort(const std::string& reason);
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  uint32_t upstream_ip() const { return ip_; }
  // Through network.egressProxy: ViaOf(its proxy); "" when direct.
  const std::string& via() const { return via_; }
  bool decided() const { return decided_; }  // past the policy decision (connecting or relaying)

 private:
  void ReadFirstBytes();
  void Decide();
  void Deny(const std::string& rule, const std::string& reason);
  void Connect(size_t index);
  // Through network.egressProxy (upstream_tunnel.cc) instead of Connect.
  void ConnectViaProxy();
  asio::awaitable<std::string> OpenProxyTunnel(UpstreamProxy proxy);  // "" or why not
  // The proxy's name's A records from the upstream resolver into *out; why none.
  asio::awaitable<std::string> ResolveProxyName(const std::string& name, std::vector<uint32_t>* out);
  std::string ProxyAddressRefusal(uint32_t ip);
  // One SOCKS5 step on upstream_: writes `out` (none when empty), then reads
  // exactly `in`. "" when both went through or the connection was finished
  // meanwhile (the caller checks finished_), else why not: a failed write,
  // or `where` + `no_answer` for a failed read.
  asio::awaitable<std::string> ProxyExchange(asio::const_buffer out, asio::mutable_buffer in, const std::string& where,
                                             const char* no_answer);
  // upstream_ is connected (to the destination, or a tunnel to it): relay.
  void OnUpstreamConnected();
  void Relay();
  struct Direction {
    tcp::socket* from;
    tcp::socket* to;
    std::array<uint8_t, 65536> buf;
    uint64_t* counter;
    bool done = false;
  };
  void Pump(Direction& d);
  void Finish(const std::string& reason);

  // proxy_http.cc: the http and intercept relays (C++20 coroutines).
  enum class Mode { kRaw, kHttp, kIntercept };
  void ChooseMode();
  asio::awaitable<void> RunHttp();
  template <class Guest, class Upstream>
  asio::awaitable<void> RelayRequests(Guest& guest, Upstream& up);
  template <class From, class To>
  asio::awaitable<void> PumpBytes(From& from, To& to, Direction& d, bool to_guest);
  asio::awaitable<void> Throttle(size_t n, asio::steady_timer& timer);
  // Responses of an intercepted connection with brokered values, masked
  // (proxy_http.cc); PumpMasked: the bytes after a 101, masked.
  template <class Upstream, class Guest>
  asio::awaitable<void> RelayResponses(Upstream& up, Guest& guest);
  template <class Upstream, class Guest>
  asio::awaitable<void> PumpMasked(Upstream& up, Guest& guest);
  // Sets rules headers and swaps placeholders; false (with *why) if a
  // resulting value is not a valid header value.
  bool TransformHeaders(HeaderList* headers, std::string* why);

  EgressService::Impl& svc_;
  std::shared_ptr<SandboxEgress> sb_;
  tcp::socket client_, upstream_;
  asio::steady_timer timer_, up_timer_, down_timer_;
  bool tls_;
  std::vector<uint8_t> first_;
  std::string host_, rule_;
  uint16_t port_;
  uint32_t ip_ = 0;
  std::vector<uint32_t> candidates_;
  Clock::time_point start_ = Clock::now();
  uint64_t bytes_out_ = 0, bytes_in_ = 0;
  Direction up_, down_;
  bool finished_ = false;
  bool allowed_ = false;
  Mode mode_ = Mode::kRaw;
  std::string note_;  // e.g. why a host with rules was not intercepted
  std::unique_ptr<asio::ssl::context> guest_ctx_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> guest_tls_, up_tls_;
  boost::beast::flat_buffer req_buf_;
  std::array<char, 16384> body_buf_;
  uint64_t requests_ = 0;
  std::set<std::string> secrets_used_;
  // Responses: the brokered values' forms to mask (empty: responses are
  // relayed as bytes), and per request sent upstream and not yet answered,
  // whether it was a HEAD (its response has no body, whatever it says).
  StreamScrubber scrub_;
  std::deque<bool> head_requests_;
  boost::beast::flat_buffer resp_buf_;
  std::array<char, 16384> resp_body_buf_;
  std::string rules_applied_;  // the network.rules pattern used, if any
  std::string via_;            // ViaOf(the proxy) for a connection through network.egressProxy
  bool decided_ = false;
};

}  // namespace airlock::egress
