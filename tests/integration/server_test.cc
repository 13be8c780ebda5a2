// Integration tests of `airlock serve` against real microVMs: routing, auth,
// error codes and bodies, bounded/slow requests, TTL expiry, and a daemon
// killed with SIGKILL whose sandbox a new daemon re-adopts. Each test starts
// its own daemon on a free port with a temp registry (fresh API key) and the
// real state dir for images. Skips without root / QEMU / image.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/subprocess.h"
#include "core/http_client.h"
#include "core/registry.h"
#include "tests/integration/daemon.h"
#include "tests/integration/harness.h"

namespace airlock::testing {
namespace {

using nlohmann::json;

void ExpectJsonError(const StatusOr<HttpReply>& r, int status) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, status) << r->body;
  auto j = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r->body;
  EXPECT_EQ(j.value("code", 0), status) << r->body;
  EXPECT_TRUE(j.contains("message") && j["message"].is_string()) << r->body;
  EXPECT_EQ(r->Header("content-type"), "application/json");
}

// Sends raw bytes, then waits up to `wait` for the reply (or EOF).
std::string RawExchange(uint16_t port, const std::string& bytes, std::chrono::seconds wait) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return "connect failed";
  (void)!::write(fd, bytes.data(), bytes.size());
  timeval tv{static_cast<time_t>(wait.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(ServerTest, RoutingAuthAndErrorsWithoutSandboxes) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir, {"--header-timeout", "2", "--body-timeout", "2"}, false);
  ASSERT_FALSE(d.key().empty());
  // Auth: no key, wrong key.
  ExpectJsonError(d.Do("GET", "/v2/sandboxes", "", false), 401);
  ExpectJsonError(d.Do("GET", "/v2/sandboxes", "", false, {{"X-API-Key", "al_wrong"}}), 401);
  // Not found: unknown routes and sandboxes, on both planes.
  ExpectJsonError(d.Do("GET", "/nope"), 404);
  ExpectJsonError(d.Do("GET", "/sandboxes/doesnotexist"), 404);
  ExpectJsonError(d.Do("DELETE", "/sandboxes/doesnotexist"), 404);
  ExpectJsonError(d.Do("POST", "/sandboxes/doesnotexist/timeout", "{\"timeout\":5}"), 404);
  ExpectJsonError(d.Do("POST", "/v2/sandboxes/doesnotexist/connect", "{}"), 404);
  ExpectJsonError(d.Do("POST", "/sandboxes/doesnotexist/pause", "{}"), 404);
  ExpectJsonError(d.Data("doesnotexist", "", "/health"), 502);
  // As E2B's proxy: 502 "The sandbox was not found" with the id, on every path.
  auto nf = d.Data("doesnotexist", "", "/files?path=/etc/hostname");
  ExpectJsonError(nf, 502);
  if (nf.ok()) {
    auto j = nlohmann::json::parse(nf->body, nullptr, false);
    EXPECT_EQ(j.value("message", ""), "The sandbox was not found");
    EXPECT_EQ(j.value("sandboxId", ""), "doesnotexist");
  }
  // Malformed and ill-typed JSON.
  ExpectJsonError(d.Do("POST", "/v2/sandboxes", "{not json"), 400);
  ExpectJsonError(d.Do("POST", "/v2/sandboxes", "[1,2]"), 400);
  ExpectJsonError(d.Do("POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"timeout\":\"soon\"}"), 400);
  ExpectJsonError(d.Do("POST", "/v2/sandboxes", "{\"templateID\":\"base\",\"metadata\":{\"a\":1}}"), 400);
  ExpectJsonError(d.Do("GET", "/v2/sandboxes?limit=0"), 400);
  ExpectJsonError(d.Do("GET", "/v2/sandboxes?nextToken=garbage"), 400);
  // Oversized control-plane body (limit 1 MiB).
  ExpectJsonError(d.Do("POST", "/v2/sandboxes", "{\"x\":\"" + std::string(2 << 20, 'a') + "\"}"), 413);
  // Chunked body + underscore header names (what the SDK sends).
  std::string chunked = "POST /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: " + d.key() +
                        "\r\nlang_version: 20\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
                        "3\r\n{no\r\n0\r\n\r\n";
  std::string reply = RawExchange(d.port(), chunked, std::chrono::seconds(5));
  EXPECT_NE(reply.find("HTTP/1.1 400"), std::string::npos) << reply;
  EXPECT_NE(reply.find("{\"code\":400"), std::string::npos) << reply;
  // Slow header and slow body are cut off (timeouts set to 2 s above).
  auto t0 = std::chrono::steady_clock::now();
  reply = RawExchange(d.port(), "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\n", std::chrono::seconds(10));
  EXPECT_NE(reply.find("HTTP/1.1 408"), std::string::npos) << reply;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6));
  t0 = std::chrono::steady_clock::now();
  reply = RawExchange(
      d.port(),
      "POST /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: " + d.key() + "\r\nContent-Length: 100\r\n\r\n{\"templ",
      std::chrono::seconds(10));
  EXPECT_NE(reply.find("HTTP/1.1 408"), std::string::npos) << reply;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6));
  // Still serving afterwards.
  auto list = d.Do("GET", "/v2/sandboxes");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->status, 200);
  EXPECT_EQ(list->body, "[]");
}

