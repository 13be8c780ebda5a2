// The daemon's typed request parsers (src/server/requests/), the one
// Status → HTTP mapping (server/http_status.h) and the in-memory API key
// table (server/api_keys.h).
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "control/sandbox_controller.h"
#include "core/registry.h"
#include "runtime/registry.h"
#include "gateway/api_keys.h"
#include "server/http_status.h"
#include "server/requests/checkpoint.h"
#include "server/requests/create.h"
#include "server/requests/fork.h"
#include "gateway/list_query.h"
#include "server/lifecycle_events.h"
#include "server/requests/network.h"
#include "server/requests/pause.h"
#include "server/requests/secret.h"
#include "server/requests/snapshot.h"
#include "server/requests/timeout.h"

namespace airlock::server {
namespace {

using nlohmann::json;
namespace rq = requests;

const rq::CreateLimits kLimits{2, 1024, 16384};

std::string CreateError(const json& body) {
  auto r = rq::ParseCreateRequest(body, kLimits);
  EXPECT_FALSE(r.ok()) << body.dump();
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(ServerRequestsTest, CreateDefaultsAndFields) {
  auto empty = rq::ParseCreateRequest(json::object(), kLimits);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_FALSE(empty->template_id);
  EXPECT_FALSE(empty->timeout_s);
  EXPECT_FALSE(empty->vcpus);
  EXPECT_TRUE(empty->allow_public_traffic);
  EXPECT_TRUE(empty->secrets.empty());
  EXPECT_FALSE(empty->lifecycle.auto_pause);
  EXPECT_TRUE(empty->lifecycle.auto_pause_memory);

  auto full = rq::ParseCreateRequest(json::parse(R"({"templateID":"base","timeout":60,"metadata":{"a":"b"},
      "envVars":{"X":"1","T":"${e2b.secrets.token}"},"cpuCount":2,"memoryMB":256,"diskSizeMB":100,
      "autoPause":true,"network":{"allowPublicTraffic":false,"maskRequestHost":"localhost:${PORT}"}})"),
                                     kLimits);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(*full->template_id, "base");
  EXPECT_EQ(*full->timeout_s, 60);
  EXPECT_EQ(full->metadata, (std::map<std::string, std::string>{{"a", "b"}}));
  // The Secret.fill placeholder leaves envVars and names a secret.
  EXPECT_EQ(full->env_vars, (std::map<std::string, std::string>{{"X", "1"}}));
  ASSERT_EQ(full->secrets.size(), 1u);
  EXPECT_EQ(full->secrets[0].name, "token");
  EXPECT_EQ(full->secrets[0].env, "T");
  EXPECT_EQ(*full->vcpus, 2);
  EXPECT_EQ(*full->memory_mib, 256);
  EXPECT_EQ(*full->disk_mib, 100);
  EXPECT_TRUE(full->lifecycle.auto_pause);
  EXPECT_FALSE(full->allow_public_traffic);
  EXPECT_EQ(full->mask_request_host, "localhost:${PORT}");
  EXPECT_TRUE(rq::CheckTemplateDisk(*full, 200).ok());
  EXPECT_NE(rq::CheckTemplateDisk(*full, 50).message().find("above the template's disk"), std::string::npos);
  EXPECT_TRUE(rq::CheckTemplateDisk(*full, 0).ok());  // unknown: not checked
}

TEST(ServerRequestsTest, CreateErrorsNameTheField) {
  EXPECT_EQ(CreateError({{"templateID", ""}}), "templateID must be a string");
  EXPECT_EQ(CreateError({{"templateID", 3}}), "templateID must be a string");
  EXPECT_EQ(CreateError({{"timeout", "x"}}), "timeout must be an integer number of seconds");
  EXPECT_EQ(CreateError({{"timeout", -1}}), "timeout must not be negative");
  EXPECT_EQ(CreateError({{"metadata", {{"k", 1}}}}), "metadata.k must be a string");
  EXPECT_EQ(CreateError({{"envVars", json::array()}}), "envVars must be an object of strings");
  EXPECT_EQ(CreateError({{"autoPause", "yes"}}), "autoPause must be a boolean");
  EXPECT_EQ(CreateError({{"autoResume", {{"enabled", true}}}}), "autoResume needs autoPause with memory kept");
  EXPECT_EQ(CreateError({{"network", {{"allowPublicTraffic", 1}}}}), "network.allowPublicTraffic must be a boolean");
  EXPECT_NE(CreateError({{"network", {{"maskRequestHost", "a\r\nX-Evil: 1"}}}}).find("maskRequestHost"),
            std::string::npos);
  // The serve flag that bounds it is named (limits_test asserts this).
  EXPECT_NE(CreateError({{"cpuCount", 3}}).find("--max-cpus"), std::string::npos);
  EXPECT_NE(CreateError({{"cpuCount", 0}}).find("--max-cpus"), std::string::npos);
  EXPECT_NE(CreateError({{"memoryMB", 4096}}).find("--max-memory"), std::string::npos);
  EXPECT_NE(CreateError({{"diskSizeMB", 1 << 20}}).find("--max-disk"), std::string::npos);
  EXPECT_EQ(CreateError({{"cpuCount", 1.5}}), "cpuCount must be an integer");
  EXPECT_EQ(CreateError({{"memoryMB", -1}}), "memoryMB is out of range");
  EXPECT_NE(CreateError({{"secrets", {{"a", {{"scope", "env"}, {"hosts", {"x.com"}}}}}}}).find("secrets.a"),
            std::string::npos);
  EXPECT_NE(
      CreateError({{"envVars", {{"A", "${e2b.secrets.a}"}}}, {"secrets", {{"a", json::object()}}}}).find("named twice"),
      std::string::npos);
  EXPECT_EQ(CreateError({{"allow_internet_access", "no"}}), "allow_internet_access must be a boolean");
  // airlock's runtime field: one of the registered runtimes, the list in the error.
  EXPECT_EQ(CreateError({{"runtime", "vmware"}}),
            "unknown runtime 'vmware' (available: " + AvailableRuntimesText() + ")");
  EXPECT_EQ(CreateError({{"runtime", 1}}), "runtime must be a string (available: " + AvailableRuntimesText() + ")");
  EXPECT_EQ(CreateError({{"runtime", ""}}), "unknown runtime '' (available: " + AvailableRuntimesText() + ")");
}

TEST(ServerRequestsTest, CreateRuntime) {
  EXPECT_FALSE(rq::ParseCreateRequest(json::object(), kLimits)->runtime);
  EXPECT_FALSE(rq::ParseCreateRequest({{"runtime", nullptr}}, kLimits)->runtime);
  for (const auto& name : AvailableRuntimes()) {
    auto r = rq::ParseCreateRequest({{"runtime", name}}, kLimits);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r->runtime, name);
  }
}

TEST(ServerRequestsTest, SmallBodies) {
  EXPECT_EQ(rq::ParseSetTimeout(json::object()).status().message(), "timeout is required");
  EXPECT_EQ(rq::ParseSetTimeout({{"timeout", 30}})->timeout_s, 30);
  EXPECT_EQ(rq::ParseSetTimeout({{"timeout", -2}}).status().message(), "timeout must not be negative");
  EXPECT_FALSE(rq::ParseConnect(json::object())->timeout_s);
  EXPECT_EQ(*rq::ParseConnect({{"timeout", 5}})->timeout_s, 5);
  // E2B's refresh: absent or under 15 s is 15 s (SandboxTimeoutDefault); at most 3600.
  EXPECT_EQ(rq::ParseRefresh(json::object())->duration_s, 15);
  EXPECT_EQ(rq::ParseRefresh({{"duration", 0}})->duration_s, 15);
  EXPECT_EQ(rq::ParseRefresh({{"duration", 600}})->duration_s, 600);
  EXPECT_EQ(rq::ParseRefresh({{"duration", 3600}})->duration_s, 3600);
  EXPECT_EQ(rq::ParseRefresh({{"duration", 3601}}).status().message(), "duration must be at most 3600 seconds");
  EXPECT_EQ(rq::ParseRefresh({{"duration", "60"}}).status().message(), "duration must be an integer number of seconds");

  EXPECT_TRUE(rq::ParsePause(json::object())->keep_memory);
  EXPECT_FALSE(rq::ParsePause({{"memory", false}})->keep_memory);
  EXPECT_EQ(rq::ParsePause({{"memory", "no"}}).status().message(), "memory must be a boolean");

  EXPECT_EQ(rq::ParseFork(json::object())->count, 1);
  EXPECT_EQ(rq::ParseFork({{"count", 16}, {"timeout", 9}})->count, 16);
  EXPECT_TRUE(rq::ParseFork(json::object())->memory);
  EXPECT_FALSE(rq::ParseFork({{"memory", false}})->memory);
  EXPECT_EQ(rq::ParseFork({{"memory", "no"}}).status().message(), "memory must be a boolean");
  for (json bad : {json(0), json(17), json(2.5), json("2"), json(18446744073709551615ull)}) {
    EXPECT_EQ(rq::ParseFork({{"count", bad}}).status().message(), "count must be an integer 1..16") << bad;
  }
  EXPECT_EQ(rq::ParseSnapshot(json::object())->name, "");
  EXPECT_EQ(rq::ParseSnapshot({{"name", "n"}})->name, "n");
  EXPECT_EQ(rq::ParseSnapshot({{"name", 1}}).status().message(), "name must be a string");
}

TEST(ServerRequestsTest, Rollback) {
  EXPECT_EQ(rq::ParseRollback({{"checkpointID", "ckpt-0123456789abcdef"}})->checkpoint_id, "ckpt-0123456789abcdef");
  EXPECT_EQ(rq::ParseRollback(json::object()).status().message(), "checkpointID is required");
  EXPECT_EQ(rq::ParseRollback({{"checkpointID", nullptr}}).status().message(), "checkpointID is required");
  EXPECT_EQ(rq::ParseRollback({{"checkpointID", 3}}).status().message(), "checkpointID must be a string");
  EXPECT_EQ(rq::ParseRollback({{"checkpointID", ""}}).status().message(), "checkpointID must be 1..64 bytes");
  EXPECT_EQ(rq::ParseRollback({{"checkpointID", std::string(65, 'a')}}).status().code(),
            airlock::StatusCode::kInvalidArgument);
}

// GET /v2/sandboxes/{id}/logs as E2B's spec and handler: backward from now by
// default, cursor + direction, limit 0..1000, level as a floor, search as a
// case-sensitive substring; v1 reads start and limit only, oldest first.
TEST(ServerRequestsTest, SandboxLogsQuery) {
  std::map<std::string, std::string> q;
  gateway::QueryFn query = [&q](const std::string& n) -> std::optional<std::string> {
    auto it = q.find(n);
    return it == q.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  auto d = gateway::ParseSandboxLogs(query, true);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->backward);
  EXPECT_EQ(d->limit, 1000);
  EXPECT_FALSE(d->cursor_ms);
  EXPECT_TRUE(d->Keeps(5, "debug", "anything"));
  q = {{"cursor", "100"}, {"direction", "forward"}, {"limit", "0"}, {"level", "warn"}, {"search", "Egress"}};
  auto f = gateway::ParseSandboxLogs(query, true);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_FALSE(f->backward);
  EXPECT_EQ(f->limit, 0);
  EXPECT_TRUE(f->Keeps(100, "warn", "an Egress deny"));
  EXPECT_TRUE(f->Keeps(101, "error", "Egress"));
  EXPECT_FALSE(f->Keeps(99, "warn", "Egress")) << "before the cursor, forward";
  EXPECT_FALSE(f->Keeps(100, "info", "Egress")) << "below the level";
  EXPECT_FALSE(f->Keeps(100, "warn", "egress")) << "search is case-sensitive";
  q = {{"cursor", "100"}};
  auto b = gateway::ParseSandboxLogs(query, true);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->Keeps(100, "info", "x"));
  EXPECT_FALSE(b->Keeps(101, "info", "x")) << "after the cursor, backward";
  for (auto [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"cursor", "-1"}, {"cursor", "x"}, {"limit", "1001"}, {"limit", ""}, {"direction", "up"},
           {"level", "warning"}, {"level", "INFO"}, {"search", std::string(257, 'a')}}) {
    q = {{name, value}};
    auto bad = gateway::ParseSandboxLogs(query, true);
    ASSERT_FALSE(bad.ok()) << name << "=" << value;
    EXPECT_EQ(bad.status().code(), airlock::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(name), std::string::npos) << bad.status().message();
  }
  q = {{"start", "7"}, {"direction", "up"}};
  auto v1 = gateway::ParseSandboxLogs(query, false);
  ASSERT_TRUE(v1.ok()) << "v1 has no direction";
  EXPECT_FALSE(v1->backward);
  EXPECT_EQ(*v1->cursor_ms, 7);
}

