#include "agent/process_table.h"

#include <fcntl.h>
#include <grp.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <vector>

#include "agent/log.h"
#include "common/fd.h"
#include "common/file_util.h"
#include "common/subprocess.h"

namespace airlock::agent {
namespace {

// Live descendants of `root`, from the ppid of every /proc/<pid>/stat (a
// child that called setsid() is still found while its parent lives).
std::vector<pid_t> Descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (*end != '\0' || pid <= 0) continue;
      std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
      std::string stat;
      std::getline(f, stat);
      size_t rp = stat.rfind(')');
      if (rp == std::string::npos || rp + 4 >= stat.size()) continue;
      long ppid = std::strtol(stat.c_str() + rp + 4, nullptr, 10);  // ") S ppid"
      children.emplace(static_cast<pid_t>(ppid), static_cast<pid_t>(pid));
    }
    closedir(d);
  }
  std::vector<pid_t> out, todo = {root};
  while (!todo.empty() && out.size() < 100000) {
    pid_t p = todo.back();
    todo.pop_back();
    auto [a, b] = children.equal_range(p);
    for (auto it = a; it != b; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}


constexpr size_t kMaxInputQueue = 16 << 20;
constexpr auto kExitGrace = std::chrono::milliseconds(1000);

StatusOr<std::pair<UniqueFd, UniqueFd>> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  return std::make_pair(UniqueFd(fds[0]), UniqueFd(fds[1]));
}

// Between fork and exec: WriteAllRaw and strlen are async-signal-safe.
void WriteAll(int fd, const char* s) { (void)WriteAllRaw(fd, s, strlen(s)); }

// Between fork and exec: async-signal-safe calls only (plus strerror, which is
// safe here because the agent is single-threaded).
[[noreturn]] void ChildExec(const SpawnRequest& req, const char* path, char* const* argv, char* const* envp,
                            int in, int out, int err, int pty_slave, const gid_t* groups, size_t ngroups,
                            int cgroup_procs, bool reset_oom_score) {
  // Into the leaf cgroup first (still root, before anything else can fork).
  if (cgroup_procs >= 0 && write(cgroup_procs, "0", 1) != 1) {
    int e = errno;
    WriteAll(err, "airlock-agent: cannot enter the command's cgroup: ");
    WriteAll(err, strerror(e));
    WriteAll(err, "\n");
    _exit(1);
  }
  if (reset_oom_score) {
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      (void)!write(fd, "0", 1);
      close(fd);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) sigaction(s, &dfl, nullptr);
  setsid();
  if (pty_slave >= 0) ioctl(pty_slave, TIOCSCTTY, 0);
  dup2(in, 0);
  dup2(out, 1);
  dup2(err, 2);
  // gVisor's Sentry (runsc 20221219) refuses ~0U as the last fd (EINVAL)
  // but takes INT_MAX; the loop of 65,533 close() calls is the last resort
  // (several seconds under gVisor's ptrace platform, every call trapped).
  if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0 &&
      syscall(SYS_close_range, 3U, static_cast<unsigned>(INT_MAX), 0U) != 0) {
    for (int fd = 3; fd < 65536; ++fd) close(fd);
  }
  if (chdir(req.cwd.c_str()) != 0) {
    WriteAll(2, "airlock-agent: chdir ");
    WriteAll(2, req.cwd.c_str());
    WriteAll(2, ": ");
    WriteAll(2, strerror(errno));
    WriteAll(2, "\n");
    _exit(1);
  }
  if (req.change_user) {
    if (setgroups(ngroups, groups) != 0 || setgid(req.user.gid) != 0 || setuid(req.user.uid) != 0) {
      WriteAll(2, "airlock-agent: cannot switch to user ");
      WriteAll(2, req.user.name.c_str());
      WriteAll(2, ": ");
      WriteAll(2, strerror(errno));
      WriteAll(2, "\n");
      _exit(1);
    }
  }
  execve(path, argv, envp);
  int e = errno;
  WriteAll(2, req.start.process.cmd.c_str());
  WriteAll(2, ": ");
  WriteAll(2, e == ENOENT ? "command not found" : strerror(e));
  WriteAll(2, "\n");
  _exit(e == ENOENT ? 127 : 126);
}

}  // namespace

