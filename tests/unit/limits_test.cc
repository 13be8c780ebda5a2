// Admission control with a fake clock: caps, rate limits, bounded fair
// queue (no key starves another), 429 + Retry-After on timeout, memory
// overcommit refusal; admission by held memory and the memory-pressure
// policy with the readings faked (MemoryReading, PressureInput: the seam
// the daemon's sampler fills from /proc); /proc parsers; the Prometheus
// exposition.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "control/admission.h"
#include "control/host_memory.h"
#include "control/memory_pressure.h"
#include "control/metrics.h"
#include "server/server_config.h"
#include "server/team_disk.h"

namespace airlock::server {
namespace {

// Admission, the memory probe and the pressure policy are control/'s.
using namespace airlock::control;

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
  c.held_memory = false;
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

// Held-memory admission: host 4096 MiB, 1024 kept for the host (budget
// 3072), each measured sandbox counts at least 0.25 x its memoryMB.
AdmissionConfig HeldMemory() {
  auto c = Unlimited();
  c.held_memory = true;
  c.host_memory_mib = 4096;
  c.memory_host_reserve_mib = 1024;
  c.memory_growth_reserve = 0.25;
  c.memory_pressure_mib = 2048;
  return c;
}

// Grants `n` creates of `mib` and finishes them as sandboxes <prefix><i>.
void Live(Admission& a, Recorder& r, int n, int mib, const std::string& prefix) {
  for (int i = 0; i < n; ++i) {
    a.Request("k", mib, Clock::now(), r.For(prefix));
    ASSERT_TRUE(r.got.back().second.granted) << r.got.back().second.message;
    a.CreateDone(r.got.back().second.ticket, prefix + std::to_string(i), Clock::now());
  }
}

TEST(MemoryAdmission, UnmeasuredSandboxesCountTheirWholeMemory) {
  Admission a(HeldMemory());
  Recorder r;
  Live(a, r, 6, 512, "sb");  // 6 x 512 = 3072 = the budget
  a.Request("k", 512, Clock::now(), r.For("7th"));
  const auto& d = r.got.back().second;
  EXPECT_FALSE(d.granted);
  EXPECT_EQ(d.http_status, 503);
  EXPECT_EQ(d.reason, "held_memory");
  EXPECT_NE(d.message.find("sandboxes hold 0 MiB, 0 MiB is reserved for their growth"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("3072 MiB for 6 not yet measured, 512 MiB asked > 4096 MiB of host memory - 1024 MiB "
                           "kept for the host = 3072 MiB"),
            std::string::npos)
      << d.message;
  EXPECT_EQ(a.stats().rejected_held, 1u);
}

TEST(MemoryAdmission, MeasuredSandboxesCountWhatTheyHoldPlusGrowthAndAdmitBeyondTheNominalCap) {
  Admission a(HeldMemory());
  Recorder r;
  Live(a, r, 6, 512, "sb");
  MemoryReading m;
  m.available_mib = 20000;
  for (int i = 0; i < 6; ++i) m.held_mib["sb" + std::to_string(i)] = 40;  // idle clones
  a.UpdateMemory(m);
  auto st = a.stats();
  EXPECT_EQ(st.held_mib, 240);
  EXPECT_EQ(st.growth_reserve_mib, 6 * 128 - 240);  // each counts max(40, 0.25 x 512)
  EXPECT_EQ(st.unmeasured, 0);
  EXPECT_EQ(st.budget_mib, 3072);
  // 768 charged: four more creates fit (768 + 4 x 512 = 2816), a fifth not.
  for (int i = 0; i < 4; ++i) {
    a.Request("k", 512, Clock::now(), r.For("more"));
    EXPECT_TRUE(r.got.back().second.granted) << r.got.back().second.message;
  }
  EXPECT_EQ(a.stats().committed_memory_mib, 10 * 512);  // 3.3 x the "host": the nominal rule would have refused
  a.Request("k", 512, Clock::now(), r.For("over"));
  const auto& d = r.got.back().second;
  EXPECT_EQ(d.reason, "held_memory");
  EXPECT_NE(d.message.find("sandboxes hold 240 MiB, 528 MiB is reserved for their growth (each counts at least 0.25 "
                           "x its memoryMB), 2048 MiB for 4 not yet measured, 512 MiB asked"),
            std::string::npos)
      << d.message;
}

TEST(MemoryAdmission, ASandboxThatDirtiesItsMemoryIsChargedWhatItHolds) {
  Admission a(HeldMemory());
  Recorder r;
  Live(a, r, 2, 1024, "sb");
  MemoryReading m;
  m.held_mib = {{"sb0", 50}, {"sb1", 60}};
  a.UpdateMemory(m);
  EXPECT_EQ(a.stats().held_mib, 110);
  a.Request("k", 1024, Clock::now(), r.For("fits"));  // 256 + 256 + 1024 <= 3072
  ASSERT_TRUE(r.got.back().second.granted);
  a.CreateDone(r.got.back().second.ticket, "", Clock::now());  // failed: released
  m.held_mib = {{"sb0", 1000}};                                // sb0 wrote 1000 MiB; sb1 keeps its figure
  a.UpdateMemory(m);
  EXPECT_EQ(a.stats().held_mib, 1060);
  a.Request("k", 1024, Clock::now(), r.For("fits too"));  // 1000 + 256 + 1024 = 2280
  ASSERT_TRUE(r.got.back().second.granted);
  a.CreateDone(r.got.back().second.ticket, "sb2", Clock::now());
  a.Request("k", 1024, Clock::now(), r.For("refused"));  // 2280 + 1024 > 3072
  EXPECT_EQ(r.got.back().second.reason, "held_memory");
  EXPECT_NE(r.got.back().second.message.find("sandboxes hold 1060 MiB"), std::string::npos);
  a.SandboxGone("sb0", Clock::now());
  a.Request("k", 1024, Clock::now(), r.For("after sb0 left"));
  EXPECT_TRUE(r.got.back().second.granted) << r.got.back().second.message;
  auto st = a.stats();
  EXPECT_EQ(st.held_mib, 60);
  EXPECT_EQ(st.unmeasured_mib, 2048);  // sb2 and the one in flight
}

TEST(MemoryAdmission, PressureAndLowMemAvailableRefuseWithTheNumbers) {
  Admission a(HeldMemory());
  Recorder r;
  MemoryReading m;
  m.available_mib = 1500;
  m.pressure = true;
  a.UpdateMemory(m);
  a.Request("k", 512, Clock::now(), r.For("a"));
  EXPECT_EQ(r.got.back().second.reason, "pressure");
  EXPECT_NE(r.got.back().second.message.find("the host is short of memory: 1500 MiB available"), std::string::npos)
      << r.got.back().second.message;
  // Not under pressure, but what is available minus what unmeasured
  // creates may take would go below the pressure level.
  m.available_mib = 3000;
  m.pressure = false;
  a.UpdateMemory(m);
  a.Request("k", 512, Clock::now(), r.For("b"));  // 3000 - 512 >= 2048
  ASSERT_TRUE(r.got.back().second.granted);
  a.Request("k", 512, Clock::now(), r.For("c"));  // 3000 - 512 - 512 < 2048
  const auto& d = r.got.back().second;
  EXPECT_EQ(d.reason, "pressure");
  EXPECT_NE(d.message.find("3000 MiB available (MemAvailable) - 512 MiB for 1 sandbox(es) not yet measured - 512 MiB "
                           "asked < 2048 MiB kept free"),
            std::string::npos)
      << d.message;
  EXPECT_EQ(a.stats().rejected_pressure, 2u);
}

TEST(MemoryAdmission, AdoptedSandboxesCountUntilMeasuredAndTheNominalCapStillApplies) {
  auto cfg = HeldMemory();
  cfg.memory_overcommit_ratio = 0.5;  // 2048 MiB nominal
  Admission a(cfg);
  a.Adopt("old", "", 2048);
  EXPECT_EQ(a.stats().unmeasured_mib, 2048);
  Recorder r;
  a.Request("k", 512, Clock::now(), r.For("a"));  // held: 2048 + 512 fits 3072; nominal: 2560 > 2048
  EXPECT_EQ(r.got.back().second.reason, "memory");
  EXPECT_NE(r.got.back().second.message.find("refusing to overcommit host memory"), std::string::npos);
}

TEST(MemoryAdmission, ForkChildrenAreCheckedAndCounted) {
  Admission a(HeldMemory());
  std::string reason;
  EXPECT_EQ(a.CheckMemory(4 * 512, &reason), "");  // 2048 <= 3072
  a.Adopt("child-1", "k", 512);
  a.Adopt("child-2", "k", 512);
  EXPECT_EQ(a.CheckMemory(4 * 512, &reason), "");  // 1024 + 2048 = 3072 fits exactly
  EXPECT_NE(a.CheckMemory(5 * 512, &reason), "");  // 1024 + 2560 > 3072
  EXPECT_EQ(reason, "held_memory");
  EXPECT_EQ(a.stats().rejected_held, 1u);
  a.SandboxGone("child-1", Clock::now());
  a.SandboxGone("child-2", Clock::now());
  EXPECT_EQ(a.stats().committed_memory_mib, 0);
}

TEST(MemoryPressure, RefusesBelowTheLevelWithHysteresis) {
  PressureConfig c;  // 2048, +256 to recover
  PressureInput in;
  in.available_mib = 3000;
  EXPECT_FALSE(PlanPressure(c, in).under);
  in.available_mib = 2000;
  EXPECT_TRUE(PlanPressure(c, in).under);
  in.was_under = true;
  in.available_mib = 2200;  // above the level, not above level + margin
  EXPECT_TRUE(PlanPressure(c, in).under);
  in.available_mib = 2400;
  EXPECT_FALSE(PlanPressure(c, in).under);
  in.available_mib = -1;  // unknown: no verdict
  EXPECT_FALSE(PlanPressure(c, in).under);
}

TEST(MemoryPressure, PausesTheLongestIdleOnlyWhenEnabledBelowThePauseLevelAndThePoolIsEmpty) {
  PressureConfig c;
  c.min_idle_ms = 2000;
  PressureInput in;
  in.now_ms = 10000;
  in.available_mib = 800;
  in.running = {{"busy", 5000, 300}, {"idle", 1000, 100}, {"idle-bigger", 1000, 200}, {"new", 9000, 50}};
  auto p = PlanPressure(c, in);
  EXPECT_TRUE(p.under);
  EXPECT_EQ(p.pause_id, "");  // pausing is the operator's choice
  c.pause_idle = true;
  p = PlanPressure(c, in);
  EXPECT_EQ(p.pause_id, "idle-bigger");  // oldest last use; of two, the one holding most
  EXPECT_NE(p.why.find("pausing the longest idle (idle-bigger, holding 200 MiB)"), std::string::npos) << p.why;
  in.pool_parked = 1;  // the pool gives back first
  EXPECT_EQ(PlanPressure(c, in).pause_id, "");
  in.pool_parked = 0;
  in.pause_in_flight = true;  // one at a time
  EXPECT_EQ(PlanPressure(c, in).pause_id, "");
  in.pause_in_flight = false;
  in.available_mib = 1500;  // under pressure, above the pause level
  p = PlanPressure(c, in);
  EXPECT_TRUE(p.under);
  EXPECT_EQ(p.pause_id, "");
  in.available_mib = 800;
  in.running = {{"used-a-second-ago", 9000, 400}};  // idle less than min_idle_ms: never paused
  EXPECT_EQ(PlanPressure(c, in).pause_id, "");
  in.running.clear();
  EXPECT_EQ(PlanPressure(c, in).pause_id, "");
}

TEST(HostMemory, ParsesSmapsRollupAndMeminfo) {
  auto v = ParseSmapsRollup(
      "55d0c0000000-7ffd5e3f2000 ---p 00000000 00:00 0                          [rollup]\n"
      "Rss:              180224 kB\nPss:               95000 kB\nPss_Anon:          40000 kB\n"
      "Shared_Clean:     100000 kB\nShared_Dirty:          0 kB\nPrivate_Clean:     10240 kB\n"
      "Private_Dirty:     51200 kB\nReferenced:       180224 kB\nSwap:                  0 kB\n");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->held_mib(), 60);
  EXPECT_EQ(v->pss_kib, 95000);
  EXPECT_FALSE(ParseSmapsRollup("").ok());
  auto m = ParseMemInfo("MemTotal:       24683904 kB\nMemFree:  1000 kB\nMemAvailable:   20480000 kB\n");
  EXPECT_EQ(m.total_mib, 24105);
  EXPECT_EQ(m.available_mib, 20000);
  EXPECT_EQ(ParseMemInfo("garbage").available_mib, -1);
}

TEST(DaemonMetrics, RendersWhatMemoryAdmissionSees) {
  DaemonMetrics m;
  m.AdmissionRejected(std::string("held_memory"));
  m.AdmissionRejected(std::string("pressure"));
  m.AdmissionRejected(std::string("pressure"));
  m.PressurePause();
  DaemonMetrics::Gauges g;
  g.memory_held_mib = 240;
  g.memory_growth_reserve_mib = 528;
  g.memory_host_reserve_mib = 2048;
  g.memory_available_mib = 20000;
  g.memory_pressure = 1;
  std::string t = m.Render(g);
  EXPECT_NE(t.find("airlock_admission_rejections_total{reason=\"held_memory\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("airlock_admission_rejections_total{reason=\"pressure\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_memory_held_mib 240\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_memory_reserved_mib{for=\"growth\"} 528\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_memory_reserved_mib{for=\"host\"} 2048\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_memory_available_mib 20000\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_memory_pressure 1\n"), std::string::npos);
  EXPECT_NE(t.find("airlock_memory_pressure_pauses_total 1\n"), std::string::npos);
}

// Disk per team (team_disk.h) over real files with a fake clock: allocated
// blocks (a sparse file counts what it holds), a path listed twice counts
// once, a team at its budget gets ResourceExhausted naming it while another
// team is unaffected, and the sum is cached until the clock moves or a
// write invalidates it.
TEST(TeamDisk, CountsAllocatedBlocksPerTeamAndRefusesATeamAtItsBudget) {
  char tmpl[] = "/tmp/airlock-teamdisk-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto write = [](const std::string& path, size_t bytes) {
    std::string data(bytes, '\0');
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 131 + 7);
    std::ofstream(path, std::ios::binary) << data;
  };
  std::filesystem::create_directories(dir + "/ckpt/sub");
  write(dir + "/upload-a", 1 << 20);
  write(dir + "/ckpt/sub/mem", 512 << 10);
  {  // a sparse file of 100 MiB holding nothing
    std::ofstream f(dir + "/sparse", std::ios::binary);
    f.seekp((100 << 20) - 1);
    f.put('\0');
  }
  write(dir + "/upload-b", 4096);
  std::vector<TeamDisk::Holding> holdings = {{"a", dir + "/upload-a"}, {"a", dir + "/ckpt"},   {"a", dir + "/upload-a"},
                                             {"b", dir + "/upload-b"}, {"b", dir + "/sparse"}, {"b", dir + "/gone"}};
  int walks = 0;
  Clock::time_point now{};
  TeamDisk::Options o;
  o.budget_mib = 1;
  o.cache_for = std::chrono::seconds(2);
  o.list = [&] {
    ++walks;
    return holdings;
  };
  o.now = [&] { return now; };
  TeamDisk disk(o);

