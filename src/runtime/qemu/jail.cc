#include "runtime/qemu/jail.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <filesystem>
#include <set>

namespace airlock::qemu {
namespace fs = std::filesystem;
namespace {

constexpr char kOldRoot[] = "/.oldroot";

// Child steps, in the order they run; the names are what an error says.
enum Step : int {
  kCgroup,
  kSetns,
  kTunOpen,
  kTunAttach,
  kTunOwner,
  kStdio,
  kUnshare,
  kPrivate,
  kTmpfs,
  kOldRootDir,
  kPivot,
  kChdirRoot,
  kMkdir,
  kFile,
  kSymlink,
  kBind,
  kRemount,
  kMknod,
  kChown,
  kProc,
  kUmountOld,
  kRootRo,
  kChdir,
  kBounding,
  kSetgroups,
  kSetgid,
  kSetuid,
  kRegain,
  kCapset,
  kNoNewPrivs,
  kDeathSig,
  kExec,
  kStepCount
};
constexpr const char* kStepName[kStepCount] = {"join cgroup",
                                               "setns(net)",
                                               "open /dev/net/tun",
                                               "TUNSETIFF",
                                               "TUNSETOWNER",
                                               "stdio",
                                               "unshare(CLONE_NEWNS)",
                                               "make mounts private",
                                               "mount tmpfs root",
                                               "mkdir old root",
                                               "pivot_root",
                                               "chdir /",
                                               "mkdir",
                                               "create",
                                               "symlink",
                                               "bind mount",
                                               "remount",
                                               "mknod",
                                               "chown",
                                               "mount /proc",
                                               "detach old root",
                                               "remount root read-only",
                                               "chdir",
                                               "drop bounding set",
                                               "setgroups",
                                               "setresgid",
                                               "setresuid",
                                               "check root is gone",
                                               "capset",
                                               "no_new_privs",
                                               "parent death signal",
                                               "exec"};

bool Under(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

// Canonical host path of an existing file or directory.
StatusOr<std::string> Canonical(const std::string& p) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf)) return ErrnoError("realpath " + p);
  return std::string(buf);
}

// Decimal of a non-negative number into buf (async-signal-safe); returns the length.
int FormatUint(unsigned long v, char* buf) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  for (int i = 0; i < n; ++i) buf[i] = tmp[n - 1 - i];
  return n;
}

}  // namespace

