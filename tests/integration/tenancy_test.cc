// Issue 11 (tenancy, least privilege, fault safety) against a real daemon:
// two keys of two teams (every route), secret scope/host/team binding, one
// daemon per registry, and a daemon killed mid-create leaving nothing.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "core/manager.h"  // ReadRunDirOwner
#include "tests/integration/daemon.h"
#include "tests/integration/harness.h"
#include "tests/wait_for.h"

namespace airlock::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Creates a key of `team` on the daemon's registry; returns the clear key.
std::string NewKey(const std::string& dir, const std::string& name, const std::string& team) {
  auto r = RunCli({"apikey", "--db", dir + "/airlock.db", "create", "--name", name, "--team", team});
  EXPECT_EQ(r.code, 0) << r.err;
  std::string key = r.out.substr(0, r.out.find('\n'));
  return key;
}

TEST(TenancyTest, KeysOfAnotherTeamReachNothing) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  ASSERT_EQ(RunCli({"secret", "--db", dir + "/airlock.db", "set", "TEAM_A_TOKEN", "--scope", "brokered", "--host",
                    "api.example.test", "--team", "team-a"},
                   "team-a-token-value-1234")
                .code,
            0);
  TestDaemon d(dir);
  ASSERT_FALSE(d.key().empty());
  std::string a = NewKey(dir, "alice", "team-a"), b = NewKey(dir, "bob", "team-b");
  auto created =
      d.Do("POST", "/v2/sandboxes",
           json{{"templateID", "base"}, {"secrets", {{"TEAM_A_TOKEN", json::object()}}}}.dump(), true, {}, a);
  ASSERT_TRUE(created.ok());
  ASSERT_EQ(created->status, 201) << created->body;
  std::string id = json::parse(created->body)["sandboxID"];
  // The brokered secret came with the stored hosts (none were named).
  auto info = d.Do("GET", "/sandboxes/" + id, "", true, {}, a);
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->status, 200);
  EXPECT_NE(info->body.find("api.example.test"), std::string::npos) << info->body;
  EXPECT_EQ(info->body.find("team-a-token-value"), std::string::npos);

  // Every route on A's sandbox is a 404 to B, as for a sandbox that does not exist.
  struct Route {
    const char* method;
    std::string path, body;
  };
  std::vector<Route> routes = {
      {"GET", "/sandboxes/" + id, ""},
      {"DELETE", "/sandboxes/" + id, ""},
      {"POST", "/sandboxes/" + id + "/timeout", R"({"timeout":60})"},
      {"POST", "/sandboxes/" + id + "/refreshes", R"({"duration":3600})"},
      {"POST", "/sandboxes/" + id + "/connect", R"({"timeout":60})"},
      {"POST", "/sandboxes/" + id + "/resume", R"({"timeout":60})"},
      {"GET", "/sandboxes/" + id + "/metrics", ""},
      {"GET", "/sandboxes/" + id + "/logs", ""},
      {"GET", "/v2/sandboxes/" + id + "/logs", ""},
      {"PUT", "/sandboxes/" + id + "/network", R"({"allowOut":["example.test"]})"},
      {"POST", "/sandboxes/" + id + "/pause", "{}"},
      {"POST", "/sandboxes/" + id + "/fork", "{}"},
      {"GET", "/sandboxes/" + id + "/audit", ""},
      {"POST", "/sandboxes/" + id + "/snapshots", R"({"name":"stolen"})"},
  };
  for (const auto& r : routes) {
    auto got = d.Do(r.method, r.path, r.body, true, {}, b);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->status, 404) << r.method << " " << r.path << ": " << got->body;
    EXPECT_EQ(got->body.find("envdAccessToken"), std::string::npos);
  }
  auto list_b = d.Do("GET", "/v2/sandboxes", "", true, {}, b);
  ASSERT_TRUE(list_b.ok());
  EXPECT_EQ(json::parse(list_b->body).size(), 0u) << list_b->body;
  EXPECT_EQ(list_b->headers.count("x-total-running") ? list_b->headers.at("x-total-running") : "0", "0");
  auto list_a = d.Do("GET", "/v2/sandboxes", "", true, {}, a);
  ASSERT_TRUE(list_a.ok());
  EXPECT_NE(list_a->body.find(id), std::string::npos);
  auto list_admin = d.Do("GET", "/v2/sandboxes");  // the CLI key is admin: sees all, explicitly
  ASSERT_TRUE(list_admin.ok());
  EXPECT_NE(list_admin->body.find(id), std::string::npos);

  // A's named snapshot: invisible to B, and no template for B.
  auto snap = d.Do("POST", "/sandboxes/" + id + "/snapshots", R"({"name":"a-snap"})", true, {}, a);
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->status, 201) << snap->body;
  std::string snap_id = json::parse(snap->body)["snapshotID"];
  auto snaps_b = d.Do("GET", "/snapshots", "", true, {}, b);
  ASSERT_TRUE(snaps_b.ok());
  EXPECT_EQ(snaps_b->body.find(snap_id), std::string::npos) << snaps_b->body;
  auto snaps_a = d.Do("GET", "/snapshots", "", true, {}, a);
  ASSERT_TRUE(snaps_a.ok());
  EXPECT_NE(snaps_a->body.find(snap_id), std::string::npos) << snaps_a->body;
  for (const std::string& t : {snap_id, std::string("a-snap")}) {
    auto from = d.Do("POST", "/v2/sandboxes", json{{"templateID", t}}.dump(), true, {}, b);
    ASSERT_TRUE(from.ok());
    EXPECT_EQ(from->status, 404) << from->body;
    auto del = d.Do("DELETE", "/templates/" + t, "", true, {}, b);
    ASSERT_TRUE(del.ok());
    EXPECT_EQ(del->status, 404) << del->body;
  }
  // B's audit query of A's sandbox is refused; A's works and shows B's attempts under B's key.
  auto audit_a = d.Do("GET", "/sandboxes/" + id + "/audit", "", true, {}, a);
  ASSERT_TRUE(audit_a.ok());
  EXPECT_EQ(audit_a->status, 200);
  // Fork children are A's too.
  auto fork = d.Do("POST", "/sandboxes/" + id + "/fork", "{}", true, {}, a);
  ASSERT_TRUE(fork.ok());
  ASSERT_EQ(fork->status, 201) << fork->body;
  std::string child = json::parse(fork->body)[0]["sandbox"]["sandboxID"];
  auto child_b = d.Do("GET", "/sandboxes/" + child, "", true, {}, b);
  ASSERT_TRUE(child_b.ok());
  EXPECT_EQ(child_b->status, 404);
  auto child_a = d.Do("GET", "/sandboxes/" + child, "", true, {}, a);
  ASSERT_TRUE(child_a.ok());
  EXPECT_EQ(child_a->status, 200);
  EXPECT_EQ(d.Do("DELETE", "/templates/" + snap_id, "", true, {}, a)->status, 204);
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + child, "", true, {}, a)->status, 204);
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + id, "", true, {}, a)->status, 204);
}