std::string LookupCommand(const std::string& cmd, const std::map<std::string, std::string>& env) {
  if (cmd.find('/') != std::string::npos) return cmd;
  auto it = env.find("PATH");
  std::string path = it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : it->second;
  size_t i = 0;
  while (i <= path.size()) {
    size_t c = path.find(':', i);
    if (c == std::string::npos) c = path.size();
    std::string dir = path.substr(i, c - i);
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + cmd;
    struct stat st;
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) return cand;
    i = c + 1;
  }
  return cmd;
}

Process::Process(asio::io_context& io, pid_t pid, SpawnRequest req)
    : io_(io), pid_(pid), req_(std::move(req)), deadline_(io), grace_(io) {}

void Process::Attach(int out_fd, int err_fd, int pty_fd, int in_fd) {
  is_pty_ = pty_fd >= 0;
  if (is_pty_) {
    pipes_[0].fd.emplace(io_, pty_fd);
    pipes_[0].stream = envd::DataEvent::Stream::kPty;
    pipes_[0].buf.resize(kPtyReadChunk);
  } else {
    pipes_[0].fd.emplace(io_, out_fd);
    pipes_[0].stream = envd::DataEvent::Stream::kStdout;
    pipes_[0].buf.resize(kReadChunk);
    pipes_[1].fd.emplace(io_, err_fd);
    pipes_[1].stream = envd::DataEvent::Stream::kStderr;
    pipes_[1].buf.resize(kReadChunk);
  }
  if (in_fd >= 0) input_.emplace(io_, in_fd);
  if (req_.timeout) {
    deadline_.expires_after(*req_.timeout);
    deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->wait_status_) return;
      LogInfo("process %d: deadline reached, killing its process tree", self->pid_);
      self->deadline_reached_ = true;
      self->KillTree();
    });
  }
  for (auto& p : pipes_) StartRead(p);
}

bool Process::Paused() const {
  for (const auto& s : subs_) {
    if (s->QueuedBytes() > kHighWatermark) return true;
  }
  return false;
}

void Process::StartRead(Pipe& p) {
  if (!p.fd || p.reading || end_ || Paused()) return;
  p.reading = true;
  size_t idx = static_cast<size_t>(&p - pipes_.data());
  p.fd->async_read_some(asio::buffer(p.buf), [self = shared_from_this(), idx](boost::system::error_code ec, size_t n) {
    if (ec == asio::error::operation_aborted) return;
    Pipe& p = self->pipes_[idx];
    p.reading = false;
    // A read that completed just before the exit grace closed the pipes:
    // the end is out and the log has its final size.
    if (self->end_) return;
    if (n > 0) {
      self->read_since_grace_ = true;
      std::string_view bytes(p.buf.data(), n);
      OutputLog& log = *self->output_;
      const size_t before = log.Held();
      const uint64_t offset = log.Append(p.stream, bytes);
      log.Trim(kOutputHeldPerProcess);
      if (self->on_output_) self->on_output_(before, log.Held());
      self->Broadcast(envd::DataEvent{p.stream, std::string(bytes), offset});
    }
    if (ec) {  // EOF, or EIO on a PTY master once the slave side is gone
      if (p.fd) {
        boost::system::error_code ig;
        p.fd->close(ig);
        p.fd.reset();
      }
      self->MaybeFinish();
      return;
    }
    self->StartRead(p);
  });
}

void Process::Broadcast(const envd::ProcessEvent& e) {
  auto subs = subs_;  // a subscriber may unsubscribe while handling
  for (auto& s : subs) s->OnEvent(e);
}

void Process::Subscribe(std::shared_ptr<ProcessSubscriber> sub) { subs_.push_back(std::move(sub)); }

void Process::Unsubscribe(const ProcessSubscriber* sub) {
  for (auto it = subs_.begin(); it != subs_.end(); ++it) {
    if (it->get() == sub) {
      subs_.erase(it);
      break;
    }
  }
  Resume();
}

void Process::Resume() {
  for (auto& p : pipes_) StartRead(p);
}

void Process::KillTree() {
  if (!cgroup_.empty()) (void)CommandCgroups::Kill(cgroup_);
  if (wait_status_) return;
  // A few rounds: a tree that forks while we walk it is caught next round.
  for (int round = 0; round < 3; ++round) {
    auto desc = Descendants(pid_);
    kill(-pid_, SIGSTOP);  // freeze the group so it cannot fork more
    for (pid_t d : desc) kill(d, SIGSTOP);
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    for (pid_t d : desc) {
      kill(-d, SIGKILL);  // its own group, if it made one
      kill(d, SIGKILL);
    }
    if (desc.empty()) break;
  }
}