StatusOr<JailPlan> PlanJail(const JailSpec& s) {
  if (s.uid == 0 || s.gid == 0) return InvalidArgument("jail uid and gid must not be 0");
  for (const auto& p : {s.vmm_dir, s.base_dir}) {
    if (p.empty() || p[0] != '/') return InvalidArgument("jail paths must be absolute: '" + p + "'");
  }
  JailPlan plan;
  plan.uid = s.uid;
  plan.gid = s.gid;
  plan.base_dir = s.base_dir;
  const std::string vmm_dir = fs::path(s.vmm_dir).lexically_normal().string();
  plan.cwd = vmm_dir;
  std::set<std::string> dirs;
  auto add_parents = [&](const std::string& target) {
    for (fs::path p = fs::path(target).parent_path(); p != p.root_path() && !p.empty(); p = p.parent_path())
      dirs.insert(p.string());
  };
  // The system: /usr read-only (QEMU, its libraries, firmware, modules) and
  // the host's top-level /bin, /lib* entries (symlinks into /usr on merged-usr hosts).
  plan.binds.push_back({"/usr", "/usr", false, true, true});
  dirs.insert("/usr");
  for (const char* name : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st;
    if (::lstat(name, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char buf[PATH_MAX];
      ssize_t n = ::readlink(name, buf, sizeof buf - 1);
      if (n <= 0) return ErrnoError(std::string("readlink ") + name);
      plan.symlinks.push_back({name, std::string(buf, static_cast<size_t>(n))});
    } else if (S_ISDIR(st.st_mode)) {
      plan.binds.push_back({name, name, false, true, true});
      dirs.insert(name);
    }
  }
  struct stat st;
  if (::stat("/etc/ld.so.cache", &st) == 0) {
    plan.binds.push_back({"/etc/ld.so.cache", "/etc/ld.so.cache", false, false, false});
    plan.files.push_back("/etc/ld.so.cache");
    dirs.insert("/etc");
  }
  if (s.proc) {
    dirs.insert("/proc");
    plan.proc = true;
  }
  // Devices: harmless ones for everybody, the VMM's own ones owned by its uid.
  dirs.insert("/dev");
  dirs.insert("/dev/net");
  plan.nodes.push_back({"/dev/null", makedev(1, 3), 0666, false});
  plan.nodes.push_back({"/dev/zero", makedev(1, 5), 0666, false});
  plan.nodes.push_back({"/dev/random", makedev(1, 8), 0666, false});
  plan.nodes.push_back({"/dev/urandom", makedev(1, 9), 0666, false});
  dev_t tun = makedev(10, 200);
  if (::stat("/dev/net/tun", &st) == 0 && S_ISCHR(st.st_mode)) tun = st.st_rdev;
  plan.nodes.push_back({"/dev/net/tun", tun, 0600, true});
  if (s.kvm) {
    if (::stat("/dev/kvm", &st) != 0) return ErrnoError("stat /dev/kvm");
    if (!S_ISCHR(st.st_mode)) return InvalidArgument("/dev/kvm is not a character device");
    plan.nodes.push_back({"/dev/kvm", st.st_rdev, 0600, true});
  }
  // The VMM's own dir, read-write.
  ASSIGN_OR_RETURN(std::string vmm_src, Canonical(vmm_dir));
  plan.binds.push_back({vmm_src, vmm_dir, true, false, true});
  dirs.insert(vmm_dir);
  add_parents(vmm_dir);
  // What it reads: at the path QEMU is given, from the canonical host file.
  std::set<std::string> seen;
  for (const auto& f : s.ro_files) {
    if (f.empty() || f[0] != '/') return InvalidArgument("jail file must be absolute: '" + f + "'");
    std::string target = fs::path(f).lexically_normal().string();
    if (!seen.insert(target).second || Under(target, vmm_dir) || Under(target, "/usr")) continue;
    ASSIGN_OR_RETURN(std::string src, Canonical(target));
    if (::stat(src.c_str(), &st) != 0) return ErrnoError("stat " + src);
    if (!S_ISREG(st.st_mode)) return InvalidArgument("jail file " + target + " is not a regular file");
    plan.binds.push_back({src, target, false, false, false});
    plan.files.push_back(target);
    add_parents(target);
  }
  plan.dirs.assign(dirs.begin(), dirs.end());
  // Parents before children.
  std::stable_sort(plan.dirs.begin(), plan.dirs.end(), [](const std::string& a, const std::string& b) {
    return std::count(a.begin(), a.end(), '/') < std::count(b.begin(), b.end(), '/');
  });
  for (auto& b : plan.binds) b.source = kOldRoot + b.source;
  return plan;
}

StatusOr<Child> SpawnJailed(const JailPlan& plan, const JailProcess& pr) {
  if (pr.argv.empty() || pr.argv[0].empty() || pr.argv[0][0] != '/')
    return InvalidArgument("jail: argv[0] must be an absolute path");
  if (plan.uid == 0 || plan.gid == 0) return InvalidArgument("jail: uid/gid 0");
  // Everything the child touches is prepared here: it may not allocate.
  std::vector<std::string> argv_storage = pr.argv, env_storage = pr.env;
  std::vector<char*> argv, envp;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string old_root_in_base = plan.base_dir + kOldRoot;
  ifreq ifr{};
  if (pr.tap.size() >= IFNAMSIZ) return InvalidArgument("tap name too long: " + pr.tap);
  std::memcpy(ifr.ifr_name, pr.tap.c_str(), pr.tap.size());
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) return ErrnoError("open /dev/null");
  int ep[2];
  if (::pipe2(ep, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  UniqueFd err_r(ep[0]), err_w(ep[1]);
  if (pr.pass_fd >= 0) {
    // Out of the way of fd 3, where the child puts pass_fd.
    UniqueFd high(::fcntl(err_w.get(), F_DUPFD_CLOEXEC, 16));
    if (!high) return ErrnoError("fcntl F_DUPFD");
    err_w = std::move(high);
    if (pr.pass_fd == 0 || pr.pass_fd == 1 || pr.pass_fd == 2) return InvalidArgument("jail: pass_fd must not be 0..2");
  }
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork");
  if (pid == 0) {
    // Child: async-signal-safe system calls only.
    auto fail = [&](int step, int index) {
      int e[3] = {step, errno, index};
      (void)!::write(err_w.get(), e, sizeof(e));
      ::_exit(127);
    };
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s = 1; s < NSIG; ++s) {
      if (s != SIGKILL && s != SIGSTOP) ::signal(s, SIG_DFL);
    }
    ::setsid();
    // cgroups first, so nothing below escapes their limits.
    char pidbuf[24];
    int pidlen = FormatUint(static_cast<unsigned long>(::getpid()), pidbuf);
    for (size_t i = 0; i < pr.cgroup_procs.size(); ++i) {
      int fd = ::open(pr.cgroup_procs[i].c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, pidbuf, static_cast<size_t>(pidlen)) != pidlen) fail(kCgroup, static_cast<int>(i));
      ::close(fd);
    }
    if (pr.netns_fd >= 0 && ::setns(pr.netns_fd, CLONE_NEWNET) != 0) fail(kSetns, 0);
    if (!pr.tap.empty()) {
      // The tap belongs to root; its owner may attach to it without CAP_NET_ADMIN.
      int t = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
      if (t < 0) fail(kTunOpen, 0);
      if (::ioctl(t, TUNSETIFF, &ifr) != 0) fail(kTunAttach, 0);
      if (::ioctl(t, TUNSETOWNER, static_cast<unsigned long>(plan.uid)) != 0) fail(kTunOwner, 0);
      ::close(t);
    }
    int out = pr.stdout_fd >= 0 ? pr.stdout_fd : devnull.get();
    int er = pr.stderr_fd >= 0 ? pr.stderr_fd : devnull.get();
    if (::dup2(devnull.get(), 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(er, 2) < 0) fail(kStdio, 0);
    {
      // err_w is >= 16 when an fd is passed (see below), so fd 3 is free for it.
      unsigned first = 3;
      if (pr.pass_fd >= 0) {
        if (pr.pass_fd == 3 ? ::fcntl(3, F_SETFD, 0) != 0 : ::dup2(pr.pass_fd, 3) < 0) fail(kStdio, 3);
        first = 4;
      }
      unsigned ew = static_cast<unsigned>(err_w.get());
      if (ew > first) ::syscall(SYS_close_range, first, ew - 1, 0u);
      ::syscall(SYS_close_range, ew + 1, ~0u, 0u);
    }
    // The mount namespace.
    if (::unshare(CLONE_NEWNS) != 0) fail(kUnshare, 0);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(kPrivate, 0);
    if (::mount("airlock-vmm", plan.base_dir.c_str(), "tmpfs", MS_NOSUID, "mode=0755,size=1m,nr_inodes=4096") != 0)
      fail(kTmpfs, 0);
    if (::mkdir(old_root_in_base.c_str(), 0700) != 0) fail(kOldRootDir, 0);
    if (::syscall(SYS_pivot_root, plan.base_dir.c_str(), old_root_in_base.c_str()) != 0) fail(kPivot, 0);
    if (::chdir("/") != 0) fail(kChdirRoot, 0);
    ::umask(0);
    for (size_t i = 0; i < plan.dirs.size(); ++i) {
      // Traversable, not listable: the path to its own dir names nothing else.
      if (::mkdir(plan.dirs[i].c_str(), 0711) != 0) fail(kMkdir, static_cast<int>(i));
    }
    for (size_t i = 0; i < plan.files.size(); ++i) {
      int fd = ::open(plan.files[i].c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
      if (fd < 0) fail(kFile, static_cast<int>(i));
      ::close(fd);
    }
    for (size_t i = 0; i < plan.symlinks.size(); ++i) {
      if (::symlink(plan.symlinks[i].target.c_str(), plan.symlinks[i].path.c_str()) != 0)
        fail(kSymlink, static_cast<int>(i));
    }
    for (size_t i = 0; i < plan.binds.size(); ++i) {
      const auto& b = plan.binds[i];
      if (::mount(b.source.c_str(), b.target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
        fail(kBind, static_cast<int>(i));
      unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV;
      if (!b.writable) flags |= MS_RDONLY;
      if (!b.exec) flags |= MS_NOEXEC;
      if (::mount(nullptr, b.target.c_str(), nullptr, flags, nullptr) != 0) fail(kRemount, static_cast<int>(i));
    }
    for (size_t i = 0; i < plan.nodes.size(); ++i) {
      const auto& n = plan.nodes[i];
      if (::mknod(n.path.c_str(), S_IFCHR | n.mode, n.rdev) != 0) fail(kMknod, static_cast<int>(i));
      if (n.owned && ::chown(n.path.c_str(), plan.uid, plan.gid) != 0) fail(kChown, static_cast<int>(i));
    }
    if (plan.proc &&
        ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid,hidepid=invisible") != 0)
      fail(kProc, 0);
    if (::umount2(kOldRoot, MNT_DETACH) != 0 || ::rmdir(kOldRoot) != 0) fail(kUmountOld, 0);
    if (::mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, nullptr) != 0) fail(kRootRo, 0);
    if (::chdir(plan.cwd.c_str()) != 0) fail(kChdir, 0);
    ::umask(077);
    // Credentials: nothing to regain, nothing to inherit.
    ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    for (int c = 0; c < 64; ++c) {
      if (::prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) fail(kBounding, c);
    }
    if (::setgroups(0, nullptr) != 0) fail(kSetgroups, 0);
    if (::setresgid(plan.gid, plan.gid, plan.gid) != 0) fail(kSetgid, 0);
    if (::setresuid(plan.uid, plan.uid, plan.uid) != 0) fail(kSetuid, 0);
    if (::setresuid(0, 0, 0) == 0) {
      errno = EPERM;
      fail(kRegain, 0);
    }
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (::syscall(SYS_capset, &hdr, data) != 0) fail(kCapset, 0);
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(kNoNewPrivs, 0);
    // Cleared by the uid change, so set only now.
    if (pr.die_with_parent) {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(kDeathSig, 0);
      if (::getppid() != parent) ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    fail(kExec, 0);
  }
  Child child(pid);
  err_w.Reset();
  int e[3];
  ssize_t n;
  do {
    n = ::read(err_r.get(), e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  if (n == sizeof(e)) {
    (void)child.Wait();
    int step = e[0] >= 0 && e[0] < kStepCount ? e[0] : kExec;
    size_t i = static_cast<size_t>(e[2]);
    std::string what;
    switch (step) {
      case kCgroup:
        what = i < pr.cgroup_procs.size() ? pr.cgroup_procs[i] : "";
        break;
      case kMkdir:
        what = i < plan.dirs.size() ? plan.dirs[i] : "";
        break;
      case kFile:
        what = i < plan.files.size() ? plan.files[i] : "";
        break;
      case kSymlink:
        what = i < plan.symlinks.size() ? plan.symlinks[i].path : "";
        break;
      case kBind:
      case kRemount:
        what = i < plan.binds.size() ? plan.binds[i].target : "";
        break;
      case kMknod:
      case kChown:
        what = i < plan.nodes.size() ? plan.nodes[i].path : "";
        break;
      case kTunAttach:
      case kTunOwner:
        what = pr.tap;
        break;
      case kExec:
        what = pr.argv[0];
        break;
      case kChdir:
        what = plan.cwd;
        break;
      default:
        break;
    }
    std::string msg =
        std::string("vmm jail: ") + kStepName[step] + (what.empty() ? "" : " " + what) + ": " + std::strerror(e[1]);
    return FailedPrecondition(msg);
  }
  return child;
}

StatusOr<std::string> ProbeJail(const std::string& qemu_binary, uid_t uid, const std::string& scratch_dir) {
  ASSIGN_OR_RETURN(std::string exe, FindExecutable(qemu_binary));
  ASSIGN_OR_RETURN(exe, Canonical(exe));
  static std::atomic<unsigned> probes{0};  // several runtimes in one process may probe at once
  const std::string base =
      scratch_dir + "/jail-probe-" + std::to_string(::getpid()) + "-" + std::to_string(probes.fetch_add(1));
  const std::string vmm = base + "/vmm";
  std::error_code ec;
  fs::remove_all(base, ec);
  fs::create_directories(vmm, ec);
  if (ec) return Internal("mkdir " + vmm + ": " + ec.message());
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(dir, e);
    }
  } cleanup{base};
  if (::chown(vmm.c_str(), uid, uid) != 0) return ErrnoError("chown " + vmm);
  JailSpec js;
  js.uid = uid;
  js.gid = uid;
  js.vmm_dir = vmm;
  js.base_dir = base;
  ASSIGN_OR_RETURN(JailPlan plan, PlanJail(js));
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  UniqueFd r(p[0]), w(p[1]);
  JailProcess pr;
  pr.argv = {exe, "--version"};
  pr.env = {"PATH=/usr/bin:/bin"};
  pr.stdout_fd = w.get();
  pr.stderr_fd = w.get();
  ASSIGN_OR_RETURN(Child c, SpawnJailed(plan, pr));
  w.Reset();
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(r.get(), buf, sizeof buf)) > 0 && out.size() < 65536) out.append(buf, static_cast<size_t>(n));
  ASSIGN_OR_RETURN(ExitStatus es, c.Wait());
  std::string first = out.substr(0, out.find('\n'));
  if (!es.success() || first.find("QEMU") == std::string::npos)
    return FailedPrecondition("vmm jail: " + exe + " --version in the jail: " + es.ToString() + ": " + first);
  return first;
}

}  // namespace airlock::qemu
