#include "interpreter/kernel_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include <boost/asio/post.hpp>

#include "common/fd.h"
#include "interpreter/wire.h"

namespace airlock::interpreter {

namespace {

std::vector<std::string> SplitColon(const std::string& line) {
  std::vector<std::string> f;
  size_t b = 0;
  while (true) {
    size_t e = line.find(':', b);
    f.push_back(line.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return f;
}

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::string ResolveInPath(const std::string& file, const std::string& path) {
  if (file.find('/') != std::string::npos) return file;
  size_t b = 0;
  while (b <= path.size()) {
    size_t e = path.find(':', b);
    std::string dir = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + file;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return file;
}

}  // namespace

StatusOr<KernelUser> ResolveKernelUser(const std::string& name, const std::string& root_prefix) {
  KernelUser u;
  u.name = name;
  bool root = ::geteuid() == 0;
  std::ifstream pw(root_prefix + "/etc/passwd");
  bool found = false;
  std::string line;
  while (pw && std::getline(pw, line)) {
    auto f = SplitColon(line);
    if (f.size() < 7 || f[0] != name) continue;
    char* end = nullptr;
    unsigned long uid = std::strtoul(f[2].c_str(), &end, 10);
    unsigned long gid = std::strtoul(f[3].c_str(), &end, 10);
    u.uid = static_cast<uid_t>(uid);
    u.gid = static_cast<gid_t>(gid);
    u.home = f[5];
    found = true;
    break;
  }
  if (!root) {
    // No switch: the kernel is whoever the server is.
    u.switch_user = false;
    u.uid = ::geteuid();
    u.gid = ::getegid();
    if (!found) {
      const char* h = std::getenv("HOME");
      u.home = h ? h : "/";
      const char* n = std::getenv("USER");
      if (n) u.name = n;
    }
    return u;
  }
  if (!found) return NotFound("user '" + name + "' is not in " + root_prefix + "/etc/passwd");
  u.switch_user = true;
  u.groups.push_back(u.gid);
  std::ifstream gr(root_prefix + "/etc/group");
  while (gr && std::getline(gr, line)) {
    auto f = SplitColon(line);
    if (f.size() < 4) continue;
    std::stringstream members(f[3]);
    std::string m;
    while (std::getline(members, m, ',')) {
      if (m == name) {
        u.groups.push_back(static_cast<gid_t>(std::strtoul(f[2].c_str(), nullptr, 10)));
        break;
      }
    }
  }
  return u;
}

std::string ConnectionInfo::ToJson() const {
  nlohmann::json j{{"transport", "ipc"},         {"ip", ip},
                   {"shell_port", shell_port},   {"iopub_port", iopub_port},
                   {"stdin_port", stdin_port},   {"control_port", control_port},
                   {"hb_port", hb_port},         {"key", key},
                   {"signature_scheme", "hmac-sha256"}, {"kernel_name", ""}};
  return j.dump(2);
}

StatusOr<ConnectionInfo> PrepareConnection(const std::string& dir, const KernelUser& user) {
  ConnectionInfo info;
  info.dir = dir;
  info.ip = dir + "/k";
  // sun_path holds 107 bytes and a NUL; the longest endpoint is "<ip>-5".
  if (info.ip.size() + 2 >= sizeof(sockaddr_un{}.sun_path)) {
    return InvalidArgument("kernel socket path too long for a unix socket: " + info.ip);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (::mkdir(dir.c_str(), 0700) != 0) return ErrnoError("mkdir " + dir);
  if (user.switch_user && ::chown(dir.c_str(), user.uid, user.gid) != 0) return ErrnoError("chown " + dir);
  info.key = NewUuid();
  return info;
}

Status WriteConnectionFile(const ConnectionInfo& info, const KernelUser& user) {
  const std::string path = info.ConnectionFile();
  ::unlink(path.c_str());
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoError("create " + path);
  if (user.switch_user && ::fchown(fd.get(), user.uid, user.gid) != 0) return ErrnoError("chown " + path);
  std::string body = info.ToJson();
  size_t off = 0;
  while (off < body.size()) {
    ssize_t n = ::write(fd.get(), body.data() + off, body.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoError("write " + path);
    off += static_cast<size_t>(n);
  }
  return OkStatus();
}

void RemoveConnection(const ConnectionInfo& info) {
  if (info.dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(info.dir, ec);
}

std::map<std::string, std::string> KernelEnvironment(const KernelUser& user,
                                                     const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env{
      {"PATH", kDefaultPath},
      {"HOME", user.home.empty() ? "/" : user.home},
      {"USER", user.name},
      {"LANG", "C.UTF-8"},
      {"PYTHONUNBUFFERED", "1"},
      {"MPLBACKEND", "module://matplotlib_inline.backend_inline"},
  };
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

KernelProcess::KernelProcess(pid_t pid) : pid_(pid), pidfd_(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))) {}

KernelProcess::KernelProcess(KernelProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), pidfd_(std::move(o.pidfd_)) {}
KernelProcess& KernelProcess::operator=(KernelProcess&& o) noexcept {
  if (this != &o) {
    Kill();
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::move(o.pidfd_);
  }
  return *this;
}

UniqueFd KernelProcess::DupPidfd() const {
  if (!pidfd_) return UniqueFd();
  return UniqueFd(::fcntl(pidfd_.get(), F_DUPFD_CLOEXEC, 0));
}

void KernelProcess::Signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

void KernelProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);  // its own session and group (setsid): the wrappers' children too
  ::kill(pid_, SIGKILL);
  pid_ = -1;
  pidfd_.Reset();
}

StatusOr<KernelProcess> SpawnKernel(const KernelLaunch& l) {
  if (l.argv.empty()) return InvalidArgument("kernel argv is empty");
  auto path_it = l.env.find("PATH");
  std::string exe = ResolveInPath(l.argv[0], path_it == l.env.end() ? kDefaultPath : path_it->second);
  std::vector<std::string> envs;
  for (const auto& [k, v] : l.env) envs.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : l.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  struct stat st{};
  if (::stat(l.cwd.c_str(), &st) != 0) return ErrnoError("kernel cwd " + l.cwd);
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("kernel cwd " + l.cwd + ": not a directory");
  // The exec's failure reaches the parent through a CLOEXEC pipe.
  int pfd[2];
  if (::pipe2(pfd, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  UniqueFd rd(pfd[0]), wr(pfd[1]);
  const KernelUser& u = l.user;
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork");
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    auto fail = [&](int s) {
      int msg[2] = {s, errno};
      ssize_t ignored = ::write(pfd[1], msg, sizeof msg);
      (void)ignored;
      ::_exit(127);
    };
    ::setsid();
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    struct sigaction sa{};
    sa.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) {
      if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &sa, nullptr);
    }
    sigset_t all;
    sigemptyset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull < 0) fail(1);
    if (devnull != 0) {
      ::dup2(devnull, 0);
      ::close(devnull);
    }
    if (u.switch_user) {
      if (::setgroups(u.groups.size(), u.groups.data()) != 0) fail(2);
      if (::setgid(u.gid) != 0) fail(3);
      if (::setuid(u.uid) != 0) fail(4);
    }
    if (::chdir(l.cwd.c_str()) != 0) fail(5);
    // Everything above 2 but the error pipe goes (the server's fds are
    // CLOEXEC; this also catches a library's that is not).
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != pfd[1]) ::close(fd);
    }
    ::execve(exe.c_str(), argv.data(), envp.data());
    fail(6);
  }
  wr.Reset();
  KernelProcess proc(pid);
  int msg[2];
  ssize_t n;
  do {
    n = ::read(rd.get(), msg, sizeof msg);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof msg)) {
    static const char* kSteps[] = {"", "open /dev/null", "setgroups", "setgid", "setuid", "chdir", "execve"};
    std::string what = msg[0] == 5 ? "chdir " + l.cwd : msg[0] == 6 ? "execve " + exe : kSteps[msg[0] % 7];
    int status = 0;
    ::waitpid(pid, &status, 0);
    proc.MarkReaped();
    return ErrnoError("kernel " + what, msg[1]);
  }
  return proc;
}

