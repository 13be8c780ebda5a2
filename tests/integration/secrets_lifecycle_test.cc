// Brokered secrets and the per-sandbox CA across a sandbox's whole life,
// against real daemons and microVMs (docs/secrets.md, "Lifecycle"): a daemon
// restart (a running sandbox gets a fresh CA at once, a paused one when it
// resumes cold, with its secret env back), fork children (the parent's
// placeholder, each its own CA), a sandbox from a named snapshot with secrets
// of its own, and kill / pause-then-kill / TTL / kill-on-exit removing the
// store's bindings.
// What the broker holds is compared with what the guest trusts: GET
// /sandboxes/{id} "caCertificate" against the guest's
// /usr/local/share/ca-certificates/airlock-sandbox.crt and system bundle.
#include <gtest/gtest.h>

#include <filesystem>

#include "secrets/secret_store.h"
#include "tests/integration/daemon.h"

namespace airlock::testing {
namespace {

using nlohmann::json;

constexpr char kCaFile[] = "/usr/local/share/ca-certificates/airlock-sandbox.crt";

struct Sb {
  std::string id, token;
};

Sb FromBody(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object()) return {};
  return {j.value("sandboxID", ""), j.value("envdAccessToken", "")};
}

json Detail(const TestDaemon& d, const std::string& id) {
  auto r = d.Do("GET", "/sandboxes/" + id);
  if (!r.ok() || r->status != 200) return json();
  return json::parse(r->body, nullptr, false);
}

std::string CaOf(const TestDaemon& d, const std::string& id) {
  json j = Detail(d, id);
  return j.is_object() && j.contains("caCertificate") && j["caCertificate"].is_string()
             ? j["caCertificate"].get<std::string>()
             : "";
}

std::string GuestFile(const TestDaemon& d, const Sb& s, const std::string& path) {
  auto r = d.Do("GET", "/files?path=" + path + "&username=user", "", false,
                {{"E2b-Sandbox-Id", s.id}, {"X-Access-Token", s.token}});
  if (!r.ok()) return "error: " + r.status().ToString();
  return r->status == 200 ? r->body : "http " + std::to_string(r->status) + ": " + r->body;
}

// The 4th line of a PEM: base64 of bytes unique to that certificate (serial, key).
std::string PemLine(const std::string& pem) {
  std::istringstream s(pem);
  std::string line;
  for (int i = 0; i < 4; ++i) std::getline(s, line);
  return line;
}

// "<markers> <count of cert a> <count of cert b>" in the guest's system bundle.
std::string BundleCounts(const TestDaemon& d, const Sb& s, const std::string& a, const std::string& b) {
  auto r = d.Run(s.id, s.token,
                 "f=/etc/ssl/certs/ca-certificates.crt; echo $(grep -c '^# airlock sandbox CA$' $f) "
                 "$(grep -cF -- '" +
                     PemLine(a) + "' $f) $(grep -cF -- '" + PemLine(b) + "' $f)");
  if (!r.ok()) return r.status().ToString();
  return r->out;
}

std::string Env(const TestDaemon& d, const Sb& s, const std::string& var) {
  auto r = d.Run(s.id, s.token, "printf '%s' \"$" + var + "\"");
  return r.ok() ? r->out : r.status().ToString();
}

std::string WaitForNewCa(const TestDaemon& d, const std::string& id, const std::string& old) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string ca = CaOf(d, id);
    if (!ca.empty() && ca != old) return ca;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return "";
}

size_t BindingsOf(const std::string& dir, const std::string& id) {
  auto store = secrets::SecretStore::Open(dir + "/airlock.db", dir + "/secrets.key");
  if (!store.ok()) return 999;
  auto b = (*store)->BindingsOf(id);
  return b.ok() ? b->size() : 998;
}

