// A hermetic "internet" for egress tests and benches, built from network
// namespaces this process creates (nothing is sent off the machine):
//
//   netns alt-d<pid>  (the daemon's namespace: the test thread moves here)
//     altu<pid> 192.0.2.2/24, default via 192.0.2.1  ── the only uplink
//   netns alt-i<pid>  (the fake internet; no default route, no other link)
//     alti<pid> 192.0.2.1/24; on lo: 203.0.113.10 (allowed.test),
//     .20 (denied.test), .30 (other.test), .53 (DNS), all /32
//   DNS server 203.0.113.53:53 (UDP+TCP): A records of the names above plus
//     meta.test → 169.254.169.254 (rebinding attempt), uplink.test → 192.0.2.2
//     (the daemon namespace's own address), selfhost.test → 203.0.113.77 (on no
//     link here: tests put it on a dummy link of the daemon namespace, an
//     address of the "host"); logs every name asked.
//   HTTP on .10/.20/.30:80, HTTPS on .10/.20:443 (cert from a test CA made
//   with the openssl CLI, SAN allowed.test, denied.test, other.test), raw TCP
//   echo-ish on .30:8080; each counts accepted connections per ip:port.
//   Responses: "server=<ip> host=<Host> sni=<sni> path=<path>\n";
//   /hold waits up to 10 s; /doh?name=N answers N's address (DNS over HTTPS
//   in spirit); /bytes?n=N sends N bytes; /echo[?chunk=N] reflects the
//   request (head, body, base64 of both; Authorization also as response
//   header X-Echo-Authorization; chunked in N-byte chunks); /pkg/<path> serves the file
//   <ServeFiles dir>/<path> (a package mirror; 404 when absent).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::test_util {

class FakeInternet {
 public:
  static StatusOr<std::unique_ptr<FakeInternet>> Start(const std::string& work_dir);
  ~FakeInternet();  // stops servers, moves the thread back, deletes namespaces

  // Moves the calling thread into the daemon namespace (threads it creates
  // afterwards are born there too); Leave() moves it back.
  Status Enter();
  void Leave();

  const std::string& daemon_ns() const { return dns_; }
  const std::string& internet_ns() const { return ins_; }
  std::string ca_file() const { return dir_ + "/ca.pem"; }
  std::string uplink() const { return uplink_; }
  static constexpr const char* kDnsServer = "203.0.113.53:53";

  // Serve /pkg/<path> from `dir` (a test's apt repository, package index,
  // tarballs). Call before the first request.
  void ServeFiles(const std::string& dir) { files_dir_ = dir; }
  // Paths asked under /pkg/, in order.
  std::vector<std::string> FilesServed();

  // Names the DNS server was asked, in order.
  std::vector<std::string> DnsLog();
  int Accepted(const std::string& ip_port);  // "203.0.113.10:443"
  int UdpReceived();                         // datagrams on 203.0.113.10:9999

 private:
  FakeInternet() = default;
  Status Setup();
  void ServeDnsUdp();
  void ServeDnsTcp();
  void ServeTcp(int listen_fd, std::string ip_port, bool tls);
  void ServeUdpSink();
  void HandleConn(int fd, std::string ip_port, bool tls);
  std::string Answer(const std::string& name);

  std::string dir_, dns_, ins_, uplink_, files_dir_;
  std::vector<std::string> files_served_;
  UniqueFd root_ns_, daemon_ns_fd_, inet_ns_fd_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::string> dns_log_;
  std::map<std::string, int> accepted_;
  int udp_received_ = 0;
  std::vector<UniqueFd> listeners_;
  std::vector<std::thread> threads_;
  void* ssl_ctx_ = nullptr;
};

}  // namespace airlock::test_util