TEST(ServerTest, TokensTtlExpiryAndCleanup) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir, {}, false);
  auto a = CreateSandbox(d, {{"templateID", "base"}, {"timeout", 4}, {"envVars", {{"K", "v"}}}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::string id = (*a)["sandboxID"], token = (*a)["envdAccessToken"];
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ((*a)["envdVersion"], "0.6.13");
  // Data plane: health is open; everything else wants this sandbox's token.
  auto h = d.Data(id, "", "/health");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 204);
  ExpectJsonError(d.Data(id, "", "/envs"), 401);
  ExpectJsonError(d.Data(id, std::string(64, '0'), "/envs"), 401);
  auto envs = d.Data(id, token, "/envs");
  ASSERT_TRUE(envs.ok());
  EXPECT_EQ(envs->status, 200);
  EXPECT_EQ(json::parse(envs->body), json({{"K", "v"}}));
  // The agent itself refuses a direct request without the token.
  auto info = d.Do("GET", "/sandboxes/" + id);
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->status, 200) << info->body;
  // TTL of 4 s: the reaper kills it and nothing is left behind.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 200;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = d.Do("GET", "/sandboxes/" + id);
    status = r.ok() ? r->status : 0;
    if (status == 404) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_EQ(status, 404);
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  struct stat st;
  while (std::chrono::steady_clock::now() < deadline &&
         (::stat(("/run/netns/al-" + id).c_str(), &st) == 0 || ::stat((StateDir() + "/run/" + id).c_str(), &st) == 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(::stat(("/run/netns/al-" + id).c_str(), &st), 0) << "netns left behind";
  EXPECT_NE(::stat((StateDir() + "/run/" + id).c_str(), &st), 0) << "run dir left behind";
  // Issue 13 item 3: the 404 of an ended sandbox says how it ended.
  auto gone = d.Do("GET", "/sandboxes/" + id);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->status, 404);
  EXPECT_EQ(json::parse(gone->body).value("outcome", ""), "ttl_expired") << gone->body;
}