// Issue 32 item 1: a team that named a snapshot "base" (or another team's
// alias) took over every other team's creates, builds and the admin's. Names
// now live in their team's namespace; built-in names are nobody's.
TEST(TenancyTest, SnapshotNamesAndTemplateAliasesLiveInTheirTeamsNamespace) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir);
  ASSERT_FALSE(d.key().empty());
  std::string a = NewKey(dir, "alice", "team-a"), b = NewKey(dir, "bob", "team-b");
  auto create = [&](const json& body, const std::string& key) -> json {
    auto r = d.Do("POST", "/v2/sandboxes", body.dump(), true, {}, key);
    EXPECT_TRUE(r.ok());
    if (!r.ok() || r->status != 201) {
      ADD_FAILURE() << "create " << body.dump() << ": " << (r.ok() ? r->body : r.status().message());
      return json::object();
    }
    return json::parse(r->body);
  };
  auto has_file = [&](const json& sb, const std::string& path) {
    auto e = d.Run(sb["sandboxID"], sb["envdAccessToken"], "test -e " + path + " && echo yes || echo no");
    EXPECT_TRUE(e.ok()) << e.status().message();
    return e.ok() && e->out == "yes\n";
  };
  // B's sandbox carries a planted file; its snapshots may not take a
  // built-in template's name in any form.
  json bs = create({{"templateID", "base"}}, b);
  ASSERT_TRUE(bs.contains("sandboxID"));
  auto planted = d.Run(bs["sandboxID"], bs["envdAccessToken"], "echo b > /tmp/planted-by-b");
  ASSERT_TRUE(planted.ok() && planted->exit_code == 0);
  const std::string bsnap = "/sandboxes/" + bs["sandboxID"].get<std::string>() + "/snapshots";
  for (const char* name : {"base", "BASE", "base-gvisor", "base-qemu", "code-interpreter", "code-interpreter-v1",
                           "base:latest", "snap-0123456789abcdef"}) {
    auto r = d.Do("POST", bsnap, json{{"name", name}}.dump(), true, {}, b);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 400) << name << ": " << r->body;
  }
  auto named = d.Do("POST", bsnap, R"({"name":"app"})", true, {}, b);
  ASSERT_TRUE(named.ok());
  ASSERT_EQ(named->status, 201) << named->body;
  // A's creates by "base", by no template, and the admin's, are never B's VM.
  for (const json& body : {json{{"templateID", "base"}}, json::object()}) {
    json sb = create(body, a);
    ASSERT_TRUE(sb.contains("sandboxID"));
    EXPECT_FALSE(has_file(sb, "/tmp/planted-by-b")) << body.dump();
    EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + sb["sandboxID"].get<std::string>(), "", true, {}, a)->status, 204);
  }
  json admin_sb = create({{"templateID", "base"}}, d.key());
  ASSERT_TRUE(admin_sb.contains("sandboxID"));
  EXPECT_FALSE(has_file(admin_sb, "/tmp/planted-by-b"));
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + admin_sb["sandboxID"].get<std::string>())->status, 204);
  // "app" is B's name: A's "app" is not B's snapshot (404), and A may have
  // its own "app", which is A's alone.
  auto a_app = d.Do("POST", "/v2/sandboxes", R"({"templateID":"app"})", true, {}, a);
  ASSERT_TRUE(a_app.ok());
  EXPECT_EQ(a_app->status, 404) << a_app->body;
  json as = create({{"templateID", "base"}}, a);
  ASSERT_TRUE(as.contains("sandboxID"));
  ASSERT_EQ(d.Run(as["sandboxID"], as["envdAccessToken"], "echo a > /tmp/planted-by-a")->exit_code, 0);
  auto a_named = d.Do("POST", "/sandboxes/" + as["sandboxID"].get<std::string>() + "/snapshots", R"({"name":"app"})",
                      true, {}, a);
  ASSERT_TRUE(a_named.ok());
  ASSERT_EQ(a_named->status, 201) << a_named->body;
  for (const auto& [key, mine, theirs] : {std::tuple{a, "/tmp/planted-by-a", "/tmp/planted-by-b"},
                                         std::tuple{b, "/tmp/planted-by-b", "/tmp/planted-by-a"}}) {
    json sb = create({{"templateID", "app"}}, key);
    ASSERT_TRUE(sb.contains("sandboxID"));
    EXPECT_TRUE(has_file(sb, mine));
    EXPECT_FALSE(has_file(sb, theirs));
    EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + sb["sandboxID"].get<std::string>(), "", true, {}, key)->status, 204);
  }
  // Template aliases: both teams may have "shared-name"; neither learns of
  // the other's (no 403 "used by another team").
  auto ta = d.Do("POST", "/v3/templates", R"({"name":"shared-name","cpuCount":1,"memoryMB":512})", true, {}, a);
  auto tb = d.Do("POST", "/v3/templates", R"({"name":"shared-name","cpuCount":1,"memoryMB":512})", true, {}, b);
  ASSERT_TRUE(ta.ok() && tb.ok());
  ASSERT_EQ(ta->status, 202) << ta->body;
  ASSERT_EQ(tb->status, 202) << tb->body;
  EXPECT_NE(json::parse(ta->body)["templateID"], json::parse(tb->body)["templateID"]);
  auto exists = d.Do("GET", "/templates/aliases/shared-name", "", true, {}, a);
  ASSERT_TRUE(exists.ok());
  EXPECT_EQ(exists->status, 200) << exists->body;
  EXPECT_EQ(json::parse(exists->body)["templateID"], json::parse(ta->body)["templateID"]);
  auto exists_b = d.Do("GET", "/templates/aliases/shared-name", "", true, {}, b);
  ASSERT_TRUE(exists_b.ok());
  EXPECT_EQ(exists_b->status, 200) << exists_b->body;
  EXPECT_EQ(json::parse(exists_b->body)["templateID"], json::parse(tb->body)["templateID"]);
  // One namespace per team for snapshots and templates.
  auto clash = d.Do("POST", bsnap, R"({"name":"shared-name"})", true, {}, b);
  ASSERT_TRUE(clash.ok());
  EXPECT_EQ(clash->status, 409) << clash->body;
  auto clash2 = d.Do("POST", "/v3/templates", R"({"name":"app","cpuCount":1,"memoryMB":512})", true, {}, b);
  ASSERT_TRUE(clash2.ok());
  EXPECT_EQ(clash2->status, 409) << clash2->body;
  EXPECT_EQ(d.Do("DELETE", "/templates/app", "", true, {}, a)->status, 204);
  EXPECT_EQ(d.Do("DELETE", "/templates/app", "", true, {}, b)->status, 204);
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + as["sandboxID"].get<std::string>(), "", true, {}, a)->status, 204);
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + bs["sandboxID"].get<std::string>(), "", true, {}, b)->status, 204);
}

