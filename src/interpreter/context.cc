#include "interpreter/context.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interpreter/log.h"
#include "interpreter/output.h"

namespace airlock::interpreter {

using json = nlohmann::json;

Context::Context(ContextServices& services, std::string id, std::string language, std::string cwd,
                 const KernelSpec& spec)
    : s_(services),
      id_(std::move(id)),
      language_(std::move(language)),
      cwd_(std::move(cwd)),
      spec_(spec),
      nudge_timer_(services.io),
      kill_timer_(services.io),
      interrupt_timer_(services.io) {}

Context::~Context() { TearDownKernel(); }

json Context::ToJson() const { return json{{"id", id_}, {"language", language_}, {"cwd", cwd_}}; }

// ---- kernel lifecycle ----

Status Context::Spawn() {
  ::mkdir(s_.options.runtime_dir.c_str(), 0711);
  ASSIGN_OR_RETURN(conn_, PrepareConnection(s_.options.runtime_dir + "/kernel-" + id_, s_.user));
  connection_file_ = conn_.ConnectionFile();
  if (Status st = WriteConnectionFile(conn_, s_.user); !st.ok()) {
    RemoveConnection(conn_);
    return st;
  }
  KernelLaunch launch;
  launch.argv = s_.table.Argv(spec_, connection_file_);
  launch.env = KernelEnvironment(s_.user, spec_.env);
  // The python kernel drops stdout/stderr past this per execution
  // (python_startup.py): a little above our cap, so that we still see the
  // cap crossed (and say OutputLimitExceeded), while a cell printing faster
  // than the kernel sends cannot grow it out of memory.
  launch.env["AIRLOCK_MAX_OUTPUT_BYTES"] = std::to_string(s_.options.max_output_bytes + (size_t{1} << 20));
  launch.cwd = cwd_;
  launch.user = s_.user;
  auto proc = SpawnKernel(launch);
  if (!proc.ok()) {
    RemoveConnection(conn_);
    connection_file_.clear();
    return proc.status();
  }
  proc_ = std::move(proc).value();
  kernel_ = s_.register_kernel(weak_from_this());
  s_.hub.Add(kernel_, conn_, proc_.DupPidfd());
  session_ = NewUuid();
  info_reply_ = iopub_seen_ = setup_done_ = internal_ = false;
  state_ = State::kStarting;
  start_deadline_ = std::chrono::steady_clock::now() + s_.options.start_timeout;
  uint64_t k = kernel_;
  std::weak_ptr<Context> weak = weak_from_this();
  s_.reaper.Watch(proc_.pid(), [weak, k](int w) {
    if (auto self = weak.lock()) self->OnExit(k, w);
  });
  LogInfo("context %s (%s): kernel pid %d started", id_.c_str(), language_.c_str(), proc_.pid());
  SendKernelInfo();
  ArmNudge();
  return OkStatus();
}

void Context::Start(std::function<void(Status)> on_ready) {
  if (state_ == State::kReady) {
    if (on_ready) on_ready(OkStatus());
    return;
  }
  if (on_ready) ready_waiters_.push_back(std::move(on_ready));
  if (state_ == State::kStarting || state_ == State::kStopping) return;
  if (state_ == State::kDeleted) {
    CallReadyWaiters(NotFound("Context " + id_ + " not found"));
    return;
  }
  if (Status st = Spawn(); !st.ok()) StartFailed(st);
}

void Context::SendKernelInfo() { Send(Channel::kShell, "kernel_info_request", json::object()); }

void Context::ArmNudge() {
  nudge_timer_.expires_after(std::chrono::seconds(1));
  std::weak_ptr<Context> weak = weak_from_this();
  uint64_t k = kernel_;
  nudge_timer_.async_wait([weak, k](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || self->kernel_ != k || self->state_ != State::kStarting) return;
    if (std::chrono::steady_clock::now() >= self->start_deadline_) {
      self->StartFailed(DeadlineExceeded("kernel did not answer kernel_info within " +
                                         std::to_string(self->s_.options.start_timeout.count() / 1000) + " s"));
      return;
    }
    self->SendKernelInfo();
    self->ArmNudge();
  });
}

void Context::BecomeReady() {
  nudge_timer_.cancel();
  start_retries_ = 0;
  state_ = State::kReady;
  last_error_ = OkStatus();
  LogInfo("context %s (%s): kernel ready", id_.c_str(), language_.c_str());
  CallReadyWaiters(OkStatus());
  Pump();
}