// Every field the newest SDK sends is read or refused by name; so is a
// field nobody defined (issue 34: never silently dropped). Nulls are absent.
TEST(ServerRequestsTest, CreateRefusesUnknownAndUnbuiltFieldsByName) {
  rq::CreateLimits limits;
  auto parse = [&](const std::string& text) { return rq::ParseCreateRequest(nlohmann::json::parse(text), limits); };
  // What SDK 2.51 sends for a plain create, with its nulls, and a 1.x SDK's `secure`.
  EXPECT_TRUE(parse(R"({"templateID":"base","metadata":null,"mcp":null,"envVars":null,"timeout":300,
                        "allow_internet_access":null,"network":null,"iam":null,"autoPause":null,
                        "autoPauseMemory":null,"autoResume":null,"secure":true,"volumeMounts":[]})").ok());
  EXPECT_TRUE(parse(R"({"network":{"allowPublicTraffic":false,"httpsPorts":[],"egressProxy":null}})").ok());
  auto https = parse(R"({"network":{"httpsPorts":[8443,3000,8443]}})");
  ASSERT_TRUE(https.ok()) << https.status().ToString();
  EXPECT_EQ(https->https_ports, (std::vector<uint16_t>{8443, 3000}));
  // Volumes by name at plain absolute paths (docs/volumes.md); the id is the server's to fill.
  auto mounts = parse(R"({"volumeMounts":[{"name":"data","path":"/mnt/data"},{"name":"w","path":"/home/user/w"}]})");
  ASSERT_TRUE(mounts.ok()) << mounts.status().ToString();
  ASSERT_EQ(mounts->volume_mounts.size(), 2u);
  EXPECT_EQ(mounts->volume_mounts[0].name, "data");
  EXPECT_EQ(mounts->volume_mounts[1].path, "/home/user/w");
  EXPECT_TRUE(mounts->volume_mounts[0].volume_id.empty());
  for (auto [text, name] : std::vector<std::pair<std::string, std::string>>{
           {R"({"templateId":"base"})", "templateId"},
           {R"({"network":{"allowout":[]}})", "network.allowout"},
           {R"({"mcp":{"github":{}}})", "mcp"},
           {R"({"iam":{"tokens":{"t":{"audience":"a","tokenType":"jwt"}}}})", "iam"},
           {R"({"volumeMounts":[{"name":"v","path":"/"}]})", "volumeMounts"},
           {R"({"volumeMounts":[{"name":"v","path":"/mnt/../etc"}]})", "volumeMounts"},
           {R"({"volumeMounts":[{"name":"v","path":"/proc/x"}]})", "volumeMounts"},
           {R"({"volumeMounts":[{"name":"v","path":"mnt"}]})", "volumeMounts"},
           {R"({"volumeMounts":[{"name":"v","path":"/mnt/"}]})", "volumeMounts"},
           {R"({"volumeMounts":[{"name":"v","path":"/mnt"},{"name":"w","path":"/mnt/x"}]})", "volumeMounts"},
           {R"({"volumeMounts":[{"name":"v"}]})", "volumeMounts"},
           {R"({"volumeMounts":{"/mnt":"v"}})", "volumeMounts"},
           {R"({"network":{"httpsPorts":[49983]}})", "network.httpsPorts"},
           {R"({"network":{"httpsPorts":[0]}})", "network.httpsPorts"},
           {R"({"network":{"httpsPorts":"443"}})", "network.httpsPorts"},
           {R"({"secure":"yes"})", "secure"},
           {R"({"network":[]})", "network"}}) {
    auto r = parse(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), airlock::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
  }
}

