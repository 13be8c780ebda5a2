// Where an OCI pull may connect and what a failed one tells the tenant
// (image/pull_proxy.h, image/oci_base.h; issue 32 item 6). No skopeo, no
// registry: the rule, the error mapping, the auth file and skopeo's argv,
// and the proxy itself with a local TCP service standing in for a registry
// (those need CAP_SYS_ADMIN for the pull's netns; skipped without it).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "image/oci_base.h"
#include "image/pull_proxy.h"

namespace airlock::image {
namespace {

sockaddr_storage Addr(const char* text) {
  sockaddr_storage s{};
  if (::inet_pton(AF_INET, text, &reinterpret_cast<sockaddr_in&>(s).sin_addr) == 1) {
    s.ss_family = AF_INET;
  } else {
    EXPECT_EQ(::inet_pton(AF_INET6, text, &reinterpret_cast<sockaddr_in6&>(s).sin6_addr), 1) << text;
    s.ss_family = AF_INET6;
  }
  return s;
}

TEST(PullRuleTest, OnlyPublicAddressesThatAreNotTheHosts) {
  PullRule rule({}, {Addr("198.51.100.7"), Addr("2a01:4f8::7")});
  for (const char* no : {"127.0.0.1",
                         "127.5.6.7",
                         "10.1.2.3",
                         "172.16.0.1",
                         "192.168.1.1",
                         "100.64.0.1",
                         "169.254.169.254",
                         "224.0.0.1",
                         "0.0.0.0",
                         "255.255.255.255",
                         "198.51.100.7",
                         "::1",
                         "::",
                         "fe80::1",
                         "fc00::1",
                         "fd12::1",
                         "ff02::1",
                         "::ffff:127.0.0.1",
                         "::ffff:8.8.8.8",
                         "2001:db8::1",
                         "2002:7f00:1::1",
                         "2001:0:4136::1",
                         "2a01:4f8::7"})
    EXPECT_FALSE(rule.PublicAddress(Addr(no))) << no;
  for (const char* yes : {"8.8.8.8", "1.1.1.1", "198.51.100.8", "2606:4700::1111", "2a01:4f8::8"})
    EXPECT_TRUE(rule.PublicAddress(Addr(yes))) << yes;
}

TEST(PullRuleTest, LiteralsAndLocalhostAreJudgedBeforeSkopeo) {
  PullRule none({}, {});
  for (const char* no : {"127.0.0.1:5000", "127.0.0.1", "localhost", "localhost:5000", "LocalHost:80",
                         "localhost.:5000", "a.localhost", "10.0.0.1:443", "169.254.169.254", "192.168.0.1:5000"})
    EXPECT_FALSE(none.StaticallyAllowed(no)) << no;
  for (const char* yes : {"", "registry.example.com", "ghcr.io", "8.8.8.8:5000", "quay.io:443"})
    EXPECT_TRUE(none.StaticallyAllowed(yes)) << yes;
  PullRule some({"127.0.0.1:5000", "LOCALHOST", "registry.internal"}, {});
  EXPECT_TRUE(some.StaticallyAllowed("127.0.0.1:5000"));
  EXPECT_FALSE(some.StaticallyAllowed("127.0.0.1:5001"));
  EXPECT_FALSE(some.StaticallyAllowed("127.0.0.1"));
  EXPECT_TRUE(some.StaticallyAllowed("localhost:1234"));
  EXPECT_TRUE(some.Allowed("registry.internal", 443));
  EXPECT_TRUE(some.Allowed("Registry.Internal.", 5000));
  EXPECT_FALSE(some.Allowed("evil.registry.internal", 443));
  EXPECT_FALSE(some.Allowed("127.0.0.1", 5001));
}

// Before: the tenant got skopeo's error, which tells a closed port, an HTTP
// service, a TLS service and a timeout apart.
TEST(PullFailureTest, TransportErrorsAllReadTheSame) {
  const std::string ref = "127.0.0.1:9/x:1";
  const std::string same = PullFailureText(ref, "");
  EXPECT_EQ(same, "cannot pull image '127.0.0.1:9/x:1': the registry refused or could not be reached");
  for (const char* raw :
       {"pinging container registry 127.0.0.1:9: Get \"https://127.0.0.1:9/v2/\": dial tcp 127.0.0.1:9: "
        "connect: connection refused",
        "pinging container registry 127.0.0.1:8080: Get \"https://127.0.0.1:8080/v2/\": http: server gave HTTP "
        "response to HTTPS client",
        "pinging container registry 10.0.0.1: Get \"https://10.0.0.1/v2/\": dial tcp 10.0.0.1:443: i/o timeout",
        "pinging container registry 127.0.0.1:22: Get \"https://127.0.0.1:22/v2/\": tls: first record does not "
        "look like a TLS handshake",
        "pinging container registry x: Get \"https://x/v2/\": x509: certificate signed by unknown authority",
        "pinging container registry 127.0.0.1:9: Get \"https://127.0.0.1:9/v2/\": Bad Gateway",
        "pinging container registry 127.0.0.1:9: invalid status code from registry 502 (Bad Gateway)",
        "lookup nope.invalid: no such host", "EOF", ""}) {
    EXPECT_EQ(PullFailureText(ref, raw), same) << raw;
  }
  // A reference cannot steer the mapping: it has no spaces.
  EXPECT_EQ(PullFailureText("r.example/unauthorized:notfound", "Get https://r.example/v2/unauthorized: EOF"),
            "cannot pull image 'r.example/unauthorized:notfound': the registry refused or could not be reached");
}

TEST(PullFailureTest, TheRegistrysAnswerIsKeptCoarse) {
  const std::string ref = "r.example/a:1";
  for (const char* raw : {"reading manifest 1 in r.example/a: manifest unknown: manifest unknown",
                          "reading manifest 1 in r.example/a: name unknown: repository name not known to registry",
                          "invalid status code from registry 404 (Not Found)"})
    EXPECT_EQ(PullFailureText(ref, raw),
              "cannot pull image 'r.example/a:1': not found (the registry has no such image)")
        << raw;
  for (const char* raw : {"unable to retrieve auth token: invalid username/password: unauthorized: authentication "
                          "required",
                          "reading manifest 1 in r.example/a: unauthorized: authentication required",
                          "reading manifest 1 in docker.io/library/nope: requested access to the resource is denied"})
    EXPECT_EQ(PullFailureText(ref, raw),
              "cannot pull image 'r.example/a:1': unauthorized (the registry refused the credentials or the access)")
        << raw;
}

class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/airlock-pull-test-XXXXXX";
    path_ = ::mkdtemp(t);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Before: the password was on skopeo's command line (--creds=user:pass),
// visible in ps to any local user.
TEST(PullCredentialsTest, AnAuthFileOfMode0600NeverArgv) {
  TempDir dir;
  OciPullOptions o;
  o.ref = "127.0.0.1:5000/team/app:1";
  o.credentials = OciCredentials{"alice", "s3cret-pw"};
  auto path = WriteAuthFile(dir.path(), o);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  struct stat st;
  ASSERT_EQ(::stat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  std::ifstream in(*path);
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j, nlohmann::json::parse(R"({"auths":{"127.0.0.1:5000":{"auth":"YWxpY2U6czNjcmV0LXB3"}}})"));
  const std::string digest = "sha256:" + std::string(64, 'a');
  for (const auto& argv : {SkopeoInspectArgv(o, *path), SkopeoCopyArgv(o, *path, digest, dir.path() + "/layout")}) {
    std::string joined;
    for (const auto& a : argv) joined += a + " ";
    EXPECT_EQ(joined.find("s3cret"), std::string::npos) << joined;
    EXPECT_EQ(joined.find("creds"), std::string::npos) << joined;
    const bool inspect = argv.end() != std::find(argv.begin(), argv.end(), "inspect");
    auto flag = std::find(argv.begin(), argv.end(), inspect ? "--authfile" : "--src-authfile");
    ASSERT_NE(flag, argv.end()) << joined;
    ASSERT_NE(flag + 1, argv.end());
    EXPECT_EQ(*(flag + 1), *path);
  }
  // A second pull in the same dir never reuses (or follows) a file there.
  EXPECT_FALSE(WriteAuthFile(dir.path(), o).ok());
}

TEST(PullCredentialsTest, NoCredentialsIsAnEmptyAuthFileAndDockerHubIsDockerIo) {
  TempDir dir;
  OciPullOptions o;
  o.ref = "python:3.12";
  auto path = WriteAuthFile(dir.path(), o);
  ASSERT_TRUE(path.ok());
  std::ifstream in(*path);
  EXPECT_EQ(nlohmann::json::parse(in), nlohmann::json::parse(R"({"auths":{}})"));
  EXPECT_EQ(AuthRegistryOf("python:3.12"), "docker.io");
  EXPECT_EQ(AuthRegistryOf("Ghcr.io/a/b"), "ghcr.io");
}

// --- the proxy, against a local TCP service on the host's loopback

class Upstream {
 public:
  Upstream() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 8);
    thread_ = std::thread([this] {
      while (true) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[4096];
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n > 0 && std::string_view(buf, n).starts_with("GET ")) {
          last_request_ = std::string(buf, n);
          const char reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
          ::send(c, reply, sizeof reply - 1, MSG_NOSIGNAL);
        } else {
          while (n > 0) {
            ::send(c, buf, n, MSG_NOSIGNAL);
            n = ::recv(c, buf, sizeof buf, 0);
          }
        }
        ::close(c);
      }
    });
  }
  ~Upstream() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  std::string last_request_;

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