void Context::CallReadyWaiters(const Status& st) {
  auto waiters = std::move(ready_waiters_);
  ready_waiters_.clear();
  for (auto& w : waiters) w(st);
}

void Context::StartFailed(const Status& failure) {
  Status st = failure;
  LogError("context %s (%s): kernel start failed: %s", id_.c_str(), language_.c_str(), st.ToString().c_str());
  TearDownKernel();
  state_ = State::kFailed;
  // A kernel that exits while starting may have lost the race for one of
  // the five ports picked for it (they are free when picked, not reserved):
  // new ports, twice more.
  if (st.code() == StatusCode::kUnavailable && start_retries_ < 2) {
    ++start_retries_;
    Status again = Spawn();
    if (again.ok()) return;
    st = again;
  }
  start_retries_ = 0;
  last_error_ = st;
  std::string line = ErrorLine("KernelStartFailed", "The " + language_ + " kernel did not start: " + st.message(), "");
  AbortRunning(line);
  FailQueue(line);
  CallReadyWaiters(st);
}

void Context::TearDownKernel() {
  nudge_timer_.cancel();
  kill_timer_.cancel();
  interrupt_timer_.cancel();
  if (kernel_) {
    s_.hub.Remove(kernel_);
    s_.unregister_kernel(kernel_);
    kernel_ = 0;
  }
  if (proc_.valid()) {
    s_.reaper.Forget(proc_.pid());  // still reaped, nobody told
    proc_.Kill();
  }
  if (!connection_file_.empty()) {
    RemoveConnection(conn_);
    connection_file_.clear();
  }
}

void Context::OnExit(uint64_t kernel, int wstatus) {
  if (kernel != kernel_) return;
  proc_.MarkReaped();
  std::string how = DescribeWaitStatus(wstatus);
  switch (state_) {
    case State::kStarting:
      StartFailed(Unavailable("kernel exited during start (" + how + ")"));
      break;
    case State::kReady: {
      LogError("context %s (%s): kernel died (%s); starting a new one", id_.c_str(), language_.c_str(), how.c_str());
      TearDownKernel();
      FailCurrent();
      state_ = State::kFailed;
      Start();
      break;
    }
    case State::kStopping:
      AfterStop();
      break;
    default:
      TearDownKernel();
  }
}

// ---- restart / delete ----

void Context::Restart(std::function<void(Status)> done) {
  if (state_ == State::kDeleted) {
    done(NotFound("Context " + id_ + " not found"));
    return;
  }
  ready_waiters_.push_back(std::move(done));
  if (state_ == State::kStopping) {
    restart_after_stop_ = true;
    return;
  }
  BeginStop(true);
}

void Context::Delete(std::function<void()> done) {
  if (state_ == State::kDeleted) {
    done();
    return;
  }
  stop_waiters_.push_back(std::move(done));
  if (state_ == State::kStopping) {
    restart_after_stop_ = false;
    return;
  }
  BeginStop(false);
}

void Context::BeginStop(bool restart) {
  restart_after_stop_ = restart;
  if (!proc_.valid()) {
    AfterStop();
    return;
  }
  state_ = State::kStopping;
  nudge_timer_.cancel();
  Send(Channel::kControl, "shutdown_request", json{{"restart", false}});
  kill_timer_.expires_after(s_.options.stop_grace);
  std::weak_ptr<Context> weak = weak_from_this();
  uint64_t k = kernel_;
  kill_timer_.async_wait([weak, k](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || self->kernel_ != k || self->state_ != State::kStopping) return;
    // Not gone after the grace period: SIGKILL; the reaper still reports
    // the exit (OnExit → AfterStop).
    if (self->proc_.valid()) {
      pid_t pid = self->proc_.pid();
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
  });
}

void Context::AfterStop() {
  TearDownKernel();
  FailCurrent();
  if (restart_after_stop_) {
    state_ = State::kFailed;
    Start();
    return;
  }
  state_ = State::kDeleted;
  FailQueue(UnexpectedEndLine());
  CallReadyWaiters(NotFound("Context " + id_ + " not found"));
  auto waiters = std::move(stop_waiters_);
  stop_waiters_.clear();
  for (auto& w : waiters) w();
}

// ---- messages ----

std::string Context::Send(Channel channel, std::string_view msg_type, json content) {
  json header = MakeHeader(msg_type, session_);
  std::string id = header["msg_id"];
  if (kernel_) s_.hub.Send(kernel_, channel, SerializeMessage(conn_.key, header, content));
  return id;
}

