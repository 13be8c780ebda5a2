#include "tests/integration/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "net/address_pool.h"
#include "net/names.h"

namespace airlock::testing {

namespace fs = std::filesystem;

static std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string AirlockBin() { return Env("AIRLOCK_BIN", AIRLOCK_BUILD_DIR "/airlock"); }
std::string StateDir() { return Env("AIRLOCK_STATE_DIR", "/var/lib/airlock"); }
std::string ExamplesDir() { return Env("AIRLOCK_EXAMPLES", AIRLOCK_SOURCE_DIR "/examples/agent-tasks"); }
std::string RuntimeName() { return Env("AIRLOCK_RUNTIME", "qemu"); }

std::string SkipReason() {
  if (::geteuid() != 0) return "microVM tests need root (netns, tap)";
  if (!FindExecutable("qemu-system-x86_64").ok()) return "qemu-system-x86_64 not installed (run scripts/setup)";
  if (::access(AirlockBin().c_str(), X_OK) != 0) return "airlock binary not found at " + AirlockBin();
  if (!fs::exists(StateDir() + "/images")) return "no guest image in " + StateDir() + " (run: make image)";
  return "";
}

long PeakRssKib(pid_t pid) {
  std::string status = ReadFileOrDie("/proc/" + std::to_string(pid) + "/status");
  auto at = status.find("VmHWM:");
  return at == std::string::npos ? 0 : std::atol(status.c_str() + at + 6);
}

CliResult RunCli(const std::vector<std::string>& args, const std::string& stdin_bytes, size_t max_output,
                 const std::function<void(pid_t)>& on_tick) {
  std::vector<std::string> argv = {AirlockBin(), "--state-dir", StateDir()};
  argv.insert(argv.end(), args.begin(), args.end());
  if (!args.empty() && (args[0] == "run" || args[0] == "serve")) {
    argv.insert(argv.begin() + 4, {"--runtime", RuntimeName()});
  }
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC)) std::abort();
  SpawnOptions so;
  so.argv = argv;
  so.stdin_fd = in[0];
  so.stdout_fd = out[1];
  so.stderr_fd = err[1];
  so.new_session = false;
  auto child = Spawn(so);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  CliResult r;
  if (!child.ok()) {
    r.err = child.status().ToString();
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    return r;
  }
  // Feed stdin and drain both outputs without deadlocking.
  ::fcntl(in[1], F_SETFL, O_NONBLOCK);
  size_t fed = 0;
  int in_fd = in[1];
  if (stdin_bytes.empty()) {
    ::close(in_fd);
    in_fd = -1;
  }
  pollfd p[3];
  int open_outputs = 2;
  int fds[2] = {out[0], err[0]};
  while (open_outputs > 0) {
    int n = 0;
    for (int i = 0; i < 2; ++i) p[n++] = {fds[i], POLLIN, 0};
    if (in_fd >= 0) p[n++] = {in_fd, POLLOUT, 0};
    if (on_tick) on_tick(child->pid());
    if (::poll(p, n, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t got = ::read(fds[i], buf, sizeof(buf));
      if (got <= 0) {
        ::close(fds[i]);
        fds[i] = -1;
        --open_outputs;
        continue;
      }
      std::string& dst = i == 0 ? r.out : r.err;
      if (dst.size() < max_output) dst.append(buf, std::min<size_t>(got, max_output - dst.size()));
    }
    if (in_fd >= 0 && (p[n - 1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      // A child that exits without reading its stdin (a refused command
      // line) makes this write EPIPE: take that as "fed", not as a SIGPIPE
      // that ends the test process (the signal is blocked around the write
      // and a pending one consumed).
      sigset_t pipe_sig, old_mask;
      sigemptyset(&pipe_sig);
      sigaddset(&pipe_sig, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &pipe_sig, &old_mask);
      ssize_t w = ::write(in_fd, stdin_bytes.data() + fed, stdin_bytes.size() - fed);
      const int write_errno = errno;
      if (w < 0 && write_errno == EPIPE) {
        timespec now{};
        sigtimedwait(&pipe_sig, nullptr, &now);
      }
      pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
      errno = write_errno;
      if (w > 0) fed += w;
      if (w < 0 && errno != EAGAIN) fed = stdin_bytes.size();
      if (fed == stdin_bytes.size()) {
        ::close(in_fd);
        in_fd = -1;
      }
    }
  }
  if (in_fd >= 0) ::close(in_fd);
  auto st = child->Wait();
  if (st.ok()) r.code = st->ShellCode();
  return r;
}

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "<missing " + path + ">";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string MakeTempDir() {
  std::string t = (fs::temp_directory_path() / "airlock-test-XXXXXX").string();
  if (!::mkdtemp(t.data())) std::abort();
  return t;
}

static std::vector<std::string> ListNames(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

SandboxResources::SandboxResources() {
  const std::string run = StateDir() + "/run";
  std::error_code ec;
  fs::create_directories(run, ec);  // as Manager::Open does
  inotify_.Reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify_ || ::inotify_add_watch(inotify_.get(), run.c_str(), IN_CREATE | IN_MOVED_TO) < 0) {
    ADD_FAILURE() << "inotify on " << run << ": " << std::strerror(errno);
  }
  // Run dirs already there are not this test's (another daemon's on the
  // same state dir, or a dead one's leftovers its own daemon will sweep).
  for (auto& n : ListNames(run)) preexisting_.insert(n);
}

HostResources SandboxResources::Snapshot() {
  // The run dirs made since the last look (the queue holds 16384 events).
  alignas(inotify_event) char buf[64 * 1024];
  ssize_t n;
  while (inotify_ && (n = ::read(inotify_.get(), buf, sizeof buf)) > 0) {
    for (char* p = buf; p < buf + n;) {
      auto* e = reinterpret_cast<inotify_event*>(p);
      if (e->mask & IN_Q_OVERFLOW) ADD_FAILURE() << "inotify queue overflowed: sandbox ids missed";
      if (e->len > 0 && (e->mask & IN_ISDIR) && !preexisting_.count(e->name)) ids_.insert(e->name);
      p += sizeof(inotify_event) + e->len;
    }
  }
  HostResources r;
  for (auto& id : ListNames(StateDir() + "/run")) {
    if (preexisting_.count(id)) continue;
    r.run_dirs.push_back(id);
    ids_.insert(id);
  }
  struct stat st;
  for (auto& id : ids_) {
    if (::stat(("/run/netns/" + net::NetnsName(id)).c_str(), &st) == 0) r.netns.push_back(net::NetnsName(id));
    if (::stat(("/sys/class/net/" + net::HostVethName(id)).c_str(), &st) == 0) r.links.push_back(net::HostVethName(id));
  }
  const std::string leases = std::string(net::kHostLeaseRoot) + "/net/leases";
  for (auto& name : ListNames(leases)) {
    std::istringstream text(ReadFileOrDie(leases + "/" + name));
    std::string line;
    while (std::getline(text, line)) {
      if (line.rfind("sandbox=", 0) == 0 && ids_.count(line.substr(8))) r.leases.push_back(name);
    }
  }
  for (auto& n : ListNames("/proc")) {
    if (n.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = ReadFileOrDie("/proc/" + n + "/cmdline");
    const std::string run = StateDir() + "/run/";
    size_t at = cmd.find(run);
    if (cmd.find("qemu-system") == std::string::npos || at == std::string::npos) continue;
    std::string id = cmd.substr(at + run.size());
    id = id.substr(0, id.find('/'));
    if (!preexisting_.count(id)) r.vmm_pids.push_back(n);
  }
  return r;
}

std::string HostResources::ToString() const {
  std::string s;
  auto add = [&](const char* what, const std::vector<std::string>& v) {
    s += what;
    s += "=[";
    for (auto& x : v) s += x + " ";
    s += "] ";
  };
  add("netns", netns);
  add("links", links);
  add("run_dirs", run_dirs);
  add("leases", leases);
  add("vmm", vmm_pids);
  return s;
}

}  // namespace airlock::testing
