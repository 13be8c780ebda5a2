// The MCP layer without a daemon: the schema validator, the JSON-RPC
// dispatch, and tool argument checks (which fail before any call is made).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace airlock::mcp