// Lifecycle webhooks (lifecycle_events.h): E2B's signature, the URL rules,
// who a delivery may reach, the events query.
TEST(LifecycleEventsTest, SignatureUrlTargetsAndQuery) {
  // base64(SHA-256(secret + body)) without padding, as E2B's docs verify it.
  EXPECT_EQ(WebhookSignature("whsec", R"({"a":1})"), "nCaxwnEyil+DXqxpp5W9U44/iV+lHRul7m1FghuMnhg");
  auto u = ParseWebhookUrl("https://Hooks.Example.com:8443/in/e2b?x=1#frag");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "hooks.example.com");
  EXPECT_EQ(u->port, 8443);
  EXPECT_EQ(u->target, "/in/e2b?x=1");
  auto plain = ParseWebhookUrl("http://[2001:db8::1]/");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->host, "2001:db8::1");
  EXPECT_EQ(plain->port, 80);
  for (const char* bad : {"ftp://x/", "http://", "http://user:pw@x/", "http://x:0/", "http://x:99999/",
                          "http://x y/", "https://[::1/"}) {
    EXPECT_FALSE(ParseWebhookUrl(bad).ok()) << bad;
  }
  EXPECT_TRUE(WebhookTargetAllowed("93.184.216.34", false));
  // Every address of this host's own interfaces, whatever its range.
  ifaddrs* all = nullptr;
  ASSERT_EQ(getifaddrs(&all), 0);
  for (ifaddrs* a = all; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, ip, sizeof ip);
    EXPECT_FALSE(WebhookTargetAllowed(ip, false)) << ip;
  }
  freeifaddrs(all);
  for (const char* ip : {"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
                         "198.18.0.1", "0.0.0.0", "224.0.0.1", "::1", "2001:db8::1", "fc00::1"}) {
    EXPECT_FALSE(WebhookTargetAllowed(ip, false)) << ip;
    EXPECT_TRUE(WebhookTargetAllowed(ip, true)) << ip;
  }
  auto q = ParseEventsQuery("offset=5&limit=20&orderAsc=true&types=sandbox.lifecycle.created&types="
                            "sandbox.lifecycle.killed%2Csandbox.lifecycle.created");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->offset, 5);
  EXPECT_EQ(q->limit, 20);
  EXPECT_TRUE(q->ascending);
  EXPECT_EQ(q->types, (std::vector<std::string>{"sandbox.lifecycle.created", "sandbox.lifecycle.killed"}));
  auto d = ParseEventsQuery("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->limit, 10);
  EXPECT_FALSE(d->ascending);
  for (const char* bad : {"limit=0", "limit=101", "offset=-1", "orderAsc=yes", "types=sandbox.created"}) {
    auto r = ParseEventsQuery(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos)
        << r.status().message();
  }
}

