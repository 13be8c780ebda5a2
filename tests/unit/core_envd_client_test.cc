// EnvdClient against a hostile fake agent: everything a guest sends is
// untrusted. The fake serves canned answers over real HTTP on loopback.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "core/envd_client.h"
#include "envd/envelope.h"

namespace airlock {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;

using Handler = std::function<http::response<http::string_body>(const http::request<http::string_body>&)>;

// Serves each connection's requests with `handler` until destroyed.
class FakeAgent {
 public:
  explicit FakeAgent(Handler h) : handler_(std::move(h)), acceptor_(ioc_, {asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] {
      while (!stop_) {
        tcp::socket s(ioc_);
        boost::system::error_code ec;
        acceptor_.accept(s, ec);
        if (ec || stop_) return;
        try {
          beast::flat_buffer buf;
          while (true) {
            http::request<http::string_body> req;
            http::read(s, buf, req);
            auto res = handler_(req);
            res.prepare_payload();
            http::write(s, res);
            if (!req.keep_alive()) break;
          }
        } catch (...) {
        }
      }
    });
  }
  ~FakeAgent() {
    stop_ = true;
    boost::system::error_code ec;
    tcp::socket poke(ioc_);
    poke.connect({asio::ip::make_address("127.0.0.1"), port_}, ec);
    thread_.join();
  }
  AgentEndpoint endpoint() const { return {"127.0.0.1", port_}; }

