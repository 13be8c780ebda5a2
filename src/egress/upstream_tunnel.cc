// ProxyConn's tunnel through a sandbox's network.egressProxy (policy.h
// UpstreamProxy): after airlock's own decision, the upstream socket is
// connected to the customer's proxy and a tunnel to host_:port_ is opened
// there; the relays then run over it unchanged (raw, http, or intercepted
// TLS, whose upstream handshake goes through the tunnel to the origin).
//
// SOCKS5 (RFC 1928): greeting offering "no authentication" and, with a
// username, "username/password" (RFC 1929: version 1, ulen, user, plen,
// password; status 0 = success), then CONNECT with ATYP=domain (3): the
// proxy resolves the name, as E2B's proxy asks it to. Reply: VER 5, REP
// (0 = succeeded), RSV, ATYP + bound address + port, all read and dropped.
// HTTP CONNECT (RFC 9110 §9.3.6): "CONNECT host:port HTTP/1.1", Host, and
// with a username `Proxy-Authorization: Basic base64(user:password)`; a 2xx
// status opens the tunnel; the head is at most 16 KiB, and a proxy that
// sends bytes past it before the client spoke is refused.
//
// Where the proxy may be (an SSRF guard: the daemon dials it from the host's
// namespace): a public IPv4 address that is not the host's, unless the
// operator allows private ones (EgressConfig::proxy_allow_private); never
// the sandbox pool nor 169.254/16 (cloud metadata). Credentials never
// appear in an error or a record. Loop thread only; the connect timer
// (ProxyConn::ConnectViaProxy) bounds resolve + connect + handshake.
#include "egress/proxy_conn.h"  // first: <utility> before Asio's awaitable.hpp (Boost 1.74)

#include <openssl/evp.h>

#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace airlock::egress {

namespace {

using asio::use_awaitable;

std::string Base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

const char* SocksReply(uint8_t rep) {
  switch (rep) {
    case 1: return "general SOCKS server failure";
    case 2: return "connection not allowed by ruleset";
    case 3: return "network unreachable";
    case 4: return "host unreachable";
    case 5: return "connection refused";
    case 6: return "TTL expired";
    case 7: return "command not supported";
    case 8: return "address type not supported";
    default: return "unknown reply";
  }
}

bool InRange(uint32_t ip, uint32_t net, int prefix) { return (ip >> (32 - prefix)) == (net >> (32 - prefix)); }

}  // namespace

// Why `ip` may not be dialled as the proxy ("" when it may).
std::string ProxyConn::ProxyAddressRefusal(uint32_t ip) {
  if (InRange(ip, 0xA9FE0000u, 16)) return "a link-local address (169.254/16)";
  if (InRange(ip, 0xC6120000u, 15)) return "an address of the sandbox pool (198.18/15)";
  if (svc_.config.proxy_allow_private) return "";
  if (IsForbiddenAddress(ip)) return "a private or reserved address (serve --egress-proxy-allow-private allows it)";
  if (svc_.IsHostAddress(ip)) return "an address of this host (serve --egress-proxy-allow-private allows it)";
  return "";
}

