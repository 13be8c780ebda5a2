// Redactor: canaries in raw, URL-encoded and base64 forms (std and URL-safe,
// every alignment inside a longer blob) are all removed.
#include <gtest/gtest.h>

#include "envd/proto_json.h"
#include "secrets/redactor.h"

namespace airlock::secrets {
namespace {

constexpr char kCanary[] = "sk-canary/Zq+8=w7 \"x\"";

std::string UrlSafe(std::string b64) {
  for (auto& c : b64) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return b64;
}

TEST(Redactor, RemovesEveryEncodedForm) {
  Redactor r;
  ASSERT_TRUE(r.Add("API_TOKEN", kCanary).ok());
  std::string raw = kCanary;
  std::vector<std::string> carriers = {
      "header: " + raw + " end",
      "url: https://x/?q=sk-canary%2FZq%2B8%3Dw7%20%22x%22&z",
      "form: sk-canary%2fZq%2b8%3dw7+%22x%22",
  };
  for (int pad = 0; pad < 3; ++pad) {
    std::string blob = std::string(pad, 'A') + raw + "tail";
    carriers.push_back("b64: " + envd::Base64Encode(blob));
    carriers.push_back("b64url: " + UrlSafe(envd::Base64Encode(blob)));
  }
  for (const auto& c : carriers) {
    std::string out = r.Redact(c);
    EXPECT_NE(out.find("[REDACTED:API_TOKEN]"), std::string::npos) << c << " -> " << out;
    EXPECT_EQ(out.find(raw), std::string::npos) << out;
    // No recoverable remainder: decoding what is left never yields the canary.
    auto dec = envd::Base64Decode(out.substr(out.find(' ') + 1));
    if (dec.ok()) {
      EXPECT_EQ(dec->find(raw), std::string::npos);
    }
  }
}

TEST(Redactor, JsonKeysAndValuesAndShortValuesRefused) {
  Redactor r;
  EXPECT_FALSE(r.Add("SHORT", "abc").ok());
  ASSERT_TRUE(r.Add("K", "canary-0123456789").ok());
  nlohmann::json j = {{"msg", "x canary-0123456789 y"}, {"canary-0123456789", {1, "canary-0123456789"}}};
  r.RedactJson(&j);
  EXPECT_EQ(j.dump().find("canary-0123456789"), std::string::npos) << j.dump();
  EXPECT_EQ(j["msg"], "x [REDACTED:K] y");
  EXPECT_EQ(r.Redact("nothing here"), "nothing here");
}

}  // namespace
}  // namespace airlock::secrets

// ---- store and broker ----
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "secrets/broker.h"
#include "secrets/secret_store.h"
#include "tests/unit/scoped_dir.h"

