#include "interpreter/interpreter.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/fd.h"
#include "common/interpreter_access.h"
#include "http/client.h"
#include "interpreter/log.h"
#include "interpreter/request.h"
#include "interpreter/wire.h"

namespace airlock::interpreter {

using json = nlohmann::json;

namespace {

constexpr std::string_view kText = "text/plain; charset=utf-8";
constexpr std::string_view kJson = "application/json";

http::Limits ServerLimits() {
  http::Limits l;
  l.log = [](http::LogLevel level, const std::string& m) {
    if (level == http::LogLevel::kError) LogError("http: %s", m.c_str());
    else LogDebug("http: %s", m.c_str());
  };
  return l;
}

// The token the agent wrote (common/interpreter_access.h); "" while it has
// none (no file). Read on every request, so a rotation at /init applies at
// once. Any other failure is an error: the caller refuses the request.
// What the token's directory is watched for. The token is only ever renamed
// over (WriteFileAtomic) or removed; a close after writing is watched too,
// for a writer that writes in place.
constexpr uint32_t kTokenEvents = IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR;

StatusOr<std::string> ReadAccessToken(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return std::string();
    return ErrnoError("open " + path);
  }
  std::string token;
  char buf[512];
  while (token.size() <= 4096) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + path);
    if (n == 0) return token;
    token.append(buf, static_cast<size_t>(n));
  }
  return InvalidArgument(path + " is larger than 4 KiB");
}

}  // namespace

Interpreter::Interpreter(boost::asio::io_context& io, Options options, KernelTable table, KernelUser user)
    : io_(io),
      options_(std::move(options)),
      table_(std::move(table)),
      user_(std::move(user)),
      reaper_(io),
      hub_(std::make_unique<ZmqHub>(
          [this, alive = std::weak_ptr<bool>(alive_)](uint64_t k, Channel ch, KernelMessage m) {
            // Hub thread → io thread.
            boost::asio::post(io_, [this, alive, k, ch, m = std::move(m)] {
              if (alive.expired()) return;
              auto it = kernels_.find(k);
              if (it == kernels_.end()) return;
              if (auto ctx = it->second.lock()) ctx->OnMessage(k, ch, m);
            });
          },
          [](uint64_t k, const Status& st) {
            static std::atomic<uint64_t> n{0};
            uint64_t i = n.fetch_add(1);
            if (i < 20 || i % 1000 == 0) LogError("kernel %llu: dropped a message: %s (%llu so far)",
                                                  static_cast<unsigned long long>(k), st.ToString().c_str(),
                                                  static_cast<unsigned long long>(i + 1));
          },
          // A content frame above the output cap is never parsed: it would
          // be cut anyway (Execution::OnIopub → OutputLimitExceeded).
          options_.max_output_bytes + (1u << 20))),
      services_{io,
                options_,
                table_,
                user_,
                *hub_,
                reaper_,
                [this](std::weak_ptr<Context> c) {
                  uint64_t k = next_kernel_++;
                  kernels_[k] = std::move(c);
                  return k;
                },
                [this](uint64_t k) { kernels_.erase(k); },
                [this](const std::string& token, std::function<void(EnvVars)> done) {
                  FetchEnvs(token, std::move(done));
                }},
      retry_timer_(io),
      listener_(io, [this](std::shared_ptr<http::Conn> c) { Handle(std::move(c)); }, ServerLimits()),
      token_watch_(io) {}

Interpreter::~Interpreter() { Shutdown(); }

Status Interpreter::Start() {
  RETURN_IF_ERROR(listener_.Listen(options_.listen));
  RETURN_IF_ERROR(hub_->Start());
  RETURN_IF_ERROR(WatchAccessToken());
  StartDefaultPython();
  return OkStatus();
}

void Interpreter::Shutdown() {
  listener_.Stop();
  retry_timer_.cancel();
  boost::system::error_code ignored;
  token_watch_.close(ignored);
  contexts_.clear();  // each kills its kernel
  defaults_.clear();
  if (hub_) hub_->Stop();
}

