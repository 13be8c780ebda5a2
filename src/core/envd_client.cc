#include "core/envd_client.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <thread>

#include "envd/connect_error.h"
#include "envd/envelope.h"
#include "envd/proto_json.h"

namespace airlock {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kMaxUnaryResponse = 16 << 20;  // agent replies are small JSON

std::string UrlEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string BasicAuth(const std::string& user) {
  return "Basic " + envd::Base64Encode(user + ":");
}

// One TCP connection to the agent with socket-level timeouts.
class Connection {
 public:
  Connection() : stream_(ioc_) {}
  Status Open(const AgentEndpoint& ep, std::chrono::milliseconds timeout) {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(ep.host, ec);
    if (ec) return InvalidArgument("bad agent address '" + ep.host + "'");
    stream_.expires_after(timeout);
    stream_.connect(tcp::endpoint(addr, ep.port), ec);
    if (ec) return Unavailable("connect " + ep.host + ":" + std::to_string(ep.port) + ": " + ec.message());
    stream_.expires_never();
    return OkStatus();
  }
  beast::tcp_stream& stream() { return stream_; }

 private:
  asio::io_context ioc_;
  beast::tcp_stream stream_;
};

template <class Req>
void AddCommonHeaders(Req& req, const AgentEndpoint& ep, const std::string& token) {
  req.set(http::field::host, ep.host + ":" + std::to_string(ep.port));
  req.set(http::field::user_agent, "airlock");
  if (!token.empty()) req.set("X-Access-Token", token);
}

// Turns a non-2xx agent reply into a Status. RPC errors carry a string code
// (spec §3.1), the REST endpoints an integer one (spec §4).
Status ErrorFromBody(unsigned status, const std::string& body, std::string_view what) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("code") && j["code"].is_number()) {
    StatusCode code = status == 404   ? StatusCode::kNotFound
                      : status == 400 ? StatusCode::kInvalidArgument
                      : status == 401 ? StatusCode::kUnauthenticated
                      : status == 507 ? StatusCode::kResourceExhausted
                                      : StatusCode::kInternal;
    std::string msg = j.contains("message") && j["message"].is_string() ? j["message"].get<std::string>() : "";
    return Status(code, std::string(what) + ": " + msg);
  }
  return envd::StatusFromErrorResponse(static_cast<int>(status), body).WithContext(what);
}

RemoteEntry EntryFromJson(const nlohmann::json& j) {
  RemoteEntry e;
  e.name = j.value("name", "");
  e.path = j.value("path", "");
  e.type = j.value("type", "FILE_TYPE_UNSPECIFIED");
  if (j.contains("size")) {
    auto s = envd::Int64FromJson(j["size"]);
    if (s.ok() && *s >= 0) e.size = static_cast<uint64_t>(*s);
  }
  e.mode = j.value("mode", 0u);
  return e;
}

// A guest-supplied relative path is safe to join under a host directory only
// if it has no empty, "." or ".." components and is not absolute.
bool SafeRelativePath(std::string_view rel) {
  if (rel.empty() || rel.front() == '/') return false;
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string_view::npos) end = rel.size();
    std::string_view part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return rel.find('\0') == std::string_view::npos;
}

}  // namespace

int ExecResult::ShellCode() const {
  if (exited) return exit_code;
  // "signal: killed" → the signal's number, from the same descriptions the
  // agent used to build the text (lowercased strsignal).
  constexpr std::string_view kPrefix = "signal: ";
  if (status.rfind(kPrefix, 0) == 0) {
    std::string name = status.substr(kPrefix.size());
    if (name == "killed") return 128 + SIGKILL;
    for (int s = 1; s < NSIG; ++s) {
      const char* d = sigdescr_np(s);
      if (!d) continue;
      std::string ds = d;
      for (auto& c : ds) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (ds == name) return 128 + s;
    }
  }
  return exit_code < 0 ? 255 : exit_code;
}

EnvdClient::EnvdClient(AgentEndpoint endpoint, std::string access_token)
    : endpoint_(std::move(endpoint)), access_token_(std::move(access_token)) {}

