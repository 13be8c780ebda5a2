#include "core/envd_client.h"

#include <algorithm>
#include <fcntl.h>
#include <cstring>
#include <poll.h>
#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <limits>
#include <thread>

#include "core/http_client.h"
#include "core/socket_watchdog.h"
#include "envd/connect_error.h"
#include "envd/envelope.h"
#include "envd/proto_json.h"

namespace airlock {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;  // airlock::http is the project's HTTP library
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kMaxUnaryResponse = 16 << 20;  // agent replies are small JSON


std::string BasicAuth(const std::string& user) {
  return "Basic " + envd::Base64Encode(user + ":");
}

// One TCP connection to the agent, registered with the client's cancel
// registry while open so CancelAll() can wake a blocked read.
class Connection {
 public:
  explicit Connection(const std::shared_ptr<ConnectionRegistry>& registry) : stream_(ioc_), registry_(registry) {}
  ~Connection() {
    if (fd_ >= 0) registry_->Remove(fd_);
  }
  Status Open(const AgentEndpoint& ep, std::chrono::milliseconds timeout) {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(ep.host, ec);
    if (ec) return InvalidArgument("bad agent address '" + ep.host + "'");
    stream_.socket().open(tcp::v4(), ec);
    if (ec) return Internal("socket: " + ec.message());
    fd_ = stream_.socket().native_handle();
    if (!registry_->Add(fd_)) return Status(StatusCode::kCancelled, "sandbox is being destroyed");
    // Non-blocking connect + poll: Asio's synchronous connect waits for
    // EINPROGRESS without any limit (SO_SNDTIMEO only makes it return to Asio,
    // which then polls forever), so a guest that is not up yet would hold
    // this call until its SYN retransmit was answered, seconds later.
    std::string what = "connect " + ep.host + ":" + std::to_string(ep.port) + ": ";
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(ep.port);
    if (::inet_pton(AF_INET, ep.host.c_str(), &sa.sin_addr) != 1) return InvalidArgument("bad agent address '" + ep.host + "'");
    int flags = ::fcntl(fd_, F_GETFL);
    ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
    int rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    if (rc != 0 && errno != EINPROGRESS) return Unavailable(what + std::strerror(errno));
    if (rc != 0) {
      pollfd pfd{fd_, POLLOUT, 0};
      int n;
      do n = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(1, timeout.count())));
      while (n < 0 && errno == EINTR);
      if (n == 0) return Unavailable(what + "timed out after " + std::to_string(timeout.count()) + " ms");
      int err = 0;
      socklen_t len = sizeof(err);
      if (n < 0 || ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) return Unavailable(what + std::strerror(err));
    }
    ::fcntl(fd_, F_SETFL, flags);
    return OkStatus();
  }
  // Bounds what follows (socket_watchdog.h): the socket is shut down once no
  // byte moved for `idle`, or `total` after this call; TimedOut() then says so.
  void Watch(std::chrono::milliseconds idle, std::optional<std::chrono::milliseconds> total = std::nullopt) {
    watch_ = SocketWatchdog::Start(fd_, idle, total);
  }
  bool TimedOut() const { return watch_.fired(); }
  // The stream every read and write goes through (progress for the watchdog).
  WatchedStream& io() { return io_; }

 private:
  asio::io_context ioc_;
  beast::tcp_stream stream_;
  SocketWatchdog::Watch watch_;  // destroyed before stream_ closes the socket
  WatchedStream io_{stream_, watch_};
  std::shared_ptr<ConnectionRegistry> registry_;
  int fd_ = -1;
};

// The error of an exchange that failed: DeadlineExceeded when the watchdog
// cut it (the guest moved no byte for `idle`), else Unavailable.
Status ExchangeError(const Connection& c, const std::string& what, const std::string& error,
                     std::chrono::milliseconds idle) {
  if (c.TimedOut())
    return DeadlineExceeded(what + ": the agent moved no byte for " + std::to_string(idle.count()) + " ms");
  return Unavailable(what + ": " + error);
}

template <class Req>
void AddCommonHeaders(Req& req, const AgentEndpoint& ep, const std::string& token, const std::string& route) {
  req.set(bhttp::field::host, ep.host + ":" + std::to_string(ep.port));
  req.set(bhttp::field::user_agent, "airlock");
  if (!token.empty()) req.set("X-Access-Token", token);
  if (!route.empty()) {
    req.set("E2b-Sandbox-Id", route);
    req.set("E2b-Sandbox-Port", std::to_string(kAgentPort));
  }
}

