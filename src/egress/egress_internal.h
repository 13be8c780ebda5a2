// Internals shared by egress_service.cc (service, resolver) and
// proxy_conn.cc (TCP proxy). Everything here lives on the loop thread.
#pragma once

// Before Asio: Boost 1.74's awaitable.hpp uses std::exchange without <utility>.
// clang-format off
#include <utility>
// clang-format on

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/clock.h"
#include "egress/dns_message.h"
#include "egress/egress_service.h"
#include "egress/host_addresses.h"

namespace airlock::egress {

namespace asio = boost::asio;
using asio::ip::tcp;
using asio::ip::udp;
using Clock = std::chrono::steady_clock;

struct Resolved {
  std::vector<uint32_t> ips;
  Clock::time_point expiry;
};

// The names one sandbox's resolver answered (SandboxEgress::resolved), kept
// to pin its connections to those answers (PinnedAddresses). An entry is
// remembered 11..15 min past its answer, but erased only when it is looked
// up again, so a guest resolving ever new names (a wildcard DNS record
// suffices) would grow the map for as long as it lives. At most
// kMaxResolvedNames are kept: 8192 names answered within a quarter of an
// hour is far past what one sandbox's own clients connect to (a crawler
// included), and costs at most a few MiB per sandbox.
inline constexpr size_t kMaxResolvedNames = 8192;
// Makes room in a full `resolved` (size >= max) before an insert: drops
// the expired entries, then, while more than 3/4 of `max` remain, the
// entries nearest their expiry. A connection to a name dropped unexpired is
// denied until the guest resolves it again. Leaving a quarter free keeps the
// cost amortised: the next prune is at least max/4 inserts away.
void PruneResolved(std::map<std::string, Resolved>& resolved, Clock::time_point now, size_t max = kMaxResolvedNames);

// Shared bandwidth budget of one sandbox (token bucket, 1 s burst).
class TokenBucket {
 public:
  void SetRate(uint64_t bytes_per_second) {
    rate_ = bytes_per_second;
    tokens_ = static_cast<double>(rate_);
    last_ = Clock::now();
  }
  // How long the caller must wait before sending n bytes (0 = now).
  Clock::duration Take(size_t n) {
    if (rate_ == 0) return Clock::duration::zero();
    auto now = Clock::now();
    tokens_ = std::min<double>(static_cast<double>(rate_),
                               tokens_ + std::chrono::duration<double>(now - last_).count() * rate_);
    last_ = now;
    tokens_ -= static_cast<double>(n);
    if (tokens_ >= 0) return Clock::duration::zero();
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(-tokens_ / rate_));
  }

 private:
  uint64_t rate_ = 0;
  double tokens_ = 0;
  Clock::time_point last_ = Clock::now();
};

class ProxyConn;
class NflogReader;

struct SandboxEgress {
  SandboxEgress(asio::io_context& io) : dns_udp(io), dns_tcp(io), http(io), tls(io), dns_limit_timer(io) {}
  std::string id;
  asio::ip::address_v4 host_ip, netns_ip;
  std::shared_ptr<const EgressPolicy> policy;
  EgressLimits limits;
  udp::socket dns_udp;
  tcp::acceptor dns_tcp, http, tls;
  std::map<std::string, Resolved> resolved;
  std::set<std::shared_ptr<ProxyConn>> conns;
  TokenBucket bucket;
  int upstream_pending = 0;
  bool closed = false;
  // Resolver TCP: open connections, and refusals (over a cap) not yet in a
  // record (one record a second at most: dns_limit_timer).
  int dns_tcp_open = 0;
  int64_t dns_tcp_refused_unreported = 0;
  bool dns_limit_timer_armed = false;
  asio::steady_timer dns_limit_timer;
  std::shared_ptr<NflogReader> nflog;  // L3 decisions logged by the netns's nftables (nflog_reader.h)
  // network.egressProxy's host name, resolved (upstream_tunnel.cc): answers
  // kept kProxyDnsTtl, lookups in flight (at most kMaxProxyLookups).
  std::map<std::string, std::pair<std::vector<uint32_t>, Clock::time_point>> proxy_dns;
  int proxy_lookups = 0;
  // Records (guarded by EgressService::Impl::records_mu_).
  std::deque<nlohmann::json> records;
  int records_this_second = 0;
  int64_t suppressed = 0;
  Clock::time_point second_start = Clock::now();
};