asio::awaitable<std::string> ProxyConn::OpenProxyTunnel(UpstreamProxy proxy) {
  auto self = shared_from_this();
  boost::system::error_code ec;
  const std::string where = "the egress proxy " + proxy.address;
  // Resolve (an IPv4 literal needs none), keep the addresses it may dial.
  std::vector<uint32_t> addrs;
  if (auto ip = ParseIpv4(proxy.host)) {
    addrs.push_back(*ip);
  } else {
    tcp::resolver resolver(svc_.io);
    auto results = co_await resolver.async_resolve(tcp::v4(), proxy.host, std::to_string(proxy.port),
                                                   asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return "";
    if (ec) co_return where + ": cannot resolve " + proxy.host + ": " + ec.message();
    for (const auto& r : results) addrs.push_back(r.endpoint().address().to_v4().to_uint());
  }
  std::string refused;
  bool connected = false;
  for (uint32_t ip : addrs) {
    if (std::string why = ProxyAddressRefusal(ip); !why.empty()) {
      refused = where + " is at " + Ipv4ToString(ip) + ", " + why;
      continue;
    }
    co_await upstream_.async_connect(tcp::endpoint(asio::ip::address_v4(ip), proxy.port),
                                     asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return "";
    if (!ec) {
      ip_ = ip;
      connected = true;
      break;
    }
    refused = where + ": connect to " + Ipv4ToString(ip) + " failed: " + ec.message();
    boost::system::error_code ignore;
    upstream_.close(ignore);
    upstream_ = tcp::socket(svc_.io);
  }
  if (!connected) co_return refused.empty() ? where + ": no IPv4 address" : refused;

  if (proxy.kind == UpstreamProxy::Kind::kHttpConnect) {
    std::string target = host_ + ":" + std::to_string(port_);
    std::string req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n";
    if (!proxy.username.empty()) req += "Proxy-Authorization: Basic " + Base64(proxy.username + ":" + proxy.password) + "\r\n";
    req += "\r\n";
    co_await asio::async_write(upstream_, asio::buffer(req), asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return "";
    if (ec) co_return where + ": write failed: " + ec.message();
    asio::streambuf head(16384);
    size_t n = co_await asio::async_read_until(upstream_, head, "\r\n\r\n", asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return "";
    if (ec) co_return where + ": no CONNECT answer: " + ec.message();
    std::string text(asio::buffers_begin(head.data()), asio::buffers_begin(head.data()) + n);
    std::string status = text.substr(0, text.find("\r\n"));
    // "HTTP/1.x 2xx ..."
    if (status.size() < 12 || status.rfind("HTTP/1.", 0) != 0 || status[9] != '2') {
      co_return where + " refused the tunnel: " + status.substr(0, 200);
    }
    if (head.size() > n) co_return where + " sent bytes before the tunnel was used";
    co_return "";
  }

  // SOCKS5.
  std::vector<uint8_t> greet = {5, 1, 0};
  if (!proxy.username.empty()) greet = {5, 2, 0, 2};
  co_await asio::async_write(upstream_, asio::buffer(greet), asio::redirect_error(use_awaitable, ec));
  if (finished_) co_return "";
  if (ec) co_return where + ": write failed: " + ec.message();
  std::array<uint8_t, 2> choice{};
  co_await asio::async_read(upstream_, asio::buffer(choice), asio::redirect_error(use_awaitable, ec));
  if (finished_) co_return "";
  if (ec) co_return where + ": no SOCKS5 greeting answer: " + ec.message();
  if (choice[0] != 5) co_return where + " is not a SOCKS5 server";
  if (choice[1] == 2 && !proxy.username.empty()) {
    std::vector<uint8_t> auth = {1, static_cast<uint8_t>(proxy.username.size())};
    auth.insert(auth.end(), proxy.username.begin(), proxy.username.end());
    auth.push_back(static_cast<uint8_t>(proxy.password.size()));
    auth.insert(auth.end(), proxy.password.begin(), proxy.password.end());
    co_await asio::async_write(upstream_, asio::buffer(auth), asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return "";
    if (ec) co_return where + ": write failed: " + ec.message();
    std::array<uint8_t, 2> status{};
    co_await asio::async_read(upstream_, asio::buffer(status), asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return "";
    if (ec) co_return where + ": no authentication answer: " + ec.message();
    if (status[1] != 0) co_return where + " refused the username and password";
  } else if (choice[1] != 0) {
    co_return where + (choice[1] == 0xFF ? " accepts none of the offered methods (does it need a username?)"
                                         : " chose a method that was not offered");
  }
  std::vector<uint8_t> connect = {5, 1, 0, 3, static_cast<uint8_t>(host_.size())};
  connect.insert(connect.end(), host_.begin(), host_.end());
  connect.push_back(static_cast<uint8_t>(port_ >> 8));
  connect.push_back(static_cast<uint8_t>(port_ & 0xFF));
  co_await asio::async_write(upstream_, asio::buffer(connect), asio::redirect_error(use_awaitable, ec));
  if (finished_) co_return "";
  if (ec) co_return where + ": write failed: " + ec.message();
  std::array<uint8_t, 5> reply{};  // VER REP RSV ATYP + the first byte of the bound address
  co_await asio::async_read(upstream_, asio::buffer(reply), asio::redirect_error(use_awaitable, ec));
  if (finished_) co_return "";
  if (ec) co_return where + ": no CONNECT reply: " + ec.message();
  if (reply[0] != 5) co_return where + " sent a malformed SOCKS5 reply";
  if (reply[1] != 0) co_return where + ": " + SocksReply(reply[1]) + " (SOCKS5 reply " + std::to_string(reply[1]) + ")";
  size_t rest = reply[3] == 1 ? 3 + 2 : reply[3] == 4 ? 15 + 2 : reply[3] == 3 ? size_t{reply[4]} + 2 : 0;
  if (rest == 0) co_return where + " sent a malformed SOCKS5 reply";
  std::vector<uint8_t> bound(rest);
  co_await asio::async_read(upstream_, asio::buffer(bound), asio::redirect_error(use_awaitable, ec));
  if (finished_) co_return "";
  if (ec) co_return where + ": truncated CONNECT reply: " + ec.message();
  co_return "";
}

}  // namespace airlock::egress
