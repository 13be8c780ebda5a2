// OTLP/HTTP JSON export against a collector in this process (127.0.0.1):
// batching, retry with backoff after 503s, the OTLP body shape, and a full
// queue dropping the oldest records (counted) without blocking.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "audit/otlp_exporter.h"

namespace airlock::audit {
namespace {

using nlohmann::json;

// Answers `fail_first` requests with 503, then 200; keeps the bodies.
class Collector {
 public:
  explicit Collector(int fail_first) : fail_first_(fail_first) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 16);
    thread_ = std::thread([this] { Loop(); });
  }
  ~Collector() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  std::vector<json> bodies() {
    std::lock_guard<std::mutex> l(mu_);
    return bodies_;
  }
  std::vector<std::string> paths() {
    std::lock_guard<std::mutex> l(mu_);
    return paths_;
  }
  int requests() const { return requests_; }

 private:
  void Loop() {
    while (!stop_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string req;
      char buf[65536];
      size_t need = std::string::npos;
      while (true) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
        size_t he = req.find("\r\n\r\n");
        if (he != std::string::npos && need == std::string::npos) {
          size_t cl = req.find("Content-Length: ");
          need = he + 4 + (cl == std::string::npos ? 0 : std::stoul(req.substr(cl + 16)));
        }
        if (need != std::string::npos && req.size() >= need) break;
      }
      int n = ++requests_;
      bool fail = n <= fail_first_;
      if (!fail) {
        std::lock_guard<std::mutex> l(mu_);
        paths_.push_back(req.substr(req.find(' ') + 1, req.find(' ', req.find(' ') + 1) - req.find(' ') - 1));
        bodies_.push_back(json::parse(req.substr(req.find("\r\n\r\n") + 4), nullptr, false));
      }
      std::string resp =
          fail
              ? "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
              : "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
      (void)!::write(c, resp.data(), resp.size());
      ::close(c);
    }
  }
  int fd_ = -1;
  uint16_t port_ = 0;
  int fail_first_;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::vector<json> bodies_;
  std::vector<std::string> paths_;
  std::thread thread_;
};

json Rec(int seq) {
  return {{"seq", seq}, {"ts", "2026-11-30T07:00:00.123Z"}, {"action", "exec"}, {"sandbox", "sb1"}, {"hash", "ab"}};
}

TEST(OtlpExporter, BatchesRetriesAndSendsOtlpJson) {
  Collector col(2);
  OtlpConfig cfg;
  cfg.endpoint = "http://127.0.0.1:" + std::to_string(col.port()) + "/v1/logs";
  cfg.batch_size = 10;
  cfg.flush_interval = std::chrono::milliseconds(100);
  auto x = OtlpExporter::Start(cfg);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  for (int i = 1; i <= 25; ++i) (*x)->Enqueue(Rec(i));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*x)->stats().exported < 25 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto st = (*x)->stats();
  EXPECT_EQ(st.exported, 25u);
  EXPECT_EQ(st.failed_batches, 2u);
  EXPECT_EQ(st.dropped, 0u);
  auto bodies = col.bodies();
  ASSERT_GE(bodies.size(), 3u);
  EXPECT_EQ(col.paths()[0], "/v1/logs");
  size_t records = 0;
  std::vector<int> seqs;
  for (auto& b : bodies) {
    auto& rl = b["resourceLogs"][0];
    EXPECT_EQ(rl["resource"]["attributes"][0]["value"]["stringValue"], "airlock");
    for (auto& lr : rl["scopeLogs"][0]["logRecords"]) {
      ++records;
      EXPECT_EQ(lr["timeUnixNano"], "1796022000123000000");
      json body = json::parse(lr["body"]["stringValue"].get<std::string>());
      seqs.push_back(body["seq"]);
      EXPECT_EQ(lr["attributes"][0]["value"]["stringValue"], "exec");
    }
    EXPECT_LE(rl["scopeLogs"][0]["logRecords"].size(), 10u);
  }
  EXPECT_EQ(records, 25u);
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], static_cast<int>(i) + 1);  // order kept across retries
}

TEST(OtlpExporter, FullQueueDropsOldestWithoutBlocking) {
  OtlpConfig cfg;
  cfg.endpoint = "http://127.0.0.1:1/v1/logs";  // nothing listens: every send fails
  cfg.queue_capacity = 5;
  cfg.batch_size = 100;
  cfg.flush_interval = std::chrono::milliseconds(10000);
  auto x = OtlpExporter::Start(cfg);
  ASSERT_TRUE(x.ok());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) (*x)->Enqueue(Rec(i));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  auto st = (*x)->stats();
  EXPECT_EQ(st.queued, 5u);
  EXPECT_EQ(st.dropped, 995u);
  OtlpConfig bad;
  bad.endpoint = "https://x:1";
  EXPECT_FALSE(OtlpExporter::Start(bad).ok());
}

}  // namespace
}  // namespace airlock::audit