TEST(ServerRequestsTest, ListQueries) {
  std::map<std::string, std::string> q;
  gateway::QueryFn query = [&q](const std::string& n) -> std::optional<std::string> {
    auto it = q.find(n);
    return it == q.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  auto d = gateway::ParseListSandboxes(query);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->limit, 100);
  EXPECT_TRUE(d->want_running && d->want_paused);
  EXPECT_FALSE(d->ascending);

  q = {{"state", "paused"}, {"limit", "500"}, {"order", "asc"}, {"nextToken", "17_abc"}, {"template", "t"}};
  auto r = gateway::ParseListSandboxes(query);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->want_running);
  EXPECT_TRUE(r->want_paused);
  EXPECT_EQ(r->limit, 100);  // capped
  EXPECT_TRUE(r->ascending);
  EXPECT_EQ(r->after->first, 17);
  EXPECT_EQ(r->template_id, "t");

  q = {{"limit", "0"}};
  EXPECT_EQ(gateway::ParseListSandboxes(query).status().message(), "limit must be a positive integer");
  q = {{"nextToken", "x"}};
  EXPECT_EQ(gateway::ParseListSandboxes(query).status().message(), "invalid nextToken");
  // The e2e suite asserts the parameter's name is in the message.
  for (const char* name : {"startedAfter", "startedBefore"}) {
    q = {{name, "yesterday"}};
    auto bad = gateway::ParseListSandboxes(query);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find(name), std::string::npos);
  }

  // An empty limit: the default for sandboxes and snapshots, refused for secrets.
  q = {{"limit", ""}};
  EXPECT_EQ(gateway::ParseListSandboxes(query)->limit, 100);
  EXPECT_EQ(gateway::ParseListSnapshots(query)->limit, 100);
  EXPECT_FALSE(gateway::ParseListSecrets(query).ok());
  q = {{"limit", "7"}, {"nextToken", "b"}, {"sandboxID", "s"}, {"name", "n"}};
  EXPECT_EQ(gateway::ParseListSecrets(query)->limit, 7);
  EXPECT_EQ(gateway::ParseListSecrets(query)->after, "b");
  auto snaps = gateway::ParseListSnapshots(query);
  EXPECT_EQ(snaps->sandbox_id, "s");
  EXPECT_EQ(snaps->name, "n");
  EXPECT_EQ(snaps->after, "b");
}