Status Process::Signal(int sig, bool group) {
  if (group && sig == SIGKILL && !cgroup_.empty()) RETURN_IF_ERROR(CommandCgroups::Kill(cgroup_));
  if (wait_status_) return OkStatus();  // already gone; the end event tells the rest
  if (!group) {
    if (kill(pid_, sig) != 0 && errno != ESRCH) return ErrnoError("kill " + std::to_string(pid_));
    return OkStatus();
  }
  if (kill(-pid_, sig) != 0 && kill(pid_, sig) != 0 && errno != ESRCH) {
    return ErrnoError("kill " + std::to_string(pid_));
  }
  return OkStatus();
}

Status Process::WriteInput(std::string data, bool pty) {
  if (pty && !is_pty_) return FailedPrecondition("process " + std::to_string(pid_) + " has no PTY");
  if (!input_ || input_close_pending_) {
    return FailedPrecondition("stdin of process " + std::to_string(pid_) + " is not open");
  }
  size_t queued = 0;
  for (const auto& s : input_queue_) queued += s.size();
  if (queued + data.size() > kMaxInputQueue) {
    return ResourceExhausted("stdin queue of process " + std::to_string(pid_) + " is full");
  }
  if (!data.empty()) input_queue_.push_back(std::move(data));
  FlushInput();
  return OkStatus();
}

Status Process::CloseStdin() {
  if (is_pty_) return WriteInput("\x04", true);  // EOF for the line discipline
  if (!input_) return OkStatus();
  input_close_pending_ = true;
  FlushInput();
  return OkStatus();
}

Status Process::Resize(uint32_t cols, uint32_t rows) {
  if (!is_pty_ || !input_) return FailedPrecondition("process " + std::to_string(pid_) + " has no PTY");
  struct winsize ws {};
  ws.ws_col = static_cast<unsigned short>(cols);
  ws.ws_row = static_cast<unsigned short>(rows);
  if (ioctl(input_->native_handle(), TIOCSWINSZ, &ws) != 0) return ErrnoError("TIOCSWINSZ");
  return OkStatus();
}

void Process::FlushInput() {
  if (input_writing_ || !input_) return;
  if (input_queue_.empty()) {
    if (input_close_pending_) {
      boost::system::error_code ig;
      input_->close(ig);
      input_.reset();
    }
    return;
  }
  input_writing_ = true;
  asio::async_write(*input_, asio::buffer(input_queue_.front()),
                    [self = shared_from_this()](boost::system::error_code ec, size_t) {
                      self->input_writing_ = false;
                      if (ec == asio::error::operation_aborted) return;
                      if (ec) {  // EPIPE: the child closed its stdin
                        self->input_queue_.clear();
                        if (self->input_) {
                          boost::system::error_code ig;
                          self->input_->close(ig);
                          self->input_.reset();
                        }
                        return;
                      }
                      self->input_queue_.pop_front();
                      self->FlushInput();
                    });
}

void Process::OnExit(int wait_status) {
  wait_status_ = wait_status;
  deadline_.cancel();
  MaybeFinish();
  if (end_) return;
  read_since_grace_ = false;
  grace_.expires_after(kExitGrace);
  auto self = shared_from_this();
  grace_.async_wait([self](boost::system::error_code ec) {
    struct Loop {
      static void Tick(std::shared_ptr<Process> p) {
        if (p->end_) return;
        if (p->Paused() || p->read_since_grace_) {
          p->read_since_grace_ = false;
          p->grace_.expires_after(kExitGrace);
          p->grace_.async_wait([p](boost::system::error_code ec) {
            if (!ec) Tick(p);
          });
          return;
        }
        // A background child still holds the pipes: stop waiting for EOF.
        for (auto& pipe : p->pipes_) {
          if (pipe.fd) {
            boost::system::error_code ig;
            pipe.fd->close(ig);
            pipe.fd.reset();
            pipe.reading = false;
          }
        }
        p->MaybeFinish();
      }
    };
    if (!ec) Loop::Tick(self);
  });
}

void Process::MaybeFinish() {
  if (end_ || !wait_status_) return;
  if (pipes_[0].fd || pipes_[1].fd) return;
  ExitStatus st = ExitStatus::FromWaitStatus(*wait_status_);
  end_ = envd::EndEventFromExit(st.exit_code, st.signal);
  grace_.cancel();
  if (input_) {
    boost::system::error_code ig;
    input_->close(ig);
    input_.reset();
  }
  input_queue_.clear();
  Broadcast(*end_);
  subs_.clear();
  if (on_finished_) on_finished_(pid_, *end_);
}

