// The HTTP library (src/http): deadlines, size limits, body framing,
// backpressure, pipelining, streamed responses, the reason table, URL and
// JSON helpers. A real Listener on 127.0.0.1 runs on its own io thread; the
// client side is plain blocking sockets, so every byte on the wire is seen.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "http/client.h"
#include "http/conn.h"
#include "http/json_error.h"
#include "http/listener.h"
#include "http/status_reason.h"
#include "http/url.h"

namespace airlock::http {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// A Listener with `handler` on an io thread of its own.
class TestServer {
 public:
  TestServer(Limits limits, Conn::Handler handler) : listener_(io_, std::move(handler), std::move(limits)) {
    Status st = listener_.Listen("127.0.0.1:0");
    EXPECT_TRUE(st.ok()) << st.ToString();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TestServer() {
    io_.stop();
    thread_.join();
  }
  uint16_t port() const { return listener_.port(); }
  asio::io_context& io() { return io_; }

 private:
  asio::io_context io_;
  Listener listener_;
  std::thread thread_;
};

// One blocking client connection; every read is bounded by 10 s.
class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ADD_FAILURE() << "connect: " << strerror(errno);
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  void Send(std::string_view d) {
    while (!d.empty()) {
      ssize_t n = ::send(fd_, d.data(), d.size(), MSG_NOSIGNAL);
      if (n <= 0) return ADD_FAILURE() << "send: " << strerror(errno);
      d.remove_prefix(static_cast<size_t>(n));
    }
  }
  // Reads until the peer closes (or `limit` passes); `closed` tells which.
  std::string ReadToClose(bool* closed, std::chrono::milliseconds limit = 10s) {
    std::string out;
    *closed = false;
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
      if (::poll(&p, 1, std::max(left, 1)) <= 0) break;
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        *closed = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Reads until `out` contains `needle` (or 10 s pass).
  std::string ReadUntil(std::string_view needle) {
    std::string out;
    auto end = std::chrono::steady_clock::now() + 10s;
    while (out.find(needle) == std::string::npos && std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
};

size_t Count(const std::string& hay, std::string_view needle) {
  size_t n = 0;
  for (size_t i = hay.find(needle); i != std::string::npos; i = hay.find(needle, i + needle.size())) ++n;
  return n;
}

Limits Fast() {
  Limits l;
  l.header_timeout = 300ms;
  l.body_idle_timeout = 300ms;
  return l;
}

TEST(HttpConnTest, HalfAHeaderGets408AndIsClosed) {
  std::atomic<int> handled{0};
  TestServer server(Fast(), [&](std::shared_ptr<Conn> c) {
    ++handled;
    c->Respond(200, "text/plain", "no");
  });
  Client client(server.port());
  client.Send("GET /x HTTP/1.1\r\nHost: a\r\n");  // no blank line
  bool closed = false;
  auto t0 = std::chrono::steady_clock::now();
  std::string got = client.ReadToClose(&closed);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  EXPECT_TRUE(closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 408 Request Timeout\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("{\"code\":408,\"message\":"), std::string::npos) << got;
  EXPECT_EQ(handled.load(), 0);
}

TEST(HttpConnTest, IdleKeepAliveConnectionClosesSilently) {
  TestServer server(Fast(), [](std::shared_ptr<Conn> c) { c->Respond(200, "text/plain", "ok"); });
  Client client(server.port());
  client.Send("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
  bool closed = false;
  std::string got = client.ReadToClose(&closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_EQ(Count(got, "HTTP/1.1"), 1u) << got;  // nothing after the idle deadline
}

TEST(HttpConnTest, OversizeHeaderGets431) {
  Limits l = Fast();
  l.header_limit = 1024;
  TestServer server(l, [](std::shared_ptr<Conn> c) { c->Respond(200, "text/plain", "ok"); });
  Client client(server.port());
  client.Send("GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(4096, 'x') + "\r\n\r\n");
  bool closed = false;
  std::string got = client.ReadToClose(&closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 431 Request Header Fields Too Large\r\n", 0), 0u) << got;
}

TEST(HttpConnTest, MalformedRequestGets400) {
  TestServer server(Fast(), [](std::shared_ptr<Conn> c) { c->Respond(200, "text/plain", "ok"); });
  Client client(server.port());
  client.Send("NOT HTTP AT ALL\r\n\r\n");
  bool closed = false;
  std::string got = client.ReadToClose(&closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << got;
}

// Echoes the body (read whole) with the request's method, path and query.
void Echo(std::shared_ptr<Conn> c) {
  c->ReadBodyToString(1 << 20, [c](StatusOr<std::string> body) {
    if (!body.ok()) return c->RespondError(400, body.status().ToString());
    std::string out = c->method_string() + " " + c->path() + " q=" + c->Query("q").value_or("-") +
                      " h=" + c->Header("x-test") + " body=" + *body;
    c->Respond(200, "text/plain", out);
  });
}

TEST(HttpConnTest, FixedLengthBody) {
  TestServer server(Fast(), Echo);
  Client client(server.port());
  client.Send("POST /a%20b?q=x+y&q=second HTTP/1.1\r\nHost: a\r\nX-Test: T\r\nContent-Length: 11\r\n\r\nhello world");
  std::string got = client.ReadUntil("body=hello world");
  EXPECT_NE(got.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("POST /a b q=x y h=T body=hello world"), std::string::npos) << got;
  EXPECT_NE(got.find("Content-Length: 36\r\n"), std::string::npos) << got;
}

TEST(HttpConnTest, ChunkedBodyInPiecesAndChunkedResponse) {
  std::promise<std::vector<std::string>> pieces;
  TestServer server(Fast(), [&](std::shared_ptr<Conn> c) {
    EXPECT_TRUE(c->chunked_request());
    auto got = std::make_shared<std::vector<std::string>>();
    auto step = std::make_shared<std::function<void()>>();
    *step = [c, got, step, &pieces] {
      c->ReadBodyChunk([c, got, step, &pieces](Status st, std::string_view chunk, bool done) {
        ASSERT_TRUE(st.ok()) << st.ToString();
        if (!chunk.empty()) got->emplace_back(chunk);
        if (!done) return (*step)();
        std::string all;
        for (const auto& p : *got) all += p;
        c->BeginResponse(200, "text/plain", std::nullopt);
        c->Write(all.substr(0, 5));  // one chunk per Write, however the body arrived
        c->Write(all.substr(5));
        c->EndResponse();
        pieces.set_value(*got);
        *step = nullptr;  // breaks the cycle
      });
    };
    (*step)();
  });
  Client client(server.port());
  client.Send("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
  std::this_thread::sleep_for(50ms);
  client.Send("6\r\n world\r\n0\r\n\r\n");
  std::string got = client.ReadUntil("0\r\n\r\n");
  EXPECT_NE(got.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << got;
  std::string joined;
  for (const auto& p : pieces.get_future().get()) joined += p;
  EXPECT_EQ(joined, "hello world");
  EXPECT_NE(got.find("\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"), std::string::npos) << got;
}

TEST(HttpConnTest, StalledBodyIsDeadlineExceeded) {
  std::promise<Status> result;
  TestServer server(Fast(), [&](std::shared_ptr<Conn> c) {
    c->ReadBodyToString(1 << 20, [c, &result](StatusOr<std::string> body) {
      result.set_value(body.status());
      c->RespondError(408, body.status().message());
    });
  });
  Client client(server.port());
  client.Send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc");
  bool closed = false;
  std::string got = client.ReadToClose(&closed);
  Status st = result.get_future().get();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_TRUE(closed);  // an unread body: no keep-alive
  EXPECT_EQ(got.rfind("HTTP/1.1 408 Request Timeout\r\n", 0), 0u) << got;
}

TEST(HttpConnTest, BodyOverLimitIsResourceExhausted) {
  TestServer server(Fast(), [](std::shared_ptr<Conn> c) {
    c->ReadBodyToString(4, [c](StatusOr<std::string> body) {
      c->RespondError(body.status().code() == StatusCode::kResourceExhausted ? 413 : 500, body.status().message());
    });
  });
  Client client(server.port());
  client.Send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789");
  bool closed = false;
  std::string got = client.ReadToClose(&closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 413 Payload Too Large\r\n", 0), 0u) << got;
}

// An early answer (before the request body is read) must reach the client
// whole, and the client must be able to finish sending: the server drops the
// rest of the body and closes after the client (FIN), never with an RST
// that would lose the answer (a "fetch failed" in the SDK).
void ExpectEarlyAnswerSurvivesTheBody(uint16_t port, const std::string& want) {
  Client client(port);
  const size_t body = 2 << 20;
  client.Send("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(body) + "\r\n\r\n");
  std::string got = client.ReadUntil(want);
  ASSERT_NE(got.find(want), std::string::npos) << got;
  std::string chunk(64 * 1024, 'x');
  size_t sent = 0;
  int send_errno = 0;
  // A slow uploader: a pause between pieces, so a server that closed at
  // once has reset the connection before the body is through.
  while (sent < body) {
    if (sent) std::this_thread::sleep_for(2ms);
    ssize_t n = ::send(client.fd(), chunk.data(), std::min(chunk.size(), body - sent), MSG_NOSIGNAL);
    if (n <= 0) {
      send_errno = errno;
      break;
    }
    sent += static_cast<size_t>(n);
  }
  EXPECT_EQ(send_errno, 0) << "the client's body was cut: " << strerror(send_errno);
  EXPECT_EQ(sent, body);
  ::shutdown(client.fd(), SHUT_WR);
  char buf[4096];
  ssize_t n = 0;
  pollfd p{client.fd(), POLLIN, 0};
  if (::poll(&p, 1, 10000) == 1) n = ::recv(client.fd(), buf, sizeof buf, 0);
  EXPECT_EQ(n, 0) << "a clean close (FIN), not " << (n < 0 ? strerror(errno) : "more bytes");
}

TEST(HttpConnTest, EarlyAnswerDropsTheRestOfTheBodyAndClosesWithoutReset) {
  TestServer server(Fast(), [](std::shared_ptr<Conn> c) { c->RespondError(400, "refused before the body"); });
  ExpectEarlyAnswerSurvivesTheBody(server.port(), "refused before the body");
}

TEST(HttpConnTest, EarlyAnswerWhileABodyReadIsPendingEndsThatRead) {
  std::promise<Status> read_end;
  TestServer server(Fast(), [&](std::shared_ptr<Conn> c) {
    c->ReadBodyChunk([&read_end](Status st, std::string_view, bool) { read_end.set_value(st); });
    c->RespondError(403, "refused mid-body");
  });
  ExpectEarlyAnswerSurvivesTheBody(server.port(), "refused mid-body");
  auto f = read_end.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get().code(), StatusCode::kUnavailable);
}

TEST(HttpConnTest, PushStyleReadBodyKeepsFirstError) {
  std::promise<std::pair<Status, int>> result;
  TestServer server(Fast(), [&](std::shared_ptr<Conn> c) {
    auto calls = std::make_shared<int>(0);
    c->ReadBody(
        [calls](std::string_view) {
          ++*calls;
          return InvalidArgument("first chunk refused");
        },
        [c, calls, &result](Status st) {
          result.set_value({st, *calls});
          c->RespondError(400, st.message());
        });
  });
  Client client(server.port());
  client.Send("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
  std::this_thread::sleep_for(50ms);
  client.Send("3\r\ndef\r\n0\r\n\r\n");
  auto [st, calls] = result.get_future().get();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);  // the rest is read and dropped
  std::string got = client.ReadUntil("first chunk refused");
  EXPECT_EQ(got.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << got;
}

TEST(HttpConnTest, KeepAliveServesTwoRequestsOnOneConnection) {
  TestServer server(Fast(), Echo);
  Client client(server.port());
  client.Send("GET /one HTTP/1.1\r\nHost: a\r\n\r\n");
  std::string first = client.ReadUntil("body=");
  client.Send("GET /two HTTP/1.1\r\nHost: a\r\n\r\n");
  std::string second = client.ReadUntil("body=");
  EXPECT_NE(first.find("GET /one"), std::string::npos) << first;
  EXPECT_NE(second.find("GET /two"), std::string::npos) << second;
}

TEST(HttpConnTest, PipelinedSecondRequestWaitsForTheFirstResponse) {
  std::mutex mu;
  std::vector<std::string> events;
  auto note = [&](std::string e) {
    std::lock_guard<std::mutex> l(mu);
    events.push_back(std::move(e));
  };
  TestServer* srv = nullptr;
  TestServer server(Fast(), [&](std::shared_ptr<Conn> c) {
    note("start " + c->path());
    if (c->path() == "/slow") {
      auto t = std::make_shared<asio::steady_timer>(srv->io(), 150ms);
      t->async_wait([c, t, &note](boost::system::error_code) {
        note("end /slow");
        c->Respond(200, "text/plain", "slow");
      });
      return;
    }
    note("end " + c->path());
    c->Respond(200, "text/plain", "fast");
  });
  srv = &server;
  Client client(server.port());
  client.Send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\nGET /fast HTTP/1.1\r\nHost: a\r\n\r\n");
  std::string got = client.ReadUntil("fast");
  EXPECT_LT(got.find("slow"), got.find("fast")) << got;
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(events, (std::vector<std::string>{"start /slow", "end /slow", "start /fast", "end /fast"}));
}

constexpr size_t kTotal = 8u << 20, kPiece = 64 * 1024, kHighWater = 1u << 20;

TEST(HttpConnTest, BackpressureBoundsQueuedBytesAndDrainResumes) {
  std::atomic<size_t> max_pending{0};
  std::atomic<int> drains{0};
  TestServer server(Fast(), [&](std::shared_ptr<Conn> c) {
    c->BeginResponse(200, "application/octet-stream", kTotal);
    auto sent = std::make_shared<size_t>(0);
    auto pump = std::make_shared<std::function<void()>>();
    std::weak_ptr<std::function<void()>> weak = pump;
    *pump = [c, sent, weak, &max_pending] {
      std::string piece(kPiece, 'x');
      while (*sent < kTotal && c->pending_bytes() < kHighWater) {
        c->Write(piece);
        *sent += kPiece;
        max_pending = std::max(max_pending.load(), c->pending_bytes());
      }
      if (*sent == kTotal) c->EndResponse();
    };
    c->SetOnDrain([weak, &drains] {
      ++drains;
      if (auto p = weak.lock()) (*p)();
    });
    (*pump)();
    // Keep the pump alive as long as the response runs.
    c->SetOnClose([pump] {});
    auto keep = std::make_shared<asio::steady_timer>(c->executor(), 30s);
    keep->async_wait([pump, keep](boost::system::error_code) {});
  });
  Client client(server.port());
  int small = 64 * 1024;
  ::setsockopt(client.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  client.Send("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
  std::this_thread::sleep_for(200ms);  // the server fills its queue and waits
  EXPECT_GE(max_pending.load(), kHighWater - kPiece);
  EXPECT_LT(max_pending.load(), kHighWater + kPiece);
  size_t body = 0;
  std::string head;
  auto end = std::chrono::steady_clock::now() + 20s;
  bool in_body = false;
  std::string buf(65536, '\0');
  while (body < kTotal && std::chrono::steady_clock::now() < end) {
    ssize_t n = ::recv(client.fd(), buf.data(), buf.size(), 0);
    if (n <= 0) break;
    std::string_view chunk(buf.data(), static_cast<size_t>(n));
    if (!in_body) {
      head.append(chunk);
      size_t e = head.find("\r\n\r\n");
      if (e == std::string::npos) continue;
      in_body = true;
      body += head.size() - e - 4;
    } else {
      body += chunk.size();
    }
  }
  EXPECT_EQ(body, kTotal);
  EXPECT_GT(drains.load(), 0);
  EXPECT_LT(max_pending.load(), kHighWater + kPiece);
}

TEST(HttpConnTest, StreamedResponseOutlivesEveryDeadline) {
  TestServer server(Fast(), [](std::shared_ptr<Conn> c) {
    c->BeginResponse(200, "text/plain", std::nullopt);
    auto n = std::make_shared<int>(0);
    auto t = std::make_shared<asio::steady_timer>(c->executor());
    auto tick = std::make_shared<std::function<void()>>();
    *tick = [c, n, t, tick] {
      t->expires_after(150ms);
      t->async_wait([c, n, t, tick](boost::system::error_code) {
        c->Write("tick" + std::to_string(*n) + ";");
        if (++*n == 8) {
          c->EndResponse();
          *tick = nullptr;
          return;
        }
        (*tick)();
      });
    };
    (*tick)();
  });
  Client client(server.port());
  client.Send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  std::string got = client.ReadUntil("0\r\n\r\n");  // 1.2 s, four times the deadlines
  EXPECT_NE(got.find("tick7;"), std::string::npos) << got;
}

TEST(HttpConnTest, DisconnectWatchNoticesThePeerLeaving) {
  std::promise<void> closed;
  TestServer server(Fast(), [&](std::shared_ptr<Conn> c) {
    c->BeginResponse(200, "text/plain", std::nullopt);
    c->Write("started");
    c->SetOnClose([&closed] { closed.set_value(); });
    c->WatchForDisconnect();
  });
  {
    Client client(server.port());
    client.Send("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    client.ReadUntil("started");
  }
  EXPECT_EQ(closed.get_future().wait_for(5s), std::future_status::ready);
}

TEST(HttpConnTest, HeadersMethodRedactionAndHandlerErrors) {
  Limits l = Fast();
  l.redact = [](std::string_view s) {
    std::string out(s);
    for (size_t i = out.find("s3cret"); i != std::string::npos; i = out.find("s3cret")) out.replace(i, 6, "******");
    return out;
  };
  TestServer server(l, [](std::shared_ptr<Conn> c) {
    if (c->path() == "/throw") throw std::runtime_error("boom");
    EXPECT_EQ(c->method(), c->method_string() == "BREW" ? Method::kOther : Method::kPut);
    const HeaderList& h = c->Headers();
    std::string names;
    for (const auto& [k, v] : h) names += k + "=" + v + ",";
    c->Respond(201, "text/plain", names + " s3cret " + c->Header("X-DUP"));
  });
  {
    Client client(server.port());
    client.Send("PUT / HTTP/1.1\r\nHost: a\r\nx-Dup: 1\r\nX-DUP: 2\r\nContent-Length: 0\r\n\r\n");
    std::string got = client.ReadUntil("******");
    EXPECT_EQ(got.rfind("HTTP/1.1 201 Created\r\n", 0), 0u) << got;
    EXPECT_NE(got.find("Host=a,x-Dup=1,X-DUP=2,Content-Length=0, ****** 1"), std::string::npos) << got;
  }
  {
    Client client(server.port());
    client.Send("BREW / HTTP/1.1\r\nHost: a\r\n\r\n");
    std::string got = client.ReadUntil("******");
    EXPECT_EQ(got.rfind("HTTP/1.1 201 Created\r\n", 0), 0u) << got;
  }
  {
    Client client(server.port());
    client.Send("GET /throw HTTP/1.1\r\nHost: a\r\n\r\n");
    bool closed = false;
    std::string got = client.ReadToClose(&closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 500 Internal Server Error\r\n", 0), 0u) << got;
    EXPECT_NE(got.find("{\"code\":500,\"message\":\"internal error\"}"), std::string::npos) << got;
  }
}

TEST(HttpConnTest, RawFramedResponseAndDetach) {
  TestServer server(Fast(), [](std::shared_ptr<Conn> c) {
    if (c->path() == "/raw") {
      c->SendRaw("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nraw");
      return c->FinishRaw(true);
    }
    auto [socket, extra] = c->DetachSocket();
    auto s = std::make_shared<boost::asio::ip::tcp::socket>(std::move(socket));
    auto msg = std::make_shared<std::string>("detached, extra=" + extra);
    boost::asio::async_write(*s, boost::asio::buffer(*msg), [s, msg](boost::system::error_code, size_t) {});
  });
  Client client(server.port());
  client.Send("GET /raw HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_NE(client.ReadUntil("raw").find("Content-Length: 3\r\n\r\nraw"), std::string::npos);
  client.Send("GET /up HTTP/1.1\r\nHost: a\r\n\r\nafter");
  std::string got = client.ReadUntil("after");
  EXPECT_EQ(got, "detached, extra=after");
}

TEST(HttpConnTest, ExpectContinueIsAnsweredWhenTheBodyIsPulled) {
  TestServer server(Fast(), Echo);
  Client client(server.port());
  client.Send("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  EXPECT_NE(client.ReadUntil("100 Continue\r\n\r\n").find("HTTP/1.1 100 Continue\r\n\r\n"), std::string::npos);
  client.Send("hi");
  EXPECT_NE(client.ReadUntil("body=hi").find("body=hi"), std::string::npos);
}

TEST(HttpClientTest, DoAgainstListener) {
  TestServer server(Fast(), Echo);
  HttpCall call;
  call.host = "127.0.0.1";
  call.port = server.port();
  call.method = "POST";
  call.target = "/c?q=" + UrlEncodeComponent("a b&c");
  call.headers = {{"X-Test", "v"}};
  call.body = "payload";
  auto reply = HttpDo(call);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->body, "POST /c q=a b&c h=v body=payload");
  EXPECT_EQ(reply->Header("content-type"), "text/plain");
}

// body_file: the file's bytes are the body, with its size as Content-Length.
TEST(HttpClientTest, BodyFileIsStreamedWithItsLength) {
  TestServer server(Fast(), Echo);
  char path[] = "/tmp/http-body-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "from a file", 11), 11);
  ::close(fd);
  HttpCall call;
  call.host = "127.0.0.1";
  call.port = server.port();
  call.method = "PUT";
  call.target = "/up";
  call.body_file = path;
  auto reply = HttpDo(call);
  ::unlink(path);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->body, "PUT /up q=- h= body=from a file");
  call.body_file = "/nonexistent/file";
  EXPECT_EQ(HttpDo(call).status().code(), StatusCode::kNotFound);
}

// A peer that accepts and then says nothing (a guest whose netns is gone
// looks like this): the call ends at its deadline instead of hanging.
TEST(HttpClientTest, SilentPeerEndsAtTheDeadline) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);  // the kernel completes the handshake; nobody reads
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  HttpCall call;
  call.host = "127.0.0.1";
  call.port = ntohs(a.sin_port);
  call.method = "GET";
  call.target = "/";
  call.timeout = 300ms;
  auto t0 = std::chrono::steady_clock::now();
  auto reply = HttpDo(call);
  auto took = std::chrono::steady_clock::now() - t0;
  ::close(fd);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kDeadlineExceeded) << reply.status().ToString();
  EXPECT_LT(took, 10s);  // a hang would be forever; the bound only catches it
}

TEST(HttpClientTest, ParseHostPort) {
  auto a = ParseHostPort("http://[::1]:3000/");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "::1");
  EXPECT_EQ(a->second, 3000);
  EXPECT_FALSE(ParseHostPort("localhost").ok());
  EXPECT_FALSE(ParseHostPort("h:0").ok());
}

TEST(StatusReasonTest, Table) {
  EXPECT_EQ(ReasonPhrase(200), "OK");
  EXPECT_EQ(ReasonPhrase(201), "Created");
  EXPECT_EQ(ReasonPhrase(204), "No Content");
  EXPECT_EQ(ReasonPhrase(404), "Not Found");
  EXPECT_EQ(ReasonPhrase(408), "Request Timeout");
  EXPECT_EQ(ReasonPhrase(431), "Request Header Fields Too Large");
  EXPECT_EQ(ReasonPhrase(499), "Client Closed Request");
  EXPECT_EQ(ReasonPhrase(502), "Bad Gateway");
  EXPECT_EQ(ReasonPhrase(507), "Insufficient Storage");
  EXPECT_EQ(ReasonPhrase(599), "Status");
  EXPECT_EQ(ReasonPhrase(0), "Status");
}

TEST(UrlTest, DecodeQueryAndTarget) {
  EXPECT_EQ(UrlDecode("a%20b+c%2Fd%zz%4", false), "a b+c/d%zz%4");
  EXPECT_EQ(UrlDecode("a+b%2b", true), "a b+");
  auto q = ParseQuery("a=1&b=x%20y&&c&a=2&d=");
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q["a"], "1");
  EXPECT_EQ(q["b"], "x y");
  EXPECT_EQ(q["c"], "");
  EXPECT_EQ(q["d"], "");
  auto [path, query] = SplitTarget("/p%20a+th?x=1?y");
  EXPECT_EQ(path, "/p a+th");
  EXPECT_EQ(query, "x=1?y");
  EXPECT_EQ(SplitTarget("/plain").second, "");
  EXPECT_EQ(UrlEncodeComponent("a b/~é"), "a%20b%2F~%C3%A9");
  EXPECT_EQ(ParseMethod("GET"), Method::kGet);
  EXPECT_EQ(ParseMethod("get"), Method::kOther);
  EXPECT_EQ(ParseMethod("DELETE"), Method::kDelete);
}

// JsonQuote is a hand-written replacement for nlohmann's dump with
// error_handler_t::replace; it must agree on every input.
TEST(JsonErrorTest, MatchesNlohmannOnAnyBytes) {
  auto nl = [](const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::vector<std::string> cases = {"",
                                    "plain",
                                    "quote\" back\\ slash/",
                                    std::string("ctl\x01\x1f\x7f\b\f\n\r\t", 12),
                                    std::string(1, '\0'),
                                    "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                                    "\x80",
                                    "\xff\xfe",
                                    "\xc3",
                                    "\xc3(",
                                    "\xe2\x82",
                                    "\xe2\x82(",
                                    "\xe0\x80\x80",
                                    "\xed\xa0\x80",
                                    "\xf4\x90\x80\x80",
                                    "\xf0\x9f\x98",
                                    "\xc0\xaf"};
  std::mt19937 rng(13);
  const char alphabet[] = {'a',    '"',    '\\',   '\n',   '\x01', '\x7f', '\x80', '\x8f',
                           '\x9f', '\xa0', '\xbf', '\xc2', '\xc3', '\xdf', '\xe0', '\xe1',
                           '\xed', '\xef', '\xf0', '\xf1', '\xf4', '\xf5', '\xff'};
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    int len = static_cast<int>(rng() % 10);
    for (int j = 0; j < len; ++j) s.push_back(alphabet[rng() % sizeof alphabet]);
    cases.push_back(s);
  }
  for (const auto& s : cases) ASSERT_EQ(JsonQuote(s), nl(s)) << "input bytes: " << ::testing::PrintToString(s);
  EXPECT_EQ(JsonError(404, "no \"x\""), nlohmann::json({{"code", 404}, {"message", "no \"x\""}}).dump());
  EXPECT_EQ(JsonError(503, "full", "sandbox_capacity_unavailable"),
            nlohmann::json({{"code", 503}, {"error_code", "sandbox_capacity_unavailable"}, {"message", "full"}}).dump());
  EXPECT_EQ(JsonError(400, "bad", ""), JsonError(400, "bad"));
}

}  // namespace
}  // namespace airlock::http
