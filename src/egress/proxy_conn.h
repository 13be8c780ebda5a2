// One proxied TCP connection from a guest (loop thread only):
//   read first bytes (HTTP head / ClientHello, ≤ 16 KiB, within a deadline)
//   → decide (policy at the name and port, name resolved by this sandbox)
//   → [handler hook: a later per-host handler, e.g. header rewriting with TLS
//      interception, is inserted here; today bytes pass through unchanged]
//   → connect to a pinned address → relay both ways (half-close aware,
//      bandwidth shared per sandbox) → one audit record when it ends.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "egress/egress_internal.h"

namespace airlock::egress {

class ProxyConn : public std::enable_shared_from_this<ProxyConn> {
 public:
  ProxyConn(EgressService::Impl& svc, std::shared_ptr<SandboxEgress> sb, tcp::socket client, bool tls);
  void Start();
  // Closes the connection (policy update, sandbox removal); the record says why.
  void Abort(const std::string& reason);
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  uint32_t upstream_ip() const { return ip_; }

 private:
  void ReadFirstBytes();
  void Decide();
  void Deny(const std::string& rule, const std::string& reason);
  void Connect(size_t index);
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
};

}  // namespace airlock::egress