// Turns a non-2xx agent reply into a Status. RPC errors carry a string code
// (spec §3.1), the REST endpoints an integer one (spec §4).
Status ErrorFromBody(unsigned status, const std::string& body, std::string_view what) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("code") && j["code"].is_number()) {
    StatusCode code = status == 404   ? StatusCode::kNotFound
                      : status == 400 ? StatusCode::kInvalidArgument
                      : status == 401 ? StatusCode::kUnauthenticated
                      : status == 403 ? StatusCode::kPermissionDenied
                      : status == 507 ? StatusCode::kResourceExhausted
                                      : StatusCode::kInternal;
    std::string msg = j.contains("message") && j["message"].is_string() ? j["message"].get<std::string>() : "";
    return Status(code, std::string(what) + ": " + msg);
  }
  return envd::StatusFromErrorResponse(static_cast<int>(status), body).WithContext(what);
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

bool ConnectionRegistry::Add(int fd) {
  std::lock_guard<std::mutex> l(mu_);
  if (cancelled_) return false;
  fds_.insert(fd);
  return true;
}

void ConnectionRegistry::Remove(int fd) {
  std::lock_guard<std::mutex> l(mu_);
  fds_.erase(fd);
}

void ConnectionRegistry::CancelAll() {
  std::lock_guard<std::mutex> l(mu_);
  cancelled_ = true;
  // shutdown() wakes a thread blocked in recv/poll on the socket; the socket
  // itself is closed by its owner.
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

EnvdClient EnvdClient::ViaDaemon(AgentEndpoint daemon, const std::string& sandbox_id, std::string access_token) {
  EnvdClient c(std::move(daemon), std::move(access_token));
  c.route_sandbox_ = sandbox_id;
  return c;
}

EnvdClient::EnvdClient(AgentEndpoint endpoint, std::string access_token)
    : endpoint_(std::move(endpoint)),
      access_token_(std::move(access_token)),
      registry_(std::make_shared<ConnectionRegistry>()) {}

void EnvdClient::CancelAll() const { registry_->CancelAll(); }

// The whole exchange within `timeout` (the watchdog's total limit): a guest
// that accepts and never answers, or answers a byte at a time, is cut then.
Status EnvdClient::Health(std::chrono::milliseconds timeout) const {
  Connection c(registry_);
  RETURN_IF_ERROR(c.Open(endpoint_, timeout));
  c.Watch(timeout, timeout);
  const std::string what = "agent /health";
  try {
    bhttp::request<bhttp::empty_body> probe{bhttp::verb::get, "/health", 11};
    AddCommonHeaders(probe, endpoint_, access_token_, route_sandbox_);
    probe.set(bhttp::field::connection, "close");
    bhttp::write(c.io(), probe);
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.header_limit(4096);
    parser.body_limit(4096);
    bhttp::read(c.io(), buf, parser);
    const unsigned code = parser.get().result_int();
    if (code / 100 == 2) return OkStatus();
    return Unavailable(what + " answered " + std::to_string(code));
  } catch (const std::exception& e) {
    if (c.TimedOut()) return Unavailable(what + ": no answer within " + std::to_string(timeout.count()) + " ms");
    return Unavailable(what + ": " + e.what());
  }
}

Status EnvdClient::WaitReady(std::chrono::steady_clock::time_point deadline,
                             const std::function<Status()>& keep_going) const {
  Status last = Unavailable("agent not reachable");
  auto pause = std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (keep_going) RETURN_IF_ERROR(keep_going());
    // Each probe within what is left, so a late answer cannot pass a
    // deadline (a busy TCG guest may accept, then answer seconds later).
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    last = Health(std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(500)));
    if (last.ok()) return last;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return DeadlineExceeded("agent did not become ready in time (last: " + last.message() + ")");
}

// A Connect RPC request (spec §3.1): POST /<service>/<method>, the protocol
// header, and the user as Basic auth when one is named.
namespace {
bhttp::request<bhttp::string_body> RpcRequest(const AgentEndpoint& endpoint, const std::string& token,
                                              const std::string& route, const std::string& method_path,
                                              const char* content_type, const std::string& user) {
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, "/" + method_path, 11};
  AddCommonHeaders(req, endpoint, token, route);
  req.set(bhttp::field::content_type, content_type);
  req.set("Connect-Protocol-Version", "1");
  if (!user.empty()) req.set(bhttp::field::authorization, BasicAuth(user));
  return req;
}
}  // namespace

