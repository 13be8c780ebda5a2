// Integration tests of the daemon's data plane against real microVMs
// (docs/server.md "Data plane"): bodies of any size stream through the proxy
// with bounded daemon memory (a 1 GiB download, a 256 MiB upload); guest
// ports other than the agent's are capped, rate-limited, added to one nft
// set, and guarded by E2B's traffic token when allowPublicTraffic is false;
// `airlock run --download DIR` through a daemon; cgroups gone after destroy;
// /metrics tells paused from running; an upload cut off mid-body leaves no
// file behind. Each test starts its own daemon. Skips without root / QEMU /
// image.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <thread>

#include "common/hex.h"
#include "common/subprocess.h"
#include "core/http_client.h"
#include "tests/integration/daemon.h"
#include "tests/integration/harness.h"

namespace airlock::testing {
namespace {

using nlohmann::json;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace asio = boost::asio;
namespace fs = std::filesystem;
using Headers = std::vector<std::pair<std::string, std::string>>;

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  void Update(const char* p, size_t n) {
    EVP_DigestUpdate(ctx_, p, n);
    bytes_ += n;
  }
  std::string Hex() {
    unsigned char md[32];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_, md, &n);
    return HexEncode(md, n);
  }
  uint64_t bytes() const { return bytes_; }

 private:
  EVP_MD_CTX* ctx_;
  uint64_t bytes_ = 0;
};

// GET through the daemon, the body hashed as it arrives (never held).
struct Streamed {
  int status = 0;
  uint64_t bytes = 0;
  std::string sha256;
  std::string error;
};
Streamed StreamGet(uint16_t port, const std::string& target, const Headers& headers) {
  Streamed out;
  try {
    asio::io_context io;
    beast::tcp_stream s(io);
    s.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target, 11};
    req.set(bhttp::field::host, "127.0.0.1");
    for (const auto& [k, v] : headers) req.set(k, v);
    bhttp::write(s, req);
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::buffer_body> p;
    p.body_limit(std::numeric_limits<uint64_t>::max());
    bhttp::read_header(s, buf, p);
    out.status = static_cast<int>(p.get().result_int());
    Sha256 h;
    std::vector<char> chunk(1 << 20);
    while (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      beast::error_code ec;
      bhttp::read(s, buf, p, ec);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) {
        out.error = ec.message();
        break;
      }
      h.Update(chunk.data(), chunk.size() - p.get().body().size);
    }
    out.bytes = h.bytes();
    out.sha256 = h.Hex();
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

