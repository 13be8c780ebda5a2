// Admission control with a fake clock: caps, rate limits, bounded fair
// queue (no key starves another), 429 + Retry-After on timeout, memory
// overcommit refusal; the Prometheus exposition.
#include <gtest/gtest.h>

#include "server/admission.h"
#include "server/metrics.h"

namespace airlock::server {
namespace {

using Clock = Admission::Clock;
using std::chrono::milliseconds;

struct Recorder {
  std::vector<std::pair<std::string, AdmissionDecision>> got;
  Admission::Callback For(const std::string& tag) {
    return [this, tag](AdmissionDecision d) { got.push_back({tag, d}); };
  }
};

AdmissionConfig Unlimited() {
  AdmissionConfig c;
  c.max_sandboxes = 0;
  c.max_sandboxes_per_key = 0;
  c.creates_per_second = 0;
  c.creates_per_second_per_key = 0;
  c.max_creates_in_flight = 0;
  c.memory_overcommit_ratio = 0;
  return c;
}

TEST(Admission, PerKeyCapQueuesThenGrantsWhenASlotFrees) {
  auto cfg = Unlimited();
  cfg.max_sandboxes_per_key = 1;
  cfg.queue_timeout = milliseconds(5000);
  Admission a(cfg);
  Recorder r;
  auto t0 = Clock::now();
  a.Request("k1", 512, t0, r.For("a"));
  ASSERT_EQ(r.got.size(), 1u);
  ASSERT_TRUE(r.got[0].second.granted);
  a.CreateDone(r.got[0].second.ticket, "sb-a", t0);
  a.Request("k1", 512, t0, r.For("b"));
  a.Request("k2", 512, t0, r.For("other-key"));  // another key is not blocked
  ASSERT_EQ(r.got.size(), 2u);
  EXPECT_EQ(r.got[1].first, "other-key");
  a.SandboxGone("sb-a", t0 + milliseconds(100));
  ASSERT_EQ(r.got.size(), 3u);
  EXPECT_EQ(r.got[2].first, "b");
  EXPECT_TRUE(r.got[2].second.granted);
}

TEST(Admission, QueueTimeoutAnswers429WithRetryAfter) {
  auto cfg = Unlimited();
  cfg.max_sandboxes = 1;
  cfg.queue_timeout = milliseconds(1000);
  Admission a(cfg);
  Recorder r;
  auto t0 = Clock::now();
  a.Request("k", 128, t0, r.For("a"));
  a.Request("k", 128, t0, r.For("b"));
  ASSERT_EQ(r.got.size(), 1u);
  auto wake = a.Pump(t0 + milliseconds(500));
  ASSERT_TRUE(wake.has_value());
  EXPECT_EQ(*wake, t0 + milliseconds(1000));
  a.Pump(t0 + milliseconds(1000));
  ASSERT_EQ(r.got.size(), 2u);
  EXPECT_FALSE(r.got[1].second.granted);
  EXPECT_EQ(r.got[1].second.http_status, 429);
  EXPECT_GE(r.got[1].second.retry_after_s, 1);
  EXPECT_EQ(a.stats().queue_timeouts, 1u);
  // A full queue is refused at once.
  cfg.max_queue_per_key = 1;
  Admission b(cfg);
  Recorder r2;
  b.Request("k", 128, t0, r2.For("1"));
  b.Request("k", 128, t0, r2.For("2"));
  b.Request("k", 128, t0, r2.For("3"));
  ASSERT_EQ(r2.got.size(), 2u);
  EXPECT_EQ(r2.got[1].first, "3");
  EXPECT_EQ(r2.got[1].second.http_status, 429);
}

TEST(Admission, RateLimitSpacesGrantsAndTellsWhenToWake) {
  auto cfg = Unlimited();
  cfg.creates_per_second_per_key = 2;
  cfg.create_burst_per_key = 1;
  cfg.queue_timeout = milliseconds(60000);
  Admission a(cfg);
  Recorder r;
  auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) a.Request("k", 128, t0, r.For(std::to_string(i)));
  EXPECT_EQ(r.got.size(), 1u);
  auto wake = a.Pump(t0);
  ASSERT_TRUE(wake.has_value());
  EXPECT_LE(*wake, t0 + milliseconds(501));
  a.Pump(t0 + milliseconds(500));
  EXPECT_EQ(r.got.size(), 2u);
  a.Pump(t0 + milliseconds(1000));
  EXPECT_EQ(r.got.size(), 3u);
}

TEST(Admission, RoundRobinDoesNotStarveAQuietKey) {
  auto cfg = Unlimited();
  cfg.max_creates_in_flight = 1;
  cfg.queue_timeout = milliseconds(600000);
  Admission a(cfg);
  Recorder r;
  auto t0 = Clock::now();
  for (int i = 0; i < 20; ++i) a.Request("noisy", 128, t0, r.For("noisy"));
  a.Request("quiet", 128, t0, r.For("quiet"));
  ASSERT_EQ(r.got.size(), 1u);  // one in flight
  a.CreateDone(r.got[0].second.ticket, "", t0);
  ASSERT_EQ(r.got.size(), 2u);
  EXPECT_EQ(r.got[1].first, "quiet");  // served before the noisy key's backlog
}

TEST(Admission, MemoryOvercommitIsRefusedWithTheNumbers) {
  auto cfg = Unlimited();
  cfg.host_memory_mib = 1000;
  cfg.memory_overcommit_ratio = 1.5;
  Admission a(cfg);
  Recorder r;
  auto t0 = Clock::now();
  a.Request("k", 1000, t0, r.For("a"));
  ASSERT_TRUE(r.got[0].second.granted);
  a.CreateDone(r.got[0].second.ticket, "sb", t0);
  a.Request("k", 600, t0, r.For("b"));
  ASSERT_EQ(r.got.size(), 2u);
  EXPECT_EQ(r.got[1].second.http_status, 503);
  EXPECT_NE(r.got[1].second.message.find("1000 MiB committed"), std::string::npos) << r.got[1].second.message;
  EXPECT_NE(r.got[1].second.message.find("600 MiB requested"), std::string::npos);
  a.Request("k", 500, t0, r.For("c"));
  EXPECT_TRUE(r.got[2].second.granted);
  EXPECT_EQ(a.stats().committed_memory_mib, 1500);
}

TEST(DaemonMetrics, RendersPrometheusText) {
  DaemonMetrics m;
  m.CreateStarted();
  m.CreateSucceeded(4.2);
  m.EgressDecision(false);
  m.EgressBytes(10, 20);
  DaemonMetrics::Gauges g;
  g.running = 3;
  g.egress_dns_tcp_refused = 7;
  g.egress_host_address_refused = 2;
  g.paused = 2;
  std::string t = m.Render(g);
  EXPECT_NE(t.find("airlock_egress_dns_tcp_refused_total 7\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_egress_host_address_refused_total 2\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_sandboxes{state=\"running\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_sandboxes{state=\"paused\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_sandbox_create_duration_seconds_bucket{le=\"5\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_sandbox_create_duration_seconds_bucket{le=\"2\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_egress_connections_total{decision=\"denied\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_egress_bytes_total{direction=\"received\"} 20\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE airlock_sandbox_creates_total counter"), std::string::npos);
}

}  // namespace
}  // namespace airlock::server
