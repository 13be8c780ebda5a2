// Execution (interpreter/execution.h) without kernels: a real http::Listener
// on loopback, synthetic kernel messages fed on the io thread, the NDJSON
// read back by a blocking client. Checks the order-independence of the
// execute_reply and the IOPub error, ExecutionAborted, the output cap (cut
// line, OutputLimitExceeded, on_limit), an oversized message, keepalives.
#include "interpreter/execution.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "http/listener.h"

namespace airlock::interpreter {
namespace {

using json = nlohmann::json;

KernelMessage Msg(const std::string& type, json content) {
  KernelMessage m;
  m.header = {{"msg_type", type}, {"msg_id", "m"}};
  m.parent_header = {{"msg_id", "p"}};
  m.content = std::move(content);
  return m;
}

json ErrorContent() {
  return {{"status", "error"}, {"ename", "ValueError"}, {"evalue", "bad"}, {"traceback", {"t1", "t2"}}};
}

// Runs `script(execution)` on the io thread for one POST, returns the lines.
std::vector<json> RunExecution(size_t max_output, std::chrono::milliseconds keepalive,
                               std::function<void(std::shared_ptr<Execution>, boost::asio::io_context&)> script) {
  boost::asio::io_context io(1);
  std::shared_ptr<Execution> keep;
  http::Listener listener(
      io,
      [&](std::shared_ptr<http::Conn> c) {
        c->ReadBodyToString(1 << 20, [&, c](StatusOr<std::string>) {
          keep = std::make_shared<Execution>(c, ExecuteRequest{}, "", max_output, keepalive);
          keep->Begin();
          script(keep, io);
        });
      },
      http::Limits{});
  EXPECT_TRUE(listener.Listen("127.0.0.1:0").ok());
  uint16_t port = listener.port();
  std::thread t([&] { io.run(); });
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  std::string req = "POST /execute HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}";
  EXPECT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string raw;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  io.stop();
  t.join();
  std::vector<json> lines;
  size_t he = raw.find("\r\n\r\n");
  if (he == std::string::npos) return lines;
  std::string body, rest = raw.substr(he + 4);
  size_t p = 0;
  while (true) {
    size_t e = rest.find("\r\n", p);
    if (e == std::string::npos) break;
    size_t len = std::strtoul(rest.substr(p, e - p).c_str(), nullptr, 16);
    if (len == 0) break;
    body += rest.substr(e + 2, len);
    p = e + 2 + len + 2;
  }
  std::stringstream ss(body);
  std::string line;
  while (std::getline(ss, line)) lines.push_back(json::parse(line, nullptr, false));
  return lines;
}

size_t Count(const std::vector<json>& lines, const std::string& type) {
  size_t n = 0;
  for (const auto& l : lines) n += l.value("type", "") == type;
  return n;
}

TEST(InterpreterExecution, ReplyBeforeIopubErrorGivesOneErrorLine) {
  auto lines = RunExecution(1 << 20, std::chrono::seconds(5), [](std::shared_ptr<Execution> e, auto&) {
    e->OnIopub(Msg("execute_input", {{"execution_count", 3}}));
    e->OnReply(ErrorContent());  // shell first
    e->OnIopub(Msg("error", ErrorContent()));
    e->Complete();
  });
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], (json{{"type", "number_of_executions"}, {"execution_count", 3}}));
  EXPECT_EQ(lines[1], (json{{"type", "error"}, {"name", "ValueError"}, {"value", "bad"}, {"traceback", "t1\nt2"}}));
  EXPECT_EQ(lines[2], (json{{"type", "end_of_execution"}}));
}

TEST(InterpreterExecution, ErrorOnlyInTheReplyStillReported) {
  auto lines = RunExecution(1 << 20, std::chrono::seconds(5), [](std::shared_ptr<Execution> e, auto&) {
    json c = ErrorContent();
    c["execution_count"] = 9;
    e->OnReply(c);
    e->Complete();
  });
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["execution_count"], 9);
  EXPECT_EQ(lines[1]["name"], "ValueError");
}

TEST(InterpreterExecution, AbortedReply) {
  auto lines = RunExecution(1 << 20, std::chrono::seconds(5), [](std::shared_ptr<Execution> e, auto&) {
    e->OnReply({{"status", "aborted"}});
    e->Complete();
  });
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], (json{{"type", "error"}, {"name", "ExecutionAborted"}, {"value", "Execution was aborted"},
                            {"traceback", ""}}));
}