// POST of `total` pseudo-random bytes (Content-Length), generated and hashed
// as they are sent; returns the status and the hash of what was sent.
Streamed StreamPost(uint16_t port, const std::string& target, const Headers& headers, uint64_t total) {
  Streamed out;
  try {
    asio::io_context io;
    asio::ip::tcp::socket s(io);
    s.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    std::string head = "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(total) +
                       "\r\nContent-Type: application/octet-stream\r\n";
    for (const auto& [k, v] : headers) head += k + ": " + v + "\r\n";
    head += "\r\n";
    asio::write(s, asio::buffer(head));
    std::mt19937_64 rng(42);
    std::vector<uint64_t> block((1 << 20) / 8);
    Sha256 h;
    for (uint64_t sent = 0; sent < total;) {
      for (auto& w : block) w = rng();
      size_t n = static_cast<size_t>(std::min<uint64_t>(total - sent, block.size() * 8));
      const char* p = reinterpret_cast<const char*>(block.data());
      h.Update(p, n);
      asio::write(s, asio::buffer(p, n));
      sent += n;
    }
    out.bytes = h.bytes();
    out.sha256 = h.Hex();
    beast::flat_buffer buf;
    bhttp::response<bhttp::string_body> res;
    bhttp::read(s, buf, res);
    out.status = static_cast<int>(res.result_int());
    if (out.status != 200) out.error = res.body();
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// `nft list <what>` inside the sandbox's netns.
std::string NftList(const std::string& id, const std::string& what) {
  auto r = airlock::Run({"ip", "netns", "exec", "al-" + id, "/bin/sh", "-c", "nft list " + what});
  return r.ok() ? r->out + r->err : r.status().ToString();
}
size_t ExposedElements(const std::string& id) {
  std::string set = NftList(id, "set inet airlock exposed_ports");
  auto at = set.find("elements = {");
  if (at == std::string::npos) return set.find("exposed_ports") != std::string::npos ? 0 : SIZE_MAX;
  std::string body = set.substr(at, set.find('}', at) - at);
  return static_cast<size_t>(std::count(body.begin(), body.end(), ',')) + 1;
}
size_t VethDnatRules(const std::string& id) {
  std::string chain = NftList(id, "chain inet airlock prerouting");
  size_t n = 0;
  std::istringstream ss(chain);
  for (std::string line; std::getline(ss, line);) {
    if (line.find("iifname \"eth0\"") != std::string::npos && line.find("dnat") != std::string::npos) ++n;
  }
  return n;
}

// ---- item 8: bodies of any size, memory bounded ----

TEST(DataPlaneTest, GigabyteDownloadAndLargeUploadStreamWithBoundedMemory) {
  AIRLOCK_REQUIRE_VM();
  TestDaemon d(MakeTempDir());
  auto a = CreateSandbox(d, {{"templateID", "base"}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::string id = (*a)["sandboxID"], token = (*a)["envdAccessToken"];
  // A sparse 1 GiB file with random MiB blocks spread over it (the guest
  // disk is the template's; holes need no space), hashed in the guest.
  auto made = d.Run(id, token,
                    "set -e; df -m --output=size,avail /home/user | tail -1 >&2; f=/home/user/big.bin; "
                    "truncate -s 1G $f; for i in 0 97 211 333 512 640 777 901 1023; do "
                    "dd if=/dev/urandom of=$f bs=1M count=1 seek=$i conv=notrunc status=none; done; "
                    "sha256sum $f | cut -d' ' -f1",
                    0, "root");
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_EQ(made->exit_code, 0) << made->err;
  std::cout << "[ info ] guest disk (MiB size, avail): " << made->err;
  std::string guest_sha = Trim(made->out);
  ASSERT_EQ(guest_sha.size(), 64u) << made->out;

  long hwm0 = PeakRssKib(d.pid());
  auto t0 = std::chrono::steady_clock::now();
  Streamed got = StreamGet(d.port(), "/files?path=/home/user/big.bin&username=root",
                           {{"E2b-Sandbox-Id", id}, {"X-Access-Token", token}});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long hwm1 = PeakRssKib(d.pid());
  EXPECT_EQ(got.status, 200) << got.error;
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.bytes, 1ull << 30);
  EXPECT_EQ(got.sha256, guest_sha);
  std::cout << "[ info ] 1 GiB download through the daemon: " << secs << " s, "
            << (1024.0 / std::max(secs, 1e-3)) << " MiB/s; daemon VmHWM " << hwm0 << " KiB before, " << hwm1
            << " KiB after\n";
  EXPECT_LT(hwm1 - hwm0, 64 * 1024) << "the daemon's peak RSS grew with the body";

  // Upload (request body) of 256 MiB through the proxy.
  t0 = std::chrono::steady_clock::now();
  Streamed up = StreamPost(d.port(), "/files?path=/home/user/up.bin&username=root",
                           {{"E2b-Sandbox-Id", id}, {"X-Access-Token", token}}, 256ull << 20);
  secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long hwm2 = PeakRssKib(d.pid());
  ASSERT_EQ(up.status, 200) << up.error;
  std::cout << "[ info ] 256 MiB upload through the daemon: " << secs << " s; daemon VmHWM " << hwm2 << " KiB\n";
  EXPECT_LT(hwm2 - hwm0, 64 * 1024) << "the daemon's peak RSS grew with the upload";
  auto check = d.Run(id, token, "stat -c %s /home/user/up.bin; sha256sum /home/user/up.bin | cut -d' ' -f1", 0,
                     "root");
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_EQ(check->out, std::to_string(256ull << 20) + "\n" + up.sha256 + "\n") << check->err;
}

// ---- item 11: guest ports ----

// A guest HTTP server on `port` (python3 -m http.server), up once it answers.
void StartGuestServer(const TestDaemon& d, const std::string& id, const std::string& token, int port) {
  auto r = d.Run(id, token,
                 "cd /tmp && (setsid python3 -m http.server " + std::to_string(port) +
                     " >/dev/null 2>&1 &) ; for i in $(seq 100); do "
                     "(echo > /dev/tcp/127.0.0.1/" + std::to_string(port) + ") 2>/dev/null && exit 0; sleep 0.1; done; "
                     "exit 1");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->exit_code, 0) << "guest server did not start: " << r->err;
}

StatusOr<HttpReply> ToPort(const TestDaemon& d, const std::string& id, int port, Headers extra = {}) {
  extra.push_back({"E2b-Sandbox-Id", id});
  extra.push_back({"E2b-Sandbox-Port", std::to_string(port)});
  return d.Do("GET", "/", "", false, extra);
}

TEST(DataPlaneTest, PortFloodIsCappedRateLimitedAndLeavesCreatesAlone) {
  AIRLOCK_REQUIRE_VM();
  TestDaemon d(MakeTempDir());
  auto t0 = std::chrono::steady_clock::now();
  auto a = CreateSandbox(d, {{"templateID", "base"}});
  double create_before_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::string id = (*a)["sandboxID"], token = (*a)["envdAccessToken"];
  EXPECT_TRUE((*a)["trafficAccessToken"].is_null()) << a->dump();
  StartGuestServer(d, id, token, 8000);
  auto ok = ToPort(d, id, 8000);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200) << ok->body;
  ASSERT_EQ(VethDnatRules(id), 2u) << NftList(id, "chain inet airlock prerouting");
  EXPECT_EQ(ExposedElements(id), 1u) << NftList(id, "set inet airlock exposed_ports");

  // The flood: N unauthenticated requests, each a new port, from 16 threads
  // (an exposed port nobody listens on takes the relay's 1 s of redials
  // before its 502, so fewer threads would not outrun the refill).
  constexpr int kFlood = 2000;
  std::atomic<int> next{0}, rate_limited{0}, capped{0}, other{0};
  t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < kFlood; i = next++) {
        auto r = ToPort(d, id, 10000 + i);
        if (!r.ok()) {
          ++other;
        } else if (r->status == 429) {
          ++rate_limited;
          if (r->Header("retry-after").empty()) ++other;
        } else if (r->status == 502 && r->body.find("exposed ports") != std::string::npos) {
          ++capped;
        } else if (r->status != 502) {  // exposed, nothing listens: 502 "unreachable"
          ++other;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  double flood_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(rate_limited.load(), 0) << "new ports are rate-limited";
  size_t after_flood = ExposedElements(id);
  EXPECT_LE(after_flood, 32u);
  EXPECT_EQ(VethDnatRules(id), 2u) << "ports are set elements, not rules";

  // Over time the cap is reached, and then a new port is refused with 502 JSON.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int port = 20000;
  bool refused = false;
  std::string body;
  while (!refused && std::chrono::steady_clock::now() < deadline) {
    auto r = ToPort(d, id, port++);
    ASSERT_TRUE(r.ok());
    body = r->body;
    if (r->status == 429) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    } else if (r->status == 502 && body.find("exposed ports") != std::string::npos) {
      refused = true;
      auto j = json::parse(body, nullptr, false);
      EXPECT_EQ(j.value("code", 0), 502) << body;
      EXPECT_EQ(j.value("sandboxId", ""), id) << body;
      EXPECT_EQ(j.value("port", ""), std::to_string(port - 1)) << body;
    }
  }
  EXPECT_TRUE(refused) << body;
  EXPECT_EQ(ExposedElements(id), 32u) << NftList(id, "set inet airlock exposed_ports");
  EXPECT_EQ(VethDnatRules(id), 2u);
  // The ports exposed first still work; the agent is untouched.
  ok = ToPort(d, id, 8000);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto h = d.Data(id, "", "/health");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 204);

  t0 = std::chrono::steady_clock::now();
  auto b = CreateSandbox(d, {{"templateID", "base"}});
  double create_after_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::cout << "[ info ] flood of " << kFlood << " new ports: " << flood_s << " s, " << rate_limited << " × 429, "
            << capped << " × cap, " << after_flood << " ports exposed after it; create before " << create_before_ms
            << " ms, after " << create_after_ms << " ms\n";
}

