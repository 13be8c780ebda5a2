// Integration tests of "guests stay honest after any restore" (issue 14 item
// 7; docs/snapshots.md "What the guest agent must do after a restore"):
// sibling sandboxes restored from one snapshot never share /dev/urandom
// output or the kernel's TCP secrets (net_secret, ts_secret in Linux's
// net/core/secure_seq.c, drawn once per boot at the first TCP use).
//
// How the secrets are measured from inside a guest, as root: a loopback
// connection from a fixed client port to a fixed listener port (the same
// 4-tuple in every clone), then
//   - ISN: TCP_REPAIR + TCP_QUEUE_SEQ gives write_seq = ISN + 1, and
//     ISN = siphash(4-tuple, net_secret) + (CLOCK_REALTIME ns >> 6), so
//     (ISN - (realtime_ns >> 6)) mod 2^32 is the secret's hash, up to the
//     few ms between reading the clock and connect();
//   - timestamp offset: getsockopt(TCP_TIMESTAMP) = CLOCK_MONOTONIC ms +
//     siphash(addresses, ts_secret), so (tsval - monotonic_ms) mod 2^32 is
//     the secret's hash, up to 1 ms.
// Two clones with the same secret give (near-)equal values for every port;
// with their own secrets they differ by a uniformly random 32-bit amount.
// Skips without root / QEMU / image.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/manager.h"
#include "tests/integration/harness.h"

namespace airlock::testing {
namespace guest_freshness_test {

// Prints one JSON object: per client port [port, isn, realtime_ns, tsval,
// monotonic_ns], and 32 bytes of /dev/urandom in hex.
constexpr char kProbe[] = R"PY(
import json, socket, time
T = socket.IPPROTO_TCP
TCP_REPAIR, TCP_REPAIR_QUEUE, TCP_QUEUE_SEQ, TCP_TIMESTAMP, TCP_SEND_QUEUE = 19, 20, 21, 24, 2
with open('/dev/urandom', 'rb') as f:
    rnd = f.read(32).hex()
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('127.0.0.1', 47000))
l.listen(16)
conns, out = [], []
for port in range(47001, 47005):
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    c.bind(('127.0.0.1', port))
    real = time.time_ns()
    c.connect(('127.0.0.1', 47000))
    mono = time.monotonic_ns()
    ts = c.getsockopt(T, TCP_TIMESTAMP) & 0xffffffff
    c.setsockopt(T, TCP_REPAIR, 1)
    c.setsockopt(T, TCP_REPAIR_QUEUE, TCP_SEND_QUEUE)
    seq = c.getsockopt(T, TCP_QUEUE_SEQ) & 0xffffffff
    c.setsockopt(T, TCP_REPAIR, 0)
    conns.append(c)
    out.append([port, (seq - 1) & 0xffffffff, real, ts, mono])
print(json.dumps({'tcp': out, 'urandom': rnd}))
)PY";

struct Probe {
  std::vector<uint32_t> isn_offset;  // per port: (isn - (realtime_ns >> 6)) mod 2^32
  std::vector<uint32_t> ts_offset;   // per port: (tsval - monotonic_ms) mod 2^32
  std::string urandom;
};

StatusOr<Probe> RunProbe(const Sandbox& sb) {
  ExecRequest r;
  r.cmd = "/usr/bin/python3";
  r.args = {"-c", kProbe};
  r.user = "root";  // TCP_REPAIR needs CAP_NET_ADMIN
  std::string out, err;
  ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view s) { out.append(s); };
  cb.on_stderr = [&](std::string_view s) { err.append(s); };
  ASSIGN_OR_RETURN(auto res, sb.agent().Exec(r, cb));
  if (res.exit_code != 0) return Internal("probe exited " + std::to_string(res.exit_code) + ": " + err);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("tcp")) return Internal("probe printed: " + out);
  Probe p;
  for (const auto& row : j["tcp"]) {
    const uint64_t isn = row[1], real_ns = row[2], ts = row[3], mono_ns = row[4];
    p.isn_offset.push_back(static_cast<uint32_t>(isn - (real_ns >> 6)));
    p.ts_offset.push_back(static_cast<uint32_t>(ts - mono_ns / 1000000));
  }
  p.urandom = j["urandom"];
  return p;
}

// |a - b| on the 32-bit circle.
uint32_t Distance(uint32_t a, uint32_t b) {
  const uint32_t d = a - b;
  return d < 0x80000000u ? d : 0u - d;
}

// What two probes share. ISN offsets within 2^20 (67 ms of the 64 ns ISN
// clock) and timestamp offsets within 1 s, on every one of the 4 ports:
// the chance of that for independent secrets is below 2^-40.
struct Shared {
  bool net_secret = true;
  bool ts_secret = true;
  std::string detail;
};
Shared Compare(const Probe& a, const Probe& b) {
  Shared s;
  for (size_t i = 0; i < a.isn_offset.size() && i < b.isn_offset.size(); ++i) {
    const uint32_t di = Distance(a.isn_offset[i], b.isn_offset[i]);
    const uint32_t dt = Distance(a.ts_offset[i], b.ts_offset[i]);
    s.net_secret = s.net_secret && di < (1u << 20);
    s.ts_secret = s.ts_secret && dt < 1000;
    s.detail += "port " + std::to_string(47001 + i) + ": isn offsets " + std::to_string(a.isn_offset[i]) + " vs " +
                std::to_string(b.isn_offset[i]) + " (distance " + std::to_string(di) + " x 64 ns), ts offsets " +
                std::to_string(a.ts_offset[i]) + " vs " + std::to_string(b.ts_offset[i]) + " (distance " +
                std::to_string(dt) + " ms)\n";
  }
  return s;
}