TEST(ServerRequestsTest, NetworkUpdate) {
  auto keep = rq::ParseNetworkUpdate({{"allowOut", {"api.example.com"}}}, /*current_internet=*/true);
  ASSERT_TRUE(keep.ok()) << keep.status().ToString();
  EXPECT_TRUE(keep->policy.internet());  // an omitted allow_internet_access keeps its value
  auto off = rq::ParseNetworkUpdate({{"allow_internet_access", false}}, true);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->policy.internet());
  auto bad = rq::ParseNetworkUpdate({{"allowOut", {"bad rule"}}}, false);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(ServerRequestsTest, SecretBodies) {
  auto c = rq::ParseCreateSecret({{"name", " DB-Password "}, {"value", "v"}}, "acme");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "db-password");
  EXPECT_EQ(c->policy.teams, std::vector<std::string>{"acme"});
  EXPECT_EQ(rq::ParseCreateSecret({{"value", "v"}}, "t").status().message(), "name (a string) is required");
  EXPECT_EQ(rq::ParseCreateSecret({{"name", "n"}}, "t").status().message(), "value (a string) is required");
  EXPECT_FALSE(rq::ParseCreateSecret({{"name", "sec_x"}, {"value", "v"}}, "t").ok());
  auto u = rq::ParseUpdateSecret({{"value", "v2"}});
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->metadata);
  EXPECT_TRUE(rq::ParseUpdateSecret({{"value", "v2"}, {"metadata", {{"k", "v"}}}})->metadata);
  // Unknown airlock.* keys are refused when the policy is built (SecretsService::UpdateSecret).
  EXPECT_TRUE(rq::ParseUpdateSecret({{"value", "v2"}, {"metadata", {{"airlock.nope", "v"}}}}).ok());
  EXPECT_FALSE(PolicyFromSecretMetadata({{"airlock.nope", "v"}}, "t").ok());
}