TEST(DataPlaneTest, TrafficTokenGuardsGuestPortsWhenPublicTrafficIsOff) {
  AIRLOCK_REQUIRE_VM();
  TestDaemon d(MakeTempDir(), {"--domain", "airlock.test"});  // the host form, for port 49999 below
  auto bad = d.Do("POST", "/v2/sandboxes", json{{"templateID", "base"}, {"network", {{"allowPublicTraffic", 1}}}}.dump());
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400) << bad->body;
  auto a = CreateSandbox(d, {{"templateID", "base"}, {"network", {{"allowPublicTraffic", false}}}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::string id = (*a)["sandboxID"], token = (*a)["envdAccessToken"];
  ASSERT_TRUE((*a)["trafficAccessToken"].is_string()) << a->dump();
  std::string traffic = (*a)["trafficAccessToken"];
  EXPECT_EQ(traffic.size(), 64u);
  EXPECT_NE(traffic, token);
  // The agent's port wants X-Access-Token only (E2B: envd has its own check).
  StartGuestServer(d, id, token, 8000);
  auto none = ToPort(d, id, 8000);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->status, 403) << none->body;
  EXPECT_NE(none->body.find("is missing"), std::string::npos) << none->body;
  auto wrong = ToPort(d, id, 8000, {{"E2B-Traffic-Access-Token", std::string(64, 'a')}});
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->status, 403) << wrong->body;
  EXPECT_NE(wrong->body.find("is invalid"), std::string::npos) << wrong->body;
  EXPECT_EQ(ExposedElements(id), 0u) << "nothing is exposed for a refused request";
  auto right = ToPort(d, id, 8000, {{"E2B-Traffic-Access-Token", traffic}});
  ASSERT_TRUE(right.ok());
  EXPECT_EQ(right->status, 200) << right->body;
  // Connect (resume path of the SDK) hands the same token back.
  auto c = d.Do("POST", "/v2/sandboxes/" + id + "/connect", "{}");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(json::parse(c->body, nullptr, false).value("trafficAccessToken", ""), traffic) << c->body;

  // Port 49999 (the code interpreter) needs the sandbox's X-Access-Token on
  // /execute too, checked by the daemon itself (issue 32): a server there
  // that checks nothing (python's http.server) is not reached without it,
  // by the headers or by the host form under --domain; the traffic token
  // is still asked first.
  StartGuestServer(d, id, token, 49999);
  const std::string code = R"({"code":"1"})";
  auto by_header = [&](Headers h) {
    h.push_back({"E2b-Sandbox-Id", id});
    h.push_back({"E2b-Sandbox-Port", "49999"});
    return d.Do("POST", "/execute", code, false, h);
  };
  auto by_host = [&](const std::string& host, Headers h) {
    h.push_back({"Host", host});
    return d.Do("POST", "/execute", code, false, h);
  };
  const Headers tr = {{"E2B-Traffic-Access-Token", traffic}};
  auto with = [&](Headers h, const std::string& access) {
    h.push_back({"X-Access-Token", access});
    return h;
  };
  auto r = by_header({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 403) << r->body;
  r = by_header(tr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_NE(r->body.find("missing X-Access-Token"), std::string::npos) << r->body;
  r = by_header(with(tr, std::string(64, 'a')));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_NE(r->body.find("invalid X-Access-Token"), std::string::npos) << r->body;
  r = by_header(with(tr, token));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 501) << r->body;  // http.server's answer to a POST: reached
  r = by_host("49999-" + id + ".airlock.test", tr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_NE(r->body.find("missing X-Access-Token"), std::string::npos) << r->body;
  r = by_host("49999-" + id + ".airlock.test:3000", with(tr, token));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 501) << r->body;
  // Another domain names no sandbox: the control plane, which wants a key.
  r = by_host("49999-" + id + ".elsewhere.test", with(tr, token));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_NE(r->body.find("X-API-Key"), std::string::npos) << r->body;
  // The contexts routes, where the official SDK sends no token, pass.
  auto ctx = d.Do("GET", "/contexts", "", false, {{"E2b-Sandbox-Id", id}, {"E2b-Sandbox-Port", "49999"}, tr[0]});
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->status, 404) << ctx->body;  // http.server: no such file
}