std::string DescribeWaitStatus(int w) {
  if (WIFEXITED(w)) return "exit status " + std::to_string(WEXITSTATUS(w));
  if (WIFSIGNALED(w)) return "signal " + std::to_string(WTERMSIG(w));
  return "status " + std::to_string(w);
}

ChildReaper::ChildReaper(boost::asio::io_context& io) : signals_(io, SIGCHLD) { Arm(); }

void ChildReaper::Arm() {
  signals_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    Poll();
    Arm();
  });
}

void ChildReaper::Watch(pid_t pid, std::function<void(int)> on_exit) {
  watched_[pid] = std::move(on_exit);
  // It may have ended before we watched (its SIGCHLD already handled): look
  // again soon, never from inside Watch (the caller is mid-setup).
  boost::asio::post(signals_.get_executor(), [this] { Poll(); });
}

void ChildReaper::Forget(pid_t pid) {
  auto it = watched_.find(pid);
  if (it != watched_.end()) it->second = nullptr;
}

void ChildReaper::Poll() {
  // Callbacks run after the scan: they may Watch() a new kernel.
  std::vector<std::pair<std::function<void(int)>, int>> ended;
  for (auto it = watched_.begin(); it != watched_.end();) {
    int status = 0;
    pid_t r = ::waitpid(it->first, &status, WNOHANG);
    if (r == it->first || (r < 0 && errno == ECHILD)) {
      ended.emplace_back(std::move(it->second), status);
      it = watched_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [fn, status] : ended) {
    if (fn) fn(status);
  }
}

}  // namespace airlock::interpreter
