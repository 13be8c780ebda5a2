#include "agent/init.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "agent/log.h"
#include "common/fd.h"
#include "common/file_util.h"

namespace airlock::agent {
namespace {

Status MountOne(const char* source, const char* target, const char* type, unsigned long flags, const char* data) {
  mkdir(target, 0755);
  if (mount(source, target, type, flags, data) != 0 && errno != EBUSY) {
    return ErrnoError(std::string("mount ") + type + " on " + target);
  }
  return OkStatus();
}

Status SetIfAddr(int sock, const char* ifname, unsigned long req, in_addr addr) {
  ifreq ifr{};
  strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
  auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
  sin->sin_family = AF_INET;
  sin->sin_addr = addr;
  if (ioctl(sock, req, &ifr) != 0) return ErrnoError(std::string("ioctl on ") + ifname);
  return OkStatus();
}

Status InterfaceUp(int sock, const char* ifname) {
  ifreq ifr{};
  strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
  if (ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) return ErrnoError(std::string("SIOCGIFFLAGS ") + ifname);
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(sock, SIOCSIFFLAGS, &ifr) != 0) return ErrnoError(std::string("SIOCSIFFLAGS ") + ifname);
  return OkStatus();
}

}  // namespace

BootConfig ParseKernelCmdline(std::string_view cmdline) {
  BootConfig c;
  size_t i = 0;
  while (i < cmdline.size()) {
    while (i < cmdline.size() && (cmdline[i] == ' ' || cmdline[i] == '\n' || cmdline[i] == '\t')) ++i;
    size_t j = i;
    while (j < cmdline.size() && cmdline[j] != ' ' && cmdline[j] != '\n' && cmdline[j] != '\t') ++j;
    std::string_view tok = cmdline.substr(i, j - i);
    i = j;
    size_t eq = tok.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view k = tok.substr(0, eq), v = tok.substr(eq + 1);
    if (k == "airlock.hostname") c.hostname = v;
    else if (k == "airlock.ip") c.ip = std::string(v);
    else if (k == "airlock.gw") c.gateway = std::string(v);
    else if (k == "airlock.route") c.default_route = (v == "default");
    else if (k == "airlock.dns") c.dns = std::string(v);
  }
  return c;
}

