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

#include "core/http_client.h"
#include "core/registry.h"
#include "server/egress_routes.h"
#include "server/server.h"

namespace airlock {
namespace {

TEST(ServerUnitTest, MetadataFilterAsTheSdkEncodesIt) {
  // Spec §1.5.5 capture: metadata=k%252520y%3Dv%2525261, once decoded by the
  // HTTP layer → "k%2520y=v%25261".
  auto m = server::ParseMetadataFilter("k%2520y=v%25261");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m["k y"], "v&1");
  auto two = server::ParseMetadataFilter("a%3Db%26c%3Dd");  // "a=b&c=d" escaped once more
  EXPECT_EQ(two, (std::map<std::string, std::string>{{"a", "b"}, {"c", "d"}}));
  EXPECT_TRUE(server::ParseMetadataFilter("").empty());
}

TEST(ServerUnitTest, PageTokensAndTimes) {
  auto t = server::ParsePageToken("1700000000123_abc");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->first, 1700000000123);
  EXPECT_EQ(t->second, "abc");
  EXPECT_FALSE(server::ParsePageToken("garbage"));
  EXPECT_FALSE(server::ParsePageToken("_abc"));
  EXPECT_FALSE(server::ParsePageToken("12x_abc"));
  EXPECT_EQ(FormatRfc3339Ms(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatRfc3339Ms(1767323045123), "2026-01-02T03:04:05.123Z");
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
    EXPECT_EQ(key->second.rfind("al_", 0), 0u);
    EXPECT_EQ(key->second.size(), 51u);
    EXPECT_TRUE(*(*reg)->CheckApiKey(key->second));
    EXPECT_FALSE(*(*reg)->CheckApiKey("al_nope"));
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
  Status st = server::InstallCaCertAt(AgentEndpoint{"127.0.0.1", ntohs(a.sin_port)}, "token",
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

}  // namespace
}  // namespace airlock
