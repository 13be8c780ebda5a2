// Kernel processes: who they run as, the connection file they read, how
// they are started, and how their end is noticed.
//
//  - KernelUser: the uid/gid/groups/HOME of --user from /etc/passwd and
//    /etc/group (read directly: the binary is static, NSS is not there).
//    Only a root server switches user; otherwise the kernel runs as the
//    server does and only HOME/USER come from the passwd entry (or the
//    server's environment).
//  - ConnectionInfo: a standard Jupyter connection file (0600, owned by the
//    kernel user) with transport "ipc": the five sockets are the files
//    <dir>/k-1 .. <dir>/k-5 in a directory of the kernel's own (0700, owned
//    by the kernel user), and a random key. Unix sockets, not loopback TCP:
//    the code-interpreter template's snapshot is taken with the default
//    kernel running, and a guest must not have made a TCP handshake before
//    its snapshot (every clone draws its own TCP secrets after its reseed,
//    docs/code-interpreter.md). Other users of the guest cannot connect
//    (the directory is the kernel user's), and no port can be taken.
//  - SpawnKernel(): fork + exec with everything prepared before the fork
//    (only async-signal-safe calls in the child): a new session (its pgid is
//    its pid), PR_SET_PDEATHSIG, default signal dispositions, an empty signal
//    mask, stdin from /dev/null, stdout/stderr inherited, fds >= 3 closed,
//    setgroups/setgid/setuid when switching, chdir(cwd), a clean environment.
//  - KernelProcess: move-only owner of a started kernel; its destructor
//    SIGKILLs the kernel's process group. Reaping is ChildReaper's: SIGCHLD on
//    the io thread, waitpid(WNOHANG) on every watched pid, the exit handed to
//    the watcher's callback (or dropped once forgotten).
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::interpreter {

struct KernelUser {
  std::string name;
  std::string home;
  bool switch_user = false;  // the server is root: setuid to uid/gid
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

// `root_prefix` is prepended to /etc/passwd and /etc/group (tests).
// NotFound when a root server cannot find the user.
StatusOr<KernelUser> ResolveKernelUser(const std::string& name, const std::string& root_prefix = "");

struct ConnectionInfo {
  std::string dir;  // the kernel's directory: its sockets and connection file
  std::string ip;   // for ipc, Jupyter's path prefix: socket n is "<ip>-<n>"
  uint16_t shell_port = 1, iopub_port = 2, stdin_port = 3, control_port = 4, hb_port = 5;
  std::string key;  // hex, also the HMAC key as is (Jupyter uses the string's bytes)

  std::string Endpoint(uint16_t port) const { return "ipc://" + ip + "-" + std::to_string(port); }
  std::string ConnectionFile() const { return dir + "/connection.json"; }
  std::string ToJson() const;
};

// Makes `dir` anew (whatever was there is removed; 0700, owned by the kernel
// user when switching) and returns its endpoints with a fresh random key.
// The socket paths must fit a sockaddr_un (InvalidArgument otherwise).
StatusOr<ConnectionInfo> PrepareConnection(const std::string& dir, const KernelUser& user);
// Writes info.ConnectionFile() (0600, created anew) and chowns it to the user when switching.
Status WriteConnectionFile(const ConnectionInfo& info, const KernelUser& user);
// Removes the kernel's directory and what is in it (sockets a killed kernel left).
void RemoveConnection(const ConnectionInfo& info);

struct KernelLaunch {
  std::vector<std::string> argv;  // argv[0] looked up in env PATH if it has no '/'
  std::map<std::string, std::string> env;
  std::string cwd;
  KernelUser user;
};

// The kernel environment: PATH, HOME, USER, LANG, PYTHONUNBUFFERED,
// MPLBACKEND, then `extra` (the kernels.json entry's env) on top.
std::map<std::string, std::string> KernelEnvironment(const KernelUser& user,
                                                     const std::map<std::string, std::string>& extra);

class KernelProcess {
 public:
  KernelProcess() = default;
  // Opens a pidfd for `pid` too (invalid on kernels without pidfd_open).
  explicit KernelProcess(pid_t pid);
  KernelProcess(KernelProcess&& o) noexcept;
  KernelProcess& operator=(KernelProcess&& o) noexcept;
  KernelProcess(const KernelProcess&) = delete;
  KernelProcess& operator=(const KernelProcess&) = delete;
  ~KernelProcess() { Kill(); }

  pid_t pid() const { return pid_; }
  bool valid() const { return pid_ > 0; }
  // kill(pid, sig) (SIGINT = interrupt, the contract); no-op when gone.
  void Signal(int sig) const;
  // SIGKILL to the process group and the process; the owner lets go.
  void Kill();
  // The process has been reaped: nothing left to kill.
  void MarkReaped() {
    pid_ = -1;
    pidfd_.Reset();
  }
  // A CLOEXEC duplicate of the pidfd (for the hub thread, which may signal
  // the kernel without the pid-reuse race); invalid when there is none.
  UniqueFd DupPidfd() const;

 private:
  pid_t pid_ = -1;
  UniqueFd pidfd_;
};

StatusOr<KernelProcess> SpawnKernel(const KernelLaunch& launch);

// "exit status 1" / "signal 9"
std::string DescribeWaitStatus(int wstatus);

class ChildReaper {
 public:
  explicit ChildReaper(boost::asio::io_context& io);
  // `on_exit(wstatus)` runs on the io thread once the child is reaped
  // (never from inside Watch).
  void Watch(pid_t pid, std::function<void(int wstatus)> on_exit);
  // Keeps reaping `pid` but calls nothing.
  void Forget(pid_t pid);
  // Reaps what has ended (also called on every SIGCHLD).
  void Poll();

 private:
  void Arm();
  boost::asio::signal_set signals_;
  std::map<pid_t, std::function<void(int)>> watched_;
};

}  // namespace airlock::interpreter
