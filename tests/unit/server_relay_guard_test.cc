// A guest's bytes never become a page of the daemon's origin (relay_guard.h,
// issue 32): signed /files URLs carry only what the E2B SDK signs and expire
// within a day if at all; a hostile agent that answers /files with text/html
// and Service-Worker-Allowed is relayed by the data plane's proxy
// (ForwardRequest, the code HandleData runs) as a download the browser
// never renders; a service worker's script is never fetched. The "daemon"
// here is an in-process listener that admits a request exactly as
// HandleData does for the agent's port (token, or CheckFileSignature on
// /files) and relays it with GuardForGuest's guard to a fake agent on
// loopback.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "http/url.h"
#include "gateway/relay_guard.h"
#include "server/server.h"
#include "tests/unit/loopback_http.h"

namespace airlock::server {
namespace {

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(RelayGuardTest, SignaturesAreTheSdks) {
  // The agent's known vectors (tests/unit/server_agent_auth_test.cc, from Python hashlib).
  EXPECT_EQ(FileUrlSignature("/home/user/a.txt", "read", "", "tok", std::nullopt),
            "v1_Zkbb3914oLJLvMBzCAHQhm2ydBLxbSx2eQUR/kLdvIY");
  EXPECT_EQ(FileUrlSignature("/home/user/a.txt", "write", "root", "tok", 1767323045),
            "v1_c2qyCWEXv9vQwQg1ZvGMaq/J8saYSfmfa8Xkejbw5+s");
}

TEST(RelayGuardTest, SignedQueryCarriesOnlyWhatTheSdkSigns) {
  const int64_t now = 1'800'000'000;
  const std::string later = std::to_string(now + 120);
  // The SDK's shapes: downloadUrl(path) (no username from envd 0.4 on, no
  // expiration by default), with user and useSignatureExpiration, and
  // uploadUrl() without a path.
  auto none = CheckSignedFileQuery("path=%2Fhome%2Fuser%2Fa.txt&signature=v1_x", now);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  auto full = CheckSignedFileQuery("username=user&path=%2Fa&signature=v1_x&signature_expiration=" + later, now);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(**full, now + 120);
  EXPECT_TRUE(CheckSignedFileQuery("signature=v1_x", now).ok());
  // Anything the signature does not cover, or a parameter twice: refused.
  for (std::string q : {"path=%2Fa&signature=v1_x&next=%2Fconsole%2F", "path=%2Fa&signature=v1_x&x",
                        "path=%2Fa&path=%2Fb&signature=v1_x", "path=%2Fa&signature=v1_x&signature=v1_y",
                        "path=%2Fa&sign%61ture=v1_x&signature=v1_y", "path=%2Fa"}) {
    auto r = CheckSignedFileQuery(q, now);
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << q;
  }
  EXPECT_NE(CheckSignedFileQuery("path=%2Fa&signature=v1_x&next=1", now).status().message().find("'next'"),
            std::string::npos);
  // Expirations: digits, not past, at most a day ahead (+ clock skew).
  const int64_t cap = kMaxSignedUrlLifetime.count() + kSignedUrlClockSkew.count();
  EXPECT_TRUE(CheckSignedFileQuery("signature=v1_x&signature_expiration=" + std::to_string(now + cap), now).ok());
  auto far = CheckSignedFileQuery("signature=v1_x&signature_expiration=" + std::to_string(now + cap + 1), now);
  EXPECT_EQ(far.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(far.status().message().find("24 h"), std::string::npos) << far.status().message();
  // envd's answer, word for word (E2B's SDK tests compare the body).
  EXPECT_EQ(CheckSignedFileQuery("signature=v1_x&signature_expiration=" + std::to_string(now - 10000), now)
                .status()
                .message(),
            "signature is already expired");
  for (std::string e : {std::to_string(now - 1), std::string(""), std::string("+1800000100"), std::string(" 1800000100"),
                        std::string("1e12"), std::string("99999999999999999999")}) {
    EXPECT_FALSE(CheckSignedFileQuery("signature=v1_x&signature_expiration=" + e, now).ok()) << e;
  }
}

TEST(RelayGuardTest, HeadersOfAGuestsAnswer) {
  EXPECT_EQ(GuardForGuest(kAgentPort, "/files"), RelayGuard::kGuestFile);
  EXPECT_EQ(GuardForGuest(kAgentPort, "/filesystem.Filesystem/ListDir"), RelayGuard::kGuest);
  EXPECT_EQ(GuardForGuest(8080, "/files"), RelayGuard::kGuest);
  EXPECT_TRUE(DropsRelayedHeader(RelayGuard::kGuest, "service-worker-allowed"));
  EXPECT_FALSE(DropsRelayedHeader(RelayGuard::kGuest, "Content-Type"));
  EXPECT_TRUE(DropsRelayedHeader(RelayGuard::kGuestFile, "Content-Type"));
  EXPECT_FALSE(DropsRelayedHeader(RelayGuard::kNone, "Service-Worker-Allowed"));
  EXPECT_TRUE(GuardHeaders(RelayGuard::kNone, http::Method::kGet, "").empty());
  // An upload's JSON answer stays JSON; a download is octet-stream whatever the guest says.
  auto upload = GuardHeaders(RelayGuard::kGuestFile, http::Method::kPost, "application/json; charset=utf-8");
  EXPECT_EQ(std::count(upload.begin(), upload.end(), std::pair<std::string, std::string>{"Content-Type", "application/json"}), 1);
  auto download = GuardHeaders(RelayGuard::kGuestFile, http::Method::kGet, "application/json");
  EXPECT_EQ(std::count(download.begin(), download.end(),
                       std::pair<std::string, std::string>{"Content-Type", "application/octet-stream"}),
            1);
  // One origin for every sandbox, chosen by headers: caches must key on them;
  // a file's bytes are never stored (the guest's Cache-Control is dropped).
  const std::pair<std::string, std::string> vary{"Vary", "E2b-Sandbox-Id, E2b-Sandbox-Port, X-Access-Token"};
  for (auto g : {RelayGuard::kGuest, RelayGuard::kGuestFile}) {
    auto h = GuardHeaders(g, http::Method::kGet, "");
    EXPECT_EQ(std::count(h.begin(), h.end(), vary), 1);
  }
  EXPECT_EQ(std::count(download.begin(), download.end(), std::pair<std::string, std::string>{"Cache-Control", "no-store"}),
            1);
  EXPECT_TRUE(DropsRelayedHeader(RelayGuard::kGuestFile, "Cache-Control"));
  EXPECT_FALSE(DropsRelayedHeader(RelayGuard::kGuest, "Cache-Control"));
}

// A hostile agent: every connection gets `answer` (whatever was asked).
class FakeAgent {
 public:
  explicit FakeAgent(std::string answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeAgent() {
    ::shutdown(fd_, SHUT_RDWR);  // accept() returns
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  int requests() const { return requests_; }

 private:
  void Serve() {
    for (;;) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      ssize_t n;
      while (req.find("\r\n\r\n") == std::string::npos && (n = ::read(c, buf, sizeof buf)) > 0) req.append(buf, n);
      ++requests_;
      (void)!::write(c, answer_.data(), answer_.size());
      ::shutdown(c, SHUT_WR);
      while (::read(c, buf, sizeof buf) > 0) {
      }
      ::close(c);
    }
  }
  std::string answer_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> requests_{0};
  std::thread thread_;
};

constexpr char kToken[] = "sandbox-access-token";

// The daemon's agent-port route: Handle's service-worker refusal, then
// HandleData's admission (X-Access-Token, or a signed /files URL), then the
// relay with the guard a sandbox's relay gets.
class GuardedDaemon {
 public:
  explicit GuardedDaemon(uint16_t agent_port)
      : listener_(io_, [agent_port](std::shared_ptr<http::Conn> c) {
          if (IsServiceWorkerScript(*c)) return c->RespondError(403, "no service worker");
          bool ok = c->Header("X-Access-Token") == kToken ||
                    (c->path() == "/files" && CheckFileSignature(*c, kToken, Now()).ok());
          if (!ok) return c->RespondError(401, "refused");
          ForwardExtras x;
          x.guard = GuardForGuest(kAgentPort, c->path());
          ForwardRequest(c, "127.0.0.1", agent_port, "", std::move(x));
        }, http::Limits{}) {
    EXPECT_TRUE(listener_.Listen("127.0.0.1:0").ok());
    thread_ = std::thread([this] { io_.run(); });
  }
  ~GuardedDaemon() {
    io_.stop();
    thread_.join();
  }
  uint16_t port() const { return listener_.port(); }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{io_.get_executor()};
  http::Listener listener_;
  std::thread thread_;
};

struct Answer {
  int status = 0;
  std::multimap<std::string, std::string> headers;  // lower-case names
  std::string body;
  size_t Count(const std::string& name) const { return headers.count(name); }
  std::string Get(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

Answer Request(uint16_t port, const std::string& method, const std::string& target, const std::string& extra = "",
               const std::string& body = "") {
  const std::string out = test_util::LoopbackHttp(port, method, target, extra, body);
  Answer r;
  size_t end = out.find("\r\n\r\n");
  if (out.size() < 12 || end == std::string::npos) return r;
  r.status = std::atoi(out.c_str() + 9);
  r.body = out.substr(end + 4);
  for (size_t pos = out.find("\r\n") + 2; pos < end;) {
    size_t eol = out.find("\r\n", pos);
    std::string line = out.substr(pos, eol - pos);
    pos = eol + 2;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    r.headers.emplace(name, value);
  }
  return r;
}

// downloadUrl()/uploadUrl() as the SDK builds them.
std::string SignedTarget(const std::string& path, const std::string& op, std::optional<int64_t> expiration,
                         const std::string& extra_query = "") {
  std::string t = "/files?path=" + http::UrlEncodeComponent(path) + "&signature=" +
                  http::UrlEncodeComponent(FileUrlSignature(path, op, "", kToken, expiration));
  if (expiration) t += "&signature_expiration=" + std::to_string(*expiration);
  return t + extra_query;
}

const char kHostilePage[] =
    "<script>navigator.serviceWorker.register('/files?path=sw.js&signature=v1_x',{scope:'/'})</script>";

std::string HostileAnswer(const std::string& type) {
  return "HTTP/1.1 200 OK\r\nContent-Type: " + type +
         "\r\nService-Worker-Allowed: /\r\nservice-worker-allowed: /console/\r\nContent-Disposition: inline\r\n"
         "Content-Security-Policy: script-src *\r\nX-Content-Type-Options: none\r\nX-Guest: kept\r\n"
         "Content-Length: " +
         std::to_string(std::strlen(kHostilePage)) + "\r\n\r\n" + kHostilePage;
}

TEST(RelayGuardTest, AHostileAgentsPageComesBackAsADownloadOnASignedUrl) {
  FakeAgent agent(HostileAnswer("text/html; charset=utf-8"));
  GuardedDaemon daemon(agent.port());
  for (std::optional<int64_t> exp : {std::optional<int64_t>(), std::optional<int64_t>(Now() + 120)}) {
    Answer a = Request(daemon.port(), "GET", SignedTarget("/home/user/page.html", "read", exp));
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.body, kHostilePage);  // the bytes are the guest's, unchanged
    EXPECT_EQ(a.Count("content-type"), 1u);
    EXPECT_EQ(a.Get("content-type"), "application/octet-stream");
    EXPECT_EQ(a.Count("content-disposition"), 1u);
    EXPECT_EQ(a.Get("content-disposition"), "attachment");
    EXPECT_EQ(a.Count("x-content-type-options"), 1u);
    EXPECT_EQ(a.Get("x-content-type-options"), "nosniff");
    EXPECT_EQ(a.Count("content-security-policy"), 1u);
    EXPECT_EQ(a.Get("content-security-policy"), "sandbox; default-src 'none'");
    EXPECT_EQ(a.Count("service-worker-allowed"), 0u);
    EXPECT_EQ(a.Get("x-guest"), "kept");
  }
  // The same with the access token instead of a signature (the SDK's files.read).
  Answer t = Request(daemon.port(), "GET", "/files?path=%2Fx", std::string("X-Access-Token: ") + kToken + "\r\n");
  EXPECT_EQ(t.Get("content-type"), "application/octet-stream");
  EXPECT_EQ(t.Count("service-worker-allowed"), 0u);
  // A form POST to a signed upload URL is a navigation too: no page either.
  Answer up = Request(daemon.port(), "POST", SignedTarget("/home/user/u.txt", "write", Now() + 60), "", "x");
  ASSERT_EQ(up.status, 200);
  EXPECT_EQ(up.Get("content-type"), "application/octet-stream");
  EXPECT_EQ(up.Get("content-disposition"), "attachment");
  // Other agent routes (fetched with headers, never navigated): nosniff, no Service-Worker-Allowed.
  Answer rpc = Request(daemon.port(), "POST", "/filesystem.Filesystem/Stat",
                       std::string("X-Access-Token: ") + kToken + "\r\n", "{}");
  EXPECT_EQ(rpc.Get("x-content-type-options"), "nosniff");
  EXPECT_EQ(rpc.Count("service-worker-allowed"), 0u);
  EXPECT_EQ(rpc.Get("content-type"), "text/html; charset=utf-8");
}

TEST(RelayGuardTest, AnUploadsJsonAnswerStaysJson) {
  FakeAgent agent("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]");
  GuardedDaemon daemon(agent.port());
  Answer up = Request(daemon.port(), "POST", SignedTarget("/home/user/u.txt", "write", std::nullopt), "", "x");
  ASSERT_EQ(up.status, 200);
  EXPECT_EQ(up.Get("content-type"), "application/json");
  EXPECT_EQ(up.Get("x-content-type-options"), "nosniff");
  EXPECT_EQ(up.body, "[]");
}

TEST(RelayGuardTest, UnsignedParametersFarExpirationsAndServiceWorkersNeverReachTheAgent) {
  FakeAgent agent(HostileAnswer("text/javascript"));
  GuardedDaemon daemon(agent.port());
  const std::string path = "/home/user/sw.js";
  // The service worker's script fetch, even on a valid signed URL.
  EXPECT_EQ(Request(daemon.port(), "GET", SignedTarget(path, "read", std::nullopt), "Service-Worker: script\r\n").status,
            403);
  EXPECT_EQ(
      Request(daemon.port(), "GET", SignedTarget(path, "read", std::nullopt), "Sec-Fetch-Dest: serviceworker\r\n").status,
      403);
  // A parameter the signature does not cover rides along: refused.
  EXPECT_EQ(Request(daemon.port(), "GET", SignedTarget(path, "read", std::nullopt, "&next=%2Fconsole%2F")).status, 401);
  EXPECT_EQ(Request(daemon.port(), "GET", SignedTarget(path, "read", Now() + 60, "&path=%2Fetc%2Fshadow")).status, 401);
  // Signed for longer than a day: refused; a day is fine.
  EXPECT_EQ(Request(daemon.port(), "GET", SignedTarget(path, "read", Now() + 2 * 86400)).status, 401);
  EXPECT_EQ(agent.requests(), 0);
  EXPECT_EQ(Request(daemon.port(), "GET", SignedTarget(path, "read", Now() + 86400)).status, 200);
  EXPECT_EQ(agent.requests(), 1);
}

}  // namespace
}  // namespace airlock::server