TEST(TenancyTest, SecretsAreUsedOnlyAsStoredAndByTheirTeams) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  auto set = [&](const std::string& name, std::vector<std::string> flags) {
    std::vector<std::string> args = {"secret", "--db", dir + "/airlock.db", "set", name};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = RunCli(args, name + "-value-0123456789");
    EXPECT_EQ(r.code, 0) << r.err;
  };
  set("BROKERED_ONLY",
      {"--scope", "brokered", "--host", "api.example.test", "--host", "*.svc.example.test", "--team", "team-a"});
  set("ENV_OK", {"--scope", "env", "--team", "team-a"});
  set("ADMIN_ONLY", {});
  // Flags that make no sense are refused before anything is stored.
  EXPECT_EQ(RunCli({"secret", "--db", dir + "/airlock.db", "set", "X", "--team", "t"}, "value-0123456789").code, 2);
  EXPECT_EQ(RunCli({"secret", "--db", dir + "/airlock.db", "set", "X", "--scope", "brokered"}, "value-0123456789").code,
            2);
  TestDaemon d(dir);
  std::string a = NewKey(dir, "alice", "team-a"), b = NewKey(dir, "bob", "team-b");
  struct Case {
    std::string key;
    json secrets;
    const char* why;
  };
  std::vector<Case> refused = {
      {a, {{"BROKERED_ONLY", {{"scope", "env"}}}}, "a brokered secret pulled into the env"},
      {a, {{"BROKERED_ONLY", {{"scope", "brokered"}, {"hosts", {"evil.test"}}}}}, "brokered to a host of the caller's"},
      {a, {{"BROKERED_ONLY", {{"hosts", {"*.example.test"}}}}}, "a wider wildcard than stored"},
      {b, {{"BROKERED_ONLY", json::object()}}, "another team"},
      {b, {{"ENV_OK", {{"scope", "env"}}}}, "another team, env"},
      {a, {{"ADMIN_ONLY", {{"scope", "env"}}}}, "a secret granted to no team"},
      {a, {{"NO_SUCH_SECRET", {{"scope", "env"}}}}, "a secret that does not exist"},
  };
  for (const auto& c : refused) {
    auto r =
        d.Do("POST", "/v2/sandboxes", json{{"templateID", "base"}, {"secrets", c.secrets}}.dump(), true, {}, c.key);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 403) << c.why << ": " << r->body;
    EXPECT_NE(r->body.find(c.secrets.begin().key()), std::string::npos) << "the 403 names the secret: " << r->body;
    EXPECT_EQ(r->body.find("-value-0123456789"), std::string::npos);
  }
  // Allowed uses: env as stored, brokered to a covered host. One sandbox for both.
  auto ok =
      d.Do("POST", "/v2/sandboxes",
           json{{"templateID", "base"},
                {"secrets", {{"ENV_OK", json::object()}, {"BROKERED_ONLY", {{"hosts", {"api.svc.example.test"}}}}}}}
               .dump(),
           true, {}, a);
  ASSERT_TRUE(ok.ok());
  ASSERT_EQ(ok->status, 201) << ok->body;
  json sb = json::parse(ok->body);
  auto e = d.Run(sb["sandboxID"], sb["envdAccessToken"], "echo \"$ENV_OK\"; echo \"$BROKERED_ONLY\"");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_NE(e->out.find("ENV_OK-value-0123456789"), std::string::npos) << e->out;
  EXPECT_EQ(e->out.find("BROKERED_ONLY-value"), std::string::npos) << "a brokered value reached the guest: " << e->out;
  // The admin (local operator) may still use an unrestricted secret its own way.
  auto admin = d.Do("POST", "/v2/sandboxes",
                    json{{"templateID", "base"}, {"secrets", {{"ADMIN_ONLY", {{"scope", "env"}}}}}}.dump());
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(admin->status, 201) << admin->body;
  if (admin->status == 201) d.Do("DELETE", "/sandboxes/" + json::parse(admin->body)["sandboxID"].get<std::string>());
  d.Do("DELETE", "/sandboxes/" + sb["sandboxID"].get<std::string>(), "", true, {}, a);
}