StatusOr<nlohmann::json> EnvdClient::Call(std::string_view method_path, const nlohmann::json& request,
                                          const std::string& user) const {
  std::string what(method_path);
  Connection c(registry_);
  try {
    RETURN_IF_ERROR(c.Open(endpoint_, std::chrono::seconds(10)));
    c.Watch(idle_timeout_);
    auto req = RpcRequest(endpoint_, access_token_, route_sandbox_, what, "application/json", user);
    req.body() = request.dump();
    req.prepare_payload();
    bhttp::write(c.io(), req);
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxUnaryResponse);
    bhttp::read(c.io(), buf, parser);
    auto& res = parser.get();
    if (res.result_int() != 200) return ErrorFromBody(res.result_int(), res.body(), what);
    auto j = nlohmann::json::parse(res.body(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Internal(what + ": agent sent invalid JSON");
    return j;
  } catch (const std::exception& e) {
    return ExchangeError(c, what, e.what(), idle_timeout_);
  }
}

namespace {
std::string StartBody(const ExecRequest& r) {
  envd::StartRequest start;
  start.process.cmd = r.cmd;
  start.process.args = r.args;
  start.process.envs = r.envs;
  start.process.cwd = r.cwd;
  start.stdin = r.stdin;
  return envd::Dump(envd::ToJson(start));
}
}  // namespace

StatusOr<ExecResult> EnvdClient::Exec(const ExecRequest& r, const ExecCallbacks& cb) const {
  return StreamProcess("process.Process/Start", StartBody(r), r.user, r.timeout, cb, false);
}

StatusOr<uint32_t> EnvdClient::StartBackground(const ExecRequest& r) const {
  ASSIGN_OR_RETURN(ExecResult started, StreamProcess("process.Process/Start", StartBody(r), r.user, r.timeout, {}, true));
  return started.pid;
}

StatusOr<ExecResult> EnvdClient::Attach(uint32_t pid, const ExecCallbacks& cb) const {
  nlohmann::json body = {{"process", {{"pid", pid}}}};
  return StreamProcess("process.Process/Connect", body.dump(), "", std::nullopt, cb, false);
}

StatusOr<ExecResult> EnvdClient::StreamProcess(std::string_view method_path, const std::string& body,
                                               const std::string& user,
                                               std::optional<std::chrono::milliseconds> timeout,
                                               const ExecCallbacks& cb, bool stop_after_start) const {
  std::string what(method_path);
  // The agent sends a keepalive event every kPing while the process runs, so a
  // stream that moves no byte for three of them has a stalled guest behind it.
  constexpr std::chrono::seconds kPing(30);
  const auto idle = std::max<std::chrono::milliseconds>(idle_timeout_, 3 * kPing);
  Connection c(registry_);
  try {
    RETURN_IF_ERROR(c.Open(endpoint_, std::chrono::seconds(10)));
    c.Watch(idle);
    auto req = RpcRequest(endpoint_, access_token_, route_sandbox_, what, "application/connect+json", user);
    req.set("Keepalive-Ping-Interval", std::to_string(kPing.count()));
    if (timeout) req.set("Connect-Timeout-Ms", std::to_string(timeout->count()));
    req.body() = envd::EncodeEnvelope(body);
    req.prepare_payload();
    bhttp::write(c.io(), req);

    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::buffer_body> parser;
    // A stream: each message is bounded by the decoder. (boost::none would
    // mean "no limit" but Beast 1.74 compares it wrongly against Content-Length.)
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    bhttp::read_header(c.io(), buf, parser);
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
      bhttp::read_some(c.io(), buf, parser, ec);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) return ExchangeError(c, what, "stream broke: " + ec.message(), idle);
      size_t n = sizeof(chunk) - parser.get().body().size;
      RETURN_IF_ERROR(decoder.Feed(std::string_view(chunk, n)));
      while (auto msg = decoder.Next()) {
        if (msg->end_stream()) {
          Status es = envd::ParseEndStream(msg->payload);
          // The timeout we sent passed: the agent killed the process group
          // and ended the stream as envd does, deadline_exceeded without an
          // end event (docs/agent.md). The process was killed.
          if (es.code() == StatusCode::kDeadlineExceeded && timeout && result && !ended) {
            result->exit_code = -1;
            result->exited = false;
            result->status = result->error = "signal: killed";
            return *result;
          }
          RETURN_IF_ERROR(es);
          if (!result || !ended) return Unavailable("process exited without a result");
          return *result;
        }
        ASSIGN_OR_RETURN(envd::ProcessEvent ev, envd::ParseEventResponse(msg->payload));
        if (auto* start = std::get_if<envd::StartEvent>(&ev)) {
          result = ExecResult{};
          result->pid = start->pid;
          if (cb.on_start) cb.on_start(start->pid);
          if (stop_after_start) return *result;  // closing the stream leaves the process running
        } else if (auto* data = std::get_if<envd::DataEvent>(&ev)) {
          if (data->stream == envd::DataEvent::Stream::kStderr) {
            if (cb.on_stderr) cb.on_stderr(data->data);
          } else if (cb.on_stdout) {
            cb.on_stdout(data->data);
          }
        } else if (auto* end = std::get_if<envd::EndEvent>(&ev)) {
          if (!result) result = ExecResult{};
          result->exit_code = end->exit_code;
          result->exited = end->exited;
          result->status = end->status;
          result->error = end->error.value_or("");
          ended = true;
        }
      }
    }
    return Unavailable(what + ": stream ended without an end-of-stream message");
  } catch (const nlohmann::json::exception& e) {
    return Internal(what + ": agent sent a malformed process event: " + e.what());
  } catch (const std::exception& e) {
    return ExchangeError(c, what, e.what(), idle);
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
  return SendFile(
      "POST",
      "/files?path=" + UrlEncodeComponent(guest_path) + (user.empty() ? "" : "&username=" + UrlEncodeComponent(user)),
      local_path, "upload " + local_path + " to " + guest_path, nullptr, std::nullopt);
}