// Every pair of `sandboxes` has its own /dev/urandom output and TCP secrets.
void ExpectAllFresh(const std::vector<std::shared_ptr<Sandbox>>& sandboxes, const std::string& what) {
  std::vector<Probe> probes;
  for (const auto& sb : sandboxes) {
    auto p = RunProbe(*sb);
    ASSERT_TRUE(p.ok()) << what << ": " << p.status().ToString();
    probes.push_back(*p);
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    for (size_t j = i + 1; j < probes.size(); ++j) {
      Shared s = Compare(probes[i], probes[j]);
      std::printf("%s %zu vs %zu:\n%s", what.c_str(), i, j, s.detail.c_str());
      EXPECT_NE(probes[i].urandom, probes[j].urandom) << what << ": /dev/urandom output shared";
      EXPECT_FALSE(s.net_secret) << what << " " << i << " and " << j << " share net_secret (TCP ISNs; above)";
      EXPECT_FALSE(s.ts_secret) << what << " " << i << " and " << j << " share ts_secret (TCP timestamps; above)";
    }
  }
}

StatusOr<std::unique_ptr<Manager>> OpenTemplateManager(int pool_size = 0) {
  ManagerConfig c;
  c.state_dir = StateDir();
  c.build_image_if_missing = false;
  c.template_snapshots = true;
  c.runtime = RuntimeName();
  c.pool.size = pool_size;
  c.pool.min_available_mib = 0;
  return Manager::Open(c);
}

// Clones of the template snapshot: the template must not have drawn the TCP
// secrets (its readiness check must not be TCP), and each clone must reseed
// its CRNG before its first TCP handshake (the host's readiness probe).
TEST(GuestFreshnessTest, TemplateClonesShareNoTcpSecretsNorUrandom) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenTemplateManager();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->template_snapshots().Ensure("base", 1, 512).ok());
  std::vector<std::shared_ptr<Sandbox>> clones;
  for (int i = 0; i < 3; ++i) {
    auto sb = (*m)->Create(CreateOptions{});
    ASSERT_TRUE(sb.ok()) << sb.status().ToString();
    ASSERT_TRUE((*sb)->timings().from_snapshot);
    clones.push_back(*sb);
  }
  ExpectAllFresh(clones, "template clone");
  for (auto& sb : clones) EXPECT_TRUE((*m)->Destroy(sb->id()).ok());
}

// Sandboxes handed out by the warm pool: parked clones of the template.
TEST(GuestFreshnessTest, WarmPoolSandboxesShareNoTcpSecretsNorUrandom) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenTemplateManager(/*pool_size=*/2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->template_snapshots().Ensure("base", 1, 512).ok());
  (*m)->warm_pool().Warm("base", 1, 512);
  (*m)->warm_pool().Start();
  // The filler parks one at a time (a restore plus a login shell each).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while ((*m)->warm_pool().stats().parked < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling a condition, bounded by the deadline
  }
  ASSERT_EQ((*m)->warm_pool().stats().parked, 2);
  std::vector<std::shared_ptr<Sandbox>> pooled;
  CreateOptions o;
  o.detach = true;  // only detached creates take from the pool
  for (int i = 0; i < 2; ++i) {
    auto sb = (*m)->Create(o);
    ASSERT_TRUE(sb.ok()) << sb.status().ToString();
    pooled.push_back(*sb);
  }
  EXPECT_GE((*m)->warm_pool().stats().hits, 2u);
  ExpectAllFresh(pooled, "pooled sandbox");
  (*m)->warm_pool().Stop();
  for (auto& sb : pooled) EXPECT_TRUE((*m)->Destroy(sb->id()).ok());
}

// Fork children of one sandbox: /dev/urandom is their own (each is reseeded
// before anything runs). Their TCP secrets are their parent's: it did TCP
// before the checkpoint (its own /health and /init), and Linux draws them
// once per boot (docs/snapshots.md). Printed, not asserted.
TEST(GuestFreshnessTest, ForkChildrenShareNoUrandom) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenTemplateManager();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  CreateOptions o;
  o.detach = true;
  auto parent = (*m)->Create(o);
  ASSERT_TRUE(parent.ok()) << parent.status().ToString();
  auto kids = (*m)->Fork((*parent)->id(), 2);
  ASSERT_TRUE(kids.ok()) << kids.status().ToString();
  std::vector<Probe> probes;
  for (auto& k : *kids) {
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    auto p = RunProbe(**k);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    probes.push_back(*p);
  }
  EXPECT_NE(probes[0].urandom, probes[1].urandom);
  Shared s = Compare(probes[0], probes[1]);
  std::printf("fork children: net_secret %s, ts_secret %s\n%s", s.net_secret ? "shared" : "own",
              s.ts_secret ? "shared" : "own", s.detail.c_str());
  for (auto& k : *kids) EXPECT_TRUE((*m)->Destroy((*k)->id()).ok());
  EXPECT_TRUE((*m)->Destroy((*parent)->id()).ok());
}

}  // namespace guest_freshness_test
}  // namespace airlock::testing
