// The MCP tools airlock offers (docs/mcp.md): sandboxes as tools for agents
// in MCP clients, without E2B code.
//
// Every tool acts through the daemon's own HTTP API, with the caller's API
// key, exactly as an SDK would: control-plane calls (create, list, kill,
// the access token) and data-plane calls (E2b-Sandbox-Id: commands, files,
// the code interpreter on port 49999). So a tool can do nothing the key
// could not, tenancy and limits apply unchanged, and the API's own audit
// records (sandbox.create, exec, file.read, ...) are written as for any
// client; the server adds one mcp.tool_call record per call.
//
// Shapes: ToolCatalogue() is the tools/list "tools" array (name,
// description, inputSchema, annotations); CallTool validates the arguments
// against that same inputSchema (schema.h) and returns a tools/call result.
// Errors are never thrown: an unknown tool, bad arguments, a refused or
// failed call all come back as a result with isError true and one text item
// saying what went wrong (MCP "tool execution errors").
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace airlock::mcp {

// Where the tools reach the API: a daemon's HTTP port and the key they act with.
struct ApiAccess {
  std::string host = "127.0.0.1";
  uint16_t port = 3000;
  std::string api_key;
};

// Bounds of what a tool returns to the client (MCP results go into a model's
// context, so output is cut with a note rather than sent whole).
inline constexpr size_t kMaxCommandOutput = 64 * 1024;    // each of stdout, stderr: bytes kept
inline constexpr size_t kMaxReadFile = 1024 * 1024;       // read_file: bytes
inline constexpr size_t kMaxDownload = 10 * 1024 * 1024;  // download_file: bytes (base64 in the result)
inline constexpr size_t kMaxWriteFile = 10 * 1024 * 1024; // write_file: decoded bytes
inline constexpr int kDefaultCommandTimeoutS = 60;
inline constexpr int kDefaultCodeTimeoutS = 300;
inline constexpr int kMaxCommandTimeoutS = 3600;

const nlohmann::json& ToolCatalogue();

struct ToolOutcome {
  nlohmann::json result;  // the tools/call result: {content, structuredContent?, isError}
  std::string sandbox;    // the sandbox it acted on or made, for the audit record
  std::string error;      // non-empty when result.isError (one line, for the audit record)
};
ToolOutcome CallTool(const ApiAccess& api, const std::string& name, const nlohmann::json& arguments);

}  // namespace airlock::mcp