namespace airlock::secrets {
namespace {

using test_util::MakeTempDir;
using test_util::ScopedDir;

std::string Slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(SecretStore, EncryptsAtRestWithA0600KeyFileCreatedOnFirstUse) {
  ScopedDir d{MakeTempDir("secrets")};
  std::string db = d.path + "/airlock.db", key = d.path + "/secrets.key";
  const std::string canary = "canary-value-7d3f19aa";
  {
    auto s = SecretStore::Open(db, key);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    struct stat st;
    ASSERT_EQ(::stat(key.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(st.st_size, 32);
    ASSERT_TRUE((*s)->Set("API_TOKEN", canary).ok());
    ASSERT_TRUE((*s)->Set("OTHER", "other-value-123").ok());
    EXPECT_EQ(*(*s)->Get("API_TOKEN"), canary);
    EXPECT_FALSE((*s)->Set("bad name", canary).ok());
    EXPECT_FALSE((*s)->Set("SHORT", "x").ok());
    EXPECT_EQ((*s)->Get("MISSING").status().code(), StatusCode::kNotFound);
    auto list = (*s)->List();
    ASSERT_TRUE(list.ok());
    ASSERT_EQ(list->size(), 2u);
    EXPECT_EQ((*list)[0].name, "API_TOKEN");
    EXPECT_EQ((*list)[0].size, canary.size());
  }
  // Nowhere on disk in clear (database, WAL, key file).
  for (const char* f : {"/airlock.db", "/airlock.db-wal", "/secrets.key"}) {
    EXPECT_EQ(Slurp(d.path + f).find(canary), std::string::npos) << f;
  }
  // A row moved to another name does not decrypt (name is authenticated).
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw,
                         "UPDATE secrets SET nonce=(SELECT nonce FROM secrets WHERE name='API_TOKEN'),"
                         " ciphertext=(SELECT ciphertext FROM secrets WHERE name='API_TOKEN'),"
                         " tag=(SELECT tag FROM secrets WHERE name='API_TOKEN') WHERE name='OTHER'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  auto s = SecretStore::Open(db, key);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->Get("OTHER").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(*(*s)->Get("API_TOKEN"), canary);
  ASSERT_TRUE((*s)->Remove("API_TOKEN").ok());
  EXPECT_EQ((*s)->Remove("API_TOKEN").code(), StatusCode::kNotFound);
  // A key file others can read is refused.
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  EXPECT_EQ(SecretStore::Open(db, key).status().code(), StatusCode::kPermissionDenied);
}

// The E2B secrets API's rows: Create refuses a taken name, the attributes
// (id, owner, version, metadata) round-trip, a CLI Set keeps them, and the
// value is still only in the ciphertext.
TEST(SecretStore, ApiAttributesAndCreate) {
  ScopedDir d{MakeTempDir("secrets")};
  std::string db = d.path + "/airlock.db";
  auto s = SecretStore::Open(db, d.path + "/secrets.key");
  ASSERT_TRUE(s.ok());
  const std::string canary = "api-canary-5f0e2c";
  ApiAttributes api{"sec_0abc", "acme", 1, {{"description", "db"}}};
  SecretPolicy policy;
  policy.scope = Scope::kEnv;
  policy.teams = {"acme"};
  ASSERT_TRUE((*s)->Create("db-password", canary, policy, api).ok());
  EXPECT_EQ((*s)->Create("db-password", "another-value", policy, api).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(*(*s)->Get("db-password"), canary);
  auto info = (*s)->Info("db-password");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->api.id, "sec_0abc");
  EXPECT_EQ(info->api.owner, "acme");
  EXPECT_EQ(info->api.version, 1);
  EXPECT_EQ(info->api.metadata.at("description"), "db");
  EXPECT_EQ(info->policy.teams, std::vector<std::string>{"acme"});
  api.version = 2;
  ASSERT_TRUE((*s)->Set("db-password", canary + "-2", policy, &api).ok());
  EXPECT_EQ((*s)->Info("db-password")->api.version, 2);
  ASSERT_TRUE((*s)->Set("db-password", canary + "-3", policy).ok());  // no api given: kept
  EXPECT_EQ((*s)->Info("db-password")->api.id, "sec_0abc");
  EXPECT_EQ((*s)->Info("missing").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE((*s)->Set("CLI_ONE", "cli-value-123").ok());
  EXPECT_TRUE((*s)->Info("CLI_ONE")->api.id.empty());
  EXPECT_EQ(Slurp(db).find(canary), std::string::npos);
  EXPECT_TRUE(ValidateEnvName("GITHUB_TOKEN").ok());
  EXPECT_FALSE(ValidateEnvName("db-password").ok());
  EXPECT_FALSE(ValidateEnvName("9x").ok());
  EXPECT_TRUE(ValidateSecretName("9x").ok());
  EXPECT_FALSE(ValidateSecretName("-x").ok());
  EXPECT_FALSE(ValidateSecretName("a/b").ok());
}

TEST(SecretStore, BindingsRoundTrip) {
  ScopedDir d{MakeTempDir("secrets")};
  auto s = SecretStore::Open(d.path + "/a.db", d.path + "/k");
  ASSERT_TRUE(s.ok());
  Binding b{"sb1", "TOKEN", Scope::kBrokered, "GH_TOKEN", "AIRLOCK_BROKERED_x", {"api.github.com"}};
  ASSERT_TRUE((*s)->PutBindings({b}).ok());
  auto got = (*s)->BindingsOf("sb1");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].env, "GH_TOKEN");
  EXPECT_EQ((*got)[0].hosts, std::vector<std::string>{"api.github.com"});
  Binding c = b;
  c.sandbox = "sb2";
  ASSERT_TRUE((*s)->PutBindings({c}).ok());
  EXPECT_EQ(*(*s)->BoundSandboxes(), (std::vector<std::string>{"sb1", "sb2"}));
  ASSERT_TRUE((*s)->DeleteBindings("sb1").ok());
  EXPECT_TRUE((*s)->BindingsOf("sb1")->empty());
  EXPECT_EQ(*(*s)->BoundSandboxes(), std::vector<std::string>{"sb2"});
}

// The store's observer hears each committed Set, Create and Remove (and
// nothing that failed); imports from other nodes are stored with their own
// times and are not heard, so a cluster node never publishes them back.
TEST(SecretStore, ObserverHearsLocalChangesButNotImports) {
  ScopedDir d{MakeTempDir("secrets")};
  auto s = SecretStore::Open(d.path + "/a.db", d.path + "/secrets.key");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::string> heard;
  (*s)->SetOnChange([&](const std::string& name) {
    heard.push_back(name);
    EXPECT_TRUE((*s)->Info(name).ok() || name == "GONE");  // outside the lock: the store is usable
  });
  ASSERT_TRUE((*s)->Set("ONE", "value-one-123").ok());
  ApiAttributes api{"sec_0abc", "acme", 1, {{"k", "v"}}};
  ASSERT_TRUE((*s)->Create("two", "value-two-123", {}, api).ok());
  EXPECT_FALSE((*s)->Create("two", "value-two-456", {}, api).ok());  // taken: not heard
  EXPECT_FALSE((*s)->Set("SHORT", "x").ok());                         // refused: not heard
  EXPECT_EQ((*s)->Remove("MISSING").code(), StatusCode::kNotFound);   // nothing removed: not heard
  ASSERT_TRUE((*s)->Set("GONE", "value-gone-123").ok());
  ASSERT_TRUE((*s)->Remove("GONE").ok());
  EXPECT_EQ(heard, (std::vector<std::string>{"ONE", "two", "GONE", "GONE"}));

  heard.clear();
  SecretPolicy policy;
  policy.scope = Scope::kBrokered;
  policy.hosts = {"api.example.com"};
  policy.teams = {"acme"};
  ASSERT_TRUE((*s)->ImportSecret("IMPORTED", "imported-value-1", policy, api, 1000, 2000).ok());
  auto info = (*s)->Info("IMPORTED");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->created_at_ms, 1000);
  EXPECT_EQ(info->updated_at_ms, 2000);
  EXPECT_EQ(info->size, 16u);
  EXPECT_EQ(info->policy.hosts, policy.hosts);
  EXPECT_EQ(info->policy.teams, policy.teams);
  EXPECT_EQ(info->policy.scope, Scope::kBrokered);
  EXPECT_EQ(info->api.id, "sec_0abc");
  EXPECT_EQ(info->api.metadata.at("k"), "v");
  EXPECT_EQ(*(*s)->Get("IMPORTED"), "imported-value-1");
  // An import over an existing secret replaces everything, its times included.
  ASSERT_TRUE((*s)->ImportSecret("ONE", "value-one-new", {}, ApiAttributes{}, 5, 6).ok());
  EXPECT_EQ(*(*s)->Get("ONE"), "value-one-new");
  EXPECT_EQ((*s)->Info("ONE")->created_at_ms, 5);
  EXPECT_EQ((*s)->Info("ONE")->updated_at_ms, 6);
  ASSERT_TRUE((*s)->ImportSecret("two", "value-two-new", {}, ApiAttributes{}, 7, 8).ok());
  EXPECT_TRUE((*s)->Info("two")->api.id.empty());  // the publisher's attributes: none
  // The store's rules still apply.
  EXPECT_EQ((*s)->ImportSecret("bad name", "imported-value-1", {}, {}, 1, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*s)->ImportSecret("SHORT", "x", {}, {}, 1, 2).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*s)->RemoveImported("IMPORTED").ok());
  EXPECT_EQ((*s)->Info("IMPORTED").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE((*s)->RemoveImported("IMPORTED").ok());  // absent: OK
  EXPECT_TRUE(heard.empty()) << heard.size();
  // The value is in no file in clear.
  EXPECT_EQ(Slurp(d.path + "/a.db").find("imported-value-1"), std::string::npos);
  EXPECT_EQ(Slurp(d.path + "/a.db-wal").find("imported-value-1"), std::string::npos);
  (*s)->SetOnChange(nullptr);
  EXPECT_TRUE((*s)->Set("ONE", "value-one-again").ok());
  EXPECT_TRUE(heard.empty());
}

TEST(Broker, SubstitutesOnlyForListedHosts) {
  Broker b;
  std::string ph = Broker::NewPlaceholder();
  EXPECT_EQ(ph.size(), 17u + 32u);
  EXPECT_NE(ph, Broker::NewPlaceholder());
  b.Register("sb1", {{"TOKEN", ph, "real-secret-value", {"api.example.com", "*.corp.test"}}});
  EXPECT_TRUE(b.Intercepts("sb1", "API.example.com:443"));
  EXPECT_TRUE(b.Intercepts("sb1", "x.corp.test"));
  EXPECT_FALSE(b.Intercepts("sb1", "corp.test"));
  EXPECT_FALSE(b.Intercepts("sb1", "evil.com"));
  EXPECT_FALSE(b.Intercepts("sb2", "api.example.com"));
  std::vector<std::pair<std::string, std::string>> h = {{"Authorization", "Bearer " + ph}, {"X", "y"}};
  auto evil = h;
  EXPECT_TRUE(b.SubstituteHeaders("sb1", "evil.com", &evil).empty());
  EXPECT_EQ(evil[0].second, "Bearer " + ph);
  auto used = b.SubstituteHeaders("sb1", "api.example.com", &h);
  EXPECT_EQ(used, std::vector<std::string>{"TOKEN"});
  EXPECT_EQ(h[0].second, "Bearer real-secret-value");
  b.Forget("sb1");
  EXPECT_FALSE(b.Intercepts("sb1", "api.example.com"));
}

}  // namespace
}  // namespace airlock::secrets