// The E2B secrets API (docs/secrets.md): a secret belongs to the creating
// key's team, carries its policy in airlock.* metadata, never shows its value,
// and is given to a sandbox through Secret.fill's placeholder, brokered here
// (the e2e suite covers env).
TEST(TenancyTest, SecretsApiSecretsBelongToTheirTeamAndAreBrokeredAsStored) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  ASSERT_EQ(RunCli({"secret", "--db", dir + "/airlock.db", "set", "cli_secret", "--scope", "env", "--team", "team-a"},
                   "cli-secret-value-0123")
                .code,
            0);
  TestDaemon d(dir);
  std::string a = NewKey(dir, "alice", "team-a"), b = NewKey(dir, "bob", "team-b");
  const std::string value = "api-brokered-value-8d1c";
  json body = {{"name", "GH-Token"},
               {"value", value},
               {"metadata", {{"airlock.hosts", "api.example.test"}, {"description", "github"}}}};
  auto created = d.Do("POST", "/secrets", body.dump(), true, {}, a);
  ASSERT_TRUE(created.ok());
  ASSERT_EQ(created->status, 201) << created->body;
  json sec = json::parse(created->body);
  EXPECT_EQ(sec["name"], "gh-token");
  EXPECT_EQ(sec["currentVersion"], 1);
  EXPECT_EQ(created->body.find(value), std::string::npos);
  std::string sid = sec["secretID"];
  // Another team: 404 on every route, an empty list; the same name is 409 for it.
  for (auto [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/secrets/" + sid}, {"GET", "/secrets/gh-token"}, {"DELETE", "/secrets/gh-token"}}) {
    auto r = d.Do(method, path, "", true, {}, b);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 404) << method << " " << path << ": " << r->body;
  }
  auto upd = d.Do("POST", "/secrets/gh-token", json{{"value", "stolen-value-0123"}}.dump(), true, {}, b);
  EXPECT_EQ(upd->status, 404) << upd->body;
  EXPECT_EQ(d.Do("GET", "/secrets", "", true, {}, b)->body, "[]");
  EXPECT_EQ(
      d.Do("POST", "/secrets", json{{"name", "gh-token"}, {"value", "other-value-0123"}}.dump(), true, {}, b)->status,
      409);
  // A CLI secret is not part of the API (not listed, 404), and its name is
  // taken (the API lower-cases "CLI_Secret" to the CLI's "cli_secret").
  auto listed = d.Do("GET", "/secrets", "", true, {}, a);
  ASSERT_EQ(listed->status, 200);
  json list = json::parse(listed->body);
  ASSERT_EQ(list.size(), 1u) << listed->body;
  EXPECT_EQ(list[0]["secretID"], sid);
  EXPECT_EQ(d.Do("GET", "/secrets/cli_secret", "", true, {}, a)->status, 404);
  EXPECT_EQ(
      d.Do("POST", "/secrets", json{{"name", "CLI_Secret"}, {"value", "x-value-0123"}}.dump(), true, {}, a)->status,
      409);
  auto bad = d.Do("POST", "/secrets",
                  json{{"name", "x"}, {"value", "x-value-0123"}, {"metadata", {{"airlock.scope", "brokered"}}}}.dump(),
                  true, {}, a);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("airlock.hosts"), std::string::npos) << bad->body;
  // The operator's view: the policy the metadata described.
  auto ls = RunCli({"secret", "--db", dir + "/airlock.db", "ls"});
  EXPECT_NE(ls.out.find("gh-token"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("api.example.test"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("team-a"), std::string::npos) << ls.out;
  // Given through E2B's placeholder: brokered as stored, only a placeholder in the guest.
  auto sb = d.Do("POST", "/v2/sandboxes",
                 json{{"templateID", "base"}, {"envVars", {{"GITHUB_TOKEN", "${e2b.secrets.gh-token}"}}}}.dump(), true,
                 {}, a);
  ASSERT_TRUE(sb.ok());
  ASSERT_EQ(sb->status, 201) << sb->body;
  json s = json::parse(sb->body);
  auto e = d.Run(s["sandboxID"], s["envdAccessToken"], "echo \"$GITHUB_TOKEN\"");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->out.rfind("AIRLOCK_BROKERED_", 0), 0u) << e->out;
  EXPECT_EQ(e->out.find(value), std::string::npos);
  auto info = d.Do("GET", "/sandboxes/" + s["sandboxID"].get<std::string>(), "", true, {}, a);
  json secrets = json::parse(info->body)["secrets"];
  ASSERT_EQ(secrets.size(), 1u) << info->body;
  EXPECT_EQ(secrets[0]["scope"], "brokered");
  EXPECT_EQ(secrets[0]["hosts"], json::array({"api.example.test"}));
  // Team b cannot name it; after a delete, nobody can.
  auto other = d.Do("POST", "/v2/sandboxes",
                    json{{"templateID", "base"}, {"envVars", {{"T", "${e2b.secrets.gh-token}"}}}}.dump(), true, {}, b);
  EXPECT_EQ(other->status, 403) << other->body;
  EXPECT_EQ(d.Do("DELETE", "/secrets/" + sid, "", true, {}, a)->status, 204);
  EXPECT_EQ(d.Do("GET", "/secrets/" + sid, "", true, {}, a)->status, 404);
  auto gone = d.Do("POST", "/v2/sandboxes",
                   json{{"templateID", "base"}, {"envVars", {{"T", "${e2b.secrets.gh-token}"}}}}.dump(), true, {}, a);
  EXPECT_EQ(gone->status, 403) << gone->body;
  EXPECT_NE(gone->body.find("gh-token"), std::string::npos) << gone->body;
  d.Do("DELETE", "/sandboxes/" + s["sandboxID"].get<std::string>(), "", true, {}, a);
}

