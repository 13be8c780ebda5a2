#include "cli/daemon_client.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/envd_client.h"
#include "envd/envelope.h"
#include "envd/messages.h"
#include "envd/proto_json.h"

namespace airlock::cli {

using nlohmann::json;
namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;

namespace {

Status ErrorFromReply(const HttpReply& r) {
  auto j = json::parse(r.body, nullptr, false);
  std::string msg = j.is_object() && j.contains("message") && j["message"].is_string()
                        ? j["message"].get<std::string>()
                        : r.body.substr(0, 500);
  return Status(r.status == 404 ? StatusCode::kNotFound : StatusCode::kUnknown,
                "HTTP " + std::to_string(r.status) + ": " + msg);
}


}  // namespace

StatusOr<HttpReply> DaemonApi(const DaemonTarget& t, const std::string& method, const std::string& target,
                              const std::string& body) {
  HttpCall call;
  call.host = t.host;
  call.port = t.port;
  call.method = method;
  call.target = target;
  call.headers = {{"X-API-Key", t.api_key}};
  if (!body.empty()) call.headers.push_back({"Content-Type", "application/json"});
  call.body = body;
  call.timeout = std::chrono::seconds(180);
  ASSIGN_OR_RETURN(auto r, HttpDo(call));
  if (r.status >= 300) return ErrorFromReply(r);
  return r;
}

StatusOr<DaemonSandbox> DaemonCreate(const DaemonTarget& t, const std::string& template_name, int timeout_s,
                                     const std::map<std::string, std::string>& env_vars, const json& extra) {
  json body{{"templateID", template_name}};
  if (extra.is_object()) body.update(extra);
  if (timeout_s > 0) body["timeout"] = timeout_s;
  if (!env_vars.empty()) body["envVars"] = env_vars;
  ASSIGN_OR_RETURN(auto r, DaemonApi(t, "POST", "/v2/sandboxes", body.dump()));
  auto j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("sandboxID") || !j["sandboxID"].is_string()) {
    return Internal("daemon answered create without a sandboxID");
  }
  return DaemonSandbox{j["sandboxID"].get<std::string>(), j.value("envdAccessToken", "")};
}

StatusOr<std::string> DaemonToken(const DaemonTarget& t, const std::string& id) {
  ASSIGN_OR_RETURN(auto r, DaemonApi(t, "GET", "/sandboxes/" + UrlEncodeComponent(id)));
  auto j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("envdAccessToken")) return Internal("daemon sent no envdAccessToken");
  return j["envdAccessToken"].get<std::string>();
}

StatusOr<int> DaemonExec(const DaemonTarget& t, const DaemonSandbox& sb, const DaemonExecSpec& spec) {
  if (spec.argv.empty()) return InvalidArgument("no command");
  envd::StartRequest req;
  req.process.cmd = spec.argv[0];
  req.process.args.assign(spec.argv.begin() + 1, spec.argv.end());
  req.process.envs = spec.envs;
  if (!spec.cwd.empty()) req.process.cwd = spec.cwd;
  req.stdin = false;  // no stdin is forwarded: /dev/null (an absent field opens a pipe, as envd)
  std::string body = envd::EncodeEnvelope(envd::Dump(envd::ToJson(req)));
  try {
    asio::io_context io;
    beast::tcp_stream stream(io);
    asio::ip::tcp::resolver res(io);
    stream.connect(res.resolve(t.host, std::to_string(t.port)));
    http::request<http::string_body> r{http::verb::post, "/process.Process/Start", 11};
    r.set(http::field::host, t.host);
    r.set(http::field::content_type, "application/connect+json");
    r.set("Connect-Protocol-Version", "1");
    r.set("E2b-Sandbox-Id", sb.id);
    r.set("E2b-Sandbox-Port", std::to_string(kAgentPort));
    r.set("X-Access-Token", sb.token);
    if (!spec.user.empty()) r.set(http::field::authorization, "Basic " + envd::Base64Encode(spec.user + ":"));
    if (spec.timeout_s > 0) r.set("Connect-Timeout-Ms", std::to_string(int64_t{spec.timeout_s} * 1000));
    r.body() = body;
    r.prepare_payload();
    http::write(stream, r);
    beast::flat_buffer buf;
    http::response_parser<http::buffer_body> p;
    p.body_limit(std::numeric_limits<uint64_t>::max());
    http::read_header(stream, buf, p);
    if (p.get().result_int() != 200) return Unavailable("exec: HTTP " + std::to_string(p.get().result_int()));
    envd::EnvelopeDecoder dec;
    std::optional<int> code;
    std::vector<char> chunk(65536);
    while (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      beast::error_code ec;
      http::read(stream, buf, p, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return Unavailable("exec stream: " + ec.message());
      RETURN_IF_ERROR(dec.Feed(std::string_view(chunk.data(), chunk.size() - p.get().body().size)));
      while (auto env = dec.Next()) {
        if (env->end_stream()) {
          Status es = envd::ParseEndStream(env->payload);
          // --timeout passed: the agent killed the process group and ended
          // the stream as envd does, deadline_exceeded without an end event.
          if (es.code() == StatusCode::kDeadlineExceeded && spec.timeout_s > 0 && !code) {
            code = 128 + 9;
            continue;
          }
          RETURN_IF_ERROR(es);
          continue;
        }
        ASSIGN_OR_RETURN(auto ev, envd::ParseEventResponse(env->payload));
        if (auto* d = std::get_if<envd::DataEvent>(&ev)) {
          FILE* out = d->stream == envd::DataEvent::Stream::kStderr ? stderr : stdout;
          std::fwrite(d->data.data(), 1, d->data.size(), out);
          std::fflush(out);
        } else if (auto* e = std::get_if<envd::EndEvent>(&ev)) {
          if (e->exited) code = e->exit_code;
          else if (e->status.find("terminated") != std::string::npos) code = 128 + 15;
          else if (e->status.find("interrupt") != std::string::npos) code = 128 + 2;
          else code = 128 + 9;
        }
      }
    }
    if (!code) return Unavailable("exec: stream ended without an end event");
    return *code;
  } catch (const std::exception& e) {
    return Unavailable(std::string("exec: ") + e.what());
  }
}

namespace {
// The sandbox's agent, reached through the daemon's data plane: files stream
// both ways (never held in memory) and directories download whole, exactly
// as in-process `airlock run` does (EnvdClient::Download).
EnvdClient AgentViaDaemon(const DaemonTarget& t, const DaemonSandbox& sb) {
  std::string host = t.host == "localhost" ? "127.0.0.1" : t.host;
  return EnvdClient::ViaDaemon(AgentEndpoint{host, t.port}, sb.id, sb.token);
}
}  // namespace

Status DaemonUpload(const DaemonTarget& t, const DaemonSandbox& sb, const std::string& local,
                    const std::string& guest) {
  return AgentViaDaemon(t, sb).UploadFile(local, guest);
}

Status DaemonDownload(const DaemonTarget& t, const DaemonSandbox& sb, const std::string& guest,
                      const std::string& local) {
  return AgentViaDaemon(t, sb).Download(guest, local);
}

}  // namespace airlock::cli
