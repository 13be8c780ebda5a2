#include "mcp/tools.h"

#include <algorithm>
#include <functional>
#include <map>

#include "audit/audit_log.h"  // StringField (never throws on untrusted JSON), Sha256Hex
#include "common/agent_port.h"
#include "core/envd_client.h"
#include "envd/proto_json.h"  // Base64Encode/Decode
#include "http/client.h"
#include "mcp/schema.h"

namespace airlock::mcp {

using nlohmann::json;

namespace {

constexpr uint16_t kInterpreterPort = 49999;
constexpr auto kControlTimeout = std::chrono::seconds(180);

json SandboxIdSchema() {
  return {{"type", "string"},
          {"minLength", 1},
          {"maxLength", 128},
          {"description", "The sandbox's id, as create_sandbox or list_sandboxes returned it."}};
}
json GuestPathSchema(const char* what) {
  return {{"type", "string"}, {"minLength", 1}, {"maxLength", 4096}, {"description", what}};
}
json UserSchema() {
  return {{"type", "string"},
          {"enum", {"user", "root"}},
          {"description", "Who acts in the sandbox (default: user, uid 1000)."}};
}
json ObjectSchema(json properties, json required) {
  return {{"type", "object"},
          {"properties", std::move(properties)},
          {"required", std::move(required)},
          {"additionalProperties", false}};
}

json BuildCatalogue() {
  json tools = json::array();
  auto add = [&](const char* name, const char* title, const char* description, json schema, bool read_only,
                 bool destructive) {
    tools.push_back({{"name", name},
                     {"title", title},
                     {"description", description},
                     {"inputSchema", std::move(schema)},
                     {"annotations",
                      {{"title", title},
                       {"readOnlyHint", read_only},
                       {"destructiveHint", destructive},
                       {"openWorldHint", false}}}});
  };
  add("create_sandbox", "Create a sandbox",
      "Start a new isolated Linux sandbox (a microVM with its own kernel) and return its id. Outbound network is "
      "sealed unless allow_out names hosts or CIDRs. The sandbox is destroyed at its timeout.",
      ObjectSchema({{"template",
                     {{"type", "string"},
                      {"minLength", 1},
                      {"maxLength", 256},
                      {"description",
                       "Template name or id (default \"base\": Debian with python3, node, git, curl). "
                       "\"code-interpreter\" adds the run_code tool's Jupyter kernels."}}},
                    {"timeout_seconds",
                     {{"type", "integer"},
                      {"minimum", 1},
                      {"maximum", 86400},
                      {"description", "Seconds until the sandbox is destroyed (default: the server's, 300)."}}},
                    {"allow_out",
                     {{"type", "array"},
                      {"maxItems", 64},
                      {"items", {{"type", "string"}, {"minLength", 1}, {"maxLength", 253}}},
                      {"description",
                       "Destinations the sandbox may reach: domain names (\"pypi.example.org\", "
                       "\"*.example.org\") or IPv4 CIDRs. Empty or omitted: no egress."}}},
                    {"metadata",
                     {{"type", "object"},
                      {"additionalProperties", {{"type", "string"}, {"maxLength", 1024}}},
                      {"description", "String labels kept with the sandbox (shown by list_sandboxes)."}}}},
                   json::array()),
      false, false);
  add("run_command", "Run a shell command",
      "Run a command with bash -l -c in a sandbox and wait for it to end. Returns its exit code, stdout and "
      "stderr (each cut to 64 KiB with a note). A non-zero exit code is a result, not a tool error.",
      ObjectSchema({{"sandbox_id", SandboxIdSchema()},
                    {"command", {{"type", "string"}, {"minLength", 1}, {"maxLength", 65536},
                                 {"description", "The shell command line, e.g. \"python3 -c 'print(6*7)'\"."}}},
                    {"cwd", GuestPathSchema("Working directory (default: the user's home).")},
                    {"user", UserSchema()},
                    {"env",
                     {{"type", "object"},
                      {"additionalProperties", {{"type", "string"}, {"maxLength", 65536}}},
                      {"description", "Extra environment variables."}}},
                    {"timeout_seconds",
                     {{"type", "integer"},
                      {"minimum", 1},
                      {"maximum", kMaxCommandTimeoutS},
                      {"description", "Kill the command after this many seconds (default 60)."}}}},
                   {"sandbox_id", "command"}),
      false, false);
  add("run_code", "Run code in the code interpreter",
      "Run code in the sandbox's Jupyter kernel (templates with the code interpreter, e.g. \"code-interpreter\"); "
      "state persists between calls. Returns stdout, stderr, results (text, and images as PNG) and the error if "
      "the code raised.",
      ObjectSchema({{"sandbox_id", SandboxIdSchema()},
                    {"code", {{"type", "string"}, {"minLength", 1}, {"maxLength", 1048576}}},
                    {"language",
                     {{"type", "string"},
                      {"enum", {"python", "javascript", "typescript", "r", "java", "bash"}},
                      {"description", "The kernel's language (default python)."}}},
                    {"timeout_seconds",
                     {{"type", "integer"},
                      {"minimum", 1},
                      {"maximum", kMaxCommandTimeoutS},
                      {"description",
                       "Interrupt the execution after this many seconds (default 300); the kernel and its state "
                       "stay."}}}},
                   {"sandbox_id", "code"}),
      false, false);
  add("read_file", "Read a text file",
      "Read a UTF-8 text file from a sandbox (at most 1 MiB; use download_file for binary files).",
      ObjectSchema({{"sandbox_id", SandboxIdSchema()},
                    {"path", GuestPathSchema("Absolute path, or relative to the user's home.")},
                    {"user", UserSchema()}},
                   {"sandbox_id", "path"}),
      true, false);
  add("write_file", "Write a file",
      "Write a file in a sandbox, creating its parent directories; an existing file is replaced.",
      ObjectSchema({{"sandbox_id", SandboxIdSchema()},
                    {"path", GuestPathSchema("Absolute path, or relative to the user's home.")},
                    {"content", {{"type", "string"}, {"maxLength", 14 * 1024 * 1024}}},
                    {"encoding",
                     {{"type", "string"},
                      {"enum", {"utf8", "base64"}},
                      {"description", "How content is given (default utf8)."}}},
                    {"user", UserSchema()}},
                   {"sandbox_id", "path", "content"}),
      false, true);
  add("list_files", "List a directory",
      "List a directory in a sandbox: name, type, size in bytes, permissions.",
      ObjectSchema({{"sandbox_id", SandboxIdSchema()},
                    {"path", GuestPathSchema("Directory (default: the user's home).")},
                    {"depth", {{"type", "integer"}, {"minimum", 1}, {"maximum", 10},
                               {"description", "How deep to descend (default 1)."}}},
                    {"user", UserSchema()}},
                   {"sandbox_id"}),
      true, false);
  add("download_file", "Download a file",
      "Fetch a file (an artefact: an archive, an image, any bytes; at most 10 MiB) from a sandbox as an embedded "
      "resource, with its size and SHA-256.",
      ObjectSchema({{"sandbox_id", SandboxIdSchema()},
                    {"path", GuestPathSchema("Absolute path, or relative to the user's home.")},
                    {"user", UserSchema()}},
                   {"sandbox_id", "path"}),
      true, false);
  add("kill_sandbox", "Kill a sandbox", "Destroy a sandbox now: its processes, memory and files are gone.",
      ObjectSchema({{"sandbox_id", SandboxIdSchema()}}, {"sandbox_id"}), false, true);
  add("list_sandboxes", "List sandboxes",
      "List the running and paused sandboxes this API key may see: id, template, state, start and end times, "
      "metadata.",
      ObjectSchema(json::object(), json::array()), true, false);
  return tools;
}

json Text(const std::string& text) { return {{"type", "text"}, {"text", text}}; }

ToolOutcome Fail(std::string message, std::string sandbox = "") {
  ToolOutcome o;
  o.result = {{"content", json::array({Text(message)})}, {"isError", true}};
  o.sandbox = std::move(sandbox);
  o.error = std::move(message);
  return o;
}

ToolOutcome Ok(json content, json structured, std::string sandbox) {
  ToolOutcome o;
  o.result = {{"content", std::move(content)}, {"isError", false}};
  if (!structured.is_null()) o.result["structuredContent"] = std::move(structured);
  o.sandbox = std::move(sandbox);
  return o;
}

// Keeps UTF-8 valid when cutting: backs off to a character boundary.
std::string CutUtf8(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

class Api {
 public:
  explicit Api(const ApiAccess& a) : a_(a) {}

  StatusOr<http::HttpReply> Control(const std::string& method, const std::string& target, const json& body = nullptr) {
    http::HttpCall call;
    call.host = a_.host;
    call.port = a_.port;
    call.method = method;
    call.target = target;
    call.headers = {{"X-API-Key", a_.api_key}, {"Content-Type", "application/json"}};
    if (!body.is_null()) call.body = body.dump();
    call.timeout = kControlTimeout;
    return http::HttpDo(call);
  }

  // The sandbox's envd access token (GET /sandboxes/{id}); NotFound with the
  // API's message for a sandbox the key cannot see.
  StatusOr<std::string> Token(const std::string& id) {
    auto r = Control("GET", "/sandboxes/" + http::UrlEncodeComponent(id));
    if (!r.ok()) return r.status();
    if (r->status != 200) return ApiError(*r);
    json j = json::parse(r->body, nullptr, false);
    if (!j.is_object()) return Internal("GET /sandboxes/" + id + ": the answer is not a JSON object");
    return audit::StringField(j, "envdAccessToken");
  }

  // A data-plane call to `port` of sandbox `id` (the daemon routes it).
  StatusOr<http::HttpReply> Data(const std::string& id, const std::string& token, uint16_t port,
                                 const std::string& method, const std::string& target, std::string body,
                                 const std::string& content_type, size_t max_body,
                                 std::chrono::milliseconds timeout) {
    http::HttpCall call;
    call.host = a_.host;
    call.port = a_.port;
    call.method = method;
    call.target = target;
    call.headers = {{"E2b-Sandbox-Id", id}, {"E2b-Sandbox-Port", std::to_string(port)}};
    if (!token.empty()) call.headers.push_back({"X-Access-Token", token});
    if (!content_type.empty()) call.headers.push_back({"Content-Type", content_type});
    call.body = std::move(body);
    call.max_body = max_body;
    call.timeout = timeout;
    return http::HttpDo(call);
  }

  EnvdClient Envd(const std::string& id, const std::string& token) {
    return EnvdClient::ViaDaemon(AgentEndpoint{a_.host, a_.port}, id, token);
  }

  // The API's own message from a JSON error body, with the status.
  static Status ApiError(const http::HttpReply& r) {
    json j = json::parse(r.body, nullptr, false);
    std::string message = j.is_object() ? audit::StringField(j, "message") : "";
    if (message.empty()) message = r.body.substr(0, 300);
    std::string text = "HTTP " + std::to_string(r.status) + ": " + message;
    if (r.status == 404) return NotFound(text);
    if (r.status == 400) return InvalidArgument(text);
    if (r.status == 401 || r.status == 403) return PermissionDenied(text);
    return Unavailable(text);
  }

 private:
  ApiAccess a_;
};

// "path" relative to the user's home, as the SDK's are (the agent resolves it).
std::string FilesTarget(const std::string& path, const std::string& user) {
  return "/files?path=" + http::UrlEncodeComponent(path) + "&username=" + http::UrlEncodeComponent(user);
}

ToolOutcome CreateSandbox(Api& api, const json& args) {
  json body = {{"templateID", audit::StringField(args, "template", "base")}};
  if (args.contains("timeout_seconds")) body["timeout"] = args["timeout_seconds"].get<int64_t>();
  if (args.contains("metadata")) body["metadata"] = args["metadata"];
  if (args.contains("allow_out") && !args["allow_out"].empty()) body["network"] = {{"allowOut", args["allow_out"]}};
  auto r = api.Control("POST", "/v2/sandboxes", body);
  if (!r.ok()) return Fail("create_sandbox: " + r.status().message());
  if (r->status != 201 && r->status != 200) return Fail("create_sandbox: " + Api::ApiError(*r).message());
  json j = json::parse(r->body, nullptr, false);
  std::string id = j.is_object() ? audit::StringField(j, "sandboxID") : "";
  if (id.empty()) return Fail("create_sandbox: the answer has no sandboxID");
  json out = {{"sandbox_id", id}, {"template", audit::StringField(j, "templateID")}};
  return Ok(json::array({Text("Created sandbox " + id + " (template " + out["template"].get<std::string>() +
                              "). Pass sandbox_id \"" + id + "\" to the other tools.")}),
            out, id);
}

ToolOutcome RunCommand(Api& api, const json& args) {
  std::string id = audit::StringField(args, "sandbox_id");
  auto token = api.Token(id);
  if (!token.ok()) return Fail("run_command: " + token.status().message(), id);
  ExecRequest req;
  req.cmd = "/bin/bash";
  req.args = {"-l", "-c", audit::StringField(args, "command")};
  if (args.contains("cwd")) req.cwd = audit::StringField(args, "cwd");
  req.user = audit::StringField(args, "user", "user");
  if (args.contains("env")) {
    for (const auto& [k, v] : args["env"].items()) req.envs[k] = v.get<std::string>();
  }
  int timeout_s = args.contains("timeout_seconds") ? args["timeout_seconds"].get<int>() : kDefaultCommandTimeoutS;
  req.timeout = std::chrono::seconds(timeout_s);
  std::string out, err;
  size_t out_total = 0, err_total = 0;
  ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view b) {
    out_total += b.size();
    if (out.size() < kMaxCommandOutput) out.append(b.substr(0, kMaxCommandOutput - out.size()));
  };
  cb.on_stderr = [&](std::string_view b) {
    err_total += b.size();
    if (err.size() < kMaxCommandOutput) err.append(b.substr(0, kMaxCommandOutput - err.size()));
  };
  auto res = api.Envd(id, *token).Exec(req, cb);
  if (!res.ok()) return Fail("run_command: " + res.status().message(), id);
  int code = res->ShellCode();
  std::string text = "exit code: " + std::to_string(code);
  if (!res->exited && !res->status.empty()) text += " (" + res->status + ")";
  if (timeout_s && res->status.find("killed") != std::string::npos) text += "; the command may have hit its timeout";
  auto section = [&](const char* name, const std::string& bytes, size_t total) {
    text += std::string("\n--- ") + name + " ---\n" + CutUtf8(bytes, kMaxCommandOutput);
    if (total > bytes.size())
      text += "\n[" + std::string(name) + " cut: showing the first " + std::to_string(bytes.size()) + " of " +
              std::to_string(total) + " bytes]";
  };
  section("stdout", out, out_total);
  section("stderr", err, err_total);
  json structured = {{"exit_code", code},
                     {"stdout", CutUtf8(out, kMaxCommandOutput)},
                     {"stderr", CutUtf8(err, kMaxCommandOutput)},
                     {"stdout_bytes", out_total},
                     {"stderr_bytes", err_total},
                     {"truncated", out_total > out.size() || err_total > err.size()}};
  return Ok(json::array({Text(text)}), structured, id);
}

ToolOutcome RunCode(Api& api, const json& args) {
  std::string id = audit::StringField(args, "sandbox_id");
  auto token = api.Token(id);
  if (!token.ok()) return Fail("run_code: " + token.status().message(), id);
  json body = {{"code", audit::StringField(args, "code")}};
  if (args.contains("language")) body["language"] = audit::StringField(args, "language");
  // Past the timeout the connection closes, and the interpreter interrupts
  // the execution (docs/code-interpreter.md "timeoutMs").
  const int timeout_s = args.contains("timeout_seconds") ? args["timeout_seconds"].get<int>() : kDefaultCodeTimeoutS;
  auto r = api.Data(id, *token, kInterpreterPort, "POST", "/execute", body.dump(), "application/json", 32u << 20,
                    std::chrono::seconds(timeout_s));
  if (!r.ok() && r.status().code() == StatusCode::kDeadlineExceeded)
    return Fail("run_code: interrupted after " + std::to_string(timeout_s) + " s (timeout_seconds); the kernel keeps its state", id);
  if (!r.ok()) return Fail("run_code: " + r.status().message(), id);
  if (r->status == 502 || r->status == 503)
    return Fail("run_code: the sandbox's code interpreter did not answer (HTTP " + std::to_string(r->status) +
                    "); create the sandbox from a template that has one, e.g. \"code-interpreter\"",
                id);
  if (r->status != 200) return Fail("run_code: HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 300), id);
  std::string out, err, text_results;
  json content = json::array();
  json results = json::array();
  json error = nullptr;
  size_t pos = 0;
  while (pos < r->body.size()) {
    size_t nl = r->body.find('\n', pos);
    std::string line = r->body.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? r->body.size() : nl + 1;
    json m = json::parse(line, nullptr, false);
    if (!m.is_object()) continue;
    std::string type = audit::StringField(m, "type");
    if (type == "stdout") out += audit::StringField(m, "text");
    if (type == "stderr") err += audit::StringField(m, "text");
    if (type == "error") {
      error = {{"name", audit::StringField(m, "name")},
               {"value", audit::StringField(m, "value")},
               {"traceback", CutUtf8(audit::StringField(m, "traceback"), kMaxCommandOutput)}};
    }
    if (type == "result") {
      json res = {{"is_main_result", m.value("is_main_result", false)}};
      std::string t = audit::StringField(m, "text");
      if (!t.empty()) {
        res["text"] = CutUtf8(t, kMaxCommandOutput);
        text_results += (text_results.empty() ? "" : "\n") + CutUtf8(t, kMaxCommandOutput);
      }
      std::string png = audit::StringField(m, "png");
      if (!png.empty() && png.size() <= kMaxDownload) {
        content.push_back({{"type", "image"}, {"data", png}, {"mimeType", "image/png"}});
        res["png"] = true;
      }
      results.push_back(std::move(res));
    }
  }
  std::string text;
  if (!text_results.empty()) text += "result:\n" + text_results + "\n";
  if (!out.empty()) text += "stdout:\n" + CutUtf8(out, kMaxCommandOutput) + "\n";
  if (!err.empty()) text += "stderr:\n" + CutUtf8(err, kMaxCommandOutput) + "\n";
  if (!error.is_null())
    text += "error: " + error["name"].get<std::string>() + ": " + error["value"].get<std::string>() + "\n" +
            error["traceback"].get<std::string>() + "\n";
  if (text.empty()) text = "(no output)";
  content.insert(content.begin(), Text(text));
  json structured = {{"stdout", CutUtf8(out, kMaxCommandOutput)},
                     {"stderr", CutUtf8(err, kMaxCommandOutput)},
                     {"results", results},
                     {"error", error}};
  return Ok(content, structured, id);
}

StatusOr<std::string> GetFile(Api& api, const std::string& id, const std::string& token, const std::string& path,
                              const std::string& user, size_t max) {
  auto r = api.Data(id, token, kAgentPort, "GET", FilesTarget(path, user), "", "", max,
                    std::chrono::seconds(120));
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kResourceExhausted)
      return ResourceExhausted(path + " is larger than " + std::to_string(max) + " bytes");
    return r.status();
  }
  if (r->status != 200) return Api::ApiError(*r);
  return std::move(r->body);
}

ToolOutcome ReadFile(Api& api, const json& args) {
  std::string id = audit::StringField(args, "sandbox_id"), path = audit::StringField(args, "path");
  auto token = api.Token(id);
  if (!token.ok()) return Fail("read_file: " + token.status().message(), id);
  auto bytes = GetFile(api, id, *token, path, audit::StringField(args, "user", "user"), kMaxReadFile);
  if (!bytes.ok()) return Fail("read_file " + path + ": " + bytes.status().message(), id);
  if (!ValidUtf8(*bytes))
    return Fail("read_file " + path + ": not UTF-8 text (" + std::to_string(bytes->size()) +
                    " bytes); use download_file",
                id);
  return Ok(json::array({Text(*bytes)}), json{{"path", path}, {"size", bytes->size()}}, id);
}

ToolOutcome WriteFile(Api& api, const json& args) {
  std::string id = audit::StringField(args, "sandbox_id"), path = audit::StringField(args, "path");
  std::string content = audit::StringField(args, "content");
  if (audit::StringField(args, "encoding", "utf8") == "base64") {
    auto decoded = envd::Base64Decode(content);
    if (!decoded.ok()) return Fail("write_file: content is not base64: " + decoded.status().message(), id);
    content = std::move(*decoded);
  }
  if (content.size() > kMaxWriteFile) return Fail("write_file: content is larger than 10 MiB", id);
  auto token = api.Token(id);
  if (!token.ok()) return Fail("write_file: " + token.status().message(), id);
  size_t size = content.size();
  auto r = api.Data(id, *token, kAgentPort, "POST", FilesTarget(path, audit::StringField(args, "user", "user")), std::move(content),
                    "application/octet-stream", 1 << 20, std::chrono::seconds(120));
  if (!r.ok()) return Fail("write_file " + path + ": " + r.status().message(), id);
  if (r->status != 200) return Fail("write_file " + path + ": " + Api::ApiError(*r).message(), id);
  json j = json::parse(r->body, nullptr, false);
  std::string written = j.is_array() && !j.empty() && j[0].is_object() ? audit::StringField(j[0], "path") : path;
  return Ok(json::array({Text("Wrote " + std::to_string(size) + " bytes to " + written)}),
            json{{"path", written}, {"size", size}}, id);
}

ToolOutcome ListFiles(Api& api, const json& args) {
  std::string id = audit::StringField(args, "sandbox_id"), path = audit::StringField(args, "path", ".");
  auto token = api.Token(id);
  if (!token.ok()) return Fail("list_files: " + token.status().message(), id);
  uint32_t depth = args.contains("depth") ? args["depth"].get<uint32_t>() : 1;
  auto entries = api.Envd(id, *token).ListDir(path, depth, audit::StringField(args, "user", "user"));
  if (!entries.ok()) return Fail("list_files " + path + ": " + entries.status().message(), id);
  json list = json::array();
  std::string text;
  for (const auto& e : *entries) {
    std::string type = e.type == envd::FileType::kDirectory ? "dir" : e.type == envd::FileType::kFile ? "file" : "other";
    list.push_back({{"name", e.name}, {"path", e.path}, {"type", type}, {"size", e.size}, {"permissions", e.permissions}});
    text += e.permissions + "  " + std::to_string(e.size) + "  " + e.path + (type == "dir" ? "/" : "") + "\n";
  }
  if (text.empty()) text = "(empty directory)";
  return Ok(json::array({Text(text)}), json{{"entries", list}}, id);
}

ToolOutcome DownloadFile(Api& api, const json& args) {
  std::string id = audit::StringField(args, "sandbox_id"), path = audit::StringField(args, "path");
  auto token = api.Token(id);
  if (!token.ok()) return Fail("download_file: " + token.status().message(), id);
  auto bytes = GetFile(api, id, *token, path, audit::StringField(args, "user", "user"), kMaxDownload);
  if (!bytes.ok()) return Fail("download_file " + path + ": " + bytes.status().message(), id);
  std::string sha = audit::Sha256Hex(*bytes);
  std::string uri = "sandbox://" + id + (path.empty() || path[0] != '/' ? "/~/" : "") + path;
  json content = json::array(
      {Text(path + ": " + std::to_string(bytes->size()) + " bytes, sha256 " + sha),
       {{"type", "resource"},
        {"resource", {{"uri", uri}, {"mimeType", "application/octet-stream"}, {"blob", envd::Base64Encode(*bytes)}}}}});
  return Ok(content, json{{"path", path}, {"size", bytes->size()}, {"sha256", sha}}, id);
}

ToolOutcome KillSandbox(Api& api, const json& args) {
  std::string id = audit::StringField(args, "sandbox_id");
  auto r = api.Control("DELETE", "/sandboxes/" + http::UrlEncodeComponent(id));
  if (!r.ok()) return Fail("kill_sandbox: " + r.status().message(), id);
  if (r->status != 204 && r->status != 200) return Fail("kill_sandbox: " + Api::ApiError(*r).message(), id);
  return Ok(json::array({Text("Killed sandbox " + id)}), json{{"sandbox_id", id}, {"killed", true}}, id);
}

ToolOutcome ListSandboxes(Api& api, const json&) {
  auto r = api.Control("GET", "/v2/sandboxes?state=running,paused&limit=1000");
  if (!r.ok()) return Fail("list_sandboxes: " + r.status().message());
  if (r->status != 200) return Fail("list_sandboxes: " + Api::ApiError(*r).message());
  json j = json::parse(r->body, nullptr, false);
  if (!j.is_array()) return Fail("list_sandboxes: the answer is not a JSON array");
  json list = json::array();
  std::string text;
  for (const auto& s : j) {
    if (!s.is_object()) continue;
    json row = {{"sandbox_id", audit::StringField(s, "sandboxID")},
                {"template", audit::StringField(s, "templateID")},
                {"state", audit::StringField(s, "state")},
                {"started_at", audit::StringField(s, "startedAt")},
                {"end_at", audit::StringField(s, "endAt")},
                {"metadata", s.value("metadata", json::object())}};
    text += row["sandbox_id"].get<std::string>() + "  " + row["template"].get<std::string>() + "  " +
            row["state"].get<std::string>() + "  ends " + row["end_at"].get<std::string>() + "\n";
    list.push_back(std::move(row));
  }
  if (text.empty()) text = "(no sandboxes)";
  return Ok(json::array({Text(text)}), json{{"sandboxes", list}}, "");
}

}  // namespace

