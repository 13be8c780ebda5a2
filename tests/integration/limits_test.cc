// Limits against a real daemon and microVMs: create-request maxima (400),
// per-key concurrency (429 + Retry-After, then success after the wait), a
// per-command timeout that kills a tree ignoring SIGTERM (setsid'd child
// included), memory overcommit refusal, /metrics, OTLP export to a collector
// in this process, and a burst of 30 creates finishing with zero failures.
#include <sys/statvfs.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>

#include "tests/integration/daemon.h"
#include "tests/wait_for.h"

namespace airlock::testing {
namespace {

using nlohmann::json;

// A minimal OTLP/HTTP collector on 127.0.0.1: keeps every request body.
class Collector {
 public:
  Collector() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 16);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        std::string req;
        char buf[65536];
        size_t need = std::string::npos;
        ssize_t n;
        while ((n = ::read(c, buf, sizeof buf)) > 0) {
          req.append(buf, static_cast<size_t>(n));
          size_t he = req.find("\r\n\r\n");
          if (he != std::string::npos && need == std::string::npos) {
            size_t cl = req.find("Content-Length: ");
            need = he + 4 + (cl == std::string::npos ? 0 : std::stoul(req.substr(cl + 16)));
          }
          if (need != std::string::npos && req.size() >= need) break;
        }
        {
          std::lock_guard<std::mutex> l(mu_);
          all_ += req;
        }
        std::string resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
        (void)!::write(c, resp.data(), resp.size());
        ::close(c);
      }
    });
  }
  ~Collector() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  std::string all() {
    std::lock_guard<std::mutex> l(mu_);
    return all_;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::string all_;
  std::thread thread_;
};

