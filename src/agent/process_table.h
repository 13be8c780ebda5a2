// The agent's table of processes it started (spec §3.2).
//
// Ownership: ProcessTable owns every Process (shared_ptr) from spawn until its
// end event has been delivered; afterwards its end event is kept for late
// Connects for kTerminatedRetention, as envd, and its leaf cgroup (the last
// kMaxFinished) for KillLeftovers. A Process owns its pipe fds
// (asio descriptors) and its subscribers (the live streams). Everything runs
// on the one io_context thread: no locks.
//
// Output flow: each pipe is read in 32 KiB pieces; every piece goes to every
// subscriber as a DataEvent. Backpressure: while any subscriber has more
// than kHighWatermark bytes queued on its socket, the pipes are not read
// (the child blocks on write); the subscriber calls Resume() when drained.
// With no subscribers, output is still read.
//
// Held output: every process keeps what it wrote in an OutputLog (the last
// kOutputHeldPerProcess bytes), also for kTerminatedRetention after its end,
// so that Connect can resume a dropped stream from its offsets; all logs
// together hold at most kOutputHeldTotal (ended processes' logs are trimmed
// first, the oldest first, then the largest running one's).
//
// End: the end event is sent once the child has been reaped AND its pipes
// reached EOF (or stayed idle for kExitGrace after exit, for when a
// background grandchild keeps them open).
//
// Limits: with SetCgroups, every process tree lives in its own leaf cgroup
// (cgroups.h) that it enters before exec; SIGKILL of a process ends its whole
// leaf (cgroup.kill), also after the leader itself has exited.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/cgroups.h"
#include "agent/output_log.h"
#include "agent/users.h"
#include "common/status.h"
#include "envd/messages.h"

namespace airlock::agent {

namespace asio = boost::asio;

inline constexpr size_t kHighWatermark = 1 << 20;  // per-subscriber queued bytes
inline constexpr size_t kReadChunk = 32 * 1024;
inline constexpr size_t kPtyReadChunk = 16 * 1024;
inline constexpr size_t kOutputHeldPerProcess = 1 << 20;
inline constexpr size_t kOutputHeldTotal = 16 << 20;

class ProcessSubscriber {
 public:
  virtual ~ProcessSubscriber() = default;
  // Data/end events after subscription (the start event is the stream's own).
  virtual void OnEvent(const envd::ProcessEvent& event) = 0;
  // Bytes queued but not yet written to the subscriber's socket.
  virtual size_t QueuedBytes() const = 0;
};

struct SpawnRequest {
  envd::StartRequest start;
  User user;
  bool change_user = true;  // false when the agent itself is not root
  std::string cwd;          // resolved, verified to exist
  std::map<std::string, std::string> env;  // complete environment
  std::optional<std::chrono::milliseconds> timeout;  // kill the group after this
};

class Process : public std::enable_shared_from_this<Process> {
 public:
  Process(asio::io_context& io, pid_t pid, SpawnRequest req);
  pid_t pid() const { return pid_; }
  const envd::ProcessConfig& config() const { return req_.start.process; }
  const std::optional<std::string>& tag() const { return req_.start.tag; }
  bool finished() const { return end_.has_value(); }
  const std::optional<envd::EndEvent>& end() const { return end_; }
  // What it wrote, as far as still held; shared with the table's record of
  // it once it ended and with a stream replaying it.
  const std::shared_ptr<OutputLog>& output() const { return output_; }
  // Its Start's deadline (Connect-Timeout-Ms) passed and ended it.
  bool deadline_reached() const { return deadline_reached_; }

  void Subscribe(std::shared_ptr<ProcessSubscriber> sub);
  void Unsubscribe(const ProcessSubscriber* sub);
  // Restart pipe reads paused for backpressure.
  void Resume();

  // SIGKILL to the leaf cgroup, the process group and every descendant
  // found by ppid (including ones that called setsid()); used when the
  // deadline passes.
  void KillTree();
  // Signal the whole process group, and with SIGKILL also end the leaf
  // cgroup (every process the command started); or, with group false, the
  // process alone.
  Status Signal(int sig, bool group = true);
  // Queue bytes for stdin (or the PTY master). failed_precondition when
  // stdin is closed or was not requested.
  Status WriteInput(std::string data, bool pty);
  Status CloseStdin();
  Status Resize(uint32_t cols, uint32_t rows);

 private:
  friend class ProcessTable;
  struct Pipe {
    std::optional<asio::posix::stream_descriptor> fd;
    envd::DataEvent::Stream stream;
    std::vector<char> buf;
    bool reading = false;
  };
  void Attach(int stdout_fd, int stderr_fd, int pty_fd, int stdin_fd);
  void StartRead(Pipe& p);
  bool Paused() const;
  void OnExit(int wait_status);
  void MaybeFinish();
  void Broadcast(const envd::ProcessEvent& e);
  void FlushInput();

