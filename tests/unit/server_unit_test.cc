// Pure pieces of the daemon: query/metadata parsing, page tokens, time
// formatting, address parsing, and the SQLite registry (temp file).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <thread>

#include <filesystem>
#include <fstream>
#include <sqlite3.h>

#include "core/http_client.h"
#include "core/registry.h"
#include "image/hash.h"
#include "server/egress_routes.h"
#include "server/server.h"

namespace airlock {
namespace {

TEST(ServerUnitTest, MetadataFilterAsTheSdkEncodesIt) {
  // Spec §1.5.5 capture: metadata=k%252520y%3Dv%2525261, once decoded by the
  // HTTP layer → "k%2520y=v%25261".
  auto m = gateway::ParseMetadataFilter("k%2520y=v%25261");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m["k y"], "v&1");
  auto two = gateway::ParseMetadataFilter("a%3Db%26c%3Dd");  // "a=b&c=d" escaped once more
  EXPECT_EQ(two, (std::map<std::string, std::string>{{"a", "b"}, {"c", "d"}}));
  EXPECT_TRUE(gateway::ParseMetadataFilter("").empty());
}

TEST(ServerUnitTest, PageTokensAndTimes) {
  auto t = gateway::ParsePageToken("1700000000123_abc");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->first, 1700000000123);
  EXPECT_EQ(t->second, "abc");
  EXPECT_FALSE(gateway::ParsePageToken("garbage"));
  EXPECT_FALSE(gateway::ParsePageToken("_abc"));
  EXPECT_FALSE(gateway::ParsePageToken("12x_abc"));
  EXPECT_EQ(FormatRfc3339Ms(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatRfc3339Ms(1767323045123), "2026-01-02T03:04:05.123Z");
}

// Which sandbox a data-plane request names (issue 32): the Host form
// "<port>-<id>.<domain>" only under serve --domain, and only that domain;
// E2b-Sandbox-Id with a direct Host always.
TEST(ServerUnitTest, HostFormRoutesOnlyTheConfiguredDomain) {
  uint16_t port = 0;
  // No --domain: no Host names a sandbox.
  for (const char* host : {"49999-sbx1.airlock.test", "49999-sbx1.anything", "49983-sbx1.e2b.app:443", "1-a.b"}) {
    EXPECT_FALSE(server::DataPlaneSandbox(host, "", "", "", &port)) << host;
  }
  // --domain airlock.test: that domain only (any case, any port).
  auto id = server::DataPlaneSandbox("49999-sbx1.airlock.test", "", "", "airlock.test", &port);
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, "sbx1");
  EXPECT_EQ(port, 49999);
  id = server::DataPlaneSandbox("8080-sbx2.AIRLOCK.test:3000", "", "", "airlock.test", &port);
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, "sbx2");
  EXPECT_EQ(port, 8080);
  for (const char* host : {"49999-sbx1.elsewhere.test", "49999-sbx1.airlock.test.evil", "49999-sbx1.x.airlock.test",
                           "49999-sbx1", "sbx1.airlock.test", "0-sbx1.airlock.test", "70000-sbx1.airlock.test",
                           "x-sbx1.airlock.test", "airlock.test"}) {
    EXPECT_FALSE(server::DataPlaneSandbox(host, "", "", "airlock.test", &port)) << host;
  }
  // Header routing, with or without a domain.
  for (const char* domain : {"", "airlock.test"}) {
    id = server::DataPlaneSandbox("127.0.0.1:3000", "sbx3", "49999", domain, &port);
    ASSERT_TRUE(id);
    EXPECT_EQ(*id, "sbx3");
    EXPECT_EQ(port, 49999);
    id = server::DataPlaneSandbox("localhost", "sbx3", "", domain, &port);
    ASSERT_TRUE(id);
    EXPECT_EQ(port, 49983);
    EXPECT_FALSE(server::DataPlaneSandbox("127.0.0.1", "sbx3", "99999", domain, &port));
  }
}