// ---- item 14 ----

TEST(DataPlaneTest, RunDownloadsADirectoryThroughTheDaemon) {
  AIRLOCK_REQUIRE_VM();
  TestDaemon d(MakeTempDir());
  std::string out = MakeTempDir() + "/out";
  ::setenv("AIRLOCK_SERVER", ("127.0.0.1:" + std::to_string(d.port())).c_str(), 1);
  ::setenv("AIRLOCK_API_KEY", d.key().c_str(), 1);
  CliResult r = RunCli({"run", "--download", "/home/user/out:" + out, "--", "/bin/bash", "-c",
                        "mkdir -p out/sub/deeper && echo one > out/a.txt && echo two > out/sub/b.txt && "
                        "head -c 3000000 /dev/zero > out/sub/deeper/z.bin"});
  ::unsetenv("AIRLOCK_SERVER");
  ::unsetenv("AIRLOCK_API_KEY");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Slurp(out + "/a.txt"), "one\n");
  EXPECT_EQ(Slurp(out + "/sub/b.txt"), "two\n");
  std::error_code ec;
  EXPECT_EQ(fs::file_size(out + "/sub/deeper/z.bin", ec), 3000000u);
  // It went through this daemon (not the in-process fallback).
  auto m = d.Do("GET", "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->body.find("airlock_sandbox_creates_total 1\n"), std::string::npos) << m->body;
}