  asio::io_context& io_;
  pid_t pid_;
  std::string cgroup_;  // its leaf cgroup; "" without cgroups
  SpawnRequest req_;
  std::array<Pipe, 2> pipes_;  // stdout (or pty), stderr
  std::optional<asio::posix::stream_descriptor> input_;  // stdin pipe or a dup of the pty master
  bool is_pty_ = false;
  std::deque<std::string> input_queue_;
  bool input_writing_ = false;
  bool input_close_pending_ = false;
  std::vector<std::shared_ptr<ProcessSubscriber>> subs_;
  std::optional<int> wait_status_;
  std::optional<envd::EndEvent> end_;
  asio::steady_timer deadline_;
  bool deadline_reached_ = false;
  asio::steady_timer grace_;
  bool read_since_grace_ = false;
  std::function<void(pid_t, const envd::EndEvent&)> on_finished_;
  std::shared_ptr<OutputLog> output_ = std::make_shared<OutputLog>();
  // (held before, held after) each read: the table's total.
  std::function<void(size_t, size_t)> on_output_;
};

class ProcessTable {
 public:
  explicit ProcessTable(asio::io_context& io) : io_(io) {}
  // From now on every Spawn runs in a leaf of `cgroups` (nullptr: none).
  // When set, a Spawn whose leaf cannot be made fails (the limits are not
  // skipped). `reset_oom_score` makes children undo the agent's
  // oom_score_adj.
  void SetCgroups(std::unique_ptr<CommandCgroups> cgroups, bool reset_oom_score) {
    cgroups_ = std::move(cgroups);
    reset_oom_score_ = reset_oom_score;
  }
  const CommandCgroups* cgroups() const { return cgroups_.get(); }

  // fork/exec per the request. Errors: invalid_argument (empty cmd),
  // resource_exhausted / internal (pipe, fork).
  StatusOr<std::shared_ptr<Process>> Spawn(SpawnRequest req);
  // Running (or still draining) process by pid or tag; nullptr if none.
  std::shared_ptr<Process> Find(const envd::ProcessSelector& sel) const;
  // envd's retention of a terminal event (services/process/service.go
  // terminatedRetentionTTL): a late Connect gets start + end this long after
  // the end, then not_found.
  static constexpr std::chrono::seconds kTerminatedRetention{30};
  // A process that ended less than kTerminatedRetention before `now`, by pid
  // or tag, the newest first; nullptr otherwise. Valid until the table
  // changes (the next event on the io thread).
  // Also drops the logs of processes past their retention.
  struct Ended {
    pid_t pid;
    envd::EndEvent end;
    std::shared_ptr<OutputLog> output;  // what it wrote, as far as still held
  };
  const Ended* FindRecentlyFinished(const envd::ProcessSelector& sel, std::chrono::steady_clock::time_point now);
  // Bytes held by every output log, running and ended.
  size_t OutputHeld() const { return output_held_; }
  std::vector<std::shared_ptr<Process>> Running() const;
  // For a finished process whose leaf cgroup still has processes (children
  // it left behind, a fork bomb whose first shell exited): kills the leaf.
  // False when there is no such process or nothing is left.
  bool KillLeftovers(const envd::ProcessSelector& sel);

  // Feed from the SIGCHLD handler: waitpid(-1) results. Unknown pids
  // (orphans reparented to PID 1) are ignored.
  void OnChildExit(pid_t pid, int wait_status);

  // Called (on the io thread) after every spawned process has ended and its
  // end event was delivered; one hook (the service supervisor's).
  using FinishedFn = std::function<void(pid_t, const std::optional<std::string>& tag, const envd::EndEvent&)>;
  void SetOnFinished(FinishedFn fn) { on_finished_ = std::move(fn); }

 private:
  struct Finished : Ended {
    std::optional<std::string> tag;
    std::string cgroup;
    std::chrono::steady_clock::time_point ended_at;
  };
  // Brings the logs' total back under kOutputHeldTotal; drops the logs of
  // ended processes past their retention.
  void TrimOutput();
  static constexpr size_t kMaxFinished = 64;
  asio::io_context& io_;
  std::unique_ptr<CommandCgroups> cgroups_;
  bool reset_oom_score_ = false;
  std::map<pid_t, std::shared_ptr<Process>> procs_;
  std::deque<Finished> finished_;
  size_t output_held_ = 0;
  FinishedFn on_finished_;
};

// Looks cmd up in PATH (from env) when it has no '/'. Returns cmd itself
// when not found (exec then fails with ENOENT → exit 127).
std::string LookupCommand(const std::string& cmd, const std::map<std::string, std::string>& env);

}  // namespace airlock::agent