  EXPECT_EQ(disk.UsageBytes("a"), (1 << 20) + (512 << 10));
  EXPECT_LT(disk.UsageBytes("b"), 64 << 10);  // the sparse file holds a block or so
  EXPECT_EQ(disk.UsageBytes("c"), 0);
  EXPECT_EQ(walks, 1);
  Status a = disk.Check("a");
  EXPECT_EQ(a.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(a.message().find("team a uses 1 MiB of its 1 MiB disk budget (uploads, layers, images, checkpoints, "
                             "paused and named snapshots"),
            std::string::npos)
      << a.message();
  EXPECT_TRUE(disk.Check("b").ok());
  EXPECT_EQ(disk.RemainingBytes("a"), 0);
  EXPECT_GT(disk.RemainingBytes("b"), (1 << 20) - (64 << 10));

  // b writes 1 MiB: seen once the cache expires, or at once after Invalidate.
  write(dir + "/upload-b2", 1 << 20);
  holdings.push_back({"b", dir + "/upload-b2"});
  EXPECT_TRUE(disk.Check("b").ok());
  EXPECT_EQ(walks, 1);
  now += std::chrono::seconds(3);
  EXPECT_FALSE(disk.Check("b").ok());
  EXPECT_EQ(walks, 2);
  std::filesystem::remove(dir + "/upload-b2");
  disk.Invalidate();
  EXPECT_TRUE(disk.Check("b").ok());
  EXPECT_EQ(walks, 3);

  // 0: no budget.
  TeamDisk::Options off = o;
  off.budget_mib = 0;
  TeamDisk none(off);
  EXPECT_TRUE(none.Check("a").ok());
  std::filesystem::remove_all(dir);
}

// serve --team-max-lifetime TEAM=SECONDS (repeatable; core/reaper.h LifetimeCaps).
TEST(TeamMaxLifetime, ParsesRepeatedTeamEqualsSeconds) {
  auto caps = ParseTeamMaxLifetimes({"team-a=86400", "b.c_d=60", "free=0"});
  ASSERT_TRUE(caps.ok()) << caps.status().message();
  ASSERT_EQ(caps->size(), 3u);
  EXPECT_EQ(caps->at("team-a"), 86400);
  EXPECT_EQ(caps->at("b.c_d"), 60);
  EXPECT_EQ(caps->at("free"), 0);
  EXPECT_TRUE(ParseTeamMaxLifetimes({}).ok());
  EXPECT_EQ(ParseTeamMaxLifetimes({"t=2147483647"})->at("t"), 2147483647);
}

TEST(TeamMaxLifetime, MalformedValuesAreRefusedNamingTheValue) {
  for (const char* bad : {"team-a", "=60", "team-a=", "team-a=-1", "team-a=+5", "team-a=1h", "team-a=1.5", "team-a= 60",
                          "team a=60", "team/a=60", "t=2147483648", "t=99999999999999999999"}) {
    auto caps = ParseTeamMaxLifetimes({bad});
    ASSERT_FALSE(caps.ok()) << bad;
    EXPECT_EQ(caps.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(caps.status().message().find(std::string("'") + bad + "'"), std::string::npos) << caps.status().message();
    EXPECT_NE(caps.status().message().find("TEAM=SECONDS"), std::string::npos) << caps.status().message();
  }
  EXPECT_FALSE(ParseTeamMaxLifetimes({std::string(65, 'a') + "=60"}).ok());
  EXPECT_TRUE(ParseTeamMaxLifetimes({std::string(64, 'a') + "=60"}).ok());
  auto twice = ParseTeamMaxLifetimes({"t=60", "u=1", "t=120"});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("given twice"), std::string::npos) << twice.status().message();
}

}  // namespace
}  // namespace airlock::server