TEST(TenancyTest, SecondDaemonOnOneRegistryIsRefusedNamingTheFirst) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir);
  ASSERT_FALSE(d.key().empty());
  auto second =
      RunCli({"serve", "--listen", "127.0.0.1:" + std::to_string(FreeTcpPort()), "--db", dir + "/airlock.db"});
  EXPECT_NE(second.code, 0);
  EXPECT_NE(second.err.find("in use by pid " + std::to_string(d.pid())), std::string::npos) << second.err;
  // The first is unharmed, and its audit trail has one writer.
  auto h = d.Do("GET", "/v2/sandboxes");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 200);
  auto v = RunCli({"audit", "verify", "--dir", dir + "/audit"});
  EXPECT_EQ(v.code, 0) << v.out << v.err;
}

// The QEMU process whose command line names `run_dir`, or 0.
pid_t FindVmm(const std::string& run_dir) {
  std::error_code ec;
  for (auto& p : fs::directory_iterator("/proc", ec)) {
    pid_t pid = std::atoi(p.path().filename().c_str());
    if (pid <= 0) continue;
    std::string cmd = Slurp(p.path().string() + "/cmdline");
    std::string argv0 = cmd.substr(0, cmd.find('\0'));
    if (argv0.find("qemu-system") != std::string::npos && cmd.find(run_dir + "/") != std::string::npos) return pid;
  }
  return 0;
}

// Issue 11 item 7: a daemon killed while a create is under way leaves a VMM
// (and its netns, lease and run dir) that no registry row names; the next
// daemon on that registry destroys them.
TEST(TenancyTest, Kill9MidCreateLeavesNothingAfterRestart) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  std::string run_dir;
  pid_t vmm = 0;
  {
    // Cold boot (no template snapshot) keeps the create in flight for seconds.
    TestDaemon d(dir, {"--no-template-snapshot"}, /*kill_on_exit=*/false);
    ASSERT_FALSE(d.key().empty());
    std::thread create([&] { (void)d.Do("POST", "/v2/sandboxes", R"({"templateID":"base"})"); });
    std::string canon = fs::weakly_canonical(dir + "/airlock.db").string();
    // Wait for a VMM whose run dir names this daemon's registry.
    bool seen = WaitFor(
        [&] {
          std::error_code ec;
          for (auto& e : fs::directory_iterator(StateDir() + "/run", ec)) {
            std::string owner = Slurp(e.path().string() + "/owner");
            if (owner.find("registry " + canon) == std::string::npos) continue;
            if (pid_t pid = FindVmm(e.path().string())) {
              run_dir = e.path().string();
              vmm = pid;
              return true;
            }
          }
          return false;
        },
        std::chrono::seconds(60));
    d.Kill9();
    create.join();
    ASSERT_TRUE(seen) << "no VMM of this daemon appeared";
  }
  ASSERT_EQ(::kill(vmm, 0), 0) << "the VMM died with the daemon; nothing to test";
  std::string id = fs::path(run_dir).filename();
  {
    TestDaemon d2(dir, {"--no-template-snapshot"});
    ASSERT_FALSE(d2.key().empty());
    EXPECT_TRUE(WaitFor([&] { return ::kill(vmm, 0) != 0; }, std::chrono::seconds(15))) << "orphan VMM still runs";
    EXPECT_FALSE(fs::exists(run_dir));
    EXPECT_FALSE(fs::exists("/run/netns/al-" + id));
    auto list = d2.Do("GET", "/v2/sandboxes");
    ASSERT_TRUE(list.ok());
    EXPECT_EQ(list->body.find(id), std::string::npos);
    // No address lease names it any more.
    std::error_code ec;
    for (auto& l : fs::directory_iterator("/run/airlock/net/leases", ec)) {
      EXPECT_EQ(Slurp(l.path().string()).find("sandbox=" + id + "\n"), std::string::npos) << l.path();
    }
  }
}

