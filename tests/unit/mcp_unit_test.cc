// The MCP layer without a daemon: the schema validator, the JSON-RPC
// dispatch, tool argument checks (which fail before any call is made), the
// per-team fair queue of tool calls and the Origin allowlist.
#include <gtest/gtest.h>

#include <deque>

#include "mcp/call_queue.h"
#include "mcp/origin.h"
#include "mcp/protocol.h"
#include "mcp/schema.h"
#include "mcp/tools.h"

namespace airlock::mcp {
namespace {

using nlohmann::json;

const json& SchemaOf(const std::string& tool) {
  for (const auto& t : ToolCatalogue())
    if (t["name"] == tool) return t["inputSchema"];
  static const json none;
  return none;
}

TEST(McpSchemaTest, AcceptsGoodArgumentsAndNamesTheBadField) {
  const json& s = SchemaOf("run_command");
  EXPECT_TRUE(ValidateAgainstSchema({{"sandbox_id", "abc"}, {"command", "ls"}}, s).ok());
  EXPECT_TRUE(ValidateAgainstSchema({{"sandbox_id", "abc"}, {"command", "ls"}, {"timeout_seconds", 5.0}}, s).ok());
  auto st = ValidateAgainstSchema({{"sandbox_id", "abc"}}, s);
  EXPECT_EQ(st.message(), "arguments.command: is required");
  st = ValidateAgainstSchema({{"sandbox_id", "abc"}, {"command", "ls"}, {"timeout_seconds", "5"}}, s);
  EXPECT_EQ(st.message(), "arguments.timeout_seconds: must be an integer");
  st = ValidateAgainstSchema({{"sandbox_id", "abc"}, {"command", "ls"}, {"timeout_seconds", 1.5}}, s);
  EXPECT_EQ(st.message(), "arguments.timeout_seconds: must be an integer");
  st = ValidateAgainstSchema({{"sandbox_id", "abc"}, {"command", "ls"}, {"timeout_seconds", 0}}, s);
  EXPECT_EQ(st.message(), "arguments.timeout_seconds: must be at least 1");
  st = ValidateAgainstSchema({{"sandbox_id", "abc"}, {"command", "ls"}, {"user", "nobody"}}, s);
  EXPECT_EQ(st.message(), "arguments.user: must be one of \"user\", \"root\"");
  st = ValidateAgainstSchema({{"sandbox_id", "abc"}, {"command", "ls"}, {"colour", 1}}, s);
  EXPECT_NE(st.message().find("arguments.colour: unknown property"), std::string::npos);
  st = ValidateAgainstSchema({{"sandbox_id", "abc"}, {"command", "ls"}, {"env", {{"A", 1}}}}, s);
  EXPECT_EQ(st.message(), "arguments.env.A: must be a string");
  st = ValidateAgainstSchema({{"sandbox_id", ""}, {"command", "ls"}}, s);
  EXPECT_EQ(st.message(), "arguments.sandbox_id: must be at least 1 bytes long");
  st = ValidateAgainstSchema({{"allow_out", {"a.example", 7}}}, SchemaOf("create_sandbox"));
  EXPECT_EQ(st.message(), "arguments.allow_out[1]: must be a string");
  EXPECT_FALSE(ValidateAgainstSchema(json::array(), SchemaOf("list_sandboxes")).ok());
}

TEST(McpSchemaTest, EverySchemaIsAClosedObjectWhoseRequiredFieldsExist) {
  ASSERT_EQ(ToolCatalogue().size(), 9u);
  for (const auto& t : ToolCatalogue()) {
    const json& s = t["inputSchema"];
    EXPECT_EQ(s["type"], "object") << t["name"];
    EXPECT_EQ(s["additionalProperties"], false) << t["name"];
    for (const auto& r : s["required"]) EXPECT_TRUE(s["properties"].contains(r.get<std::string>())) << t["name"];
    EXPECT_FALSE(t["description"].get<std::string>().empty());
  }
}

TEST(McpProtocolTest, InitializeNegotiatesAndRemembersTheClient) {
  SessionState s;
  int calls = 0;
  ToolInvoker invoke = [&](const std::string&, const json&) {
    ++calls;
    return ToolOutcome{};
  };
  auto r = HandleMessage(s,
                         {{"jsonrpc", "2.0"},
                          {"id", 1},
                          {"method", "initialize"},
                          {"params", {{"protocolVersion", "2025-06-18"}, {"clientInfo", {{"name", "claude\nx"}, {"version", "1"}}}}}},
                         invoke, "0.1.0");
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["result"]["protocolVersion"], "2025-06-18");
  EXPECT_TRUE((*r)["result"]["capabilities"].contains("tools"));
  EXPECT_EQ(s.client_name, "claude x");  // control characters never reach a log line
  r = HandleMessage(s, {{"jsonrpc", "2.0"}, {"id", 2}, {"method", "initialize"}, {"params", {{"protocolVersion", "1999-01-01"}}}},
                    invoke, "0.1.0");
  EXPECT_EQ((*r)["result"]["protocolVersion"], kProtocolVersions.front());
  EXPECT_FALSE(HandleMessage(s, {{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}, invoke, "0.1.0"));
  EXPECT_EQ(calls, 0);
}

TEST(McpProtocolTest, ProtocolErrorsAreJsonRpcErrors) {
  SessionState s;
  ToolInvoker invoke = [](const std::string&, const json&) { return ToolOutcome{}; };
  auto code = [&](const json& m) { return (*HandleMessage(s, m, invoke, "v"))["error"]["code"].get<int>(); };
  EXPECT_EQ(code({{"id", 1}, {"method", "ping"}}), kInvalidRequest);  // no "jsonrpc"
  EXPECT_EQ(code({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "resources/list"}}), kMethodNotFound);
  EXPECT_EQ(code({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/call"}, {"params", {{"name", "rm_rf"}}}}),
            kInvalidParams);
  EXPECT_EQ(code({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/call"}, {"params", json::array()}}), kInvalidParams);
  EXPECT_EQ(code({{"jsonrpc", "2.0"}, {"id", json::array()}, {"method", "ping"}}), kInvalidRequest);
  auto pong = HandleMessage(s, {{"jsonrpc", "2.0"}, {"id", "a"}, {"method", "ping"}}, invoke, "v");
  EXPECT_EQ((*pong)["id"], "a");
  EXPECT_TRUE((*pong)["result"].is_object());
}

TEST(McpToolsTest, BadArgumentsAreToolErrorsBeforeAnyCall) {
  // Port 1 on loopback: were a call made, it would fail differently.
  ApiAccess nowhere{"127.0.0.1", 1, "k"};
  auto o = CallTool(nowhere, "run_command", {{"sandbox_id", "x"}});
  EXPECT_TRUE(o.result["isError"].get<bool>());
  EXPECT_EQ(o.result["content"][0]["text"], "run_command: arguments.command: is required");
  o = CallTool(nowhere, "write_file", {{"sandbox_id", "x"}, {"path", "/a"}, {"content", "%%%"}, {"encoding", "base64"}});
  EXPECT_TRUE(o.result["isError"].get<bool>());
  EXPECT_NE(o.error.find("not base64"), std::string::npos);
  o = CallTool(nowhere, "list_sandboxes", json::object());
  EXPECT_TRUE(o.result["isError"].get<bool>());  // nobody listens: an error result, not a crash
  EXPECT_NE(o.error.find("list_sandboxes"), std::string::npos);
}

// The fair queue driven by hand: "threads" are a list of launched tasks the
// test runs one at a time, so every order is deterministic (no sleeps).
struct ManualPool {
  std::deque<FairCallQueue::Task> launched;
  std::vector<std::string> ran;
  std::shared_ptr<FairCallQueue> q;
  ManualPool(size_t threads, size_t per_team) {
    auto made =
        FairCallQueue::Create(threads, per_team, [this](FairCallQueue::Task t) { launched.push_back(std::move(t)); });
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (made.ok()) q = *made;
  }
  Status Submit(const std::string& team, const std::string& label) {
    return q->Submit(team, [this, label] { ran.push_back(label); });
  }
  // Ends the oldest launched call (it runs, then frees its thread).
  void RunOldest() {
    ASSERT_FALSE(launched.empty());
    auto t = std::move(launched.front());
    launched.pop_front();
    t();
  }
};

// A call that gives its place back before its answer goes out: the
// client's next call, sent the moment it has the answer, is admitted even
// while the first call's thread has not returned yet (CI saw the 7th of 7
// calls refused because an earlier call was still counted).
TEST(McpCallQueueTest, ACallThatFinishesEarlyFreesItsPlaceBeforeItReturns) {
  ManualPool p(16, 2);
  ASSERT_TRUE(p.q);
  Status inside = Internal("not run");
  ASSERT_TRUE(p.q->Submit("A", FairCallQueue::FinishingTask([&](const std::function<void()>& finish) {
                  finish();
                  finish();  // once only
                  // The answer is out; the next call comes before this returns.
                  inside = p.Submit("A", "next");
                })).ok());
  ASSERT_TRUE(p.Submit("A", "second").ok());
  EXPECT_EQ(p.Submit("A", "third").code(), StatusCode::kResourceExhausted);
  p.RunOldest();
  EXPECT_TRUE(inside.ok()) << inside.ToString();
  EXPECT_EQ(p.q->running(), 2u);  // "second" and "next": the first counted once, not twice
  p.RunOldest();
  p.RunOldest();
  EXPECT_EQ(p.q->running(), 0u);
}

TEST(McpCallQueueTest, OneTeamHoldsLessThanHalfThePoolAndIsRefusedAtOnce) {
  EXPECT_EQ(FairCallQueue::DefaultPerTeam(16), 7u);
  EXPECT_FALSE(FairCallQueue::Create(16, 8, [](FairCallQueue::Task) {}).ok());  // half: refused
  EXPECT_FALSE(FairCallQueue::Create(2, 0, [](FairCallQueue::Task) {}).ok());
  // Check (what the daemon runs before it opens anything) says the same.
  EXPECT_EQ(FairCallQueue::Check(16, 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FairCallQueue::Check(2, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(FairCallQueue::Check(16, 0).ok());
  EXPECT_TRUE(FairCallQueue::Check(16, 7).ok());
  ManualPool p(16, 0);
  ASSERT_TRUE(p.q);
  // The case: two keys of team A (the key plays no part) fill their
  // team's share; the next call of A is refused at once, not queued.
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(p.Submit("A", "a" + std::to_string(i)).ok());
  Status refused = p.Submit("A", "a-extra");
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("too many MCP calls in flight"), std::string::npos);
  EXPECT_EQ(p.q->waiting(), 0u);
  // Another team's list_sandboxes runs at once: threads are left for it.
  EXPECT_TRUE(p.Submit("B", "b-list").ok());
  EXPECT_EQ(p.launched.size(), 8u);
  EXPECT_EQ(p.q->running(), 8u);
  // One of A's ends: A may submit again.
  p.RunOldest();
  EXPECT_TRUE(p.Submit("A", "a7").ok());
  EXPECT_EQ(p.Submit("A", "a8").code(), StatusCode::kResourceExhausted);
}

TEST(McpCallQueueTest, WaitingTeamsTakeTurns) {
  ManualPool p(5, 2);
  ASSERT_TRUE(p.q);
  for (const char* t : {"A", "B"})
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(p.Submit(t, std::string(t) + std::to_string(i)).ok());
  ASSERT_TRUE(p.Submit("C", "C0").ok());  // the fifth thread
  EXPECT_EQ(p.launched.size(), 5u);
  // Every thread is busy: these wait. C began waiting first, then D, then E.
  for (const char* t : {"C1", "D0", "D1", "E0", "E1"}) ASSERT_TRUE(p.Submit(std::string(1, t[0]), t).ok());
  EXPECT_EQ(p.q->waiting(), 5u);
  EXPECT_EQ(p.launched.size(), 5u);
  // Each waiting team is capped too: D holds 2 (both waiting).
  EXPECT_EQ(p.Submit("D", "D2").code(), StatusCode::kResourceExhausted);
  // Drain: one call per team per turn (C, D, E, D, E), not first come first
  // served (which would give D both its calls before E's first).
  while (!p.launched.empty()) p.RunOldest();
  std::vector<std::string> expected = {"A0", "A1", "B0", "B1", "C0", "C1", "D0", "E0", "D1", "E1"};
  EXPECT_EQ(p.ran, expected);
  EXPECT_EQ(p.q->running(), 0u);
  EXPECT_EQ(p.q->waiting(), 0u);
}

TEST(McpCallQueueTest, AFreedThreadGoesToTheTeamWaitingNotToANewerCall) {
  ManualPool p(3, 1);
  ASSERT_TRUE(p.q);
  ASSERT_TRUE(p.Submit("A", "A0").ok());
  ASSERT_TRUE(p.Submit("B", "B0").ok());
  ASSERT_TRUE(p.Submit("C", "C0").ok());
  ASSERT_TRUE(p.Submit("D", "D0").ok());  // waits
  p.RunOldest();                          // A0 ends: D0 is launched, not a newer call of A
  ASSERT_TRUE(p.Submit("A", "A1").ok());  // every thread busy again: A1 waits
  EXPECT_EQ(p.q->waiting(), 1u);
  while (!p.launched.empty()) p.RunOldest();
  std::vector<std::string> expected = {"A0", "B0", "C0", "D0", "A1"};
  EXPECT_EQ(p.ran, expected);
}

TEST(McpOriginTest, OnlyTheConfiguredOriginsNeverTheRequestsHost) {
  auto loop = AllowedOrigins::For("127.0.0.1", 3000, "");
  for (const char* ok :
       {"http://127.0.0.1:3000", "http://localhost:3000", "http://[::1]:3000", "HTTP://LocalHost:3000"})
    EXPECT_TRUE(loop.Allows(ok)) << ok;
  // DNS rebinding: the attacker's name now resolves to 127.0.0.1, and the
  // browser sends Origin and Host both as evil.example:3000. Refused, since
  // the allowlist never looks at Host.
  for (const char* bad : {"http://evil.example:3000", "http://evil.example", "http://localhost:3001",
                          "https://localhost:3000", "http://localhost", "null", "", "http://localhost:3000/",
                          "http://user@localhost:3000", "http://localhost:03000x", "http://127.0.0.1.evil.example:3000",
                          "file://localhost:3000", "http://localhost:0", "http://[::1:3000"})
    EXPECT_FALSE(loop.Allows(bad)) << bad;

  // A wildcard listen: the loopback forms and --public-url only (another
  // name for the host must be configured as --public-url).
  auto wild = AllowedOrigins::For("0.0.0.0", 80, "https://Airlock.Example.org/console/");
  EXPECT_TRUE(wild.Allows("http://localhost"));
  EXPECT_TRUE(wild.Allows("http://localhost:80"));
  EXPECT_TRUE(wild.Allows("https://airlock.example.org"));
  EXPECT_TRUE(wild.Allows("https://airlock.example.org:443"));
  EXPECT_FALSE(wild.Allows("http://airlock.example.org"));
  EXPECT_FALSE(wild.Allows("https://x.airlock.example.org"));
  EXPECT_FALSE(wild.Allows("http://10.0.0.5"));

  // A routable listen address: exactly that origin.
  auto lan = AllowedOrigins::For("10.1.2.3", 3000, "");
  EXPECT_TRUE(lan.Allows("http://10.1.2.3:3000"));
  EXPECT_FALSE(lan.Allows("http://localhost:3000"));
  auto v6 = AllowedOrigins::For("[::]", 8080, "");
  EXPECT_TRUE(v6.Allows("http://[0:0:0:0:0:0:0:1]:8080"));
}

}  // namespace
}  // namespace airlock::mcp
