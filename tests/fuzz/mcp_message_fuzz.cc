// libFuzzer target for MCP messages (src/mcp): any bytes as a JSON-RPC
// message through HandleMessage, and as tools/call arguments through every
// tool's schema check (mcp/schema.h). The tools' own calls are replaced by
// an invoker that only validates, so no daemon is needed: what is checked is
// that nothing a client sends throws, crashes or answers outside JSON-RPC.
#include "mcp/protocol.h"
#include "mcp/schema.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  using nlohmann::json;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  json m = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded()) return 0;
  mcp::SessionState s;
  mcp::ToolInvoker invoke = [](const std::string& tool, const json& args) {
    const json* schema = nullptr;
    for (const auto& t : mcp::ToolCatalogue())
      if (t["name"] == tool) schema = &t["inputSchema"];
    fuzz::Check(schema != nullptr);  // unknown names are refused before a call
    mcp::ToolOutcome o;
    Status st = mcp::ValidateAgainstSchema(args, *schema);
    fuzz::Check(st.ok() || st.code() == StatusCode::kInvalidArgument);
    o.result = {{"content", json::array()}, {"isError", !st.ok()}};
    return o;
  };
  auto r = mcp::HandleMessage(s, m, invoke, "fuzz");
  if (r) {
    fuzz::Check(r->is_object() && (*r)["jsonrpc"] == "2.0");
    fuzz::Check(r->contains("result") != r->contains("error"));
    (void)r->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  // The same bytes as arguments of every tool.
  for (const auto& t : mcp::ToolCatalogue()) {
    Status st = mcp::ValidateAgainstSchema(m, t["inputSchema"]);
    fuzz::Check(st.ok() || st.code() == StatusCode::kInvalidArgument);
  }
  return 0;
}