class EgressService::Impl {
 public:
  explicit Impl(EgressConfig c) : config(std::move(c)) {}
  EgressConfig config;
  // Resolver TCP connections open (all sandboxes); written on the loop
  // thread, read by Counters(). Before `io`: its handlers' sockets give slots back.
  std::atomic<int> dns_tcp_open_total{0};
  asio::io_context io;
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
  udp::endpoint upstream;
  std::optional<Cidr> pool;            // config.sandbox_pool
  std::vector<Cidr> proxy_allow;       // config.proxy_allow
  // TLS client side of intercepted connections (verify_peer; system store +
  // config.upstream_ca_file; TLS >= 1.2; ALPN http/1.1).
  std::unique_ptr<asio::ssl::context> tls_client;
  std::map<std::string, std::shared_ptr<SandboxEgress>> sandboxes;  // loop thread only
  std::mutex records_mu;
  std::map<std::string, std::shared_ptr<SandboxEgress>> by_id;  // for Records(), under records_mu
  // The host's own addresses (host_addresses.h), and the socket that says
  // they changed (watched on the loop: WatchHostAddresses).
  std::unique_ptr<HostAddresses> host;
  std::unique_ptr<asio::posix::stream_descriptor> host_events;
  std::atomic<uint64_t> dns_tcp_refused{0}, host_address_refused{0};
  // Host address changes for config.on_host_addresses_changed, handed to
  // their own thread (the callback may block and may call back in).
  std::mutex notify_mu;
  std::condition_variable notify_cv;
  std::optional<std::vector<uint32_t>> notify_pending;
  bool notify_stop = false;
  std::thread notify_thread;

  // Runs fn on the loop thread and waits for it.
  template <typename F>
  auto OnLoop(F&& fn) -> decltype(fn());

  void Emit(SandboxEgress& sb, nlohmann::json record);
  // An address of this host, of another sandbox, or delivered locally
  // (host_addresses.h); counted in host_address_refused when `count`.
  bool IsHostAddress(uint32_t ip, bool count = true);
  void WatchHostAddresses();
  // A resolver TCP connection refused over a cap: counted, and reported in
  // at most one record a second per sandbox.
  void RefuseDnsTcp(std::shared_ptr<SandboxEgress> sb, const std::string& reason);
  // The addresses this sandbox may reach for `name` (resolver answers that
  // are not expired and that the current policy still allows).
  // `host_skipped`: how many were left out for being the host's (IsHostAddress).
  std::vector<uint32_t> PinnedAddresses(SandboxEgress& sb, const std::string& name, uint16_t port,
                                        size_t* host_skipped = nullptr);

  // Resolver.
  void StartDnsUdp(std::shared_ptr<SandboxEgress> sb);
  void StartDnsTcp(std::shared_ptr<SandboxEgress> sb);
  // Answers one query; `reply` is called (on the loop) with the bytes to send
  // (empty: send nothing).
  // One A query of `name` to the upstream resolver (a fresh socket and id;
  // answers from elsewhere, spoofed or malformed ones ignored; within
  // config.upstream_timeout). `done` runs once, on the loop: the rcode
  // (SERVFAIL on a timeout or a socket error), the A records, and why it
  // failed ("" when answered). The guests' resolver and the egress proxy's
  // name (upstream_tunnel.cc) both ask through it.
  using UpstreamAnswer = std::function<void(uint8_t rcode, std::vector<dns::ARecord> a, const std::string& reason)>;
  void AskUpstreamA(const std::string& name, UpstreamAnswer done);
  void HandleQuery(std::shared_ptr<SandboxEgress> sb, const uint8_t* data, size_t size, const char* transport,
                   std::function<void(std::vector<uint8_t>)> reply);
  // Proxy.
  void StartAccept(std::shared_ptr<SandboxEgress> sb, bool tls);
  void CloseSandbox(SandboxEgress& sb);
  void EnforcePolicy(SandboxEgress& sb);
  // L3 audit (nflog_reader.cc): records for the packets the netns logs.
  void StartNflog(std::shared_ptr<SandboxEgress> sb, std::shared_ptr<NflogReader> reader);
};

}  // namespace airlock::egress