StatusOr<std::shared_ptr<Process>> ProcessTable::Spawn(SpawnRequest req) {
  const auto& pc = req.start.process;
  if (pc.cmd.empty()) return InvalidArgument("process cmd is empty");
  std::string path = LookupCommand(pc.cmd, req.env);
  std::vector<std::string> argv_s;
  argv_s.push_back(pc.cmd);
  argv_s.insert(argv_s.end(), pc.args.begin(), pc.args.end());
  std::vector<std::string> env_s;
  for (const auto& [k, v] : req.env) env_s.push_back(k + "=" + v);
  for (const auto& s : argv_s) {
    if (s.find('\0') != std::string::npos) return InvalidArgument("argument contains a NUL byte");
  }
  std::vector<char*> argv, envp;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);

  UniqueFd out_r, out_w, err_r, err_w, in_r, in_w, pty_master, pty_slave, devnull;
  if (req.start.pty) {
    int m, s;
    struct winsize ws {};
    ws.ws_col = static_cast<unsigned short>(req.start.pty->cols ? req.start.pty->cols : 80);
    ws.ws_row = static_cast<unsigned short>(req.start.pty->rows ? req.start.pty->rows : 24);
    if (openpty(&m, &s, nullptr, nullptr, &ws) != 0) return ErrnoError("openpty");
    pty_master.Reset(m);
    pty_slave.Reset(s);
    fcntl(m, F_SETFD, FD_CLOEXEC);
    fcntl(s, F_SETFD, FD_CLOEXEC);
    int dup = fcntl(m, F_DUPFD_CLOEXEC, 3);
    if (dup < 0) return ErrnoError("dup pty master");
    in_w.Reset(dup);
  } else {
    ASSIGN_OR_RETURN(auto o, MakePipe());
    ASSIGN_OR_RETURN(auto e, MakePipe());
    out_r = std::move(o.first);
    out_w = std::move(o.second);
    err_r = std::move(e.first);
    err_w = std::move(e.second);
    // As envd (handler.go): open unless the request says `stdin: false`;
    // the SDK before 2.x sends no `stdin` and writes to it with sendStdin.
    if (req.start.stdin.value_or(true)) {
      ASSIGN_OR_RETURN(auto i, MakePipe());
      in_r = std::move(i.first);
      in_w = std::move(i.second);
    } else {
      devnull.Reset(open("/dev/null", O_RDWR | O_CLOEXEC));
      if (!devnull) return ErrnoError("open /dev/null");
    }
  }
  int child_in = req.start.pty ? pty_slave.get() : (in_r ? in_r.get() : devnull.get());
  int child_out = req.start.pty ? pty_slave.get() : out_w.get();
  int child_err = req.start.pty ? pty_slave.get() : err_w.get();
  std::vector<gid_t> groups = req.user.groups;
  if (groups.empty()) groups.push_back(req.user.gid);

  std::optional<CommandCgroup> cg;
  if (cgroups_) {
    auto c = cgroups_->Create();
    if (!c.ok()) return Status(c.status().code(), "cgroup for the command: " + c.status().message());
    cg = std::move(*c);
  }
  int cg_procs = cg ? cg->procs.get() : -1;

  pid_t pid = fork();
  if (pid < 0) {
    if (cg) cgroups_->Release(cg->path);
    return ErrnoError("fork");
  }
  if (pid == 0) {
    ChildExec(req, path.c_str(), argv.data(), envp.data(), child_in, child_out, child_err,
              req.start.pty ? pty_slave.get() : -1, groups.data(), groups.size(), cg_procs, reset_oom_score_);
  }
  // Parent: keep our ends only.
  out_w.Reset();
  err_w.Reset();
  in_r.Reset();
  pty_slave.Reset();
  devnull.Reset();
  auto proc = std::make_shared<Process>(io_, pid, std::move(req));
  if (cg) proc->cgroup_ = cg->path;
  proc->on_output_ = [this](size_t before, size_t after) {
    output_held_ = output_held_ - before + after;
    if (output_held_ > kOutputHeldTotal) TrimOutput();
  };
  proc->on_finished_ = [this, raw = proc.get()](pid_t p, const envd::EndEvent& end) {
    raw->on_output_ = nullptr;
    auto it = procs_.find(p);
    if (it == procs_.end() || it->second.get() != raw) {
      // Its pid was taken by a newer process while it drained (a reaped
      // leader whose grandchild held the pipes): the table has the newer
      // one; only its log and its leaf are left to account for.
      output_held_ -= raw->output_->Held();
      if (cgroups_ && !raw->cgroup_.empty()) cgroups_->Release(raw->cgroup_);
      return;
    }
    const std::string& leaf = it->second->cgroup_;
    if (cgroups_ && !leaf.empty()) cgroups_->Release(leaf);  // removed now, or once its leftovers end
    Finished f;
    f.pid = p;
    f.end = end;
    f.output = it->second->output_;
    f.tag = it->second->tag();
    f.cgroup = leaf;
    f.ended_at = std::chrono::steady_clock::now();
    finished_.push_back(std::move(f));
    while (finished_.size() > kMaxFinished) {
      output_held_ -= finished_.front().output->Held();
      finished_.pop_front();
    }
    TrimOutput();
    // Destroy later: we are inside a member function of this Process.
    auto keep = std::move(it->second);
    procs_.erase(it);
    asio::post(io_, [keep] {});
    if (on_finished_) {
      asio::post(io_, [this, p, tag = keep->tag(), end] {
        if (on_finished_) on_finished_(p, tag, end);
      });
    }
  };
  procs_[pid] = proc;
  proc->Attach(out_r.Release(), err_r.Release(), pty_master.Release(), in_w.Release());
  return proc;
}

