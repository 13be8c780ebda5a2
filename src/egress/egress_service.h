// EgressService: airlock's resolver and egress proxy for every sandbox, on
// one Boost.Asio event loop (its own thread). docs/network.md "Egress".
//
// Per sandbox it listens on the sandbox's host-side veth address (so nothing
// is reachable from anywhere else, and the listening socket tells which
// sandbox is talking); the sandbox netns DNATs the guest's traffic there:
//   guest → 169.254.0.22:53 (UDP/TCP)  ⇒ host_ip:dns_port   resolver
//   guest → any:80                      ⇒ host_ip:http_port  proxy, HTTP Host
//   guest → any:443                     ⇒ host_ip:tls_port   proxy, TLS SNI
// Resolver: a name the policy does not allow gets NXDOMAIN at once (nothing
// is asked upstream, so query names carry nothing out). An allowed name's A
// query is re-asked upstream (a fresh query: only the name crosses), answers
// in forbidden ranges are dropped, and the rest remembered (name → IPs) for
// the proxy. AAAA and other types of allowed names: NOERROR, no records.
// Proxy: reads the first HTTP request head / TLS ClientHello, checks the name
// at port 80/443, and connects only to an address the resolver answered for
// that name to this sandbox (a name the sandbox never resolved is refused;
// the guest's own destination address is never used).
//
// Plain HTTP is relayed request by request: every request head is checked
// (its Host must be the connection's name) and network.rules headers are set.
// HTTPS is relayed as opaque bytes, except for hosts with network.rules or
// brokered secrets: those are intercepted (the guest talks TLS to the proxy
// with a leaf of its sandbox CA; the proxy talks verified TLS upstream) and
// relayed like plain HTTP, with placeholders swapped (request_broker.h).
//
// Every decision (DNS and TCP, allowed or denied) becomes one JSON record:
//   {"time","timestampMs","sandboxID","protocol":"dns"|"http"|"tls","decision":"allow"|"deny",
//    "rule","reason","destination":{"name","ip","port"},"bytesOut","bytesIn",
//    "durationMs","queryType","intercepted","requests","secrets":[name...]}
// handed to the audit sink and kept (last N) per sandbox for the logs API.
// Packets the sandbox netns's nftables drops (UDP, ICMP, other TCP ports,
// forbidden ranges, IPv6) or forwards by a CIDR rule become records too
// (protocol "tcp"|"udp"|"icmp"|"ip"|"ipv6"|"unknown", "source":"nftables";
// nflog_packet.h), and each such CIDR connection's end, with bytes each way
// and duration ("source":"conntrack"; flow_end_reader.h).
// The host's own addresses (every interface of the daemon's namespace, the
// sandbox pool, whatever the kernel delivers locally; host_addresses.h) are
// never reached, whatever the policy: resolver answers that are one are
// dropped (a deny record when none is left), the proxy never connects to
// one (deny, rule "host-address"); on_host_addresses_changed lets the
// caller keep the sandboxes' nftables sets of them current (CIDR rules).
// Resolver TCP: at most EgressLimits::max_dns_tcp_connections open per
// sandbox and EgressConfig::max_dns_tcp_total overall, each closed after
// dns_tcp_timeout; refusals are counted (Counters()) and reported in at
// most one record a second per sandbox.
// Records are rate-limited per sandbox (a guest can trigger them): beyond
// kMaxRecordsPerSecond the rest are counted and reported in one record.
//
// Thread-safe: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "egress/policy.h"
#include "egress/request_broker.h"

