#include "mcp/protocol.h"

#include <algorithm>

namespace airlock::mcp {

using nlohmann::json;

json ErrorResponse(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

bool IsRequest(const json& m) { return m.is_object() && m.contains("method") && m.contains("id"); }

namespace {

json Result(const json& id, json result) { return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}; }

std::string Bounded(const json& j, const char* key, size_t max) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  std::string s = it->get<std::string>();
  if (s.size() > max) s.resize(max);
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  return s;
}

}  // namespace

std::optional<json> HandleMessage(SessionState& s, const json& m, const ToolInvoker& invoke,
                                  const std::string& version) {
  if (!m.is_object() || m.value("jsonrpc", "") != "2.0")
    return ErrorResponse(m.is_object() && m.contains("id") ? m["id"] : json(nullptr), kInvalidRequest,
                         "not a JSON-RPC 2.0 message");
  if (!m.contains("method")) return std::nullopt;  // a response to nothing we asked: dropped
  if (!m["method"].is_string()) return ErrorResponse(m.value("id", json(nullptr)), kInvalidRequest, "method must be a string");
  const std::string method = m["method"].get<std::string>();
  if (!m.contains("id")) return std::nullopt;  // notifications: initialized, cancelled, ...
  const json& id = m["id"];
  if (!id.is_string() && !id.is_number_integer())
    return ErrorResponse(nullptr, kInvalidRequest, "id must be a string or an integer");
  const json params = m.contains("params") ? m["params"] : json::object();
  if (!params.is_object()) return ErrorResponse(id, kInvalidParams, "params must be an object");

  if (method == "initialize") {
    std::string asked = Bounded(params, "protocolVersion", 32);
    bool known = std::find(kProtocolVersions.begin(), kProtocolVersions.end(), asked) != kProtocolVersions.end();
    s.protocol_version = known ? asked : kProtocolVersions.front();
    if (auto ci = params.find("clientInfo"); ci != params.end() && ci->is_object()) {
      std::string name = Bounded(*ci, "name", 128);
      if (!name.empty()) s.client_name = name;
      s.client_version = Bounded(*ci, "version", 64);
    }
    s.initialized = true;
    return Result(id, {{"protocolVersion", s.protocol_version},
                       {"capabilities", {{"tools", {{"listChanged", false}}}}},
                       {"serverInfo", {{"name", kServerName}, {"title", "airlock sandboxes"}, {"version", version}}},
                       {"instructions",
                        "Each sandbox is a disposable Linux microVM. Call create_sandbox first and pass its sandbox_id "
                        "to the other tools; kill_sandbox when done (sandboxes also end at their timeout). Network "
                        "egress is sealed unless create_sandbox's allow_out names destinations."}});
  }
  if (method == "ping") return Result(id, json::object());
  if (method == "tools/list") return Result(id, {{"tools", ToolCatalogue()}});
  if (method == "tools/call") {
    if (!params.contains("name") || !params["name"].is_string())
      return ErrorResponse(id, kInvalidParams, "tools/call needs params.name (a string)");
    const std::string name = params["name"].get<std::string>();
    bool known = false;
    for (const auto& t : ToolCatalogue()) known = known || t["name"] == name;
    if (!known) return ErrorResponse(id, kInvalidParams, "unknown tool: " + name);
    json args = params.contains("arguments") ? params["arguments"] : json::object();
    if (!args.is_object()) {
      return Result(id, {{"content", json::array({{{"type", "text"}, {"text", name + ": arguments must be an object"}}})},
                         {"isError", true}});
    }
    return Result(id, invoke(name, args).result);
  }
  return ErrorResponse(id, kMethodNotFound, "method not found: " + method);
}

}  // namespace airlock::mcp