Status MountFilesystems() {
  Status first;
  auto step = [&](Status st) {
    if (!st.ok()) {
      LogError("%s", st.ToString().c_str());
      if (first.ok()) first = st;
    }
  };
  step(MountOne("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  step(MountOne("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  step(MountOne("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  step(MountOne("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755"));
  step(MountOne("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666"));
  step(MountOne("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
  step(MountOne("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
  step(MountOne("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"));
  // The usual /dev links that devtmpfs does not create.
  symlink("/proc/self/fd", "/dev/fd");
  symlink("/proc/self/fd/0", "/dev/stdin");
  symlink("/proc/self/fd/1", "/dev/stdout");
  symlink("/proc/self/fd/2", "/dev/stderr");
  struct stat st;
  if (stat("/dev/ptmx", &st) != 0) symlink("pts/ptmx", "/dev/ptmx");
  // No console device (gVisor: runsc gives PID 1 its stdio instead): the
  // console is PID 1's stderr, which runsc writes to the host's console
  // log, so a service's console line (the interpreter's "ready") reaches
  // the host as in a microVM.
  if (lstat("/dev/console", &st) != 0 && errno == ENOENT) symlink("/proc/1/fd/2", "/dev/console");
  return first;
}

Status SetHostname(const std::string& name) {
  if (name.empty()) return OkStatus();
  if (sethostname(name.data(), name.size()) != 0) return ErrnoError("sethostname " + name);
  return OkStatus();
}

Status ConfigureNetwork(const BootConfig& cfg) {
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return ErrnoError("socket");
  RETURN_IF_ERROR(InterfaceUp(sock.get(), "lo"));
  if (!cfg.ip) return OkStatus();
  std::string ip = *cfg.ip;
  int prefix = 32;
  if (size_t slash = ip.find('/'); slash != std::string::npos) {
    prefix = std::atoi(ip.c_str() + slash + 1);
    ip.resize(slash);
  }
  if (prefix < 0 || prefix > 32) return InvalidArgument("airlock.ip: bad prefix length");
  in_addr addr{}, mask{};
  if (inet_pton(AF_INET, ip.c_str(), &addr) != 1) return InvalidArgument("airlock.ip: bad address '" + ip + "'");
  mask.s_addr = htonl(prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix));
  RETURN_IF_ERROR(SetIfAddr(sock.get(), "eth0", SIOCSIFADDR, addr));
  RETURN_IF_ERROR(SetIfAddr(sock.get(), "eth0", SIOCSIFNETMASK, mask));
  RETURN_IF_ERROR(InterfaceUp(sock.get(), "eth0"));
  if (cfg.default_route && cfg.gateway) {
    in_addr gw{};
    if (inet_pton(AF_INET, cfg.gateway->c_str(), &gw) != 1) return InvalidArgument("airlock.gw: bad address");
    rtentry rt{};
    auto* dst = reinterpret_cast<sockaddr_in*>(&rt.rt_dst);
    auto* gwa = reinterpret_cast<sockaddr_in*>(&rt.rt_gateway);
    auto* msk = reinterpret_cast<sockaddr_in*>(&rt.rt_genmask);
    dst->sin_family = gwa->sin_family = msk->sin_family = AF_INET;
    gwa->sin_addr = gw;
    rt.rt_flags = RTF_UP | RTF_GATEWAY;
    char dev[] = "eth0";
    rt.rt_dev = dev;
    if (ioctl(sock.get(), SIOCADDRT, &rt) != 0 && errno != EEXIST) return ErrnoError("add default route");
  }
  return OkStatus();
}

Status WriteResolvConf(const BootConfig& cfg, const std::string& path) {
  if (!cfg.dns) return OkStatus();
  in_addr a{};
  if (inet_pton(AF_INET, cfg.dns->c_str(), &a) != 1) return InvalidArgument("airlock.dns: bad address");
  std::string text = "nameserver " + *cfg.dns + "\noptions timeout:2 attempts:2\n";
  return WriteFileAtomic(path, text, 0644);
}

void SetupProcessBasics(bool pid1) {
  // fds 0-2 must be valid so that pipes never land on them.
  while (true) {
    int fd = open("/dev/null", O_RDWR);
    if (fd < 0) fd = open("/", O_RDONLY);
    if (fd < 0) break;
    if (fd > 2) {
      close(fd);
      break;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  if (pid1) {
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
  }
}

namespace {
// The link protections a systemd-booted Debian has (sysctl.d/50-default.conf):
// no following a user's symlink in a sticky world-writable directory (/tmp)
// unless it is the follower's own, no hard links to files one cannot write,
// no O_CREAT open of someone else's file or FIFO there. A root request of the
// files API is then not redirected by a link a user planted.
void ProtectLinks() {
  const std::pair<const char*, const char*> kSettings[] = {
      {"/proc/sys/fs/protected_symlinks", "1"},
      {"/proc/sys/fs/protected_hardlinks", "1"},
      {"/proc/sys/fs/protected_regular", "1"},
      {"/proc/sys/fs/protected_fifos", "1"},
  };
  for (const auto& [path, value] : kSettings) {
    UniqueFd fd(open(path, O_WRONLY | O_CLOEXEC));
    if (!fd || write(fd.get(), value, 1) != 1) {
      LogError("%s", ErrnoError(std::string("write ") + path).ToString().c_str());
    }
  }
}
}  // namespace

void RunPid1Setup(const std::optional<std::string>& boot_config) {
  (void)MountFilesystems();
  ProtectLinks();
  std::string cmdline;
  if (boot_config) {
    cmdline = *boot_config;
  } else {
    std::ifstream f("/proc/cmdline");
    std::stringstream ss;
    ss << f.rdbuf();
    cmdline = ss.str();
  }
  BootConfig cfg = ParseKernelCmdline(cmdline);
  if (Status st = SetHostname(cfg.hostname); !st.ok()) LogError("%s", st.ToString().c_str());
  if (Status st = ConfigureNetwork(cfg); !st.ok()) LogError("network: %s", st.ToString().c_str());
  if (Status st = WriteResolvConf(cfg); !st.ok()) LogError("resolv.conf: %s", st.ToString().c_str());
  setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
}

void ConsoleLine(const std::string& line) {
  std::string l = line + "\n";
  // O_APPEND: under gVisor /dev/console links to PID 1's stderr, the host's
  // console log (MountFilesystems), and a fresh open of it without O_APPEND
  // would write at offset 0, over what is there.
  int fd = open("/dev/console", O_WRONLY | O_NOCTTY | O_CLOEXEC | O_APPEND);
  if (fd >= 0) {
    (void)!write(fd, l.data(), l.size());
    close(fd);
  } else {
    (void)!write(2, l.data(), l.size());
  }
}

}  // namespace airlock::agent
