// process.Process RPCs (spec §3.2).
#include <sys/stat.h>

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdlib>

#include <signal.h>

#include "agent/agent.h"
#include "agent/log.h"
#include "agent/paths.h"
#include "agent/rpc.h"
#include "envd/envelope.h"

namespace airlock::agent {
namespace {

using Clock = std::chrono::steady_clock;

// One live Start/Connect response stream subscribed to one process.
class EventStream : public ProcessSubscriber, public std::enable_shared_from_this<EventStream> {
 public:
  // owns_deadline: the Start stream whose Connect-Timeout-Ms set the
  // process's deadline; when that deadline ends the process, this stream
  // ends as envd's does, with a Connect deadline_exceeded error and no end
  // event (the Python SDK's commands.run(timeout=) relies on it). Other
  // streams of the process see its end as usual.
  EventStream(std::shared_ptr<http::Conn> s, std::chrono::milliseconds keepalive, bool owns_deadline = false)
      : session_(std::move(s)), timer_(session_->executor()), keepalive_(keepalive), owns_deadline_(owns_deadline) {}

  // The start event says where this stream's output starts (`from`). With
  // `replay`, the held output after `from` comes first, one piece at a time
  // as the client takes it (at most kReplayQueued queued, and no copy of
  // the log), and the stream subscribes to the live output once it
  // has caught up: on the one io thread nothing is lost or sent twice in
  // between. A client slower than the process may fall behind what is held:
  // the stream then ends with out_of_range.
  void Begin(std::shared_ptr<Process> proc, const envd::OutputOffsets& from, bool replay = false) {
    process_ = proc;
    Open(static_cast<uint32_t>(proc->pid()), from);
    if (!replay) return proc->Subscribe(shared_from_this());
    replaying_ = proc;
    log_ = proc->output();
    cursor_.from = from;
    Pump();
  }

  // A process that ended within its retention: start, the held output after
  // `from` with `replay`, then its end.
  void BeginEnded(uint32_t pid, std::shared_ptr<OutputLog> log, const envd::EndEvent& end,
                  const envd::OutputOffsets& from, bool replay) {
    ended_ = end;
    Open(pid, from);
    if (!replay) return End(end);
    log_ = std::move(log);
    cursor_.from = from;
    Pump();
  }

  void OnEvent(const envd::ProcessEvent& e) override {
    if (done_) return;
    if (auto* end = std::get_if<envd::EndEvent>(&e)) return End(*end);
    Send(e);
  }

  size_t QueuedBytes() const override { return session_->pending_bytes(); }

 private:
  void Send(const envd::ProcessEvent& e) {
    last_ = Clock::now();
    std::string frame;
    envd::AppendEnvelope(&frame, envd::EventResponsePayload(e));
    session_->Write(frame);
  }

  void Open(uint32_t pid, const envd::OutputOffsets& from) {
    BeginStream(*session_);
    Send(envd::StartEvent{pid, from});
    // The session holds the stream (a replaying stream is nobody's
    // subscriber yet) until it ends or closes, which drops this callback.
    session_->SetOnDrain([self = shared_from_this()] {
      if (self->log_) return self->Pump();
      if (auto p = self->process_.lock()) p->Resume();
    });
    std::weak_ptr<EventStream> weak = shared_from_this();
    session_->SetOnClose([weak] {
      if (auto self = weak.lock()) self->Detach();
    });
    session_->WatchForDisconnect();
    ArmKeepalive();
  }

  // A replaying stream keeps at most this much queued (plus one piece):
  // many resuming clients that never read hold little of the agent's memory.
  static constexpr size_t kReplayQueued = 64 * 1024;

  void Pump() {
    while (log_ && !done_ && session_->pending_bytes() < kReplayQueued) {
      auto next = log_->Next(&cursor_);
      if (!next.ok()) {  // the process wrote faster than the client read
        session_->Write(envd::EncodeEndStream(next.status()));
        Finish();
        return session_->EndResponse();
      }
      if (*next) {
        Send(**next);
        continue;
      }
      // Caught up with everything written so far.
      log_.reset();
      auto p = std::move(replaying_);
      if (ended_) return End(*ended_);
      if (p && p->finished()) return End(*p->end());
      if (p) p->Subscribe(shared_from_this());
    }
  }

  // The end: as envd, a Start whose own deadline ended the process gets the
  // deadline_exceeded error instead of the end event.
  void End(const envd::EndEvent& e) {
    auto p = process_.lock();
    const bool deadline = owns_deadline_ && p && p->deadline_reached();
    if (!deadline) Send(e);
    session_->Write(envd::EncodeEndStream(
        deadline ? Status(StatusCode::kDeadlineExceeded, "context deadline exceeded") : OkStatus()));
    Finish();
    session_->EndResponse();
  }