// E2B's error_code of a failed create (control/sandbox_controller.h).
TEST(HttpStatusTest, CreateErrorCodes) {
  using airlock::control::CreateErrorCode;
  using airlock::control::CreateOutcome;
  EXPECT_EQ(CreateErrorCode({nullptr, ResourceExhausted("memory"), 503}, 503), "sandbox_capacity_unavailable");
  EXPECT_EQ(CreateErrorCode({nullptr, ResourceExhausted("disk"), 507}, 507), "sandbox_capacity_unavailable");
  EXPECT_EQ(CreateErrorCode({nullptr, Internal("vmm exited")}, 500), "sandbox_create_failed");
  EXPECT_EQ(CreateErrorCode({nullptr, Status(StatusCode::kDeadlineExceeded, "agent")}, 504), "sandbox_create_failed");
  EXPECT_EQ(CreateErrorCode({nullptr, Status(StatusCode::kUnimplemented, "x")}, 501), "internal_server_error");
  EXPECT_EQ(CreateErrorCode({nullptr, ResourceExhausted("key quota"), 429}, 429), "");
  EXPECT_EQ(CreateErrorCode({nullptr, NotFound("template")}, 404), "");
}

TEST(HttpStatusTest, OneTable) {
  EXPECT_EQ(HttpStatusFor(InvalidArgument("x")), 400);
  EXPECT_EQ(HttpStatusFor(Status(StatusCode::kUnauthenticated, "x")), 401);
  EXPECT_EQ(HttpStatusFor(PermissionDenied("x")), 403);
  EXPECT_EQ(HttpStatusFor(NotFound("x")), 404);
  EXPECT_EQ(HttpStatusFor(Status(StatusCode::kAlreadyExists, "x")), 409);
  EXPECT_EQ(HttpStatusFor(FailedPrecondition("x")), 409);
  EXPECT_EQ(HttpStatusFor(ResourceExhausted("x")), 503);
  EXPECT_EQ(HttpStatusFor(ResourceExhausted("x"), HttpStatusContext::kDisk), 507);
  EXPECT_EQ(HttpStatusFor(Status(StatusCode::kDeadlineExceeded, "x")), 504);
  EXPECT_EQ(HttpStatusFor(Status(StatusCode::kUnimplemented, "x")), 501);
  EXPECT_EQ(HttpStatusFor(Status(StatusCode::kUnavailable, "x")), 503);
  EXPECT_EQ(HttpStatusFor(Internal("x")), 500);
  EXPECT_EQ(HttpStatusFor(ResourceExhausted("x"), HttpStatusContext::kRequestBody), 413);
  EXPECT_EQ(HttpStatusFor(Status(StatusCode::kDeadlineExceeded, "x"), HttpStatusContext::kRequestBody), 408);
  EXPECT_EQ(HttpStatusFor(Internal("x"), HttpStatusContext::kRequestBody), 400);
}