// Issue 13 item 3: one owner of sandbox state. The manager writes the
// registry on each transition and the outcome is set once: an API kill
// says "killed" (GET 404 body, audit), and the row goes with the sandbox.
TEST(ServerTest, RegistryFollowsTheSandboxAndTheOutcomeIsRecorded) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir);
  auto a = CreateSandbox(d, {{"templateID", "base"}, {"timeout", 600}, {"metadata", {{"who", "test"}}}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::string id = (*a)["sandboxID"];
  auto registry = Registry::Open(dir + "/airlock.db");
  ASSERT_TRUE(registry.ok()) << registry.status().ToString();
  auto row = [&]() -> std::optional<SandboxRecord> {
    auto rows = (*registry)->ListSandboxes();
    if (!rows.ok()) return std::nullopt;
    for (const auto& r : *rows) {
      if (r.id == id) return r;
    }
    return std::nullopt;
  };
  auto r = row();
  ASSERT_TRUE(r.has_value()) << "no registry row for a running sandbox";
  EXPECT_EQ(r->state, "running");
  EXPECT_EQ(r->metadata.at("who"), "test");
  EXPECT_GT(r->vmm_pid, 0);
  EXPECT_FALSE(r->netns_ip.empty());
  // The TTL's new end reaches the row.
  int64_t ends_before = r->ends_at_ms;
  auto t = d.Do("POST", "/sandboxes/" + id + "/timeout", R"({"timeout":1200})");
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->status, 204) << t->body;
  r = row();
  ASSERT_TRUE(r.has_value());
  EXPECT_GT(r->ends_at_ms, ends_before);
  auto k = d.Do("DELETE", "/sandboxes/" + id);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->status, 204) << k->body;
  EXPECT_FALSE(row().has_value()) << "the registry row outlived the sandbox";
  auto gone = d.Do("GET", "/sandboxes/" + id);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->status, 404);
  json body = json::parse(gone->body);
  EXPECT_EQ(body.value("outcome", ""), "killed") << gone->body;
  EXPECT_NE(body.value("message", "").find("killed"), std::string::npos) << gone->body;
  // A second kill finds nothing to kill.
  auto again = d.Do("DELETE", "/sandboxes/" + id);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->status, 404);
  auto audit = RunCli({"audit", "--dir", dir + "/audit", "--sandbox", id});
  EXPECT_NE(audit.out.find("sandbox.ended"), std::string::npos) << audit.out;
  EXPECT_NE(audit.out.find("killed"), std::string::npos) << audit.out;
}

TEST(ServerTest, DaemonKilledWithSigkillIsReadopted) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  uint16_t port = FreeTcpPort();
  std::string id, token;
  {
    TestDaemon d(dir, {}, false, port);
    auto a = CreateSandbox(d, {{"templateID", "base"}, {"metadata", {{"keep", "me"}}}});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    id = (*a)["sandboxID"];
    token = (*a)["envdAccessToken"];
    d.Kill9();
  }
  // Same port: nothing of the old daemon (e.g. its listener) leaked into the VMM.
  TestDaemon d2(dir, {}, false, port);
  auto list = d2.Do("GET", "/v2/sandboxes?metadata=keep%3Dme");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->status, 200);
  auto arr = json::parse(list->body);
  ASSERT_EQ(arr.size(), 1u) << list->body;
  EXPECT_EQ(arr[0]["sandboxID"], id);
  auto envs = d2.Data(id, token, "/envs");
  ASSERT_TRUE(envs.ok());
  EXPECT_EQ(envs->status, 200) << envs->body;
  ExpectJsonError(d2.Data(id, "", "/envs"), 401);
  // The re-adopted sandbox's L3 audit came back: a datagram to its gateway
  // (dropped inside its netns, never leaves it) is a record in its logs.
  ::setenv("AIRLOCK_API_KEY", d2.key().c_str(), 1);
  auto sent = airlock::Run({AirlockBin(), "sandbox", "--server", "127.0.0.1:" + std::to_string(port), "exec", id, "--",
                            "/bin/bash", "-c", "echo probe > /dev/udp/169.254.0.22/9; echo sent"});
  ASSERT_TRUE(sent.ok());
  EXPECT_NE(sent->out.find("sent"), std::string::npos) << sent->out << sent->err;
  bool l3 = false;
  std::string body;
  for (int i = 0; i < 25 && !l3; ++i) {
    auto logs = d2.Do("GET", "/v2/sandboxes/" + id + "/logs");
    if (logs.ok()) body = logs->body;
    l3 = body.find("egress deny udp 169.254.0.22:9 rule=gateway") != std::string::npos;
    if (!l3) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(l3) << body;
  auto del = d2.Do("DELETE", "/sandboxes/" + id);
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->status, 204);
  ExpectJsonError(d2.Do("DELETE", "/sandboxes/" + id), 404);
}

}  // namespace
}  // namespace airlock::testing