void Interpreter::StartDefaultPython() {
  auto ctx = DefaultContext("python");
  if (!ctx) {
    LogError("%s has no python kernel: /health stays 503", options_.kernels.c_str());
    return;
  }
  ctx->Start([this, alive = std::weak_ptr<bool>(alive_)](Status st) {
    if (alive.expired()) return;
    if (st.ok()) {
      if (!python_ready_) {
        // The ready line is the host's cue for the template snapshot: the
        // warm-up comes first, so every sandbox made from it has it done.
        if (auto ctx = DefaultContext("python")) {
          ctx->WarmUp([this, alive] {
            if (!alive.expired()) AnnounceReady();
          });
        }
      }
      python_ready_ = true;
      retry_delay_ = std::chrono::seconds(1);
      return;
    }
    if (python_ready_) return;
    // Not warm yet: try again (the host waits on /health), backing off.
    retry_timer_.expires_after(retry_delay_);
    retry_delay_ = std::min<std::chrono::milliseconds>(retry_delay_ * 2, std::chrono::seconds(30));
    retry_timer_.async_wait([this, alive](const boost::system::error_code& ec) {
      if (!ec && !alive.expired() && !python_ready_) StartDefaultPython();
    });
  });
}

void Interpreter::AnnounceReady() {
  LogInfo("the default python kernel is ready");
  if (options_.console.empty()) return;
  UniqueFd fd(::open(options_.console.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | O_APPEND));
  if (!fd) {
    LogError("open %s: %s", options_.console.c_str(), std::strerror(errno));
    return;
  }
  static constexpr char kLine[] = "airlock-interpreter: ready\n";
  if (::write(fd.get(), kLine, sizeof kLine - 1) != static_cast<ssize_t>(sizeof kLine - 1)) {
    LogError("write %s: %s", options_.console.c_str(), std::strerror(errno));
  }
}

std::shared_ptr<Context> Interpreter::NewContext(const std::string& language, const std::string& cwd) {
  const KernelSpec* spec = table_.Find(language);
  if (!spec) return nullptr;
  auto ctx = std::make_shared<Context>(services_, NewUuid(), language, cwd, *spec);
  contexts_[ctx->id()] = ctx;
  return ctx;
}

std::shared_ptr<Context> Interpreter::DefaultContext(const std::string& language) {
  if (auto it = defaults_.find(language); it != defaults_.end()) {
    auto c = contexts_.find(it->second);
    if (c != contexts_.end()) return c->second;
    defaults_.erase(it);
  }
  auto ctx = NewContext(language, options_.cwd);
  if (ctx) defaults_[language] = ctx->id();
  return ctx;
}

void Interpreter::FetchEnvs(const std::string& token, std::function<void(EnvVars)> done) {
  auto hp = http::ParseHostPort(options_.envd);
  if (!hp.ok()) {
    LogError("--envd %s: %s", options_.envd.c_str(), hp.status().ToString().c_str());
    boost::asio::post(io_, [done = std::move(done)] { done({}); });
    return;
  }
  http::HttpCall call;
  call.host = hp->first;
  call.port = hp->second;
  call.target = "/envs";
  if (!token.empty()) call.headers.emplace_back("X-Access-Token", token);
  call.timeout = std::chrono::seconds(5);
  call.max_body = 4u << 20;
  // HttpDo blocks: a short-lived thread, the answer posted back.
  std::thread([this, call = std::move(call), done = std::move(done)]() mutable {
    EnvVars envs;
    auto r = http::HttpDo(call);
    if (!r.ok()) {
      LogError("envd GET /envs: %s", r.status().ToString().c_str());
    } else if (r->status != 200) {
      LogError("envd GET /envs: HTTP %d", r->status);
    } else {
      json j = json::parse(r->body, nullptr, false);
      if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it) {
          if (!it->is_string() || it.key().empty()) continue;
          const std::string& v = it->get_ref<const std::string&>();
          if (it.key().find_first_of(std::string_view("=\0", 2)) != std::string::npos ||
              v.find('\0') != std::string::npos)
            continue;  // no environment holds it
          envs[it.key()] = v;
        }
      }
    }
    boost::asio::post(io_, [done = std::move(done), envs = std::move(envs)]() mutable { done(std::move(envs)); });
  }).detach();
}

// ---- the sandbox's identity: the access token the agent writes at /init ----