Status EnvdClient::Health(std::chrono::milliseconds timeout) const {
  try {
    Connection c;
    RETURN_IF_ERROR(c.Open(endpoint_, timeout));
    http::request<http::empty_body> req{http::verb::get, "/health", 11};
    AddCommonHeaders(req, endpoint_, access_token_);
    c.stream().expires_after(timeout);
    http::write(c.stream(), req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(c.stream(), buf, res);
    if (res.result_int() / 100 == 2) return OkStatus();
    return Unavailable("agent /health answered " + std::to_string(res.result_int()));
  } catch (const std::exception& e) {
    return Unavailable(std::string("agent /health: ") + e.what());
  }
}

Status EnvdClient::WaitReady(std::chrono::steady_clock::time_point deadline,
                             const std::function<Status()>& keep_going) const {
  Status last = Unavailable("agent not reachable");
  auto pause = std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (keep_going) RETURN_IF_ERROR(keep_going());
    last = Health(std::chrono::milliseconds(500));
    if (last.ok()) return last;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return DeadlineExceeded("agent did not become ready in time (last: " + last.message() + ")");
}

StatusOr<nlohmann::json> EnvdClient::Call(std::string_view method_path, const nlohmann::json& request,
                                          const std::string& user) const {
  std::string what(method_path);
  try {
    Connection c;
    RETURN_IF_ERROR(c.Open(endpoint_, std::chrono::seconds(10)));
    http::request<http::string_body> req{http::verb::post, "/" + what, 11};
    AddCommonHeaders(req, endpoint_, access_token_);
    req.set(http::field::content_type, "application/json");
    req.set("Connect-Protocol-Version", "1");
    if (!user.empty()) req.set(http::field::authorization, BasicAuth(user));
    req.body() = request.dump();
    req.prepare_payload();
    c.stream().expires_after(std::chrono::seconds(60));
    http::write(c.stream(), req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxUnaryResponse);
    http::read(c.stream(), buf, parser);
    auto& res = parser.get();
    if (res.result_int() != 200) return ErrorFromBody(res.result_int(), res.body(), what);
    auto j = nlohmann::json::parse(res.body(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Internal(what + ": agent sent invalid JSON");
    return j;
  } catch (const std::exception& e) {
    return Unavailable(what + ": " + e.what());
  }
}

StatusOr<ExecResult> EnvdClient::Exec(const ExecRequest& r, const ExecCallbacks& cb) const {
  nlohmann::json process = {{"cmd", r.cmd}, {"args", r.args}};
  if (!r.envs.empty()) process["envs"] = r.envs;
  if (r.cwd) process["cwd"] = *r.cwd;
  nlohmann::json body = {{"process", process}, {"stdin", r.stdin}};
  return StreamProcess("process.Process/Start", body, r.user, r.timeout, cb, false);
}

StatusOr<uint32_t> EnvdClient::StartBackground(const ExecRequest& r) const {
  nlohmann::json process = {{"cmd", r.cmd}, {"args", r.args}};
  if (!r.envs.empty()) process["envs"] = r.envs;
  if (r.cwd) process["cwd"] = *r.cwd;
  nlohmann::json body = {{"process", process}, {"stdin", r.stdin}};
  ASSIGN_OR_RETURN(ExecResult started, StreamProcess("process.Process/Start", body, r.user, r.timeout, {}, true));
  return started.pid;
}

StatusOr<ExecResult> EnvdClient::Attach(uint32_t pid, const ExecCallbacks& cb) const {
  return StreamProcess("process.Process/Connect", {{"process", {{"pid", pid}}}}, "", std::nullopt, cb, false);
}

StatusOr<ExecResult> EnvdClient::StreamProcess(std::string_view method_path, const nlohmann::json& body,
                                               const std::string& user,
                                               std::optional<std::chrono::milliseconds> timeout,
                                               const ExecCallbacks& cb, bool stop_after_start) const {
  std::string what(method_path);
  try {
    Connection c;
    RETURN_IF_ERROR(c.Open(endpoint_, std::chrono::seconds(10)));
    http::request<http::string_body> req{http::verb::post, "/" + what, 11};
    AddCommonHeaders(req, endpoint_, access_token_);
    req.set(http::field::content_type, "application/connect+json");
    req.set("Connect-Protocol-Version", "1");
    req.set("Keepalive-Ping-Interval", "30");
    if (timeout) req.set("Connect-Timeout-Ms", std::to_string(timeout->count()));
    if (!user.empty()) req.set(http::field::authorization, BasicAuth(user));
    req.body() = envd::EncodeEnvelope(body.dump());
    req.prepare_payload();
    http::write(c.stream(), req);

    beast::flat_buffer buf;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);  // a stream: each message is bounded by the decoder
    http::read_header(c.stream(), buf, parser);
    if (parser.get().result_int() != 200) {
      return Unavailable(what + ": HTTP " + std::to_string(parser.get().result_int()));
    }
    envd::EnvelopeDecoder decoder;
    std::optional<ExecResult> result;
    bool ended = false;
    char chunk[64 * 1024];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      boost::system::error_code ec;
      http::read_some(c.stream(), buf, parser, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return Unavailable(what + ": stream broke: " + ec.message());
      size_t n = sizeof(chunk) - parser.get().body().size;
      RETURN_IF_ERROR(decoder.Feed(std::string_view(chunk, n)));
      while (auto msg = decoder.Next()) {
        if (msg->end_stream()) {
          RETURN_IF_ERROR(envd::ParseEndStream(msg->payload));
          if (!result || !ended) return Unavailable("process exited without a result");
          return *result;
        }
        auto j = nlohmann::json::parse(msg->payload, nullptr, false);
        if (j.is_discarded() || !j.contains("event")) return Internal("agent sent an invalid process event");
        const auto& ev = j["event"];
        if (ev.contains("start")) {
          ExecResult s;
          s.pid = ev["start"].value("pid", 0u);
          result = s;
          if (cb.on_start) cb.on_start(s.pid);
          if (stop_after_start) return *result;  // closing the stream leaves the process running
        } else if (ev.contains("data")) {
          const auto& d = ev["data"];
          if (d.contains("stdout")) {
            ASSIGN_OR_RETURN(std::string bytes, envd::Base64Decode(d["stdout"].get<std::string>()));
            if (cb.on_stdout) cb.on_stdout(bytes);
          } else if (d.contains("stderr")) {
            ASSIGN_OR_RETURN(std::string bytes, envd::Base64Decode(d["stderr"].get<std::string>()));
            if (cb.on_stderr) cb.on_stderr(bytes);
          }
        } else if (ev.contains("end")) {
          const auto& e = ev["end"];
          if (!result) result = ExecResult{};
          result->exit_code = e.value("exitCode", 0);
          result->exited = e.value("exited", false);
          result->status = e.value("status", "");
          result->error = e.value("error", "");
          ended = true;
        }
      }
    }
    return Unavailable(what + ": stream ended without an end-of-stream message");
  } catch (const nlohmann::json::exception& e) {
    return Internal(what + ": agent sent a malformed process event: " + e.what());
  } catch (const std::exception& e) {
    return Unavailable(what + ": " + e.what());
  }
}

Status EnvdClient::SendStdin(uint32_t pid, std::string_view bytes) const {
  nlohmann::json req = {{"process", {{"pid", pid}}}, {"input", {{"stdin", envd::Base64Encode(bytes)}}}};
  return Call("process.Process/SendInput", req).status();
}

Status EnvdClient::CloseStdin(uint32_t pid) const {
  return Call("process.Process/CloseStdin", {{"process", {{"pid", pid}}}}).status();
}

Status EnvdClient::SendSignal(uint32_t pid, std::string_view signal_name) const {
  return Call("process.Process/SendSignal", {{"process", {{"pid", pid}}}, {"signal", signal_name}}).status();
}

Status EnvdClient::UploadFile(const std::string& local_path, const std::string& guest_path,
                              const std::string& user) const {
  std::string what = "upload " + local_path + " to " + guest_path;
  try {
    http::request<http::file_body> req{http::verb::post, "/files?path=" + UrlEncode(guest_path) +
                                                             (user.empty() ? "" : "&username=" + UrlEncode(user)), 11};
    beast::error_code ec;
    req.body().open(local_path.c_str(), beast::file_mode::scan, ec);
    if (ec) return Status(StatusCode::kNotFound, "open " + local_path + ": " + ec.message());
    AddCommonHeaders(req, endpoint_, access_token_);
    req.set(http::field::content_type, "application/octet-stream");
    req.prepare_payload();
    Connection c;
    RETURN_IF_ERROR(c.Open(endpoint_, std::chrono::seconds(10)));
    http::write(c.stream(), req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxUnaryResponse);
    http::read(c.stream(), buf, parser);
    if (parser.get().result_int() != 200) return ErrorFromBody(parser.get().result_int(), parser.get().body(), what);
    return OkStatus();
  } catch (const std::exception& e) {
    return Unavailable(what + ": " + e.what());
  }
}

Status EnvdClient::DownloadFile(const std::string& guest_path, const std::string& local_path,
                                uint64_t max_bytes) const {
  std::string what = "download " + guest_path;
  std::string tmp = local_path + ".airlock-part";
  try {
    Connection c;
    RETURN_IF_ERROR(c.Open(endpoint_, std::chrono::seconds(10)));
    http::request<http::empty_body> req{http::verb::get, "/files?path=" + UrlEncode(guest_path), 11};
    AddCommonHeaders(req, endpoint_, access_token_);
    req.set(http::field::accept_encoding, "identity");
    http::write(c.stream(), req);
    beast::flat_buffer buf;
    http::response_parser<http::file_body> parser;
    parser.body_limit(max_bytes);
    http::read_header(c.stream(), buf, parser);
    if (parser.get().result_int() != 200) {
      http::response_parser<http::string_body> err{std::move(parser)};
      err.body_limit(kMaxUnaryResponse);
      http::read(c.stream(), buf, err);
      return ErrorFromBody(err.get().result_int(), err.get().body(), what);
    }
    // O_NOFOLLOW: never write through a symlink someone planted at the target.
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("open " + tmp);
    ::close(fd);
    beast::error_code ec;
    parser.get().body().open(tmp.c_str(), beast::file_mode::write, ec);
    if (ec) return Internal("open " + tmp + ": " + ec.message());
    http::read(c.stream(), buf, parser, ec);
    parser.get().body().close();
    if (ec) {
      ::unlink(tmp.c_str());
      if (ec == http::error::body_limit) return ResourceExhausted(what + ": larger than " + std::to_string(max_bytes) + " bytes");
      return Unavailable(what + ": " + ec.message());
    }
    if (::rename(tmp.c_str(), local_path.c_str()) != 0) {
      Status s = ErrnoError("rename " + tmp + " to " + local_path);
      ::unlink(tmp.c_str());
      return s;
    }
    return OkStatus();
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    return Unavailable(what + ": " + e.what());
  }
}

StatusOr<RemoteEntry> EnvdClient::Stat(const std::string& guest_path, const std::string& user) const {
  ASSIGN_OR_RETURN(auto j, Call("filesystem.Filesystem/Stat", {{"path", guest_path}}, user));
  if (!j.contains("entry") || !j["entry"].is_object()) return Internal("Stat: reply without entry");
  return EntryFromJson(j["entry"]);
}

StatusOr<std::vector<RemoteEntry>> EnvdClient::ListDir(const std::string& guest_path, uint32_t depth,
                                                       const std::string& user) const {
  ASSIGN_OR_RETURN(auto j, Call("filesystem.Filesystem/ListDir", {{"path", guest_path}, {"depth", depth}}, user));
  std::vector<RemoteEntry> out;
  if (j.contains("entries") && j["entries"].is_array()) {
    for (const auto& e : j["entries"]) {
      if (e.is_object()) out.push_back(EntryFromJson(e));
    }
  }
  return out;
}

Status EnvdClient::MakeDir(const std::string& guest_path, const std::string& user) const {
  auto r = Call("filesystem.Filesystem/MakeDir", {{"path", guest_path}}, user);
  if (!r.ok() && r.status().code() == StatusCode::kAlreadyExists) return OkStatus();
  return r.status();
}

Status EnvdClient::Download(const std::string& guest_path, const std::string& local_path,
                            uint64_t max_bytes) const {
  ASSIGN_OR_RETURN(RemoteEntry root, Stat(guest_path));
  if (root.type == "FILE_TYPE_FILE") return DownloadFile(root.path, local_path, max_bytes);
  if (root.type != "FILE_TYPE_DIRECTORY") return InvalidArgument(guest_path + " is neither a file nor a directory");
  std::error_code ec;
  std::filesystem::create_directories(local_path, ec);
  if (ec) return Internal("mkdir " + local_path + ": " + ec.message());
  ASSIGN_OR_RETURN(auto entries, ListDir(root.path, 64));
  std::string prefix = root.path;
  if (prefix.empty() || prefix.back() != '/') prefix += '/';
  uint64_t budget = max_bytes;
  // Directories first (ListDir walks top-down), then files.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& e : entries) {
      bool dir = e.type == "FILE_TYPE_DIRECTORY";
      if ((pass == 0) != dir) continue;
      if (e.type == "FILE_TYPE_SYMLINK" || (!dir && e.type != "FILE_TYPE_FILE")) continue;
      if (e.path.rfind(prefix, 0) != 0) return PermissionDenied("agent listed " + e.path + " outside " + root.path);
      std::string rel = e.path.substr(prefix.size());
      if (!SafeRelativePath(rel)) return PermissionDenied("agent listed an unsafe path: " + e.path);
      std::string dst = local_path + "/" + rel;
      if (dir) {
        if (::mkdir(dst.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dst);
        struct stat st;
        if (::lstat(dst.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return PermissionDenied(dst + " is not a directory");
      } else {
        if (e.size > budget) return ResourceExhausted("download of " + guest_path + " exceeds " + std::to_string(max_bytes) + " bytes");
        RETURN_IF_ERROR(DownloadFile(e.path, dst, budget));
        struct stat st;
        if (::stat(dst.c_str(), &st) == 0) budget -= std::min<uint64_t>(budget, st.st_size);
      }
    }
  }
  return OkStatus();
}

}  // namespace airlock