std::vector<std::string> CgroupLeaves(const std::string& id) {
  std::vector<std::string> out;
  for (const char* root : {"/sys/fs/cgroup/airlock/", "/sys/fs/cgroup/memory/airlock/", "/sys/fs/cgroup/pids/airlock/"}) {
    std::string p = std::string(root) + id;
    if (fs::exists(p)) out.push_back(p);
  }
  return out;
}
// The leaves of `id` once they are gone (≤ 20 s), else those still there.
std::vector<std::string> CgroupLeavesAfterDestroy(const std::string& id) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto left = CgroupLeaves(id);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    left = CgroupLeaves(id);
  }
  return left;
}

TEST(DataPlaneTest, CgroupsAreGoneAfterDestroyIncludingAfterARestart) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  uint16_t port = FreeTcpPort();
  std::string kept, direct;
  {
    TestDaemon d(dir, {}, false, port);
    auto a = CreateSandbox(d, {{"templateID", "base"}});
    auto b = CreateSandbox(d, {{"templateID", "base"}});
    ASSERT_TRUE(a.ok() && b.ok());
    kept = (*a)["sandboxID"];
    direct = (*b)["sandboxID"];
    if (CgroupLeaves(direct).empty()) GTEST_SKIP() << "VMMs run without a cgroup on this host";
    auto del = d.Do("DELETE", "/sandboxes/" + direct);
    ASSERT_TRUE(del.ok());
    EXPECT_EQ(del->status, 204);
    EXPECT_EQ(CgroupLeavesAfterDestroy(direct), std::vector<std::string>{});
    EXPECT_FALSE(CgroupLeaves(kept).empty());
  }  // SIGTERM without --kill-on-exit: `kept` outlives the daemon
  TestDaemon d(dir, {}, false, port);
  auto del = d.Do("DELETE", "/sandboxes/" + kept);
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->status, 204) << del->body;
  EXPECT_EQ(CgroupLeavesAfterDestroy(kept), std::vector<std::string>{}) << "the re-adopted VMM's cgroup is removed with it";
}

