// Where an OCI pull may connect (docs/templates.md "OCI bases", issue 32
// item 6): skopeo runs on the host, so without a bound a tenant's
// fromImage("127.0.0.1:PORT/x") would make it a port scanner of the host and
// its networks.
//
// The rule (PullRule): a registry named by the operator (serve
// --registry-allow HOST[:PORT]; without a port every port of HOST) may be
// reached at whatever it resolves to. Any other host is reached only when
// every address it resolves to is public: not in egress's forbidden ranges
// (loopback, RFC 1918, CGNAT, link-local incl. 169.254.169.254, multicast,
// reserved: egress::IsForbiddenAddress), not an IPv6 address outside global
// unicast 2000::/3 (or in 2001::/32, 2001:db8::/32, 2002::/16, which embed or
// document other addresses), and not one of the host's own addresses
// (getifaddrs at the pull's start).
//
// Enforced where skopeo connects (PullProxy): skopeo runs in a network
// namespace of its own that has nothing but `lo`, with HTTPS_PROXY and
// HTTP_PROXY naming a proxy of ours listening on that namespace's 127.0.0.1
// (an ephemeral port, a random password), for the pull's duration; the
// proxy's threads dial out from the daemon's namespace. So nothing skopeo
// does reaches anything directly: not the host's loopback (Go's net/http
// never proxies `localhost` and loopback literals, nor a redirect or a token
// realm naming them: in skopeo's namespace they find nothing), not any
// other address (no route).
// For each CONNECT host:port (HTTPS) and each absolute-form request (plain
// HTTP of an insecure registry, sent upstream as origin-form with
// `Connection: close`), the proxy resolves the host itself, checks every
// address, and connects only to a checked address: a name that resolves
// differently for skopeo (DNS rebinding) changes nothing. A refused or
// unreachable target gets the same `502 Bad Gateway`, whatever the cause.
// A registry of registry_allow that is `localhost` or a 127/8 literal gets a
// plain TCP forwarder at the same 127.0.0.1:PORT inside skopeo's namespace
// (PORT: the entry's, else 443 and 80) to 127.0.0.1:PORT of the host: the
// e2e suite's local registry. The reference's registry is also checked
// before skopeo runs (PullRule::StaticallyAllowed), so that a refused
// literal fails without starting anything.
//
// Needs CAP_SYS_ADMIN (unshare(CLONE_NEWNET)): without it Start fails and
// so does the pull (fail closed).
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::image {

class PullRule {
 public:
  // registry_allow: HOST[:PORT] (lower case). host_addresses: the host's own
  // addresses (sockaddr_in / sockaddr_in6; the port is ignored).
  PullRule(std::vector<std::string> registry_allow, std::vector<sockaddr_storage> host_addresses);
  // With the host's addresses from getifaddrs (none when it fails).
  static PullRule ForThisHost(std::vector<std::string> registry_allow);

  // The operator named host:port (or host) in registry_allow.
  bool Allowed(std::string_view host, uint16_t port) const;
  // A public address that is not the host's (see above).
  bool PublicAddress(const sockaddr_storage& addr) const;
  // Before skopeo runs: the registry of `registry` (RegistryOf(ref); "" for
  // Docker Hub) when it is a literal address or `localhost` not allowed:
  // false. A DNS name: true (the proxy judges what it resolves to).
  bool StaticallyAllowed(std::string_view registry) const;
  const std::vector<std::string>& allow() const { return allow_; }

 private:
  std::vector<std::string> allow_;
  std::vector<sockaddr_storage> host_;
};

class PullProxy {
 public:
  // A new network namespace with `lo` up; the proxy on its 127.0.0.1:0 and
  // the forwarders; serves until destroyed.
  static StatusOr<std::unique_ptr<PullProxy>> Start(PullRule rule);
  ~PullProxy();  // stops accepting, ends every relay, joins the threads
  PullProxy(const PullProxy&) = delete;
  PullProxy& operator=(const PullProxy&) = delete;

  // "http://airlock:<password>@127.0.0.1:<port>": for HTTPS_PROXY/HTTP_PROXY.
  std::string url() const;
  uint16_t port() const { return port_; }
  // The namespace skopeo runs in (SpawnOptions::netns_fd).
  int netns_fd() const { return netns_.get(); }
  // What the proxy refused or could not reach, one line each ("refused
  // 127.0.0.1:5000: 127.0.0.1 is not a public address"), for the daemon's
  // log only: never for the tenant.
  std::vector<std::string> Events() const;

 private:
  explicit PullProxy(PullRule rule) : rule_(std::move(rule)) {}
  struct Listener {
    UniqueFd fd;
    uint16_t forward_port = 0;  // 0: the proxy; else a forwarder to the host's 127.0.0.1:PORT
  };
  void AcceptLoop();
  void Serve(UniqueFd client);
  void Forward(UniqueFd client, uint16_t port);
  StatusOr<UniqueFd> Dial(const std::string& host, uint16_t port);
  void Relay(int a, int b, bool end_on_b_eof);
  void Note(std::string line);

  PullRule rule_;
  UniqueFd netns_;
  std::vector<Listener> listeners_;
  UniqueFd stop_read_, stop_write_;  // a pipe: readable once stopping
  uint16_t port_ = 0;
  std::string password_;
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::thread> conns_;   // guarded by mu_
  std::vector<std::string> events_;  // guarded by mu_
};

}  // namespace airlock::image
