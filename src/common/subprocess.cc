#include "common/subprocess.h"

#include <iterator>
#include <sstream>
#include <fstream>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace airlock {

std::string ExitStatus::ToString() const {
  if (exit_code) return "exit status " + std::to_string(*exit_code);
  if (signal) {
    if (*signal == SIGKILL) return "signal: killed";
    const char* d = sigdescr_np(*signal);
    std::string s = d ? d : ("signal " + std::to_string(*signal));
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return "signal: " + s;
  }
  return "unknown";
}

ExitStatus ExitStatus::FromWaitStatus(int ws) {
  ExitStatus s;
  if (WIFEXITED(ws)) s.exit_code = WEXITSTATUS(ws);
  else if (WIFSIGNALED(ws)) s.signal = WTERMSIG(ws);
  return s;
}

Child::Child(Child&& o) noexcept : pid_(std::exchange(o.pid_, -1)), status_(std::move(o.status_)) {}
Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    Kill();
    pid_ = std::exchange(o.pid_, -1);
    status_ = std::move(o.status_);
  }
  return *this;
}
Child::~Child() { Kill(); }

void Child::Kill() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    (void)Wait();
  }
}

pid_t Child::Release() { return std::exchange(pid_, -1); }

Status Child::Signal(int sig) {
  if (pid_ <= 0 || status_) return FailedPrecondition("process already exited");
  if (::kill(pid_, sig) != 0) return ErrnoError("kill " + std::to_string(pid_));
  return OkStatus();
}

StatusOr<ExitStatus> Child::Wait() {
  if (status_) return *status_;
  if (pid_ <= 0) return FailedPrecondition("no process");
  int ws = 0;
  while (::waitpid(pid_, &ws, 0) < 0) {
    if (errno != EINTR) return ErrnoError("waitpid " + std::to_string(pid_));
  }
  status_ = ExitStatus::FromWaitStatus(ws);
  return *status_;
}

std::optional<ExitStatus> Child::Poll() {
  if (status_) return status_;
  if (pid_ <= 0) return std::nullopt;
  int ws = 0;
  pid_t r = ::waitpid(pid_, &ws, WNOHANG);
  if (r == pid_) status_ = ExitStatus::FromWaitStatus(ws);
  return status_;
}

StatusOr<ExitStatus> Child::WaitFor(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto step = std::chrono::milliseconds(1);
  while (true) {
    if (auto s = Poll()) return *s;
    if (std::chrono::steady_clock::now() >= deadline)
      return DeadlineExceeded("process " + std::to_string(pid_) + " still running");
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, std::chrono::milliseconds(50));
  }
}

StatusOr<std::string> FindExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
    return NotFound(name + " not found or not executable");
  }
  const char* path = ::getenv("PATH");
  std::string p = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  // Root's tools (ip, nft, mkfs.ext4) live in sbin, which a user PATH may lack.
  p += ":/usr/sbin:/sbin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      std::string cand = dir + "/" + name;
      struct stat st;
      if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(cand.c_str(), X_OK) == 0)
        return cand;
    }
    start = end + 1;
  }
  return NotFound("executable '" + name + "' not found in PATH");
}