Status EnvdClient::SendFile(const std::string& method, const std::string& target, const std::string& local_path,
                            const std::string& what, std::string* reply,
                            std::optional<std::chrono::milliseconds> total) const {
  Connection c(registry_);
  try {
    bhttp::request<bhttp::file_body> req{method == "PUT" ? bhttp::verb::put : bhttp::verb::post, target, 11};
    beast::error_code ec;
    req.body().open(local_path.c_str(), beast::file_mode::scan, ec);
    if (ec) return Status(StatusCode::kNotFound, "open " + local_path + ": " + ec.message());
    AddCommonHeaders(req, endpoint_, access_token_, route_sandbox_);
    req.set(bhttp::field::content_type, "application/octet-stream");
    req.prepare_payload();
    RETURN_IF_ERROR(c.Open(endpoint_, std::chrono::seconds(10)));
    c.Watch(idle_timeout_, total);
    bhttp::write(c.io(), req);
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxUnaryResponse);
    bhttp::read(c.io(), buf, parser);
    if (parser.get().result_int() != 200) return ErrorFromBody(parser.get().result_int(), parser.get().body(), what);
    if (reply) *reply = parser.get().body();
    return OkStatus();
  } catch (const std::exception& e) {
    return ExchangeError(c, what, e.what(), idle_timeout_);
  }
}

Status EnvdClient::DownloadFile(const std::string& guest_path, const std::string& local_path,
                                uint64_t max_bytes, const std::string& user) const {
  return GetToFile(
      "/files?path=" + UrlEncodeComponent(guest_path) + (user.empty() ? "" : "&username=" + UrlEncodeComponent(user)),
      local_path, max_bytes, "download " + guest_path, std::nullopt);
}

Status EnvdClient::ExportRootChanges(const std::string& local_path, uint64_t max_bytes) const {
  return GetToFile("/airlock/root-changes", local_path, max_bytes, "export the guest's root changes", kRootChangesLimit);
}

StatusOr<nlohmann::json> EnvdClient::ImportRootChanges(const std::string& local_path) const {
  std::string reply;
  RETURN_IF_ERROR(
      SendFile("PUT", "/airlock/root-changes", local_path, "import the guest's root changes", &reply, kRootChangesLimit));
  auto j = nlohmann::json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Internal("import the guest's root changes: unreadable answer");
  return j;
}