// Issue 14 item 2: parked sandboxes of the warm pool are this daemon's run
// dirs and nobody's registry rows. A daemon killed -9 with a full pool
// leaves their VMMs running; the next daemon on the registry removes them
// all (VMM, netns, run dir) and never hands one out or lists it.
TEST(TenancyTest, Kill9WithAFullWarmPoolLeavesNothingAfterRestart) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  const std::string db = fs::weakly_canonical(dir + "/airlock.db").string();
  std::map<std::string, pid_t> parked;  // id -> VMM pid
  {
    TestDaemon d(dir, {"--pool", "2"}, false);
    auto parked_count = [&] {
      auto m = d.Do("GET", "/metrics", "", false);
      return m.ok() && m->body.find("airlock_pool_parked 2") != std::string::npos;
    };
    ASSERT_TRUE(WaitFor(parked_count, std::chrono::seconds(90))) << "the pool never filled";
    std::error_code ec;
    for (auto& e : fs::directory_iterator(StateDir() + "/run", ec)) {
      if (ReadRunDirOwner(e.path().string()).registry != db) continue;
      parked[e.path().filename().string()] = FindVmm(e.path().string());
    }
    ASSERT_EQ(parked.size(), 2u);
    for (const auto& [id, pid] : parked) EXPECT_GT(pid, 0) << id;
    auto list = d.Do("GET", "/v2/sandboxes");
    ASSERT_TRUE(list.ok());
    EXPECT_EQ(list->body, "[]") << "parked sandboxes are listed";
    d.Kill9();
  }
  for (const auto& [id, pid] : parked) EXPECT_TRUE(fs::exists("/proc/" + std::to_string(pid))) << "VMM of " << id;
  TestDaemon d2(dir);  // --pool 0
  for (const auto& [id, pid] : parked) {
    EXPECT_TRUE(WaitFor(
        [&] {
          return !fs::exists("/proc/" + std::to_string(pid)) && !fs::exists(StateDir() + "/run/" + id) &&
                 !fs::exists("/run/netns/al-" + id);
        },
        std::chrono::seconds(30)))
        << "parked sandbox " << id << " left behind";
    auto r = d2.Do("GET", "/sandboxes/" + id);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 404) << r->body;
  }
}

// Issue 14: a daemon killed -9 in the middle of a fork (the parent's RAM in
// the fork's file, children coming up) leaves nothing the next daemon on its
// registry does not clean up at start: no fork snapshot, committed or not,
// that no registered sandbox maps; no run dir, VMM or netns of a child it
// never registered. The parent (and any child registered before the kill)
// runs on, and killing them releases the fork's files.
TEST(TenancyTest, Kill9DuringForkLeavesNothingAfterRestart) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  const std::string canon = fs::weakly_canonical(dir + "/airlock.db").string();
  const std::string forks = StateDir() + "/snapshots/forks";
  std::string parent;
  {
    TestDaemon d(dir, {}, /*kill_on_exit=*/false);
    auto sb = CreateSandbox(d, {{"templateID", "base"}, {"timeout", 600}});
    ASSERT_TRUE(sb.ok()) << sb.status().ToString();
    parent = (*sb)["sandboxID"].get<std::string>();
    std::thread fork([&] { (void)d.Do("POST", "/sandboxes/" + parent + "/fork", R"({"count":3})"); });
    // Killed once the fork's RAM file is committed and its children start.
    bool seen = WaitFor(
        [&] {
          std::error_code ec;
          for (auto& e : fs::directory_iterator(forks, ec)) {
            std::string name = e.path().filename().string();
            if (name.rfind(parent + "-", 0) == 0 && e.is_directory(ec) && name.find(".tmp") == std::string::npos &&
                fs::exists(e.path() / "ram", ec))
              return true;
          }
          return false;
        },
        std::chrono::seconds(120));
    d.Kill9();
    fork.join();
    ASSERT_TRUE(seen) << "the fork never committed its RAM file";
  }
  TestDaemon d2(dir, {}, /*kill_on_exit=*/true);
  ASSERT_FALSE(d2.key().empty());
  auto listed = [&](const std::string& id) {
    auto r = d2.Do("GET", "/sandboxes/" + id);
    return r.ok() && r->status == 200;
  };
  ASSERT_TRUE(listed(parent)) << "the parent was not adopted";
  // Every run dir of this registry is a listed sandbox; every fork dir of
  // the parent is mapped by one of them.
  std::set<std::string> mapped;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(StateDir() + "/run", ec)) {
    if (ReadRunDirOwner(e.path().string()).registry != canon) continue;
    const std::string id = e.path().filename().string();
    EXPECT_TRUE(listed(id)) << "run dir of an unregistered sandbox left: " << id;
    auto vm = nlohmann::json::parse(Slurp(e.path().string() + "/vm/vm.json"), nullptr, false);
    if (vm.is_object()) mapped.insert(fs::path(vm.value("ram_source", "")).parent_path().string());
  }
  for (auto& e : fs::directory_iterator(forks, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(parent + "-", 0) != 0 || !e.is_directory(ec)) continue;
    EXPECT_TRUE(mapped.count(e.path().string())) << "fork snapshot left that nothing maps: " << name;
  }
  // Killing every sandbox of the registry releases the fork's files.
  auto list = d2.Do("GET", "/v2/sandboxes");
  ASSERT_TRUE(list.ok());
  for (auto& s : nlohmann::json::parse(list->body)) {
    auto r = d2.Do("DELETE", "/sandboxes/" + s["sandboxID"].get<std::string>());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 204);
  }
  EXPECT_TRUE(WaitFor(
      [&] {
        std::error_code ec2;
        for (auto& e : fs::directory_iterator(forks, ec2))
          if (e.path().filename().string().rfind(parent + "-", 0) == 0) return false;
        return true;
      },
      std::chrono::seconds(30)))
      << "the fork's files outlived its children";
}

