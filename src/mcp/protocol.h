// MCP (Model Context Protocol) JSON-RPC 2.0 message handling, independent of
// the transport (stdio lines via `airlock mcp`, streamable HTTP at /mcp).
// Spec: modelcontextprotocol.io/specification, revisions 2024-11-05 through
// 2025-11-25; airlock offers the "tools" capability only.
//
// Handled: initialize, notifications/initialized, ping, tools/list,
// tools/call, notifications/cancelled (ignored: calls are not interruptible
// yet). Protocol errors are JSON-RPC errors (-32700 parse, -32600 invalid
// request, -32601 unknown method, -32602 bad params, including an unknown
// tool name, as the spec's example); everything that goes wrong inside a
// tool is a tool result with isError (tools.h).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mcp/tools.h"

namespace airlock::mcp {

inline constexpr const char* kServerName = "airlock";
// Newest first; initialize answers with the client's when it is here, else the newest.
inline const std::vector<std::string> kProtocolVersions = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;

// What one session learnt at initialize.
struct SessionState {
  bool initialized = false;  // initialize answered
  std::string protocol_version;
  std::string client_name = "unknown";  // clientInfo.name (bounded to 128 bytes)
  std::string client_version;
};

using ToolInvoker = std::function<ToolOutcome(const std::string& tool, const nlohmann::json& arguments)>;

// One JSON-RPC message in, its response out (nullopt for a notification or
// a response). `version`: the server's version string for serverInfo.
std::optional<nlohmann::json> HandleMessage(SessionState& session, const nlohmann::json& message,
                                            const ToolInvoker& invoke, const std::string& version);

nlohmann::json ErrorResponse(const nlohmann::json& id, int code, const std::string& message);

// True for a JSON-RPC request (has "method" and "id"); false for
// notifications and responses.
bool IsRequest(const nlohmann::json& message);

}  // namespace airlock::mcp
