// Context: one code context of the port-49999 API (an id, a language, a
// cwd) and the kernel process behind it. Single-threaded: the io thread.
//
// Kernel lifecycle (State):
//   kStarting  process spawned, sockets connected; kernel_info_request sent
//              every second until a kernel_info_reply AND an IOPub message
//              (the subscription is live) have arrived → kReady; at most
//              start_timeout, else kFailed. A kernel that exits while
//              starting is started twice more, on new ports.
//   kReady     runs the queue, one execution at a time.
//   kStopping  shutdown_request sent on control; SIGKILL after stop_grace;
//              the exit then restarts (Restart) or ends the context (Delete).
//   kFailed    the last start failed; queued executions got an error line;
//              the next Enqueue/Restart/Start tries again.
//   kDeleted   gone.
// A kernel that dies by itself ends the execution in flight with
// UnexpectedEndOfExecution and is started again (its state is lost).
//
// One execution (Execution) goes through: [first execute of this kernel:
// the sandbox's create-time env vars from envd GET /envs, plus the PRNG
// re-seed for python] → [set env_vars, saving the old values] → the code →
// end_of_execution → [restore env_vars] → the next one. The extra steps are
// silent executions (env_snippet.h). The first step is done again for the
// next execution after the sandbox's identity changes (Reinit: a create
// from the template snapshot, a warm-pool claim, a fork child), and at once
// when the kernel is idle then, so that execution does not wait for it.
// Interrupt is SIGINT to the kernel's pid
// while it is busy with the user's code, repeated every `reinterrupt` until
// that execution ends (the client went away, or the output limit was hit).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "interpreter/env_snippet.h"
#include "interpreter/execution.h"
#include "interpreter/kernel_process.h"
#include "interpreter/kernel_spec.h"
#include "interpreter/options.h"
#include "interpreter/zmq_hub.h"

namespace airlock::interpreter {

class Context;

// What a context uses of the server; all of it lives longer than any context.
struct ContextServices {
  boost::asio::io_context& io;
  const Options& options;
  const KernelTable& table;
  const KernelUser& user;
  ZmqHub& hub;
  ChildReaper& reaper;
  // A new kernel id routed to `ctx` (hub messages), and its removal.
  std::function<uint64_t(std::weak_ptr<Context> ctx)> register_kernel;
  std::function<void(uint64_t id)> unregister_kernel;
  // envd GET /envs with the token; `done` on the io thread (empty on failure).
  std::function<void(const std::string& token, std::function<void(EnvVars)> done)> fetch_envs;
};

class Context : public std::enable_shared_from_this<Context> {
 public:
  enum class State { kStarting, kReady, kStopping, kFailed, kDeleted };

  Context(ContextServices& services, std::string id, std::string language, std::string cwd, const KernelSpec& spec);
  ~Context();

  const std::string& id() const { return id_; }
  const std::string& language() const { return language_; }
  const std::string& cwd() const { return cwd_; }
  State state() const { return state_; }
  nlohmann::json ToJson() const;  // {"id","language","cwd"}

  // Starts the kernel unless it runs or is starting; `on_ready` gets OK once
  // kernel_info answered, or the start error.
  void Start(std::function<void(Status)> on_ready = nullptr);
  void Enqueue(std::shared_ptr<Execution> e);
  // Kills the kernel (shutdown_request, then SIGKILL) and starts a new one
  // with the same id; `done` when it is ready (or failed to start).
  void Restart(std::function<void(Status)> done);
  // The same without the new kernel; `done` once the process is gone.
  void Delete(std::function<void()> done);
  void OnMessage(uint64_t kernel, Channel channel, const KernelMessage& m);
  // The sandbox has a new identity (a new access token at /init, `token`):
  // the next execution fetches the env vars with it and re-seeds the PRNGs
  // (a snapshot's children must not share a random sequence). Done at once
  // while the kernel is ready and idle: an execution that arrives meanwhile
  // waits for it instead of doing it (one kernel round trip fewer on the
  // create's first execution). A resume of the same sandbox keeps its token
  // and never calls this: a seeded sequence carries on across a pause.
  void Reinit(const std::string& token);
  // One silent execution that takes the kernel's execute path and its
  // display formatters once (IPython's lazy set-up), leaving nothing in the
  // user's namespace or history; `done` after it, or at once when the kernel
  // is not ready and idle. For the server to call before the template
  // snapshot is taken, so every sandbox restored from it has it done.
  void WarmUp(std::function<void()> done);

 private:
  struct Request {
    std::string msg_id;
    bool user = false;
    const char* what = "";  // for the log: "env setup", "env_vars", "code", "env restore", "warm-up"
    bool started = false, reply = false, idle = false;
    std::function<void(bool ok)> done;  // ok false: the kernel went away
  };

  Status Spawn();
  void SendKernelInfo();
  void ArmNudge();
  void BecomeReady();
  void StartFailed(const Status& st);
  void OnExit(uint64_t kernel, int wstatus);
  void TearDownKernel();
  void FailCurrent();
  void FailQueue(const std::string& error_line);
  void CallReadyWaiters(const Status& st);
  std::string Send(Channel channel, std::string_view msg_type, nlohmann::json content);
  void RunCode(const std::string& code, const char* what, std::function<void(bool ok)> done);
  // An execution of the server's own between user executions (Reinit's
  // set-up, WarmUp): Pump holds the queue until `done` ran.
  void RunInternal(const std::string& code, const char* what, std::function<void(bool ok)> done);
  void Complete();

  void Pump();
  void StepSetup();
  void StepSetEnv();
  void StepUser();
  void StepRestoreEnv();
  void StepDone();
  void AbortRunning(const std::string& error_line);
  void Interrupt();
  void ArmReinterrupt(const std::string& msg_id);

  void BeginStop(bool restart);
  void AfterStop();

  ContextServices& s_;
  std::string id_, language_, cwd_;
  const KernelSpec& spec_;
  State state_ = State::kFailed;
  Status last_error_;

  // The kernel instance.
  uint64_t kernel_ = 0;
  KernelProcess proc_;
  ConnectionInfo conn_;
  std::string session_;
  std::string connection_file_;
  bool info_reply_ = false, iopub_seen_ = false, setup_done_ = false;
  // An internal execution (RunInternal) is in flight or about to be.
  bool internal_ = false;
  uint64_t identity_ = 0;  // Reinit calls so far
  int start_retries_ = 0;
  std::chrono::steady_clock::time_point start_deadline_;
  boost::asio::steady_timer nudge_timer_, kill_timer_, interrupt_timer_;
  std::vector<std::function<void(Status)>> ready_waiters_;
  bool restart_after_stop_ = false;
  std::vector<std::function<void()>> stop_waiters_;

  std::unique_ptr<Request> current_;
  bool interrupt_wanted_ = false;
  std::deque<std::shared_ptr<Execution>> queue_;
  std::shared_ptr<Execution> running_;
  bool user_sent_ = false;
};

}  // namespace airlock::interpreter