namespace airlock::egress {

using AuditSink = std::function<void(const nlohmann::json&)>;

inline constexpr uint16_t kDefaultDnsPort = 49153;
inline constexpr uint16_t kDefaultHttpPort = 49180;
inline constexpr uint16_t kDefaultTlsPort = 49443;
inline constexpr int kMaxRecordsPerSecond = 200;

struct EgressLimits {
  int max_connections = 256;         // concurrent proxied TCP connections
  uint64_t bytes_per_second = 0;     // both directions together; 0 = unlimited
  int max_dns_tcp_connections = 16;  // concurrent resolver (DNS over TCP) connections
};

struct EgressCounters {
  uint64_t dns_tcp_refused = 0;       // resolver TCP connections refused over a cap
  uint64_t host_address_refused = 0;  // answers/connections refused: an address of this host
  int dns_tcp_open = 0;               // resolver TCP connections open now (all sandboxes)
};

struct EgressConfig {
  // Upstream resolver "a.b.c.d" or "a.b.c.d:port"; empty = the first IPv4
  // nameserver of /etc/resolv.conf.
  std::string upstream_dns;
  AuditSink audit_sink;
  size_t records_per_sandbox = 2000;
  uint16_t dns_port = kDefaultDnsPort;
  uint16_t http_port = kDefaultHttpPort;
  uint16_t tls_port = kDefaultTlsPort;
  std::chrono::milliseconds upstream_timeout{3000};
  std::chrono::milliseconds first_bytes_timeout{10000};  // Host/ClientHello
  std::chrono::milliseconds connect_timeout{10000};
  EgressLimits default_limits;
  // Brokered secrets (null: none). See request_broker.h.
  std::shared_ptr<RequestBroker> request_broker;
  // Trust for upstream servers of intercepted HTTPS connections (the proxy
  // verifies their certificate and name): the system store, plus this PEM
  // bundle when set (a private CA; the tests' fake internet).
  std::string upstream_ca_file;
  // Also the host's (host_addresses.h): the sandbox address pool, "a.b.c.d/n".
  std::string sandbox_pool;
  int max_dns_tcp_total = 512;                      // resolver TCP connections of all sandboxes together
  std::chrono::milliseconds dns_tcp_timeout{5000};  // a resolver TCP connection's whole life
  // Where a network.egressProxy (policy.h UpstreamProxy) may be besides a
  // public address that is not the host's: these IPv4 CIDRs (serve
  // --egress-proxy-allow, the operator's own proxies in its LAN or on the
  // host), though never in the sandbox pool nor 169.254/16.
  std::vector<std::string> proxy_allow;
  // Called (on a thread of the service's own, never concurrently) with the
  // host's interface addresses whenever they change.
  std::function<void(const std::vector<uint32_t>&)> on_host_addresses_changed;
};

class EgressService {
 public:
  static StatusOr<std::unique_ptr<EgressService>> Start(EgressConfig config);
  ~EgressService();  // closes every connection, joins the loop thread
  EgressService(const EgressService&) = delete;
  EgressService& operator=(const EgressService&) = delete;

  // Opens the sandbox's listeners on host_ip (which must exist: the veth).
  // Connections are accepted only from netns_ip. With `netns` (the name under
  // /run/netns), the packets that netns's nftables ruleset logs (drops, new
  // CIDR connections) become records too (nflog_reader.h); when that reader
  // cannot be opened the sandbox is added without it (warning logged).
  Status AddSandbox(const std::string& id, const std::string& host_ip, const std::string& netns_ip, EgressPolicy policy,
                    std::optional<EgressLimits> limits = std::nullopt, const std::string& netns = "");
  // Replaces the policy; open connections it no longer allows are closed,
  // remembered answers for names it no longer allows are forgotten.
  Status UpdatePolicy(const std::string& id, EgressPolicy policy);
  StatusOr<EgressPolicy> Policy(const std::string& id);
  Status SetLimits(const std::string& id, EgressLimits limits);
  // Closes listeners and connections; forgets records. Idempotent.
  void RemoveSandbox(const std::string& id);
  // The sandbox's records, oldest first; NotFound for an unknown sandbox.
  StatusOr<std::vector<nlohmann::json>> Records(const std::string& id);

  const EgressConfig& config() const;
  EgressCounters Counters() const;
  // The host's interface addresses now (sorted; host_addresses.h).
  std::vector<uint32_t> HostAddressList() const;
  // Ends on_host_addresses_changed calls (waits for one under way); idempotent.
  void StopHostAddressNotifications();
  // Whether `ip` is one of the host's addresses (what the proxy checks).
  bool IsHostAddress(uint32_t ip);

  class Impl;

 private:
  explicit EgressService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace airlock::egress