TEST(LimitsTest, MaximaPerKeyCapTimeoutTreeMetricsAndOtlp) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  Collector col;
  TestDaemon d(dir, {"--max-sandboxes-per-key", "1", "--queue-timeout", "1", "--max-cpus", "2", "--max-memory", "1024",
                     "--otlp-endpoint", "http://127.0.0.1:" + std::to_string(col.port()) + "/v1/logs"});
  for (auto [field, value, flag] : {std::tuple{"cpuCount", 3, "--max-cpus"},
                                    {"memoryMB", 4096, "--max-memory"},
                                    {"diskSizeMB", 1 << 20, "--max-disk"}}) {
    auto r = d.Do("POST", "/v2/sandboxes", json{{field, value}}.dump());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find(flag), std::string::npos) << r->body;
  }
  auto a = d.Do("POST", "/v2/sandboxes", json{{"cpuCount", 2}, {"memoryMB", 256}}.dump());
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->status, 201) << a->body;
  json sa = json::parse(a->body);
  auto info = d.Do("GET", "/sandboxes/" + sa["sandboxID"].get<std::string>());
  EXPECT_EQ(json::parse(info->body)["cpuCount"], 2);
  EXPECT_EQ(json::parse(info->body)["memoryMB"], 256);

  // Same key, cap 1: queued for --queue-timeout, then 429 with Retry-After.
  auto t0 = std::chrono::steady_clock::now();
  auto b = d.Do("POST", "/v2/sandboxes", "{}");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->status, 429) << b->body;
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
  int retry_after = std::atoi(b->Header("retry-after").c_str());
  EXPECT_GE(retry_after, 1);

  // The per-command timeout kills a tree that ignores SIGTERM, setsid'd child too.
  std::string id = sa["sandboxID"], token = sa["envdAccessToken"];
  auto start = std::chrono::steady_clock::now();
  auto e = d.Run(id, token,
                 "trap '' TERM; (trap '' TERM; exec -a airlock-orphan-a sleep 600) & "
                 "setsid bash -c \"trap '' TERM; exec -a airlock-orphan-b sleep 600\" & "
                 "exec -a airlock-orphan-c sleep 600",
                 2000);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  // As envd: the stream ends deadline_exceeded, no end event; the kill itself
  // is checked below (no survivor).
  EXPECT_FALSE(e->ended) << e->out << e->err;
  EXPECT_EQ(e->end_of_stream.code(), StatusCode::kDeadlineExceeded) << e->end_of_stream.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  std::string survivors;
  WaitFor(
      [&] {
        auto ps = d.Run(id, token, "ps -eo args | grep -c '^airlock-orphan' || true");
        survivors = ps.ok() ? ps->out : ps.status().ToString();
        return survivors == "0\n";
      },
      std::chrono::seconds(10), std::chrono::milliseconds(200));
  EXPECT_EQ(survivors, "0\n") << "survivors of the timeout";

  // Kill A; after the wait, B's retry succeeds.
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + id)->status, 204);
  std::this_thread::sleep_for(std::chrono::seconds(std::min(retry_after, 5)));
  auto b2 = d.Do("POST", "/v2/sandboxes", "{}");
  ASSERT_TRUE(b2.ok());
  ASSERT_EQ(b2->status, 201) << b2->body;
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + json::parse(b2->body)["sandboxID"].get<std::string>())->status, 204);

  auto m = d.Do("GET", "/metrics", "", false);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("airlock_sandbox_creates_total 2\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("airlock_admission_rejections_total{reason=\"limit\"} 1\n"), std::string::npos);
  EXPECT_NE(m->body.find("airlock_execs_total 2\n"), std::string::npos);
  EXPECT_NE(m->body.find("airlock_sandbox_create_duration_seconds_count 2\n"), std::string::npos);

  // Audit records reached the collector as OTLP logs.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (col.all().find("sandbox.created") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string got = col.all();
  EXPECT_NE(got.find("POST /v1/logs"), std::string::npos);
  EXPECT_NE(got.find("\"resourceLogs\""), std::string::npos);
  EXPECT_NE(got.find("sandbox.created"), std::string::npos);
  EXPECT_NE(got.find("\\\"action\\\":\\\"exec\\\""), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(LimitsTest, MemoryOvercommitIsRefusedAndSaysSo) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir, {"--memory-overcommit-ratio", "0.001"});
  auto r = d.Do("POST", "/v2/sandboxes", "{}");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_NE(r->body.find("overcommit host memory"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("512 MiB requested"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("\"error_code\":\"sandbox_capacity_unavailable\""), std::string::npos) << r->body;
  std::filesystem::remove_all(dir);
}

// The value of the Prometheus line `name` (exact, labels included) in a
// /metrics body; -1 when absent.
int64_t MetricValue(const std::string& body, const std::string& name) {
  size_t at = body.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(body.substr(at + name.size() + 2));
}

// The oom_score_adj of the VMM of sandbox `id` (its command line names its
// run dir), or "" when there is none.
std::string VmmOomScoreAdj(const std::string& id) {
  const std::string run_dir = StateDir() + "/run/" + id + "/";
  std::error_code ec;
  for (auto& p : std::filesystem::directory_iterator("/proc", ec)) {
    std::string cmd = Slurp(p.path().string() + "/cmdline");
    if (cmd.rfind("/usr/bin/qemu-system", 0) != 0 && cmd.find("qemu-system") == std::string::npos) continue;
    if (cmd.find(run_dir) == std::string::npos) continue;
    std::string adj = Slurp(p.path().string() + "/oom_score_adj");
    while (!adj.empty() && adj.back() == '\n') adj.pop_back();
    return adj;
  }
  return "";
}

// Issue 14 item 6: admission by what sandboxes hold. With --host-memory
// 700 the nominal rule (1.5 x 700 = 1050 MiB) admitted two sandboxes of
// 512 MiB and refused a third; measured clones hold far less (each is
// charged max(held, 0.1 x 512 MiB)), so the third is admitted. Then one
// guest writes memory until what is held plus a fourth create's 512 MiB
// exceeds 700 MiB: refused with the numbers.
TEST(LimitsTest, MemoryAdmissionCountsWhatSandboxesHold) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir, {"--host-memory", "700", "--memory-host-reserve", "0", "--memory-growth-reserve", "0.1",
                     "--memory-pressure", "0", "--memory-sample-interval", "300"});
  auto metrics = [&] {
    auto m = d.Do("GET", "/metrics", "", false);
    return m.ok() ? m->body : std::string();
  };
  // Every live sandbox measured at a reading after `after_held` MiB was seen.
  auto measured = [&](int64_t at_least_held) {
    return WaitFor(
        [&] {
          std::string m = metrics();
          return MetricValue(m, "airlock_memory_reserved_mib{for=\"unmeasured\"}") == 0 &&
                 MetricValue(m, "airlock_memory_held_mib") >= at_least_held;
        },
        std::chrono::seconds(60));
  };
  std::vector<std::pair<std::string, std::string>> sbs;  // id, token
  auto create = [&] { return d.Do("POST", "/v2/sandboxes", json{{"timeout", 600}}.dump()); };
  for (int i = 0; i < 2; ++i) {
    auto r = create();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->status, 201) << r->body;
    auto j = json::parse(r->body);
    sbs.push_back({j["sandboxID"], j["envdAccessToken"]});
    // Until the sampler has measured it, a new sandbox counts its whole 512 MiB.
    ASSERT_TRUE(measured(1)) << metrics();
  }
  std::string m = metrics();
  const int64_t held2 = MetricValue(m, "airlock_memory_held_mib");
  std::printf("2 idle sandboxes hold %lld MiB (growth reserve %lld MiB)\n", static_cast<long long>(held2),
              static_cast<long long>(MetricValue(m, "airlock_memory_reserved_mib{for=\"growth\"}")));
  auto third = create();
  ASSERT_TRUE(third.ok());
  ASSERT_EQ(third->status, 201) << third->body << "\n" << m;
  sbs.push_back({json::parse(third->body)["sandboxID"], json::parse(third->body)["envdAccessToken"]});
  m = metrics();
  EXPECT_EQ(MetricValue(m, "airlock_committed_memory_mib"), 3 * 512);  // > 1.5 x 700: beyond the old cap
  EXPECT_EQ(MetricValue(m, "airlock_memory_budget_mib"), 700);
  ASSERT_TRUE(measured(1)) << metrics();
  m = metrics();
  const int64_t held3 = MetricValue(m, "airlock_memory_held_mib");
  const int64_t charged = held3 + MetricValue(m, "airlock_memory_reserved_mib{for=\"growth\"}");
  std::printf("3 idle sandboxes hold %lld MiB, charged %lld MiB\n", static_cast<long long>(held3),
              static_cast<long long>(charged));
  // What one guest must write so that a fourth create no longer fits: the
  // shortfall, plus its growth reserve (52 MiB) that its writes fill first.
  const int64_t need = 700 - 512 - charged + 1;
  ASSERT_GT(need, 0) << "a fourth create already does not fit: " << m;
  ASSERT_LE(need, 250) << "idle sandboxes hold more than this test can outgrow: " << m;
  const int64_t write = need + 52 + 48;
  auto w = d.Run(sbs[0].first, sbs[0].second,
                 "dd if=/dev/zero of=/dev/shm/a bs=1M count=" + std::to_string(write / 2) +
                     " status=none && dd if=/dev/zero of=/tmp/b bs=1M count=" + std::to_string(write - write / 2) +
                     " status=none && echo ok",
                 120000);
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_EQ(w->out, "ok\n") << w->err;
  ASSERT_TRUE(measured(held3 + need + 52)) << metrics();
  auto fourth = create();
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ(fourth->status, 503) << fourth->body;
  EXPECT_NE(fourth->body.find("refusing create: not enough host memory: sandboxes hold "), std::string::npos)
      << fourth->body;
  EXPECT_NE(fourth->body.find("512 MiB asked > 700 MiB of host memory - 0 MiB kept for the host = 700 MiB"),
            std::string::npos)
      << fourth->body;
  std::printf("refused: %s\n", fourth->body.c_str());
  // The sampler made every VMM a likelier OOM victim than the daemon.
  for (const auto& [id, token] : sbs) EXPECT_EQ(VmmOomScoreAdj(id), "500") << id;
  m = metrics();
  EXPECT_EQ(MetricValue(m, "airlock_admission_rejections_total{reason=\"held_memory\"}"), 1) << m;
  for (const auto& [id, token] : sbs) EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + id)->status, 204);
  std::filesystem::remove_all(dir);
}