const json& ToolCatalogue() {
  static const json catalogue = BuildCatalogue();
  return catalogue;
}

ToolOutcome CallTool(const ApiAccess& access, const std::string& name, const json& arguments) {
  static const std::map<std::string, std::function<ToolOutcome(Api&, const json&)>> kTools = {
      {"create_sandbox", CreateSandbox}, {"run_command", RunCommand},     {"run_code", RunCode},
      {"read_file", ReadFile},           {"write_file", WriteFile},       {"list_files", ListFiles},
      {"download_file", DownloadFile},   {"kill_sandbox", KillSandbox},   {"list_sandboxes", ListSandboxes}};
  auto it = kTools.find(name);
  if (it == kTools.end()) return Fail("unknown tool \"" + name + "\"; tools/list names the tools");
  const json* schema = nullptr;
  for (const auto& t : ToolCatalogue())
    if (t["name"] == name) schema = &t["inputSchema"];
  const json args = arguments.is_null() ? json::object() : arguments;
  if (Status st = ValidateAgainstSchema(args, *schema); !st.ok()) return Fail(name + ": " + st.message());
  Api api(access);
  try {
    return it->second(api, args);
  } catch (const std::exception& e) {  // a guest's bytes must never crash the server
    return Fail(name + ": " + e.what(), audit::StringField(args, "sandbox_id"));
  }
}

}  // namespace airlock::mcp