StatusOr<Child> Spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return InvalidArgument("spawn: empty argv");
  ASSIGN_OR_RETURN(std::string exe, FindExecutable(o.argv[0]));
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  if (o.env) {
    for (const auto& [k, v] : *o.env) env_storage.push_back(k + "=" + v);
    for (auto& s : env_storage) envp.push_back(s.data());
    envp.push_back(nullptr);
  }
  std::vector<std::string> argv_storage = o.argv;
  std::vector<char*> argv;
  for (auto& s : argv_storage) argv.push_back(s.data());
  argv.push_back(nullptr);

  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) return ErrnoError("open /dev/null");
  // Error pipe: the child writes errno if exec fails.
  int ep[2];
  if (::pipe2(ep, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  UniqueFd err_r(ep[0]), err_w(ep[1]);
  const char* cwd = o.cwd.empty() ? nullptr : o.cwd.c_str();
  pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork");
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    int stage = 0;
    auto fail = [&](int s) {
      int e[2] = {s, errno};
      (void)!::write(err_w.get(), e, sizeof(e));
      ::_exit(127);
    };
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    for (int s = 1; s < NSIG; ++s) {
      if (s == SIGKILL || s == SIGSTOP) continue;
      ::signal(s, SIG_DFL);
    }
    if (o.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
    }
    if (o.new_session) ::setsid();
    stage = 1;
    if (o.netns_fd >= 0 && ::setns(o.netns_fd, CLONE_NEWNET) != 0) fail(stage);
    int in = o.stdin_fd >= 0 ? o.stdin_fd : devnull.get();
    int out = o.stdout_to_devnull ? devnull.get() : o.stdout_fd;
    int er = o.stderr_to_devnull ? devnull.get() : o.stderr_fd;
    stage = 2;
    if (::dup2(in, 0) < 0) fail(stage);
    if (out >= 0 && ::dup2(out, 1) < 0) fail(stage);
    if (er >= 0 && ::dup2(er, 2) < 0) fail(stage);
    // Nothing else of ours leaks into the child (listening sockets, other
    // sandboxes' fds): close every fd above 2 except the exec-error pipe,
    // which closes itself on exec.
    {
      unsigned ew = static_cast<unsigned>(err_w.get());
      if (ew > 3) ::syscall(SYS_close_range, 3u, ew - 1, 0u);
      ::syscall(SYS_close_range, ew + 1, ~0u, 0u);
    }
    stage = 3;
    if (cwd && ::chdir(cwd) != 0) fail(stage);
    stage = 4;
    if (o.env) ::execve(exe.c_str(), argv.data(), envp.data());
    else ::execv(exe.c_str(), argv.data());
    fail(stage);
  }
  Child child(pid);
  err_w.Reset();
  int e[2];
  ssize_t n;
  do { n = ::read(err_r.get(), e, sizeof(e)); } while (n < 0 && errno == EINTR);
  if (n == sizeof(e)) {
    (void)child.Wait();
    static const char* kStage[] = {"start", "setns", "dup2", "chdir", "exec"};
    std::string what = std::string(kStage[e[0]]) + " " + o.argv[0];
    return ErrnoError(what, e[1]);
  }
  return child;
}

StatusOr<RunResult> Run(const std::vector<std::string>& argv, int netns_fd, size_t max_output) {
  int op[2], ep[2];
  if (::pipe2(op, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  UniqueFd out_r(op[0]), out_w(op[1]);
  if (::pipe2(ep, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  UniqueFd err_r(ep[0]), err_w(ep[1]);
  SpawnOptions so;
  so.argv = argv;
  so.stdout_fd = out_w.get();
  so.stderr_fd = err_w.get();
  so.netns_fd = netns_fd;
  ASSIGN_OR_RETURN(Child child, Spawn(so));
  out_w.Reset();
  err_w.Reset();
  RunResult r;
  pollfd fds[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
  int open_count = 2;
  while (open_count > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("poll");
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      std::string* dst = i == 0 ? &r.out : &r.err;
      char buf[65536];
      ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
      if (got <= 0) {
        fds[i].fd = -1;
        --open_count;
      } else if (dst->size() < max_output) {
        dst->append(buf, std::min<size_t>(got, max_output - dst->size()));
      }
    }
  }
  ASSIGN_OR_RETURN(r.status, child.Wait());
  return r;
}

StatusOr<std::string> RunChecked(const std::vector<std::string>& argv, int netns_fd) {
  ASSIGN_OR_RETURN(RunResult r, Run(argv, netns_fd));
  if (!r.status.success()) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    std::string err = r.err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    return Internal("'" + cmd + "' failed (" + r.status.ToString() + ")" + (err.empty() ? "" : ": " + err));
  }
  return std::move(r.out);
}

unsigned long long ProcessStartTicks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto rp = s.rfind(')');  // comm may contain spaces and parens
  if (rp == std::string::npos || rp + 2 > s.size()) return 0;
  std::stringstream ss(s.substr(rp + 2));
  std::string field;
  // Fields after comm start at #3 (state); starttime is #22.
  for (int i = 3; i <= 22; ++i) {
    if (!(ss >> field)) return 0;
  }
  try {
    return std::stoull(field);
  } catch (...) {
    return 0;
  }
}

}  // namespace airlock