TEST(InterpreterExecution, OutputCapCutsInterruptsAndEnds) {
  bool limited = false;
  size_t written = 0;
  auto lines = RunExecution(4096, std::chrono::seconds(5), [&](std::shared_ptr<Execution> e, auto&) {
    e->SetOnLimit([&] { limited = true; });
    for (int i = 0; i < 10; ++i) e->OnIopub(Msg("stream", {{"name", "stdout"}, {"text", std::string(1000, 'a')}}));
    e->OnIopub(Msg("stream", {{"name", "stdout"}, {"text", "after"}}));  // dropped
    written = e->output_bytes();
    e->OnReply({{"status", "ok"}});
    e->Complete();  // no-op: already finished
  });
  EXPECT_TRUE(limited);
  EXPECT_LE(written, 4096u);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines.back(), (json{{"type", "end_of_execution"}}));
  json err = lines[lines.size() - 2];
  EXPECT_EQ(err["name"], "OutputLimitExceeded");
  EXPECT_NE(err["value"].get<std::string>().find("4096"), std::string::npos);
  std::string out;
  for (const auto& l : lines) {
    if (l.value("type", "") == "stdout") out += l["text"].get<std::string>();
  }
  EXPECT_GT(out.size(), 3000u);  // the crossing line was cut, not dropped
  EXPECT_LT(out.size(), 4096u);
  EXPECT_EQ(out.find("after"), std::string::npos);
}

TEST(InterpreterExecution, LongStreamTextGoesOutAsBoundedLinesThatJoinToIt) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += std::string(99, 'a' + i % 26) + "\n";  // 300,000 bytes
  auto lines = RunExecution(1 << 20, std::chrono::seconds(5), [&](std::shared_ptr<Execution> e, auto&) {
    e->OnIopub(Msg("stream", {{"name", "stderr"}, {"text", text}}));
    e->OnReply({{"status", "ok"}});
    e->Complete();
  });
  std::string joined;
  size_t pieces = 0;
  for (const auto& l : lines) {
    if (l.value("type", "") != "stderr") continue;
    ++pieces;
    std::string t = l["text"];
    EXPECT_LE(t.size(), 64u << 10);
    EXPECT_EQ(t.back(), '\n');  // cut after a line, not inside one
    joined += t;
  }
  EXPECT_EQ(pieces, 5u);
  EXPECT_EQ(joined, text);
  EXPECT_EQ(lines.back(), (json{{"type", "end_of_execution"}}));
}

TEST(InterpreterExecution, OutputCapCutsALongStreamMessageMidway) {
  auto lines = RunExecution(100000, std::chrono::seconds(5), [](std::shared_ptr<Execution> e, auto&) {
    e->OnIopub(Msg("stream", {{"name", "stdout"}, {"text", std::string(1 << 20, 'z')}}));
  });
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[lines.size() - 2]["name"], "OutputLimitExceeded");
  size_t out = 0;
  for (const auto& l : lines) {
    if (l.value("type", "") == "stdout") out += l["text"].get<std::string>().size();
  }
  EXPECT_GT(out, 90000u);
  EXPECT_LT(out, 100000u);
}

TEST(InterpreterExecution, OversizedKernelMessageHitsTheCap) {
  auto lines = RunExecution(1 << 20, std::chrono::seconds(5), [](std::shared_ptr<Execution> e, auto&) {
    KernelMessage m = Msg("stream", json::object());
    m.content_too_large = true;
    e->OnIopub(m);
  });
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["name"], "OutputLimitExceeded");
}

TEST(InterpreterExecution, KeepaliveWhileSilent) {
  auto lines = RunExecution(1 << 20, std::chrono::milliseconds(50),
                            [](std::shared_ptr<Execution> e, boost::asio::io_context& io) {
                              auto t = std::make_shared<boost::asio::steady_timer>(io, std::chrono::milliseconds(400));
                              t->async_wait([e, t](const boost::system::error_code&) { e->Complete(); });
                            });
  ASSERT_GE(lines.size(), 3u);
  EXPECT_GE(Count(lines, "keepalive"), 2u);
  EXPECT_EQ(lines.back(), (json{{"type", "end_of_execution"}}));
}

}  // namespace
}  // namespace airlock::interpreter