// A TCP connection to 127.0.0.1:port made inside the netns `ns`.
int ConnectIn(int ns, uint16_t port) {
  int fd = -1;
  std::thread t([&] {
    if (::setns(ns, CLONE_NEWNET) != 0) return;
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      fd = -1;
    }
  });
  t.join();
  return fd;
}

std::string Exchange(int fd, const std::string& out) {
  ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  std::string in;
  char buf[4096];
  while (in.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, n);
  }
  return in;
}

std::string AuthHeader(const PullProxy& p) {
  // url() = http://airlock:<password>@127.0.0.1:<port>
  const std::string u = p.url();
  const std::string userpass = u.substr(7, u.find('@') - 7);
  static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b;
  for (size_t i = 0; i < userpass.size(); i += 3) {
    uint32_t v = uint8_t(userpass[i]) << 16 | (i + 1 < userpass.size() ? uint8_t(userpass[i + 1]) << 8 : 0) |
                 (i + 2 < userpass.size() ? uint8_t(userpass[i + 2]) : 0);
    b += k[v >> 18 & 63];
    b += k[v >> 12 & 63];
    b += i + 1 < userpass.size() ? k[v >> 6 & 63] : '=';
    b += i + 2 < userpass.size() ? k[v & 63] : '=';
  }
  return "Proxy-Authorization: Basic " + b + "\r\n";
}