TEST(ApiKeyTableTest, FollowsTheRegistryAndOtherConnections) {
  std::string dir = std::filesystem::temp_directory_path() / ("airlock-keys-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string db = dir + "/airlock.db";
  auto daemon = Registry::Open(db);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  auto first = (*daemon)->CreateApiKey("first", "acme");
  ASSERT_TRUE(first.ok());
  gateway::ApiKeyTable table(daemon->get());
  ASSERT_TRUE(table.Reload().ok());
  auto found = table.Find(first->second);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, first->first.id);
  EXPECT_EQ(found->team, "acme");
  EXPECT_FALSE(table.Find(""));
  EXPECT_FALSE(table.Find("e2b_0000"));

  // The CLI is another connection: its commits change data_version.
  auto cli = Registry::Open(db);
  ASSERT_TRUE(cli.ok());
  auto second = (*cli)->CreateApiKey("second", "beta", /*admin=*/true);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(table.Find(second->second));  // not yet
  ASSERT_TRUE(table.RefreshIfStale().ok());
  ASSERT_TRUE(table.Find(second->second));
  EXPECT_TRUE(table.Find(second->second)->admin);
  ASSERT_TRUE((*cli)->RemoveApiKey("first").ok());
  ASSERT_TRUE(table.RefreshIfStale().ok());
  EXPECT_FALSE(table.Find(first->second));
  EXPECT_EQ(table.size(), 1u);
  ASSERT_TRUE(table.RefreshIfStale().ok());  // nothing changed: no reload, same table
  EXPECT_EQ(table.size(), 1u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace airlock::server