// A run dir left by a dead daemon whose registry no longer exists can never
// be adopted or swept by its own daemon: the next daemon on the state dir
// removes it. One of a dead daemon whose registry still exists is left for
// that daemon.
TEST(TenancyTest, LeftoversOfADaemonWhoseRegistryIsGoneAreSwept) {
  const std::string run = StateDir() + "/run";
  fs::create_directories(run);
  const std::string gone_id = "zzgone" + NewSandboxId().substr(6), kept_id = "zzkept" + NewSandboxId().substr(6);
  std::string other = MakeTempDir();
  const std::string other_db = other + "/airlock.db";
  { std::ofstream(other_db) << ""; }
  auto make = [&](const std::string& id, const std::string& registry) {
    fs::create_directories(run + "/" + id);
    // pid 2147483647 is never a live process.
    std::ofstream(run + "/" + id + "/owner") << "2147483647\nregistry " << registry << "\n";
  };
  make(gone_id, "/nonexistent/airlock-test-" + NewSandboxId() + "/airlock.db");
  make(kept_id, other_db);
  {
    TestDaemon d(MakeTempDir());
    EXPECT_TRUE(WaitFor([&] { return !fs::exists(run + "/" + gone_id); }, std::chrono::seconds(10)))
        << "the leftover of a daemon whose registry is gone stayed";
    EXPECT_TRUE(fs::exists(run + "/" + kept_id)) << "another daemon's leftover was removed";
  }
  std::error_code ec;
  fs::remove_all(run + "/" + kept_id, ec);
}

// Issue 11 item 9: a guest that dies is noticed at once, reaped, recorded
// and freed, not left "running" until its TTL.
TEST(TenancyTest, GuestPanicIsReportedDeadWithinSeconds) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir);
  auto created = d.Do("POST", "/v2/sandboxes", R"({"templateID":"base","timeout":3600})");
  ASSERT_TRUE(created.ok());
  ASSERT_EQ(created->status, 201) << created->body;
  json sb = json::parse(created->body);
  std::string id = sb["sandboxID"];
  pid_t vmm = FindVmm(StateDir() + "/run/" + id);
  ASSERT_GT(vmm, 0);
  // The panic fires after the exec has answered (a stream open to a guest
  // that dies is the conformance issue's, not this test's).
  auto e = d.Run(id, sb["envdAccessToken"],
                 "setsid sh -c 'sleep 1; echo c > /proc/sysrq-trigger' </dev/null >/dev/null 2>&1 & echo armed", 20000,
                 "root");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_NE(e->out.find("armed"), std::string::npos);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitFor(
      [&] {
        auto r = d.Do("GET", "/sandboxes/" + id);
        return r.ok() && r->status == 404;
      },
      std::chrono::seconds(30)))
      << "a dead sandbox is still listed";
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "panicked sandbox gone from the API " << s << " s after the panic command returned\n";
  // Reaped: no zombie left behind.
  EXPECT_TRUE(WaitFor([&] { return !fs::exists("/proc/" + std::to_string(vmm)); }, std::chrono::seconds(10)));
  auto audit = RunCli({"audit", "--dir", dir + "/audit", "--sandbox", id});
  EXPECT_NE(audit.out.find("sandbox.died"), std::string::npos) << audit.out;
  auto gone = d.Do("GET", "/sandboxes/" + id);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->status, 404);
  EXPECT_EQ(json::parse(gone->body).value("outcome", ""), "vmm_exited") << gone->body;
  auto metrics = d.Do("GET", "/metrics", "", false);
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("airlock_sandbox_deaths_total 1"), std::string::npos);
}

