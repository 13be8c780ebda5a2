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
// namespace): a public IPv4 address that is not the host's, or one in the
// operator's CIDRs (EgressConfig::proxy_allow); never the sandbox pool nor
// 169.254/16 (cloud metadata). Credentials never
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

#include "egress/dns_message.h"

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

}  // namespace

// Why `ip` may not be dialled as the proxy ("" when it may).
std::string ProxyConn::ProxyAddressRefusal(uint32_t ip) {
  if (Cidr{0xA9FE0000u, 16}.Contains(ip)) return "a link-local address (169.254/16)";
  if (svc_.pool && svc_.pool->Contains(ip)) return "an address of the sandbox pool";
  for (const auto& c : svc_.proxy_allow)
    if (c.Contains(ip)) return "";  // the operator's
  if (IsForbiddenAddress(ip)) return "a private or reserved address (serve --egress-proxy-allow CIDR allows it)";
  if (svc_.IsHostAddress(ip)) return "an address of this host (serve --egress-proxy-allow CIDR allows it)";
  return "";
}

asio::awaitable<std::string> ProxyConn::ResolveProxyName(const std::string& name, std::vector<uint32_t>* out) {
  auto self = shared_from_this();
  struct Answer {
    uint8_t rcode = 0;
    std::vector<dns::ARecord> a;
    std::string reason;
    bool answered = false;
  };
  auto answer = std::make_shared<Answer>();
  auto wake = std::make_shared<asio::steady_timer>(svc_.io, asio::steady_timer::time_point::max());
  svc_.AskUpstreamA(name, [answer, wake](uint8_t rcode, std::vector<dns::ARecord> a, const std::string& reason) {
    *answer = {rcode, std::move(a), reason, true};
    wake->cancel();
  });
  boost::system::error_code ec;
  // Cancelled by the answer (which a socket error gives at once, before any wait).
  if (!answer->answered) co_await wake->async_wait(asio::redirect_error(use_awaitable, ec));
  for (const auto& r : answer->a) out->push_back(r.ip);
  if (!answer->reason.empty()) co_return answer->reason;
  co_return out->empty() ? std::string(answer->rcode == dns::kRcodeNxDomain ? "no such name" : "no A record") : "";
}

asio::awaitable<std::string> ProxyConn::OpenProxyTunnel(UpstreamProxy proxy) {
  auto self = shared_from_this();
  boost::system::error_code ec;
  const std::string where = "the egress proxy " + proxy.address;
  // Resolve (an IPv4 literal needs none), keep the addresses it may dial.
  std::vector<uint32_t> addrs;
  if (auto ip = ParseIpv4(proxy.host)) {
    addrs.push_back(*ip);
  } else if (auto hit = sb_->proxy_dns.find(proxy.host);
             hit != sb_->proxy_dns.end() && hit->second.second > Clock::now()) {
    addrs = hit->second.first;
  } else {
    // Asked of the upstream resolver the guests' names go to (serve
    // --dns-upstream), on the loop like theirs: never getaddrinfo, whose
    // one Asio thread every sandbox would share.
    if (sb_->proxy_lookups >= kMaxProxyLookups) co_return where + ": too many lookups of it in flight";
    ++sb_->proxy_lookups;
    std::string why = co_await ResolveProxyName(proxy.host, &addrs);
    --sb_->proxy_lookups;
    if (finished_) co_return "";
    if (addrs.empty()) co_return where + ": cannot resolve " + proxy.host + ": " + why;
    sb_->proxy_dns[proxy.host] = {addrs, Clock::now() + kProxyDnsTtl};
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
  std::array<uint8_t, 2> choice{};
  std::string why = co_await ProxyExchange(asio::buffer(greet), asio::buffer(choice), where, ": no SOCKS5 greeting answer");
  if (finished_ || !why.empty()) co_return why;
  if (choice[0] != 5) co_return where + " is not a SOCKS5 server";
  if (choice[1] == 2 && !proxy.username.empty()) {
    std::vector<uint8_t> auth = {1, static_cast<uint8_t>(proxy.username.size())};
    auth.insert(auth.end(), proxy.username.begin(), proxy.username.end());
    auth.push_back(static_cast<uint8_t>(proxy.password.size()));
    auth.insert(auth.end(), proxy.password.begin(), proxy.password.end());
    std::array<uint8_t, 2> status{};
    why = co_await ProxyExchange(asio::buffer(auth), asio::buffer(status), where, ": no authentication answer");
    if (finished_ || !why.empty()) co_return why;
    if (status[1] != 0) co_return where + " refused the username and password";
  } else if (choice[1] != 0) {
    co_return where + (choice[1] == 0xFF ? " accepts none of the offered methods (does it need a username?)"
                                         : " chose a method that was not offered");
  }
  std::vector<uint8_t> connect = {5, 1, 0, 3, static_cast<uint8_t>(host_.size())};
  connect.insert(connect.end(), host_.begin(), host_.end());
  connect.push_back(static_cast<uint8_t>(port_ >> 8));
  connect.push_back(static_cast<uint8_t>(port_ & 0xFF));
  std::array<uint8_t, 5> reply{};  // VER REP RSV ATYP + the first byte of the bound address
  why = co_await ProxyExchange(asio::buffer(connect), asio::buffer(reply), where, ": no CONNECT reply");
  if (finished_ || !why.empty()) co_return why;
  if (reply[0] != 5) co_return where + " sent a malformed SOCKS5 reply";
  if (reply[1] != 0) co_return where + ": " + SocksReply(reply[1]) + " (SOCKS5 reply " + std::to_string(reply[1]) + ")";
  size_t rest = reply[3] == 1 ? 3 + 2 : reply[3] == 4 ? 15 + 2 : reply[3] == 3 ? size_t{reply[4]} + 2 : 0;
  if (rest == 0) co_return where + " sent a malformed SOCKS5 reply";
  std::vector<uint8_t> bound(rest);
  co_return co_await ProxyExchange({}, asio::buffer(bound), where, ": truncated CONNECT reply");
}

asio::awaitable<std::string> ProxyConn::ProxyExchange(asio::const_buffer out, asio::mutable_buffer in,
                                                      const std::string& where, const char* no_answer) {
  boost::system::error_code ec;
  if (out.size() > 0) {
    co_await asio::async_write(upstream_, out, asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return "";
    if (ec) co_return where + ": write failed: " + ec.message();
  }
  co_await asio::async_read(upstream_, in, asio::redirect_error(use_awaitable, ec));
  if (finished_) co_return "";
  if (ec) co_return where + no_answer + ": " + ec.message();
  co_return "";
}

}  // namespace airlock::egress