void Context::OnMessage(uint64_t kernel, Channel channel, const KernelMessage& m) {
  if (kernel != kernel_) return;
  std::string type = m.msg_type();
  if (state_ == State::kStarting) {
    if (channel == Channel::kShell && type == "kernel_info_reply") info_reply_ = true;
    if (channel == Channel::kIopub) iopub_seen_ = true;
    if (info_reply_ && iopub_seen_) BecomeReady();
    return;
  }
  if (!current_ || m.parent_id() != current_->msg_id) return;
  if (channel == Channel::kIopub) {
    if (type == "status") {
      std::string st = m.content.is_object() ? m.content.value("execution_state", "") : "";
      if (st == "busy") {
        current_->started = true;
        if (interrupt_wanted_ && current_->user) proc_.Signal(SIGINT);
      } else if (st == "idle") {
        current_->idle = true;
      }
    } else if (current_->user && running_) {
      running_->OnIopub(m);
    }
  } else if (channel == Channel::kShell && type == "execute_reply") {
    current_->reply = true;
    if (current_->user && running_) {
      running_->OnReply(m.content);
    } else if (!current_->user && m.content.is_object() && m.content.value("status", "") != "ok") {
      // The server's own snippets must not fail; say so when they do.
      LogError("context %s (%s): the %s execution failed in the kernel: %s: %s", id_.c_str(), language_.c_str(),
               current_->what, m.content.value("ename", m.content.value("status", "")).c_str(),
               m.content.value("evalue", "").c_str());
    }
  }
  if (current_ && current_->reply && current_->idle) Complete();
}

void Context::RunCode(const std::string& code, const char* what, std::function<void(bool ok)> done) {
  auto r = std::make_unique<Request>();
  bool user = std::string_view(what) == "code";
  r->user = user;
  r->what = what;
  r->done = std::move(done);
  r->msg_id = Send(Channel::kShell, "execute_request",
                   json{{"code", code},
                        {"silent", !user},
                        {"store_history", user},
                        {"user_expressions", json::object()},
                        {"allow_stdin", false},
                        // false: an error must not make the kernel abort the
                        // env-restore execution that follows it.
                        {"stop_on_error", false}});
  interrupt_wanted_ = false;
  current_ = std::move(r);
}

void Context::RunInternal(const std::string& code, const char* what, std::function<void(bool ok)> done) {
  internal_ = true;
  std::weak_ptr<Context> weak = weak_from_this();
  RunCode(code, what, [weak, done = std::move(done)](bool ok) {
    auto self = weak.lock();
    if (!self) return;
    self->internal_ = false;
    if (done) done(ok);
    // Not ok: the kernel went away; its successor's BecomeReady pumps.
    if (ok) self->Pump();
  });
}

void Context::Reinit(const std::string& token) {
  ++identity_;
  setup_done_ = false;
  // Busy: the next execution's StepSetup does it.
  if (state_ != State::kReady || running_ || internal_) return;
  internal_ = true;  // from the fetch on: an execution arriving now waits
  std::weak_ptr<Context> weak = weak_from_this();
  const uint64_t k = kernel_, identity = identity_;
  s_.fetch_envs(token, [weak, k, identity](EnvVars envs) {
    auto self = weak.lock();
    if (!self || self->kernel_ != k) return;  // a new kernel: Spawn reset both flags
    self->internal_ = false;
    if (self->state_ != State::kReady) return;  // stopping: BecomeReady pumps
    auto done = [weak, identity](bool ok) {
      auto self = weak.lock();
      // A Reinit since: its identity's set-up is still to do.
      if (self && ok && self->identity_ == identity) self->setup_done_ = true;
    };
    std::string code = SetEnvSnippet(self->language_, envs, false) + ReseedSnippet(self->language_);
    if (code.empty()) {
      done(true);
      self->Pump();
      return;
    }
    self->RunInternal(code, "env setup", done);
  });
}

void Context::WarmUp(std::function<void()> done) {
  std::string code = WarmUpSnippet(language_);
  if (code.empty() || state_ != State::kReady || running_ || internal_) {
    done();
    return;
  }
  RunInternal(code, "warm-up", [done = std::move(done)](bool) { done(); });
}

void Context::Complete() {
  auto r = std::move(current_);
  interrupt_timer_.cancel();
  interrupt_wanted_ = false;
  if (r->done) r->done(true);
}

void Context::FailCurrent() {
  auto r = std::move(current_);
  interrupt_timer_.cancel();
  interrupt_wanted_ = false;
  if (r && r->done) r->done(false);
  AbortRunning(UnexpectedEndLine());
}