Status EnvdClient::GetToFile(const std::string& target, const std::string& local_path, uint64_t max_bytes,
                             const std::string& what, std::optional<std::chrono::milliseconds> total) const {
  std::string tmp = local_path + ".airlock-part";
  Connection c(registry_);
  try {
    RETURN_IF_ERROR(c.Open(endpoint_, std::chrono::seconds(10)));
    c.Watch(idle_timeout_, total);
    bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target, 11};
    AddCommonHeaders(req, endpoint_, access_token_, route_sandbox_);
    req.set(bhttp::field::accept_encoding, "identity");
    bhttp::write(c.io(), req);
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::file_body> parser;
    parser.body_limit(max_bytes);
    beast::error_code hec;
    bhttp::read_header(c.io(), buf, parser, hec);
    if (hec == bhttp::error::body_limit) {
      return ResourceExhausted(what + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    if (hec) return ExchangeError(c, what, hec.message(), idle_timeout_);
    if (parser.get().result_int() != 200) {
      bhttp::response_parser<bhttp::string_body> err{std::move(parser)};
      err.body_limit(kMaxUnaryResponse);
      bhttp::read(c.io(), buf, err);
      return ErrorFromBody(err.get().result_int(), err.get().body(), what);
    }
    // O_NOFOLLOW: never write through a symlink someone planted at the target.
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("open " + tmp);
    ::close(fd);
    beast::error_code ec;
    parser.get().body().open(tmp.c_str(), beast::file_mode::write, ec);
    if (ec) return Internal("open " + tmp + ": " + ec.message());
    bhttp::read(c.io(), buf, parser, ec);
    parser.get().body().close();
    if (ec) {
      ::unlink(tmp.c_str());
      if (ec == bhttp::error::body_limit)
        return ResourceExhausted(what + ": larger than " + std::to_string(max_bytes) + " bytes");
      return ExchangeError(c, what, ec.message(), idle_timeout_);
    }
    if (::rename(tmp.c_str(), local_path.c_str()) != 0) {
      Status s = ErrnoError("rename " + tmp + " to " + local_path);
      ::unlink(tmp.c_str());
      return s;
    }
    return OkStatus();
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    return ExchangeError(c, what, e.what(), idle_timeout_);
  }
}

StatusOr<envd::EntryInfo> EnvdClient::Stat(const std::string& guest_path, const std::string& user) const {
  ASSIGN_OR_RETURN(auto j, Call("filesystem.Filesystem/Stat", {{"path", guest_path}}, user));
  if (!j.contains("entry") || !j["entry"].is_object()) return Internal("Stat: reply without entry");
  return envd::EntryInfoFromJson(j["entry"]);
}

StatusOr<size_t> EnvdClient::CountProcesses() const {
  ASSIGN_OR_RETURN(auto j, Call("process.Process/List", nlohmann::json::object(), ""));
  return j.contains("processes") && j["processes"].is_array() ? j["processes"].size() : 0;
}

StatusOr<std::vector<envd::EntryInfo>> EnvdClient::ListDir(const std::string& guest_path, uint32_t depth,
                                                            const std::string& user) const {
  ASSIGN_OR_RETURN(auto j, Call("filesystem.Filesystem/ListDir", {{"path", guest_path}, {"depth", depth}}, user));
  std::vector<envd::EntryInfo> out;
  if (j.contains("entries") && j["entries"].is_array()) {
    for (const auto& e : j["entries"]) {
      ASSIGN_OR_RETURN(envd::EntryInfo entry, envd::EntryInfoFromJson(e));
      out.push_back(std::move(entry));
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
  using envd::FileType;
  ASSIGN_OR_RETURN(envd::EntryInfo root, Stat(guest_path));
  if (root.type == FileType::kFile) return DownloadFile(root.path, local_path, max_bytes);
  if (root.type != FileType::kDirectory) return InvalidArgument(guest_path + " is neither a file nor a directory");
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
      bool dir = e.type == FileType::kDirectory;
      if ((pass == 0) != dir) continue;
      if (!dir && e.type != FileType::kFile) continue;  // symlinks are not followed out of the guest
      if (e.path.rfind(prefix, 0) != 0) return PermissionDenied("agent listed " + e.path + " outside " + root.path);
      std::string rel = e.path.substr(prefix.size());
      if (!SafeRelativePath(rel)) return PermissionDenied("agent listed an unsafe path: " + e.path);
      std::string dst = local_path + "/" + rel;
      if (dir) {
        if (::mkdir(dst.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dst);
        struct stat st;
        if (::lstat(dst.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return PermissionDenied(dst + " is not a directory");
      } else {
        if (e.size < 0 || static_cast<uint64_t>(e.size) > budget) return ResourceExhausted("download of " + guest_path + " exceeds " + std::to_string(max_bytes) + " bytes");
        RETURN_IF_ERROR(DownloadFile(e.path, dst, budget));
        struct stat st;
        if (::stat(dst.c_str(), &st) == 0) budget -= std::min<uint64_t>(budget, st.st_size);
      }
    }
  }
  return OkStatus();
}

}  // namespace airlock