// Issue 14 item 6, memory pressure: a daemon that finds the host short of
// memory (here: --memory-pressure above any real MemAvailable) refuses
// creates with reason "pressure" and, with --pause-idle-under-pressure,
// pauses the longest-idle sandbox with its memory kept; connect resumes it.
// Its warm pool (--pool 1) follows the same verdict and parks nothing. The
// sandbox is made by a first daemon (a daemon under pressure admits
// nothing) and adopted by the second.
TEST(LimitsTest, MemoryPressureRefusesCreatesAndPausesTheIdleSandbox) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  std::string id, token;
  {
    TestDaemon d(dir, {}, /*kill_on_exit=*/false);
    auto r = d.Do("POST", "/v2/sandboxes", json{{"timeout", 600}}.dump());
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->status, 201) << r->body;
    id = json::parse(r->body)["sandboxID"];
    token = json::parse(r->body)["envdAccessToken"];
    auto e = d.Run(id, token, "echo before > /tmp/mark && echo ok");
    ASSERT_TRUE(e.ok() && e->out == "ok\n");
  }
  TestDaemon d(dir, {"--memory-pressure", "100000000", "--pause-idle-under-pressure", "--pressure-pause-below",
                     "100000000", "--pressure-pause-min-idle", "5", "--memory-sample-interval", "300", "--pool", "1"});
  auto metric = [&](const std::string& name) {
    auto m = d.Do("GET", "/metrics", "", false);
    return m.ok() ? MetricValue(m->body, name) : -1;
  };
  auto state = [&] {
    auto r = d.Do("GET", "/sandboxes/" + id);
    return r.ok() && r->status == 200 ? json::parse(r->body).value("state", "") : std::string();
  };
  ASSERT_TRUE(WaitFor([&] { return state() == "paused" && metric("airlock_memory_pressure_pauses_total") == 1; },
                      std::chrono::seconds(120)))
      << "state " << state() << "\n"
      << Slurp(dir + "/daemon.log");
  EXPECT_EQ(metric("airlock_memory_pressure"), 1);
  EXPECT_EQ(metric("airlock_pool_parked"), 0);
  EXPECT_EQ(metric("airlock_pool_hits_total"), 0);
  auto r = d.Do("POST", "/v2/sandboxes", "{}");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_NE(r->body.find("refusing create: the host is short of memory: "), std::string::npos) << r->body;
  EXPECT_EQ(metric("airlock_admission_rejections_total{reason=\"pressure\"}"), 1);
  // Connect resumes it, memory intact; connect and the command count as use,
  // so it is not paused again for --pressure-pause-min-idle (5 s).
  auto c = d.Do("POST", "/v2/sandboxes/" + id + "/connect", json{{"timeout", 600}}.dump());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->status == 200 || c->status == 201) << c->body;
  auto e = d.Run(id, token, "cat /tmp/mark");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->out, "before\n");
  std::string log = Slurp(dir + "/daemon.log");
  EXPECT_NE(log.find("memory pressure: MemAvailable"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Issue 11 item 12: a create that would eat into the disk kept for the
// registry and audit trail is refused with 507 and the numbers; nothing starts.
TEST(LimitsTest, DiskBelowTheReserveIsRefusedWith507) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(StateDir().c_str(), &vfs), 0);
  int64_t free_mib = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize) >> 20;
  // A reserve just above what is free: the host's disk is "full" for creates.
  TestDaemon d(dir, {"--disk-reserve", std::to_string(free_mib + 1024)});
  auto r = d.Do("POST", "/v2/sandboxes", "{}");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 507) << r->body;
  EXPECT_NE(r->body.find("not enough free disk"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("kept for the registry and audit trail"), std::string::npos) << r->body;
  auto m = d.Do("GET", "/metrics", "", false);
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->body.find("airlock_admission_rejections_total{reason=\"disk\"} 1"), std::string::npos);
  auto list = d.Do("GET", "/v2/sandboxes");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->body, "[]");
  std::filesystem::remove_all(dir);
}