// Issue 32 item 5: one key filled the host's disk with uploads. A team's
// uploads, layers, images, checkpoints, paused and named snapshots count
// against serve --team-disk-budget: team A at its budget gets 507 naming
// it for its next upload and checkpoint; team B's still work. Uploads go
// after serve --upload-ttl, and a files link then says present: false.
namespace {
// GET /templates/{id}/files/{hash} of a new template of the key's team: the upload link's JSON.
json FilesLink(const TestDaemon& d, const std::string& key, const std::string& alias, const std::string& hash) {
  auto t = d.Do("POST", "/v3/templates", json{{"name", alias}}.dump(), true, {}, key);
  if (!t.ok() || t->status != 202) return json{{"error", t.ok() ? t->body : t.status().message()}};
  std::string id = json::parse(t->body)["templateID"];
  auto link = d.Do("GET", "/templates/" + id + "/files/" + hash, "", true, {}, key);
  if (!link.ok() || link->status != 201) return json{{"error", link.ok() ? link->body : link.status().message()}};
  json j = json::parse(link->body);
  j["templateID"] = id;
  return j;
}
// PUT the link's URL (the SDK's way), `bytes` of incompressible data.
StatusOr<HttpReply> Upload(const TestDaemon& d, const json& link, size_t bytes) {
  std::string url = link.value("url", "");
  std::string target = url.substr(url.find("/upload/"));
  std::string data(bytes, '\0');
  uint32_t x = 2463534242u ^ static_cast<uint32_t>(bytes);
  for (auto& ch : data) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    ch = static_cast<char>(x);
  }
  return d.Do("PUT", target, data, false, {{"Content-Type", "application/octet-stream"}});
}
std::string Hash(char c) { return std::string(64, c); }
}  // namespace

TEST(TenancyTest, TeamDiskBudgetRefusesOnlyTheTeamOverItAndUploadsExpire) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir, {"--team-disk-budget", "2"});
  std::string a = NewKey(dir, "alice", "team-a"), b = NewKey(dir, "bob", "team-b");
  auto sa = d.Do("POST", "/v2/sandboxes", json{{"templateID", "base"}}.dump(), true, {}, a);
  auto sb = d.Do("POST", "/v2/sandboxes", json{{"templateID", "base"}}.dump(), true, {}, b);
  ASSERT_TRUE(sa.ok() && sb.ok());
  ASSERT_EQ(sa->status, 201) << sa->body;
  ASSERT_EQ(sb->status, 201) << sb->body;
  std::string ida = json::parse(sa->body)["sandboxID"], idb = json::parse(sb->body)["sandboxID"];

  // A fills its 2 MiB with two uploads of 1 MiB.
  for (char c : {'a', 'b'}) {
    json link = FilesLink(d, a, std::string("fill-") + c, Hash(c));
    ASSERT_EQ(link.value("present", true), false) << link.dump();
    auto up = Upload(d, link, 1 << 20);
    ASSERT_TRUE(up.ok());
    ASSERT_EQ(up->status, 200) << up->body;
    EXPECT_EQ(FilesLink(d, a, std::string("fill-") + c, Hash(c)).value("present", false), true);
  }
  const std::string named = "team team-a uses 2 MiB of its 2 MiB disk budget (uploads, layers, images, checkpoints, "
                            "paused and named snapshots";
  auto more = Upload(d, FilesLink(d, a, "fill-c", Hash('c')), 4096);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->status, 507) << more->body;
  EXPECT_NE(more->body.find(named), std::string::npos) << more->body;
  auto ckpt = d.Do("POST", "/sandboxes/" + ida + "/checkpoints", "{}", true, {}, a);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->status, 507) << ckpt->body;
  EXPECT_NE(ckpt->body.find(named), std::string::npos) << ckpt->body;

  // B is unaffected: its upload and its checkpoint are written.
  auto theirs = Upload(d, FilesLink(d, b, "other", Hash('a')), 1 << 20);
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ(theirs->status, 200) << theirs->body;
  auto ckpt_b = d.Do("POST", "/sandboxes/" + idb + "/checkpoints", "{}", true, {}, b);
  ASSERT_TRUE(ckpt_b.ok());
  EXPECT_EQ(ckpt_b->status, 201) << ckpt_b->body;
  for (const auto& [id, key] : {std::pair{ida, a}, std::pair{idb, b}}) (void)d.Do("DELETE", "/sandboxes/" + id, "", true, {}, key);

  // Another daemon, no VM: an upload is gone 1 s after its last use, file and row.
  std::string dir2 = MakeTempDir();
  {
    TestDaemon e(dir2, {"--upload-ttl", "1"});
    std::string c = NewKey(dir2, "carol", "team-c");
    json link = FilesLink(e, c, "ttl", Hash('d'));
    auto up = Upload(e, link, 4096);
    ASSERT_TRUE(up.ok());
    ASSERT_EQ(up->status, 200) << up->body;
    // Its file goes (watched on disk: a files link would start the TTL again)...
    auto tars = [] {
      std::error_code ec;
      int n = 0;
      for (auto& f : fs::recursive_directory_iterator(StateDir() + "/templates/files", ec))
        if (f.path().filename().string().rfind(Hash('d'), 0) == 0) ++n;
      return n;
    };
    EXPECT_EQ(tars(), 1);
    EXPECT_TRUE(WaitFor([&] { return tars() == 0; }, std::chrono::seconds(30))) << "the upload was never collected";
    // ...and so does its row: not present, so the SDK uploads it again.
    std::string id = link["templateID"];
    auto again = e.Do("GET", "/templates/" + id + "/files/" + Hash('d'), "", true, {}, c);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(json::parse(again->body).value("present", true), false) << again->body;
  }
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir2);
}

}  // namespace
}  // namespace airlock::testing