std::shared_ptr<Process> ProcessTable::Find(const envd::ProcessSelector& sel) const {
  if (sel.pid) {
    auto it = procs_.find(static_cast<pid_t>(*sel.pid));
    return it == procs_.end() ? nullptr : it->second;
  }
  if (sel.tag) {
    for (const auto& [pid, p] : procs_) {
      if (p->tag() == sel.tag) return p;
    }
  }
  return nullptr;
}

const ProcessTable::Ended* ProcessTable::FindRecentlyFinished(const envd::ProcessSelector& sel,
                                                              std::chrono::steady_clock::time_point now) {
  TrimOutput();
  for (auto it = finished_.rbegin(); it != finished_.rend(); ++it) {
    if (now - it->ended_at >= kTerminatedRetention) break;  // older ones too
    if ((sel.pid && static_cast<uint32_t>(it->pid) == *sel.pid) || (!sel.pid && sel.tag && it->tag == sel.tag)) {
      return &*it;
    }
  }
  return nullptr;
}

void ProcessTable::TrimOutput() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& f : finished_) {  // the oldest first
    if (output_held_ <= kOutputHeldTotal && now - f.ended_at < kTerminatedRetention) continue;
    OutputLog& log = *f.output;
    const size_t excess = output_held_ > kOutputHeldTotal ? output_held_ - kOutputHeldTotal : 0;
    const size_t keep = now - f.ended_at >= kTerminatedRetention ? 0 : log.Held() - std::min(log.Held(), excess);
    output_held_ -= log.Trim(keep);
  }
  while (output_held_ > kOutputHeldTotal) {
    OutputLog* largest = nullptr;
    for (const auto& [pid, p] : procs_) {
      if (!p->end_ && (!largest || p->output_->Held() > largest->Held())) largest = p->output_.get();
    }
    if (!largest) break;
    const size_t excess = output_held_ - kOutputHeldTotal;
    const size_t released = largest->Trim(largest->Held() - std::min(largest->Held(), excess));
    if (released == 0) break;  // nothing left to drop (cannot happen while the total is right)
    output_held_ -= released;
  }
}

std::vector<std::shared_ptr<Process>> ProcessTable::Running() const {
  std::vector<std::shared_ptr<Process>> out;
  for (const auto& [pid, p] : procs_) {
    if (!p->wait_status_) out.push_back(p);
  }
  return out;
}

bool ProcessTable::KillLeftovers(const envd::ProcessSelector& sel) {
  for (auto it = finished_.rbegin(); it != finished_.rend(); ++it) {
    bool match = (sel.pid && static_cast<uint32_t>(it->pid) == *sel.pid) || (!sel.pid && sel.tag && it->tag == sel.tag);
    if (!match) continue;
    if (it->cgroup.empty() || !CommandCgroups::Populated(it->cgroup)) return false;
    return CommandCgroups::Kill(it->cgroup).ok();
  }
  return false;
}

void ProcessTable::OnChildExit(pid_t pid, int wait_status) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  auto p = it->second;  // keep alive across the call
  p->OnExit(wait_status);
}

}  // namespace airlock::agent