  void ArmKeepalive() {
    if (done_) return;
    auto due = last_ + keepalive_;
    timer_.expires_at(due);
    timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      auto self = weak.lock();
      if (!self || ec || self->done_) return;
      if (Clock::now() - self->last_ >= self->keepalive_) self->Send(envd::KeepAliveEvent{});
      self->ArmKeepalive();
    });
  }

  void Finish() {
    done_ = true;
    timer_.cancel();
    log_.reset();
    replaying_.reset();
  }

  // The client went away: the process keeps running.
  void Detach() {
    if (done_) return;
    Finish();
    if (auto p = process_.lock()) p->Unsubscribe(this);
  }

  std::shared_ptr<http::Conn> session_;
  asio::steady_timer timer_;
  std::chrono::milliseconds keepalive_;
  Clock::time_point last_ = Clock::now();
  std::weak_ptr<Process> process_;
  // While replaying: the log, the reader's place in it, and (for a running
  // process) the process, to subscribe to once caught up.
  std::shared_ptr<OutputLog> log_;
  OutputLog::Cursor cursor_;
  std::shared_ptr<Process> replaying_;
  std::optional<envd::EndEvent> ended_;  // BeginEnded's process's end
  bool owns_deadline_;
  bool done_ = false;
};

void Start(Agent& agent, std::shared_ptr<http::Conn> s) {
  ReadStreamRequest(s, [&agent, s](const envd::Json& j) {
    auto req = envd::StartRequestFromJson(j);
    if (!req.ok()) return RespondStreamStatus(*s, req.status());
    auto user = agent.UserFromAuthHeader(*s);
    if (!user.ok()) return RespondStreamStatus(*s, user.status());

    SpawnRequest sp = agent.SpawnAs(*user);
    if (!user->shell.empty()) sp.env["SHELL"] = user->shell;
    for (const auto& [k, v] : agent.env_vars()) sp.env[k] = v;
    for (const auto& [k, v] : req->process.envs) {
      if (k.empty() || k.find('=') != std::string::npos) {
        return RespondStreamStatus(*s, InvalidArgument("invalid environment variable name '" + k + "'"));
      }
      sp.env[k] = v;
    }
    struct stat st;
    if (req->process.cwd && !req->process.cwd->empty()) {
      auto cwd = ResolvePath(*req->process.cwd, user->home);
      if (!cwd.ok()) return RespondStreamStatus(*s, cwd.status());
      if (stat(cwd->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return RespondStreamStatus(*s, InvalidArgument("cwd '" + *cwd + "' does not exist"));
      }
      sp.cwd = *cwd;
    } else if (!agent.default_workdir().empty() && stat(agent.default_workdir().c_str(), &st) == 0 &&
               S_ISDIR(st.st_mode)) {
      sp.cwd = agent.default_workdir();  // a custom template's WORKDIR
    } else {
      sp.cwd = (stat(user->home.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ? user->home : "/";
    }
    sp.timeout = ConnectTimeout(*s);
    const bool has_deadline = sp.timeout.has_value();
    sp.start = std::move(*req);
    auto proc = agent.processes().Spawn(std::move(sp));
    if (!proc.ok()) return RespondStreamStatus(*s, proc.status());
    LogDebug("started process %d: %s", (*proc)->pid(), (*proc)->config().cmd.c_str());
    std::make_shared<EventStream>(s, KeepaliveInterval(*s), has_deadline)->Begin(*proc, envd::OutputOffsets{});
  });
}

// Connect: the live output from now on, or, with resumeFrom, the held output
// after those offsets first (docs/agent.md "Resumable output"); out_of_range
// when part of it is no longer held.
void Connect(Agent& agent, std::shared_ptr<http::Conn> s) {
  ReadStreamRequest(s, [&agent, s](const envd::Json& j) {
    auto req = envd::ConnectRequestFromJson(j);
    if (!req.ok()) return RespondStreamStatus(*s, req.status());
    const envd::ProcessSelector& sel = req->process;
    if (auto proc = agent.processes().Find(sel)) {
      if (req->resume_from) {
        Status held = proc->output()->Check(*req->resume_from);
        if (!held.ok()) return RespondStreamStatus(*s, held);
      }
      const envd::OutputOffsets from = req->resume_from.value_or(proc->output()->End());
      return std::make_shared<EventStream>(s, KeepaliveInterval(*s))
          ->Begin(proc, from, req->resume_from.has_value());
    }
    // An ended process, as envd (services/process/service.go): its start and
    // end events for 30 s after it ended (kTerminatedRetention: a client that
    // re-attaches just after the end still learns the exit code), then
    // "process with pid N not found" (a client that re-attaches long after
    // the command's deadline, the SDK's default timeoutMs of 60 s, also for
    // background commands, learns it is gone instead of getting a silent
    // handle). With resumeFrom, the held output it wrote after those offsets
    // comes between the two.
    if (const auto* ended = agent.processes().FindRecentlyFinished(sel, std::chrono::steady_clock::now())) {
      if (req->resume_from) {
        Status held = ended->output->Check(*req->resume_from);
        if (!held.ok()) return RespondStreamStatus(*s, held);
      }
      const envd::OutputOffsets from = req->resume_from.value_or(ended->output->End());
      return std::make_shared<EventStream>(s, KeepaliveInterval(*s))
          ->BeginEnded(static_cast<uint32_t>(ended->pid), ended->output, ended->end, from,
                       req->resume_from.has_value());
    }
    RespondStreamStatus(*s, NotFound("process with " +
                                     (sel.pid ? "pid " + std::to_string(*sel.pid) : "tag '" + *sel.tag + "'") +
                                     " not found"));
  });
}

StatusOr<std::shared_ptr<Process>> FindProcess(Agent& agent, const envd::ProcessSelector& sel) {
  auto p = agent.processes().Find(sel);
  if (!p || p->finished()) {
    return NotFound("process with " + (sel.pid ? "pid " + std::to_string(*sel.pid) : "tag '" + *sel.tag + "'") +
                    " not found");
  }
  return p;
}

}  // namespace

void HandleProcessRpc(Agent& agent, std::shared_ptr<http::Conn> s, const std::string& method) {
  if (method == "Start") return Start(agent, s);
  if (method == "Connect") return Connect(agent, s);
  if (method == "SendSignal") {
    return ServeUnary(s, [&agent](const envd::Json& j) -> StatusOr<envd::OJson> {
      ASSIGN_OR_RETURN(auto req, envd::SendSignalRequestFromJson(j));
      int sig = static_cast<int>(req.signal);
      const bool group = req.scope != envd::SignalScope::kProcess;
      auto p = FindProcess(agent, req.process);
      // The leader exited but left processes in its cgroup (a fork bomb's
      // first shell returns at once): SIGKILL still ends them.
      if (!p.ok() && group && sig == SIGKILL && agent.processes().KillLeftovers(req.process)) {
        return envd::OJson::object();
      }
      if (!p.ok()) return p.status();
      if (sig <= 0 || sig >= 65) return Unimplemented("unsupported signal " + std::to_string(sig));
      RETURN_IF_ERROR((*p)->Signal(sig, group));
      return envd::OJson::object();
    });
  }
  if (method == "SendInput") {
    return ServeUnary(s, [&agent](const envd::Json& j) -> StatusOr<envd::OJson> {
      ASSIGN_OR_RETURN(auto req, envd::SendInputRequestFromJson(j));
      ASSIGN_OR_RETURN(auto p, FindProcess(agent, req.process));
      RETURN_IF_ERROR(p->WriteInput(std::move(req.input.data), req.input.kind == envd::ProcessInput::Kind::kPty));
      return envd::OJson::object();
    });
  }
  if (method == "CloseStdin") {
    return ServeUnary(s, [&agent](const envd::Json& j) -> StatusOr<envd::OJson> {
      ASSIGN_OR_RETURN(auto sel, envd::SelectorRequestFromJson(j));
      ASSIGN_OR_RETURN(auto p, FindProcess(agent, sel));
      RETURN_IF_ERROR(p->CloseStdin());
      return envd::OJson::object();
    });
  }
  if (method == "List") {
    return ServeUnary(s, [&agent](const envd::Json&) -> StatusOr<envd::OJson> {
      envd::OJson list = envd::OJson::array();
      for (const auto& p : agent.processes().Running()) {
        envd::ProcessInfo info{p->config(), static_cast<uint32_t>(p->pid()), p->tag()};
        list.push_back(envd::ToJson(info));
      }
      envd::OJson out = envd::OJson::object();
      out["processes"] = std::move(list);
      return out;
    });
  }
  if (method == "Update") {
    return ServeUnary(s, [&agent](const envd::Json& j) -> StatusOr<envd::OJson> {
      ASSIGN_OR_RETURN(auto req, envd::UpdateRequestFromJson(j));
      ASSIGN_OR_RETURN(auto p, FindProcess(agent, req.process));
      if (req.pty) RETURN_IF_ERROR(p->Resize(req.pty->cols, req.pty->rows));
      return envd::OJson::object();
    });
  }
  Status st = Unimplemented("process.Process/" + method + " is not implemented");
  if (IsStreamRequest(*s)) return RespondStreamStatus(*s, st);
  RespondUnaryError(*s, st);
}

}  // namespace airlock::agent