Status Interpreter::WatchAccessToken() {
  if (options_.access_token_file.empty()) return OkStatus();
  const std::filesystem::path file = std::filesystem::absolute(options_.access_token_file);
  token_dir_ = file.parent_path().string();
  token_name_ = file.filename().string();
  token_dir_name_ = file.parent_path().filename().string();
  const std::string parent = file.parent_path().parent_path().string();
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return ErrnoError("inotify_init1");
  token_watch_.assign(fd);
  token_dir_wd_ = ::inotify_add_watch(fd, token_dir_.c_str(), kTokenEvents);
  if (token_dir_wd_ < 0) {
    if (errno != ENOENT) return ErrnoError("inotify_add_watch " + token_dir_);
    // Not made yet (the agent makes it at the first /init with a token).
    token_parent_wd_ = ::inotify_add_watch(fd, parent.c_str(), IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
    if (token_parent_wd_ < 0) return ErrnoError("inotify_add_watch " + parent);
    token_dir_wd_ = ::inotify_add_watch(fd, token_dir_.c_str(), kTokenEvents);  // made meanwhile?
  }
  if (auto t = ReadAccessToken(file); t.ok()) token_seen_ = *t;
  ReadTokenEvents();
  return OkStatus();
}

void Interpreter::ReadTokenEvents() {
  token_watch_.async_read_some(
      boost::asio::buffer(token_events_),
      [this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec, size_t n) {
        if (ec || alive.expired()) return;
        bool written = false;
        for (size_t off = 0; off + sizeof(inotify_event) <= n;) {
          const auto* ev = reinterpret_cast<const inotify_event*>(token_events_.data() + off);
          std::string name = ev->len ? std::string(ev->name) : std::string();
          if (ev->mask & IN_Q_OVERFLOW) {
            written = true;  // events were lost: look at the file itself
          } else if (ev->wd == token_parent_wd_ && name == token_dir_name_ && token_dir_wd_ < 0) {
            token_dir_wd_ = ::inotify_add_watch(token_watch_.native_handle(), token_dir_.c_str(), kTokenEvents);
            if (token_dir_wd_ < 0) LogError("inotify_add_watch %s: %s", token_dir_.c_str(), std::strerror(errno));
            written = true;  // the token may be in it already
          } else if (ev->wd == token_dir_wd_ && name == token_name_) {
            written = true;
          }
          off += sizeof(inotify_event) + ev->len;
        }
        if (written) OnTokenWritten();
        ReadTokenEvents();
      });
}

void Interpreter::OnTokenWritten() {
  auto token = ReadAccessToken(options_.access_token_file);
  if (!token.ok()) {
    LogError("access token: %s", token.status().ToString().c_str());
    return;
  }
  // The same token again is the same sandbox (a resume): nothing changes.
  if (token->empty() || *token == token_seen_) return;
  token_seen_ = *token;
  LogInfo("a new access token: the contexts take the sandbox's env vars and new PRNG seeds");
  for (auto& [id, ctx] : contexts_) ctx->Reinit(*token);
}

// ---- HTTP ----

void Interpreter::Handle(std::shared_ptr<http::Conn> c) {
  const std::string& path = c->path();
  http::Method m = c->method();
  if (!options_.access_token_file.empty()) {
    auto token = ReadAccessToken(options_.access_token_file);
    if (!token.ok()) {
      LogError("access token: %s", token.status().ToString().c_str());
      return c->RespondError(503, "the sandbox's access token cannot be read: " + token.status().message());
    }
    if (!token->empty()) {
      std::string denied = InterpreterAccessError(c->method_string(), path, c->Header("X-Access-Token"), *token);
      if (!denied.empty()) return c->RespondError(401, denied);
    }
  }
  auto with_body = [this, c](std::function<void(std::string)> fn) {
    c->ReadBodyToString(options_.max_request_body, [c, fn = std::move(fn)](StatusOr<std::string> body) {
      if (!body.ok()) {
        c->Respond(body.status().code() == StatusCode::kResourceExhausted ? 413 : 400, kText,
                   "Could not read the request body: " + body.status().message());
        return;
      }
      fn(std::move(body).value());
    });
  };
  if (path == "/health") {
    if (m != http::Method::kGet && m != http::Method::kHead) return c->Respond(405, kText, "Method not allowed");
    if (python_ready_) return c->Respond(200, kJson, "\"OK\"");
    return c->Respond(503, kText, "The default python kernel is not ready yet");
  }
  if (path == "/airlock/warm-up") {
    // The warm pool's (core/bring_up.cc Manager::Park): a parked sandbox's
    // kernel runs WarmUp once, so under TCG the execute path is translated
    // before a claim's first execution. Leaves nothing the user sees.
    if (m != http::Method::kPost) return c->Respond(405, kText, "Method not allowed");
    auto ctx = python_ready_ ? DefaultContext("python") : nullptr;
    if (!ctx) return c->Respond(503, kText, "The default python kernel is not ready yet");
    ctx->WarmUp([c] { c->Respond(204, kText, ""); });
    return;
  }
  if (path == "/execute") {
    if (m != http::Method::kPost) return c->Respond(405, kText, "Method not allowed");
    return with_body([this, c](std::string body) { HandleExecute(c, std::move(body)); });
  }
  if (path == "/contexts") {
    if (m == http::Method::kGet) return HandleListContexts(c);
    if (m == http::Method::kPost)
      return with_body([this, c](std::string body) { HandleCreateContext(c, std::move(body)); });
    return c->Respond(405, kText, "Method not allowed");
  }
  constexpr std::string_view kPrefix = "/contexts/";
  if (path.size() > kPrefix.size() && path.compare(0, kPrefix.size(), kPrefix) == 0) {
    std::string rest = path.substr(kPrefix.size());
    constexpr std::string_view kRestart = "/restart";
    if (rest.size() > kRestart.size() && rest.compare(rest.size() - kRestart.size(), kRestart.size(), kRestart) == 0) {
      if (m != http::Method::kPost) return c->Respond(405, kText, "Method not allowed");
      std::string id = rest.substr(0, rest.size() - kRestart.size());
      return with_body([this, c, id](std::string) { HandleRestart(c, id); });
    }
    if (rest.find('/') == std::string::npos) {
      if (m != http::Method::kDelete) return c->Respond(405, kText, "Method not allowed");
      return with_body([this, c, rest](std::string) { HandleDelete(c, rest); });
    }
  }
  c->Respond(404, kText, "Not found");
}

void Interpreter::HandleExecute(std::shared_ptr<http::Conn> c, std::string body) {
  auto parsed = ParseExecuteRequest(body);
  if (!parsed.ok()) return c->Respond(parsed.error.status, kText, parsed.error.message);
  ExecuteRequest req = std::move(*parsed.value);
  std::shared_ptr<Context> ctx;
  if (req.context_id) {
    auto it = contexts_.find(*req.context_id);
    if (it == contexts_.end()) return c->Respond(404, kText, "Context " + *req.context_id + " not found");
    ctx = it->second;
  } else {
    std::string language = req.language.value_or("python");
    if (language.empty()) language = "python";
    ctx = DefaultContext(language);
    if (!ctx)
      return c->Respond(500, kText,
                        "Language '" + language + "' is not supported; supported: " + table_.Languages());
  }
  auto e = std::make_shared<Execution>(c, std::move(req), c->Header("X-Access-Token"), options_.max_output_bytes,
                                       options_.keepalive);
  e->Begin();
  ctx->Enqueue(std::move(e));
}

void Interpreter::HandleCreateContext(std::shared_ptr<http::Conn> c, std::string body) {
  auto parsed = ParseCreateContextRequest(body);
  if (!parsed.ok()) return c->Respond(parsed.error.status, kText, parsed.error.message);
  const auto& req = *parsed.value;
  auto ctx = NewContext(req.language, req.cwd.value_or(options_.cwd));
  if (!ctx)
    return c->Respond(500, kText,
                      "Language '" + req.language + "' is not supported; supported: " + table_.Languages());
  std::weak_ptr<Context> weak = ctx;
  ctx->Start([this, c, weak, alive = std::weak_ptr<bool>(alive_)](Status st) {
    auto ctx = weak.lock();
    if (alive.expired() || !ctx) return;
    if (!st.ok()) {
      // A context that never ran is not kept.
      contexts_.erase(ctx->id());
      return c->Respond(500, kText, "Could not start the " + ctx->language() + " kernel: " + st.message());
    }
    c->Respond(200, kJson, ctx->ToJson().dump(-1, ' ', true, json::error_handler_t::replace));
  });
}

void Interpreter::HandleListContexts(std::shared_ptr<http::Conn> c) {
  json a = json::array();
  for (const auto& [id, ctx] : contexts_) a.push_back(ctx->ToJson());
  c->Respond(200, kJson, a.dump(-1, ' ', true, json::error_handler_t::replace));
}

void Interpreter::HandleRestart(std::shared_ptr<http::Conn> c, const std::string& id) {
  auto it = contexts_.find(id);
  if (it == contexts_.end()) return c->Respond(404, kText, "Context " + id + " not found");
  it->second->Restart([c](Status st) {
    if (st.ok()) return c->Respond(200, kJson, "null");
    if (st.code() == StatusCode::kNotFound) return c->Respond(404, kText, st.message());
    c->Respond(500, kText, "Could not restart the kernel: " + st.message());
  });
}

void Interpreter::HandleDelete(std::shared_ptr<http::Conn> c, const std::string& id) {
  auto it = contexts_.find(id);
  if (it == contexts_.end()) return c->Respond(404, kText, "Context " + id + " not found");
  auto ctx = it->second;
  contexts_.erase(it);
  for (auto d = defaults_.begin(); d != defaults_.end(); ++d) {
    if (d->second == id) {
      defaults_.erase(d);
      break;
    }
  }
  ctx->Delete([c, ctx] { c->Respond(200, kJson, "null"); });
}

}  // namespace airlock::interpreter