std::unique_ptr<PullProxy> StartOrSkip(PullRule rule) {
  auto p = PullProxy::Start(std::move(rule));
  if (!p.ok()) return nullptr;
  return std::move(*p);
}

TEST(PullProxyTest, RefusesLoopbackLikeAClosedPortAndTheNetnsReachesNothing) {
  Upstream up;
  auto p = StartOrSkip(PullRule({}, {}));
  if (!p) GTEST_SKIP() << "no CAP_SYS_ADMIN for the pull's netns";
  const std::string target = "127.0.0.1:" + std::to_string(up.port());
  // No password: 407.
  int c = ConnectIn(p->netns_fd(), p->port());
  ASSERT_GE(c, 0);
  EXPECT_TRUE(
      Exchange(c, "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n").starts_with("HTTP/1.1 407"));
  ::close(c);
  // The open port and a closed one get the same answer.
  std::string answers[2];
  for (int i = 0; i < 2; ++i) {
    const std::string t = i == 0 ? target : "127.0.0.1:9";
    c = ConnectIn(p->netns_fd(), p->port());
    answers[i] = Exchange(c, "CONNECT " + t + " HTTP/1.1\r\nHost: " + t + "\r\n" + AuthHeader(*p) + "\r\n");
    ::close(c);
  }
  EXPECT_TRUE(answers[0].starts_with("HTTP/1.1 502 Bad Gateway")) << answers[0];
  EXPECT_EQ(answers[0], answers[1]);
  c = ConnectIn(p->netns_fd(), p->port());
  EXPECT_TRUE(
      Exchange(c, "GET http://" + target + "/v2/ HTTP/1.1\r\nHost: " + target + "\r\n" + AuthHeader(*p) + "\r\n")
          .starts_with("HTTP/1.1 502"));
  ::close(c);
  EXPECT_TRUE(up.last_request_.empty());
  // What skopeo would do without the proxy (a loopback literal, a redirect
  // to one): nothing there.
  EXPECT_LT(ConnectIn(p->netns_fd(), up.port()), 0);
  auto events = p->Events();
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events[0].find("refused " + target), std::string::npos) << events[0];
}

TEST(PullProxyTest, AnAllowedRegistryIsReachedTunnelledForwardedAndAsPlainHttp) {
  Upstream up;
  const std::string target = "127.0.0.1:" + std::to_string(up.port());
  auto p = StartOrSkip(PullRule({target}, {}));
  if (!p) GTEST_SKIP() << "no CAP_SYS_ADMIN for the pull's netns";
  int c = ConnectIn(p->netns_fd(), p->port());
  ASSERT_GE(c, 0);
  EXPECT_TRUE(Exchange(c, "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n" + AuthHeader(*p) + "\r\n")
                  .starts_with("HTTP/1.1 200"));
  EXPECT_EQ(Exchange(c, "ping\r\n\r\n"), "ping\r\n\r\n");
  ::close(c);
  // Plain HTTP: origin form upstream, the proxy's headers dropped.
  c = ConnectIn(p->netns_fd(), p->port());
  std::string r = Exchange(c, "GET http://" + target + "/v2/ HTTP/1.1\r\nHost: " + target + "\r\n" + AuthHeader(*p) +
                                  "Connection: keep-alive\r\n\r\n");
  ::close(c);
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK")) << r;
  EXPECT_TRUE(up.last_request_.starts_with("GET /v2/ HTTP/1.1\r\n")) << up.last_request_;
  EXPECT_EQ(up.last_request_.find("Proxy-Authorization"), std::string::npos);
  EXPECT_NE(up.last_request_.find("Connection: close\r\n"), std::string::npos);
  // Go dials loopback literals directly: the forwarder at the same port.
  c = ConnectIn(p->netns_fd(), up.port());
  ASSERT_GE(c, 0);
  EXPECT_EQ(Exchange(c, "pong\r\n\r\n"), "pong\r\n\r\n");
  ::close(c);
}

}  // namespace
}  // namespace airlock::image