 private:
  Handler handler_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  uint16_t port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

http::response<http::string_body> Json(const std::string& body, http::status st = http::status::ok) {
  http::response<http::string_body> r{st, 11};
  r.set(http::field::content_type, "application/json");
  r.body() = body;
  return r;
}

std::string TempDir() {
  std::string t = (fs::temp_directory_path() / "airlock-client-XXXXXX").string();
  return ::mkdtemp(t.data());
}

TEST(EnvdClientTest, DirectoryDownloadRefusesPathsOutsideTheRequestedDir) {
  FakeAgent agent([](const auto& req) {
    std::string t(req.target());
    if (t == "/filesystem.Filesystem/Stat")
      return Json(R"({"entry":{"name":"out","type":"FILE_TYPE_DIRECTORY","path":"/home/user/out"}})");
    if (t == "/filesystem.Filesystem/ListDir")
      return Json(R"({"entries":[{"name":"x","type":"FILE_TYPE_FILE","path":"/home/user/out/../../../tmp/evil","size":"4"}]})");
    return Json("pwnd");
  });
  EnvdClient c(agent.endpoint());
  std::string dir = TempDir();
  Status s = c.Download("/home/user/out", dir + "/dst");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_FALSE(fs::exists(dir + "/tmp/evil"));
  fs::remove_all(dir);
}

TEST(EnvdClientTest, DirectoryDownloadRefusesEntriesOfAnotherTree) {
  FakeAgent agent([](const auto& req) {
    std::string t(req.target());
    if (t == "/filesystem.Filesystem/Stat")
      return Json(R"({"entry":{"name":"out","type":"FILE_TYPE_DIRECTORY","path":"/home/user/out"}})");
    return Json(R"({"entries":[{"name":"passwd","type":"FILE_TYPE_FILE","path":"/etc/passwd","size":"4"}]})");
  });
  EnvdClient c(agent.endpoint());
  std::string dir = TempDir();
  EXPECT_EQ(c.Download("/home/user/out", dir + "/dst").code(), StatusCode::kPermissionDenied);
  fs::remove_all(dir);
}

TEST(EnvdClientTest, DownloadIsBoundedInSize) {
  FakeAgent agent([](const auto& req) {
    http::response<http::string_body> r{http::status::ok, 11};
    r.body() = std::string(1 << 20, 'x');
    return r;
  });
  EnvdClient c(agent.endpoint());
  std::string dir = TempDir();
  Status s = c.DownloadFile("/big", dir + "/big", 1000);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_FALSE(fs::exists(dir + "/big"));
  EXPECT_FALSE(fs::exists(dir + "/big.airlock-part"));
  fs::remove_all(dir);
}

TEST(EnvdClientTest, StreamWithoutEndEventIsAnError) {
  FakeAgent agent([](const auto& req) {
    http::response<http::string_body> r{http::status::ok, 11};
    r.set(http::field::content_type, "application/connect+json");
    r.body() = envd::EncodeEnvelope(R"({"event":{"start":{"pid":5}}})") + envd::EncodeEndStream(OkStatus());
    return r;
  });
  EnvdClient c(agent.endpoint());
  ExecRequest req;
  req.cmd = "true";
  auto r = c.Exec(req, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("without a result"), std::string::npos) << r.status().ToString();
}

TEST(EnvdClientTest, OversizedStreamMessageIsRejected) {
  FakeAgent agent([](const auto& req) {
    http::response<http::string_body> r{http::status::ok, 11};
    std::string frame = "\x00\x7f\xff\xff\xff";  // claims a 2 GiB message
    r.body() = std::string(frame.data(), 5) + std::string(100, 'a');
    return r;
  });
  EnvdClient c(agent.endpoint());
  ExecRequest req;
  req.cmd = "true";
  auto r = c.Exec(req, {});
  ASSERT_FALSE(r.ok());
}

TEST(EnvdClientTest, StreamErrorsSurfaceWithTheirCode) {
  FakeAgent agent([](const auto& req) {
    http::response<http::string_body> r{http::status::ok, 11};
    r.body() = envd::EncodeEndStream(InvalidArgument("cwd '/nonexistent' does not exist"));
    return r;
  });
  EnvdClient c(agent.endpoint());
  ExecRequest req;
  req.cmd = "true";
  auto r = c.Exec(req, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("/nonexistent"), std::string::npos);
}

TEST(EnvdClientTest, UnaryErrorsMapTheirJsonCode) {
  FakeAgent agent([](const auto& req) {
    return Json(R"({"code":"not_found","message":"process 9 not found"})", http::status::not_found);
  });
  EnvdClient c(agent.endpoint());
  Status s = c.SendSignal(9, "SIGNAL_SIGKILL");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

// A guest that accepts and then says nothing, or a byte now and then: the
// probe ends at its timeout (Asio's synchronous read would wait for good).
TEST(EnvdClientTest, HealthEndsAtItsTimeoutAgainstASilentOrTricklingListener) {
  for (const char* mode : {"silent", "trickle", "healthy"}) {
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc, {asio::ip::make_address("127.0.0.1"), 0});
    const uint16_t port = acceptor.local_endpoint().port();
    std::atomic<bool> done{false};
    std::thread server([&] {
      tcp::socket s(ioc);
      boost::system::error_code ec;
      acceptor.accept(s, ec);
      if (ec) return;
      const std::string answer = "HTTP/1.1 204 No Content\r\n\r\n";
      if (std::string(mode) == "healthy") asio::write(s, asio::buffer(answer), ec);
      for (size_t i = 0; !done && i < answer.size(); ++i) {
        if (std::string(mode) == "trickle") asio::write(s, asio::buffer(answer.data() + i, 1), ec);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the hostile guest's pace
      }
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
    EnvdClient c({"127.0.0.1", port});
    const auto t0 = std::chrono::steady_clock::now();
    Status st = c.Health(std::chrono::milliseconds(300));
    const auto took = std::chrono::steady_clock::now() - t0;
    done = true;
    server.join();
    if (std::string(mode) == "healthy") {
      EXPECT_TRUE(st.ok()) << st.ToString();
    } else {
      EXPECT_EQ(st.code(), StatusCode::kUnavailable) << mode << ": " << st.ToString();
    }
    EXPECT_LT(took, std::chrono::seconds(2)) << mode;
  }
}

TEST(EnvdClientTest, UnreachableAgentIsUnavailable) {
  EnvdClient c({"127.0.0.1", 1});
  EXPECT_EQ(c.Health(std::chrono::milliseconds(200)).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace airlock

namespace airlock {
namespace {

// An agent that accepts one connection, reads what it is sent, and then
// answers nothing, or `trickle` one byte at a time every 100 ms, until the
// client goes away: a guest that stalls mid-exchange.
class StalledAgent {
 public:
  explicit StalledAgent(std::string trickle = "") : trickle_(std::move(trickle)) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(::listen(listen_, 4), 0);
    socklen_t len = sizeof sa;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] {
      int s = ::accept(listen_, nullptr, nullptr);
      if (s < 0) return;
      size_t next = 0;
      char buf[4096];
      while (!stop_) {
        pollfd p{s, POLLIN, 0};
        if (::poll(&p, 1, 100) > 0) {
          if (::recv(s, buf, sizeof buf, 0) <= 0) break;  // the client shut it down
        } else if (next < trickle_.size()) {
          ::send(s, trickle_.data() + next++, 1, MSG_NOSIGNAL);
        }
      }
      ::close(s);
    });
  }
  ~StalledAgent() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    thread_.join();
    ::close(listen_);
  }
  AgentEndpoint endpoint() const { return {"127.0.0.1", port_}; }

 private:
  std::string trickle_;
  int listen_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Asio's synchronous reads ignore SO_RCVTIMEO and Beast's expiry; the
// watchdog's shutdown ends the wait (core/socket_watchdog.h).
TEST(EnvdClientDeadline, AStalledAgentFailsTheCallAfterTheIdleTimeNotNever) {
  StalledAgent agent;
  EnvdClient client(agent.endpoint());
  client.set_idle_timeout(std::chrono::milliseconds(400));
  auto t0 = std::chrono::steady_clock::now();
  auto r = client.Stat("/etc/hostname");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("moved no byte for 400 ms"), std::string::npos) << r.status().ToString();
  EXPECT_GE(SecondsSince(t0), 0.35);
  EXPECT_LT(SecondsSince(t0), 5.0);
}

TEST(EnvdClientDeadline, ADownloadFromAStalledAgentEndsAndLeavesNoPartFile) {
  StalledAgent agent;
  EnvdClient client(agent.endpoint());
  client.set_idle_timeout(std::chrono::milliseconds(300));
  const std::string dir = ::testing::TempDir() + "/envd-deadline";
  std::filesystem::create_directories(dir);
  auto st = client.DownloadFile("/big", dir + "/out");
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.airlock-part"));
}

// Health has a total limit: an answer a byte at a time does not stretch it.
TEST(EnvdClientDeadline, HealthAnsweredAByteAtATimeStillEndsAtItsTimeout) {
  StalledAgent agent("HTTP/1.1 204 No Content\r\nX-Padding: " + std::string(200, 'a') + "\r\n\r\n");
  EnvdClient client(agent.endpoint());
  auto t0 = std::chrono::steady_clock::now();
  Status st = client.Health(std::chrono::milliseconds(600));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no answer within 600 ms"), std::string::npos) << st.ToString();
  EXPECT_LT(SecondsSince(t0), 5.0);
}

TEST(EnvdClientDeadline, HealthAnsweredSlowlyWithinItsTimeoutSucceeds) {
  StalledAgent agent("HTTP/1.1 204 No Content\r\n\r\n");  // 27 bytes, one per 100 ms: 2.7 s
  EnvdClient client(agent.endpoint());
  EXPECT_TRUE(client.Health(std::chrono::seconds(20)).ok());
}

}  // namespace
}  // namespace airlock