TEST(SecretsLifecycleTest, RestartForkResumeSnapshotAndKillKeepBrokerAndCaRight) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  const std::string env_value = "lifecycle-env-" + std::to_string(::getpid()) + "-77ab";
  for (auto [name, value] :
       {std::pair<std::string, std::string>{"BROKER_S", "brokered-" + std::to_string(::getpid()) + "-9d1e2f"},
        {"OTHER_S", "other-brokered-value-42"},
        {"ENV_S", env_value}}) {
    auto set = RunCli({"secret", "--db", dir + "/airlock.db", "set", name}, value);
    ASSERT_EQ(set.code, 0) << set.err;
  }
  const json secrets = {{"BROKER_S", {{"hosts", {"api.example.test"}}, {"env", "API_TOKEN"}}},
                        {"ENV_S", {{"scope", "env"}}}};
  const json create = {{"templateID", "base"}, {"timeout", 600}, {"secrets", secrets}};

  // Daemon 1 (its sandboxes outlive it): S keeps running, T is paused to disk.
  Sb s, t;
  std::string ca_s1, ca_t1, placeholder;
  auto phase1 = [&] {
    TestDaemon d(dir, {}, /*kill_on_exit=*/false);
    auto r = d.Do("POST", "/v2/sandboxes", create.dump());
    ASSERT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
    s = FromBody(r->body);
    r = d.Do("POST", "/v2/sandboxes", create.dump());
    ASSERT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
    t = FromBody(r->body);
    json detail = Detail(d, s.id);
    ASSERT_TRUE(detail.is_object());
    ASSERT_EQ(detail["secrets"].size(), 2u) << detail.dump();
    EXPECT_EQ(
        detail["secrets"][0],
        (json{{"name", "BROKER_S"}, {"scope", "brokered"}, {"env", "API_TOKEN"}, {"hosts", {"api.example.test"}}}));
    EXPECT_EQ(detail["secrets"][1], (json{{"name", "ENV_S"}, {"scope", "env"}, {"env", "ENV_S"}}));
    ca_s1 = CaOf(d, s.id);
    ca_t1 = CaOf(d, t.id);
    ASSERT_NE(ca_s1.find("BEGIN CERTIFICATE"), std::string::npos);
    EXPECT_EQ(GuestFile(d, s, kCaFile), ca_s1);
    EXPECT_EQ(BundleCounts(d, s, ca_s1, ca_t1), "1 1 0\n");
    placeholder = Env(d, s, "API_TOKEN");
    ASSERT_EQ(placeholder.rfind("AIRLOCK_BROKERED_", 0), 0u) << placeholder;
    auto p = d.Do("POST", "/sandboxes/" + t.id + "/pause", R"({"memory":false})");
    ASSERT_TRUE(p.ok() && p->status == 204) << (p.ok() ? p->body : p.status().ToString());
  };
  phase1();

  // Daemon 2 adopts both (and kills what is left when it exits).
  TestDaemon d(dir);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_FALSE(s.id.empty());
  // S: a fresh CA, installed in the running guest, replacing the old one.
  std::string ca_s2 = WaitForNewCa(d, s.id, ca_s1);
  ASSERT_FALSE(ca_s2.empty()) << "no new CA for the adopted sandbox; daemon log tail:\n"
                              << [&] {
                                   std::string log = Slurp(dir + "/daemon.log");
                                   return log.substr(log.size() > 8000 ? log.size() - 8000 : 0);
                                 }();
  EXPECT_EQ(GuestFile(d, s, kCaFile), ca_s2);
  EXPECT_EQ(BundleCounts(d, s, ca_s2, ca_s1), "1 1 0\n");
  EXPECT_EQ(Env(d, s, "API_TOKEN"), placeholder);
  // T: paused, so no CA until it runs; resumed cold: its CA and secret env are back.
  EXPECT_EQ(CaOf(d, t.id), "");
  auto r = d.Do("POST", "/v2/sandboxes/" + t.id + "/connect", R"({"timeout":600})");
  ASSERT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
  std::string ca_t2 = CaOf(d, t.id);
  ASSERT_FALSE(ca_t2.empty());
  EXPECT_NE(ca_t2, ca_t1);
  EXPECT_EQ(GuestFile(d, t, kCaFile), ca_t2);
  EXPECT_EQ(BundleCounts(d, t, ca_t2, ca_t1), "1 1 0\n");
  EXPECT_EQ(Env(d, t, "ENV_S"), env_value);
  EXPECT_EQ(Env(d, t, "API_TOKEN").rfind("AIRLOCK_BROKERED_", 0), 0u);
  EXPECT_EQ(Env(d, t, "NODE_EXTRA_CA_CERTS"), kCaFile);

  // Fork S twice: each child has S's placeholder and a CA of its own.
  r = d.Do("POST", "/sandboxes/" + s.id + "/fork", R"({"count":2,"timeout":600})");
  ASSERT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
  json kids = json::parse(r->body);
  ASSERT_EQ(kids.size(), 2u) << r->body;
  std::vector<Sb> children;
  std::vector<std::string> child_cas;
  for (auto& k : kids) {
    ASSERT_TRUE(k.contains("sandbox")) << k.dump();
    Sb c = FromBody(k["sandbox"].dump());
    children.push_back(c);
    std::string ca = CaOf(d, c.id);
    ASSERT_NE(ca.find("BEGIN CERTIFICATE"), std::string::npos) << k.dump();
    EXPECT_NE(ca, ca_s2);
    for (auto& other : child_cas) EXPECT_NE(ca, other);
    child_cas.push_back(ca);
    EXPECT_EQ(GuestFile(d, c, kCaFile), ca);
    EXPECT_EQ(BundleCounts(d, c, ca, ca_s2), "1 1 0\n");  // the parent's CA is not trusted by the child
    EXPECT_EQ(Env(d, c, "API_TOKEN"), placeholder);
    EXPECT_EQ(Detail(d, c.id)["secrets"].size(), 2u);
    EXPECT_EQ(BindingsOf(dir, c.id), 2u);
  }
  auto au = d.Do("GET", "/sandboxes/" + children[0].id + "/audit");
  ASSERT_TRUE(au.ok());
  int attach = 0;
  for (auto& rec : json::parse(au->body)) {
    if (rec.value("action", "") == "secret.attach" && rec.value("forked_from", "") == s.id) ++attach;
  }
  EXPECT_EQ(attach, 2) << au->body.substr(0, 4000);

  // A sandbox from a named snapshot of S, with a secret of its own.
  r = d.Do("POST", "/sandboxes/" + s.id + "/snapshots", "{}");
  ASSERT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
  std::string snap = json::parse(r->body)["snapshotID"];
  json from_snap = {{"templateID", snap},
                    {"timeout", 600},
                    {"secrets", {{"OTHER_S", {{"hosts", {"other.example.test"}}, {"env", "OTHER_TOKEN"}}}}}};
  r = d.Do("POST", "/v2/sandboxes", from_snap.dump());
  ASSERT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
  Sb n = FromBody(r->body);
  json nd = Detail(d, n.id);
  ASSERT_EQ(nd["secrets"].size(), 1u) << nd.dump();
  EXPECT_EQ(nd["secrets"][0]["name"], "OTHER_S");
  std::string ca_n = nd.value("caCertificate", "");
  ASSERT_FALSE(ca_n.empty());
  EXPECT_NE(ca_n, ca_s2);
  EXPECT_EQ(GuestFile(d, n, kCaFile), ca_n);
  EXPECT_EQ(BundleCounts(d, n, ca_n, ca_s2), "1 1 0\n");
  EXPECT_EQ(Env(d, n, "OTHER_TOKEN").rfind("AIRLOCK_BROKERED_", 0), 0u);

  // Kill, and pause-then-kill: the bindings leave the store.
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + children[0].id)->status, 204);
  EXPECT_EQ(BindingsOf(dir, children[0].id), 0u);
  EXPECT_EQ(BindingsOf(dir, children[1].id), 2u);
  auto p = d.Do("POST", "/sandboxes/" + t.id + "/pause", "{}");
  ASSERT_TRUE(p.ok() && p->status == 204) << (p.ok() ? p->body : p.status().ToString());
  EXPECT_EQ(CaOf(d, t.id), ca_t2);  // a pause keeps the entry and the CA
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + t.id)->status, 204);
  EXPECT_EQ(BindingsOf(dir, t.id), 0u);
  for (const auto& id : {s.id, children[1].id, n.id}) EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + id)->status, 204);
  for (const auto& id : {s.id, children[1].id, n.id}) EXPECT_EQ(BindingsOf(dir, id), 0u) << id;
  (void)d.Do("DELETE", "/templates/" + snap);
  // A daemon that kills its sandboxes when it exits drops their bindings too.
  {
    std::filesystem::create_directories(dir + "/d3");
    ASSERT_EQ(RunCli({"secret", "--db", dir + "/d3/airlock.db", "set", "BROKER_S"}, "d3-brokered-value").code, 0);
    TestDaemon d3(dir + "/d3");
    auto c3 = d3.Do("POST", "/v2/sandboxes", json{{"secrets", {{"BROKER_S", {{"hosts", {"x.example.test"}}}}}}}.dump());
    ASSERT_TRUE(c3.ok() && c3->status == 201) << (c3.ok() ? c3->body : c3.status().ToString());
    EXPECT_EQ(BindingsOf(dir + "/d3", FromBody(c3->body).id), 1u);
    s.id = FromBody(c3->body).id;
    // The TTL reaper forgets them too.
    auto ttl = d3.Do("POST", "/v2/sandboxes",
                     json{{"timeout", 1}, {"secrets", {{"BROKER_S", {{"hosts", {"x.example.test"}}}}}}}.dump());
    ASSERT_TRUE(ttl.ok() && ttl->status == 201) << (ttl.ok() ? ttl->body : ttl.status().ToString());
    std::string ttl_id = FromBody(ttl->body).id;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (BindingsOf(dir + "/d3", ttl_id) != 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    EXPECT_EQ(BindingsOf(dir + "/d3", ttl_id), 0u) << "bindings outlived the TTL";
    EXPECT_EQ(d3.Do("GET", "/sandboxes/" + ttl_id)->status, 404);
  }
  EXPECT_EQ(BindingsOf(dir + "/d3", s.id), 0u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace airlock::testing