void Context::FailQueue(const std::string& error_line) {
  auto q = std::move(queue_);
  queue_.clear();
  for (auto& e : q) e->Finish(error_line);
}

// ---- executions ----

void Context::Enqueue(std::shared_ptr<Execution> e) {
  std::weak_ptr<Context> weak = weak_from_this();
  std::weak_ptr<Execution> we = e;
  e->SetOnGone([weak, we] {
    auto self = weak.lock();
    auto ex = we.lock();
    if (!self || !ex) return;
    if (self->running_ == ex) {
      if (self->user_sent_) self->Interrupt();
      return;
    }
    for (auto it = self->queue_.begin(); it != self->queue_.end(); ++it) {
      if (*it == ex) {
        self->queue_.erase(it);
        break;
      }
    }
  });
  e->SetOnLimit([weak, we] {
    auto self = weak.lock();
    if (self && self->running_ == we.lock() && self->user_sent_) self->Interrupt();
  });
  queue_.push_back(std::move(e));
  if (state_ == State::kFailed) Start();
  Pump();
}

void Context::Pump() {
  if (running_ || internal_ || state_ != State::kReady) return;
  while (!queue_.empty() && !running_) {
    auto e = std::move(queue_.front());
    queue_.pop_front();
    if (e->gone() || e->finished()) continue;
    running_ = std::move(e);
  }
  if (!running_) return;
  user_sent_ = false;
  StepSetup();
}

void Context::AbortRunning(const std::string& error_line) {
  if (!running_) return;
  auto e = std::move(running_);
  running_.reset();
  e->Finish(error_line);
}

void Context::StepSetup() {
  if (setup_done_) {
    StepSetEnv();
    return;
  }
  setup_done_ = true;
  std::weak_ptr<Context> weak = weak_from_this();
  uint64_t k = kernel_;
  auto ex = running_;
  s_.fetch_envs(running_->access_token(), [weak, k, ex](EnvVars envs) {
    auto self = weak.lock();
    if (!self || self->kernel_ != k || self->running_ != ex || self->state_ != State::kReady) return;
    std::string code = SetEnvSnippet(self->language_, envs, false) + ReseedSnippet(self->language_);
    if (code.empty()) {
      self->StepSetEnv();
      return;
    }
    self->RunCode(code, "env setup", [weak](bool ok) {
      if (auto self = weak.lock(); self && ok) self->StepSetEnv();
    });
  });
}

void Context::StepSetEnv() {
  if (!running_) return;
  std::string code = SetEnvSnippet(language_, running_->request().env_vars, true);
  if (code.empty() || running_->gone()) {
    StepUser();
    return;
  }
  std::weak_ptr<Context> weak = weak_from_this();
  RunCode(code, "env_vars", [weak](bool ok) {
    if (auto self = weak.lock(); self && ok) self->StepUser();
  });
}

void Context::StepUser() {
  if (!running_) return;
  if (running_->gone() || running_->finished()) {
    StepRestoreEnv();
    return;
  }
  std::weak_ptr<Context> weak = weak_from_this();
  user_sent_ = true;
  RunCode(running_->request().code, "code", [weak](bool ok) {
    auto self = weak.lock();
    if (!self || !ok) return;  // not ok: FailCurrent already ended it
    if (self->running_) self->running_->Complete();
    self->StepRestoreEnv();
  });
}

void Context::StepRestoreEnv() {
  if (!running_) return;
  user_sent_ = false;
  std::string code = RestoreEnvSnippet(language_, running_->request().env_vars);
  if (code.empty()) {
    StepDone();
    return;
  }
  std::weak_ptr<Context> weak = weak_from_this();
  RunCode(code, "env restore", [weak](bool ok) {
    if (auto self = weak.lock(); self && ok) self->StepDone();
  });
}

void Context::StepDone() {
  if (running_) running_->Finish();
  running_.reset();
  Pump();
}

void Context::Interrupt() {
  if (!current_ || !current_->user) return;
  interrupt_wanted_ = true;
  if (current_->started) proc_.Signal(SIGINT);
  ArmReinterrupt(current_->msg_id);
}

void Context::ArmReinterrupt(const std::string& msg_id) {
  interrupt_timer_.expires_after(s_.options.reinterrupt);
  std::weak_ptr<Context> weak = weak_from_this();
  interrupt_timer_.async_wait([weak, msg_id](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || !self->current_ || self->current_->msg_id != msg_id) return;
    if (self->current_->started) self->proc_.Signal(SIGINT);
    self->ArmReinterrupt(msg_id);
  });
}

}  // namespace airlock::interpreter