TEST(ServerUnitTest, HostPortAndEncoding) {
  auto a = ParseHostPort("http://127.0.0.1:3000/");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(a->second, 3000);
  auto b = ParseHostPort("[::1]:80");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, "::1");
  EXPECT_FALSE(ParseHostPort("nohost").ok());
  EXPECT_FALSE(ParseHostPort("h:99999").ok());
  EXPECT_EQ(UrlEncodeComponent("/a b&c"), "%2Fa%20b%26c");
}

TEST(ServerUnitTest, RegistrySandboxesAndKeys) {
  std::string key_text;
  std::string dir = std::filesystem::temp_directory_path() / ("airlock-reg-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    auto reg = Registry::Open(dir + "/airlock.db");
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    SandboxRecord r;
    r.id = "abc";
    r.template_id = "base";
    r.state = "running";
    r.created_at_ms = 1;
    r.ends_at_ms = 2;
    r.metadata = {{"k", "v"}};
    r.env_vars = {{"E", "1"}};
    r.access_token = "tok";
    r.netns_ip = "198.18.0.1";
    r.vmm_pid = 42;
    r.run_dir = "/x";
    ASSERT_TRUE((*reg)->PutSandbox(r).ok());
    ASSERT_TRUE((*reg)->SetEndsAt("abc", 99).ok());
    EXPECT_EQ((*reg)->SetEndsAt("nope", 1).code(), StatusCode::kNotFound);
    auto key = (*reg)->CreateApiKey("ci");
    ASSERT_TRUE(key.ok());
    key_text = key->second;
    // E2B's format: "e2b_" + 40 hex (20 random bytes, like E2B's keyLength).
    EXPECT_EQ(key->second.rfind("e2b_", 0), 0u);
    EXPECT_EQ(key->second.size(), 44u);
    EXPECT_TRUE(HasE2bKeyFormat(key->second)) << key->second;
    EXPECT_EQ(key->first.prefix, key->second.substr(0, 9));
    EXPECT_NE((*reg)->CreateApiKey("ci2")->second, key->second);
    ASSERT_TRUE((*reg)->RemoveApiKey("ci2").ok());
    EXPECT_TRUE(*(*reg)->CheckApiKey(key->second));
    EXPECT_FALSE(*(*reg)->CheckApiKey("al_nope"));
    EXPECT_FALSE(*(*reg)->CheckApiKey(key->second + "0"));
    EXPECT_FALSE(*(*reg)->CheckApiKey(""));
    EXPECT_FALSE((*reg)->CreateApiKey("").ok());
  }
  // Reopened: everything persisted; keys stored hashed only.
  auto reg = Registry::Open(dir + "/airlock.db");
  ASSERT_TRUE(reg.ok());
  auto list = (*reg)->ListSandboxes();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].ends_at_ms, 99);
  EXPECT_EQ((*list)[0].metadata.at("k"), "v");
  EXPECT_EQ((*list)[0].env_vars.at("E"), "1");
  EXPECT_EQ((*list)[0].vmm_pid, 42);
  auto keys = (*reg)->ListApiKeys();
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 1u);
  {
    // The clear key appears nowhere in the database file: only its hash.
    std::ifstream f(dir + "/airlock.db", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find(key_text.substr(4)), std::string::npos);
  }
  EXPECT_EQ((*keys)[0].name, "ci");
  EXPECT_TRUE((*reg)->RemoveApiKey("ci").ok());
  EXPECT_EQ((*reg)->RemoveApiKey("ci").code(), StatusCode::kNotFound);
  ASSERT_TRUE((*reg)->DeleteSandbox("abc").ok());
  EXPECT_TRUE((*reg)->ListSandboxes()->empty());
  std::filesystem::remove_all(dir);
}