// ---- per-sandbox CA ----
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "secrets/sandbox_ca.h"

namespace airlock::secrets {
namespace {

X509* ParsePem(const std::string& pem) {
  BIO* b = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
  BIO_free(b);
  return x;
}

// Verifies `leaf` against `ca` alone for `host` (chain, name constraints, hostname).
bool Verifies(const std::string& ca_pem, const std::string& leaf_pem, const std::string& host) {
  X509* ca = ParsePem(ca_pem);
  X509* leaf = ParsePem(leaf_pem);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM_set1_host(X509_STORE_CTX_get0_param(ctx), host.c_str(), host.size());
  bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  X509_free(leaf);
  X509_free(ca);
  return ok;
}

TEST(SandboxCa, MintsLeavesOnlyForBrokeredHostsThatVerify) {
  auto ca = SandboxCa::Generate("sb1", {"api.example.test", "*.corp.test"}, std::chrono::hours(24));
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  EXPECT_EQ((*ca)->cert_pem().find("PRIVATE KEY"), std::string::npos);
  X509* x = ParsePem((*ca)->cert_pem());
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(X509_check_ca(x), 1);
  char cn[128];
  X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn);
  EXPECT_STREQ(cn, "airlock sandbox sb1");
  X509_free(x);

  auto leaf = (*ca)->LeafFor("API.example.test:443");
  ASSERT_TRUE(leaf.ok()) << leaf.status().ToString();
  EXPECT_NE(leaf->key_pem.find("PRIVATE KEY"), std::string::npos);
  EXPECT_TRUE(Verifies((*ca)->cert_pem(), leaf->cert_pem, "api.example.test"));
  EXPECT_FALSE(Verifies((*ca)->cert_pem(), leaf->cert_pem, "evil.test"));
  auto sub = (*ca)->LeafFor("x.corp.test");
  ASSERT_TRUE(sub.ok());
  EXPECT_TRUE(Verifies((*ca)->cert_pem(), sub->cert_pem, "x.corp.test"));
  EXPECT_EQ((*ca)->LeafFor("api.example.test")->cert_pem, leaf->cert_pem);  // cached
  EXPECT_EQ((*ca)->LeafFor("evil.test").status().code(), StatusCode::kPermissionDenied);
  // Another sandbox's CA does not vouch for this one's leaves.
  auto other = SandboxCa::Generate("sb2", {"api.example.test"}, std::chrono::hours(24));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(Verifies((*other)->cert_pem(), leaf->cert_pem, "api.example.test"));
}

// A wildcard host lets a guest ask for ever new names: the cache keeps the
// newest kMaxCachedLeaves and mints a dropped host again.
TEST(SandboxCa, LeafCacheIsBoundedAndDropsTheOldestHost) {
  auto ca = SandboxCa::Generate("sb1", {"*.corp.test"}, std::chrono::hours(24));
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  auto first = (*ca)->LeafFor("h0.corp.test");
  ASSERT_TRUE(first.ok());
  const size_t n = SandboxCa::kMaxCachedLeaves + 10;
  std::string newest_pem;
  for (size_t i = 1; i < n; ++i) {
    auto leaf = (*ca)->LeafFor("h" + std::to_string(i) + ".corp.test");
    ASSERT_TRUE(leaf.ok()) << i;
    newest_pem = leaf->cert_pem;
  }
  EXPECT_EQ((*ca)->cached_leaves(), SandboxCa::kMaxCachedLeaves);
  // The newest is still cached; the oldest was dropped and is minted anew (and verifies).
  EXPECT_EQ((*ca)->LeafFor("h" + std::to_string(n - 1) + ".corp.test")->cert_pem, newest_pem);
  auto again = (*ca)->LeafFor("h0.corp.test");
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->cert_pem, first->cert_pem);
  EXPECT_TRUE(Verifies((*ca)->cert_pem(), again->cert_pem, "h0.corp.test"));
  EXPECT_EQ((*ca)->cached_leaves(), SandboxCa::kMaxCachedLeaves);
}

}  // namespace
}  // namespace airlock::secrets