// Like the SDK (spec: rate-limit retry): on 429 sleep Retry-After, at most 3 retries.
TEST(LimitsTest, BurstOf30CreatesCompletesWithZeroFailures) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir);
  constexpr int kN = 30;
  std::atomic<int> ok{0}, retries{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int i = 0; i < kN; ++i) {
    ts.emplace_back([&] {
      for (int attempt = 0; attempt <= 3; ++attempt) {
        auto r = d.Do("POST", "/v2/sandboxes", json{{"timeout", 120}}.dump());
        if (r.ok() && r->status == 429 && attempt < 3) {
          ++retries;
          std::this_thread::sleep_for(std::chrono::seconds(std::atoi(r->Header("retry-after").c_str())));
          continue;
        }
        if (r.ok() && r->status == 201) {
          std::string id = json::parse(r->body)["sandboxID"];
          auto k = d.Do("DELETE", "/sandboxes/" + id);
          if (k.ok() && k->status == 204) {
            ++ok;
            return;
          }
        }
        std::lock_guard<std::mutex> l(mu);
        failures.push_back(r.ok() ? std::to_string(r->status) + " " + r->body : r.status().ToString());
        return;
      }
    });
  }
  for (auto& t : ts) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("burst of %d creates: %.1f s, %d retries after 429\n", kN, s, retries.load());
  EXPECT_EQ(ok.load(), kN);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures[0];
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace airlock::testing