TEST(DataPlaneTest, MetricsTellPausedFromRunning) {
  AIRLOCK_REQUIRE_VM();
  TestDaemon d(MakeTempDir());
  auto a = CreateSandbox(d, {{"templateID", "base"}});
  auto b = CreateSandbox(d, {{"templateID", "base"}});
  ASSERT_TRUE(a.ok() && b.ok());
  auto p = d.Do("POST", "/sandboxes/" + (*a)["sandboxID"].get<std::string>() + "/pause", "{}");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->status, 204) << p->body;
  auto m = d.Do("GET", "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->body.find("airlock_sandboxes{state=\"running\"} 1\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("airlock_sandboxes{state=\"paused\"} 1\n"), std::string::npos) << m->body;
}

TEST(DataPlaneTest, UploadCutOffMidBodyLeavesNoFile) {
  AIRLOCK_REQUIRE_VM();
  TestDaemon d(MakeTempDir());
  auto a = CreateSandbox(d, {{"templateID", "base"}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::string id = (*a)["sandboxID"], token = (*a)["envdAccessToken"];
  // An older whole file at the path stays as it was.
  auto w = d.Data(id, token, "POST", "/files?path=/home/user/kept.txt", "old content\n");
  ASSERT_TRUE(w.ok() && w->status == 200);
  for (std::string name : {"fresh.bin", "kept.txt"}) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(d.port());
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    std::string head = "POST /files?path=/home/user/" + name + " HTTP/1.1\r\nHost: 127.0.0.1\r\nE2b-Sandbox-Id: " + id +
                       "\r\nX-Access-Token: " + token +
                       "\r\nContent-Type: application/octet-stream\r\nContent-Length: 10485760\r\n\r\n";
    std::string part(1 << 20, 'x');
    std::string first = head + part;
    for (size_t off = 0; off < first.size();) {
      ssize_t n = ::write(fd, first.data() + off, first.size() - off);
      ASSERT_GT(n, 0) << "write to the daemon";
      off += static_cast<size_t>(n);
    }
    // Wait until the bytes reached the guest (a temp file grew), then cut.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string seen;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = d.Run(id, token, "ls -a /home/user | grep -c '" + name + "' || true");
      seen = r.ok() ? r->out : "";
      if (seen != "0\n" && name == "fresh.bin") break;
      if (name == "kept.txt" && seen == "2\n") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(seen, name == "fresh.bin" ? "1\n" : "2\n") << name << ": the upload never reached the agent";
    std::cout << "[ info ] " << name << ": upload under way (" << Trim(seen) << " names) after "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - (deadline - std::chrono::seconds(30))).count()
              << " s; cutting it off\n";
    ::close(fd);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + std::chrono::seconds(30);
  std::string ls;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = d.Run(id, token, "ls -a /home/user | grep -e fresh -e kept -e airlock-upload || true");
    ls = r.ok() ? r->out : r.status().ToString();
    if (ls == "kept.txt\n") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::cout << "[ info ] temporary files gone " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s after the cut\n";
  EXPECT_EQ(ls, "kept.txt\n") << "no truncated file at the final path, no temporary file";
  auto kept = d.Data(id, token, "/files?path=/home/user/kept.txt");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->body, "old content\n");
}

}  // namespace
}  // namespace airlock::testing