// A hostile guest agent: answers /health, then holds every other request open
// forever. Installing the sandbox CA must still return, with an error, soon
// after its timeout (a restarted daemon or a fork must not hang on it).
TEST(ServerUnitTest, SandboxCaInstallIsBoundedAgainstAnAgentThatNeverAnswers) {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 8), 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::vector<int> held;
  std::mutex held_mu;
  std::thread agent([&] {
    for (;;) {
      int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      if (req.find(" /health ") != std::string::npos) {
        std::string r = "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
        (void)!::send(fd, r.data(), r.size(), MSG_NOSIGNAL);
        ::close(fd);
        continue;
      }
      std::lock_guard<std::mutex> l(held_mu);
      held.push_back(fd);  // never answered
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  Status st = control::InstallCaCertAt(AgentEndpoint{"127.0.0.1", ntohs(a.sin_port)}, "token",
                                      "-----BEGIN CERTIFICATE-----\n", std::chrono::seconds(1));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(st.ok());
  EXPECT_LT(s, 30.0) << st.ToString();  // the bound is timeout + 5 s; generous for a loaded CI box
  {
    std::lock_guard<std::mutex> l(held_mu);
    EXPECT_EQ(held.size(), 1u) << "the install request reached the agent";
  }
  ::shutdown(lfd, SHUT_RDWR);
  ::close(lfd);
  agent.join();
  for (int fd : held) ::close(fd);
}

TEST(ServerEgressLog, L3RecordsReadLikeProxyRecords) {
  nlohmann::json udp = {{"time", "t"},         {"protocol", "udp"},
                        {"decision", "deny"},  {"rule", "default-deny"},
                        {"reason", "dropped"}, {"destination", {{"name", ""}, {"ip", "203.0.113.10"}, {"port", 9999}}},
                        {"bytesOut", 29},      {"bytesIn", 0},
                        {"source", "nftables"}};
  auto e = server::EgressLogEntry(udp);
  EXPECT_EQ(e["message"], "egress deny udp 203.0.113.10:9999 rule=default-deny (dropped) out=29B in=0B");
  EXPECT_EQ(e["level"], "warn");
  EXPECT_EQ(e["fields"]["source"], "nftables");
  nlohmann::json v6 = udp;
  v6["protocol"] = "ipv6";
  v6["destination"]["ip"] = "2001:db8::10";
  v6["destination"]["port"] = 443;
  EXPECT_EQ(server::EgressLogEntry(v6)["message"],
            "egress deny ipv6 [2001:db8::10]:443 rule=default-deny (dropped) out=29B in=0B");
  nlohmann::json icmp = udp;
  icmp["protocol"] = "icmp";
  icmp["destination"].erase("port");
  EXPECT_EQ(server::EgressLogEntry(icmp)["message"],
            "egress deny icmp 203.0.113.10 rule=default-deny (dropped) out=29B in=0B");
}


TEST(ServerUnitTest, E2bKeyFormatIsTheSdksCheck) {
  // ^e2b_[0-9a-f]+$ (E2B js-sdk src/api/index.ts API_KEY_PATTERN).
  EXPECT_TRUE(HasE2bKeyFormat("e2b_0123456789abcdef0123456789abcdef01234567"));
  EXPECT_TRUE(HasE2bKeyFormat("e2b_0"));
  EXPECT_FALSE(HasE2bKeyFormat("e2b_"));
  EXPECT_FALSE(HasE2bKeyFormat("e2b_ABCDEF"));  // upper case is not hex to the SDK
  EXPECT_FALSE(HasE2bKeyFormat("e2b_12g4"));
  EXPECT_FALSE(HasE2bKeyFormat("al_0123456789abcdef"));
  EXPECT_FALSE(HasE2bKeyFormat(" e2b_00"));
  EXPECT_FALSE(HasE2bKeyFormat("e2b_00\n"));
  EXPECT_FALSE(HasE2bKeyFormat(""));
}

// A registry written by an older daemon holds "al_<48 hex>" keys (as the
// SHA-256 hex of the clear key): they keep working next to new e2b_ keys.
TEST(ServerUnitTest, LegacyAlKeysStayValid) {
  std::string dir = std::filesystem::temp_directory_path() / ("airlock-legacy-key-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string legacy = "al_00112233445566778899aabbccddeeff0011223344556677";
  {
    auto reg = Registry::Open(dir + "/airlock.db");
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/airlock.db").c_str(), &db), SQLITE_OK);
    // sha256("al_00112233445566778899aabbccddeeff0011223344556677"), as the old CreateApiKey stored it.
    std::string sql =
        "INSERT INTO api_keys (id, name, prefix, hash, created_at, team, admin) VALUES ('old1', 'old', 'al_001122', '" +
        image::Sha256Hex(legacy) + "', 1, 'acme', 0)";
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
  auto reg = Registry::Open(dir + "/airlock.db");
  ASSERT_TRUE(reg.ok());
  auto fresh = (*reg)->CreateApiKey("new", "acme");
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(HasE2bKeyFormat(fresh->second));
  auto old = (*reg)->LookupApiKey(legacy);
  ASSERT_TRUE(old.ok());
  ASSERT_TRUE(old->has_value());
  EXPECT_EQ((*old)->id, "old1");
  EXPECT_EQ((*old)->team, "acme");
  auto now = (*reg)->LookupApiKey(fresh->second);
  ASSERT_TRUE(now.ok() && now->has_value());
  EXPECT_EQ((*now)->team, "acme");
  EXPECT_FALSE((*reg)->LookupApiKey("al_00112233445566778899aabbccddeeff001122334455667")->has_value());
  std::filesystem::remove_all(dir);
}


TEST(ServerUnitTest, Rfc3339TimestampsAsE2bAcceptsThem) {
  // What the SDK sends (Date.toISOString()).
  EXPECT_EQ(*ParseRfc3339Us("1970-01-01T00:00:00.000Z"), 0);
  EXPECT_EQ(*ParseRfc3339Us("2026-01-02T03:04:05.123Z"), int64_t{1767323045123} * 1000);
  EXPECT_EQ(*ParseRfc3339Us("2026-01-02T03:04:05Z"), int64_t{1767323045} * 1000000);
  // Offsets, lower-case separators, sub-millisecond and > 9 fraction digits (truncated to µs).
  EXPECT_EQ(*ParseRfc3339Us("2026-01-02T05:04:05+02:00"), int64_t{1767323045} * 1000000);
  EXPECT_EQ(*ParseRfc3339Us("2026-01-01T22:34:05-04:30"), int64_t{1767323045} * 1000000);
  EXPECT_EQ(*ParseRfc3339Us("2026-01-02t03:04:05.1234567891z"), int64_t{1767323045} * 1000000 + 123456);
  // An unescaped '+' in a query string arrives as a space.
  EXPECT_EQ(*ParseRfc3339Us("2026-01-02T05:04:05 02:00"), int64_t{1767323045} * 1000000);
  // Leap day, before the epoch.
  EXPECT_EQ(*ParseRfc3339Us("2024-02-29T00:00:00Z"), int64_t{1709164800} * 1000000);
  EXPECT_EQ(*ParseRfc3339Us("1969-12-31T23:59:59Z"), -1000000);
  for (const char* bad : {"", "2026-01-02", "2026-01-02T03:04:05", "2026-01-02 03:04:05Z", "2026-1-02T03:04:05Z",
                          "2026-01-02T03:04:05.Z", "2026-13-01T00:00:00Z", "2025-02-29T00:00:00Z",
                          "2026-04-31T00:00:00Z", "2026-01-02T24:00:00Z", "2026-01-02T03:60:00Z",
                          "2026-01-02T03:04:60Z", "2026-01-02T03:04:05+24:00", "2026-01-02T03:04:05+0200",
                          "2026-01-02T03:04:05Zjunk", "1767323045", "yesterday"}) {
    auto r = ParseRfc3339Us(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ServerUnitTest, MetricsRangeDefaultsAndErrors) {
  auto d = control::ParseMetricsRange(std::nullopt, std::nullopt, 100, 500);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->start_s, 100);
  EXPECT_EQ(d->end_s, 500);
  auto r = control::ParseMetricsRange(std::string("200"), std::string("300"), 100, 500);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->start_s, 200);
  EXPECT_EQ(r->end_s, 300);
  auto only_end = control::ParseMetricsRange(std::nullopt, std::string("150"), 100, 500);
  EXPECT_EQ(only_end->start_s, 100);
  EXPECT_EQ(only_end->end_s, 150);
  auto backwards = control::ParseMetricsRange(std::string("300"), std::string("200"), 100, 500);
  EXPECT_EQ(backwards.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(backwards.status().message().find("start"), std::string::npos);
  for (const char* bad : {"", "-1", "1.5", "12a", "99999999999999"}) {
    auto s = control::ParseMetricsRange(std::string(bad), std::nullopt, 0, 10);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("start"), std::string::npos) << bad;
    auto e = control::ParseMetricsRange(std::nullopt, std::string(bad), 0, 10);
    EXPECT_NE(e.status().message().find("end"), std::string::npos) << bad;
  }
  // Start after "now" but before end is fine (an empty answer).
  EXPECT_TRUE(control::ParseMetricsRange(std::string("600"), std::string("700"), 100, 500).ok());
}

TEST(ServerUnitTest, MetricsSelectionHonoursTheRangeAndE2bSteps) {
  EXPECT_EQ(control::MetricsStep(0), 5);
  EXPECT_EQ(control::MetricsStep(3599), 5);
  EXPECT_EQ(control::MetricsStep(3600), 30);
  EXPECT_EQ(control::MetricsStep(6 * 3600), 60);
  EXPECT_EQ(control::MetricsStep(12 * 3600), 120);
  EXPECT_EQ(control::MetricsStep(24 * 3600), 300);
  EXPECT_EQ(control::MetricsStep(7 * 24 * 3600), 900);
  std::deque<control::MetricSample> h;
  for (int64_t t = 1000; t <= 1100; t += 5) {
    control::MetricSample m;
    m.ts_s = t;
    m.mem_used = t;
    h.push_back(m);
  }
  auto all = control::SelectMetrics(h, {1000, 1100});
  EXPECT_EQ(all.size(), 21u);
  auto mid = control::SelectMetrics(h, {1010, 1020});  // both ends inclusive
  ASSERT_EQ(mid.size(), 3u);
  EXPECT_EQ(mid.front().ts_s, 1010);
  EXPECT_EQ(mid.back().ts_s, 1020);
  EXPECT_TRUE(control::SelectMetrics(h, {1101, 2000}).empty());
  EXPECT_TRUE(control::SelectMetrics(h, {0, 999}).empty());
  // Samples a second apart inside one 5 s step: the newest of the bucket.
  std::deque<control::MetricSample> dense;
  for (int64_t t = 0; t < 10; ++t) dense.push_back({t, 1, 0, t, 0, 0, 0, 0});
  auto b = control::SelectMetrics(dense, {0, 9});
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].ts_s, 4);
  EXPECT_EQ(b[1].ts_s, 9);
  auto j = control::MetricJson(h.front());
  EXPECT_EQ(j["timestamp"], "1970-01-01T00:16:40.000Z");
  EXPECT_EQ(j["timestampUnix"], 1000);
  for (const char* k : {"cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal"})
    EXPECT_TRUE(j.contains(k)) << k;
}

TEST(ServerUnitTest, SecretsApiNamesMetadataAndPolicy) {
  EXPECT_EQ(*server::NormalizeSecretName("  OpenAI-Key_2 "), "openai-key_2");
  EXPECT_EQ(*server::NormalizeSecretName("9lives"), "9lives");
  for (const char* bad : {"", " ", "a b", "a.b", "sec_abc", "SEC_abc", "-x", "${x}"})
    EXPECT_FALSE(server::NormalizeSecretName(bad).ok()) << bad;
  EXPECT_FALSE(server::NormalizeSecretName(std::string(129, 'a')).ok());
  EXPECT_TRUE(server::NormalizeSecretName(std::string(128, 'a')).ok());

  using nlohmann::json;
  EXPECT_TRUE(server::ParseSecretMetadata(json::object())->empty());
  EXPECT_FALSE(server::ParseSecretMetadata(json{{"metadata", {{"a", 1}}}}).ok());
  EXPECT_FALSE(server::ParseSecretMetadata(json{{"metadata", "x"}}).ok());
  json many = json::object();
  for (int i = 0; i < 33; ++i) many["k" + std::to_string(i)] = "v";
  EXPECT_FALSE(server::ParseSecretMetadata(json{{"metadata", many}}).ok());
  EXPECT_FALSE(server::ParseSecretMetadata(json{{"metadata", {{"a", std::string(1025, 'x')}}}}).ok());

  auto env = server::PolicyFromSecretMetadata({{"description", "db"}}, "acme");
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->scope, secrets::Scope::kEnv);
  EXPECT_EQ(env->teams, std::vector<std::string>{"acme"});
  auto brokered = server::PolicyFromSecretMetadata(
      {{"airlock.hosts", "api.github.com, *.githubusercontent.com"}, {"airlock.teams", "beta,acme"}}, "acme");
  ASSERT_TRUE(brokered.ok()) << brokered.status().ToString();
  EXPECT_EQ(brokered->scope, secrets::Scope::kBrokered);
  EXPECT_EQ(brokered->hosts, (std::vector<std::string>{"api.github.com", "*.githubusercontent.com"}));
  EXPECT_EQ(brokered->teams, (std::vector<std::string>{"acme", "beta"}));
  EXPECT_FALSE(server::PolicyFromSecretMetadata({{"airlock.scope", "brokered"}}, "acme").ok());  // no hosts
  EXPECT_FALSE(server::PolicyFromSecretMetadata({{"airlock.scope", "env"}, {"airlock.hosts", "a.com"}}, "acme").ok());
  EXPECT_FALSE(server::PolicyFromSecretMetadata({{"airlock.scope", "guest"}}, "acme").ok());
  EXPECT_FALSE(server::PolicyFromSecretMetadata({{"airlock.hosts", "a b.com"}}, "acme").ok());
  EXPECT_FALSE(server::PolicyFromSecretMetadata({{"airlock.teams", "a team"}}, "acme").ok());
  auto unknown = server::PolicyFromSecretMetadata({{"airlock.host", "a.com"}}, "acme");
  EXPECT_NE(unknown.status().message().find("airlock.host"), std::string::npos);

  std::map<std::string, std::string> envs = {{"TOKEN", "${e2b.secrets.my-token}"}, {"PLAIN", "x"},
                                             {"NOT", "${e2b.secrets.}"}};
  auto spec = server::LiftSecretPlaceholders(&envs, json());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(*spec, (json{{"my-token", {{"env", "TOKEN"}}}}));
  EXPECT_EQ(envs, (std::map<std::string, std::string>{{"PLAIN", "x"}, {"NOT", "${e2b.secrets.}"}}));
  std::map<std::string, std::string> twice = {{"A", "${e2b.secrets.t}"}};
  EXPECT_FALSE(server::LiftSecretPlaceholders(&twice, json{{"t", {{"scope", "env"}}}}).ok());
  std::map<std::string, std::string> bad = {{"A", "${e2b.secrets.a b}"}};
  EXPECT_FALSE(server::LiftSecretPlaceholders(&bad, json()).ok());
  // A name that is no environment variable needs "env" in a create's secrets spec.
  EXPECT_FALSE(server::ParseSecretsSpec(json{{"my-token", json::object()}}).ok());
  EXPECT_TRUE(server::ParseSecretsSpec(json{{"my-token", {{"env", "TOKEN"}}}}).ok());
}

}  // namespace
}  // namespace airlock
