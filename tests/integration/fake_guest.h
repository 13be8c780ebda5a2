// A stand-in guest for egress tests and benches: a netns wired where the
// VMM's tap0 would be, with what a microVM gets (169.254.0.21/30, default
// route via 169.254.0.22, resolv.conf → 169.254.0.22 through
// /etc/netns/<name>/resolv.conf, which `ip netns exec` mounts).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "common/subprocess.h"
#include "net/sandbox_network.h"

namespace airlock::test_util {

inline Status OkOf(const StatusOr<std::string>& r) { return r.ok() ? OkStatus() : r.status(); }

// A guest: a netns wired where the VMM's tap0 would be.
class Guest {
 public:
  Status Start(net::SandboxNetwork& n, const std::string& tag) {
    ns_ = "alt-g" + std::to_string(::getpid()) + tag;
    RETURN_IF_ERROR(OkOf(RunChecked({"ip", "netns", "add", ns_})));
    const std::string sns = n.netns_name();
    RETURN_IF_ERROR(OkOf(RunChecked({"ip", "-n", sns, "link", "del", "tap0"})));
    RETURN_IF_ERROR(OkOf(
        RunChecked({"ip", "-n", sns, "link", "add", "tap0", "type", "veth", "peer", "name", "eth0", "netns", ns_})));
    RETURN_IF_ERROR(OkOf(RunChecked({"ip", "-n", sns, "addr", "add", "169.254.0.22/30", "dev", "tap0"})));
    RETURN_IF_ERROR(OkOf(RunChecked({"ip", "-n", sns, "link", "set", "tap0", "up"})));
    RETURN_IF_ERROR(OkOf(RunChecked({"ip", "-n", ns_, "addr", "add", "169.254.0.21/30", "dev", "eth0"})));
    RETURN_IF_ERROR(OkOf(RunChecked({"ip", "-n", ns_, "link", "set", "eth0", "up"})));
    RETURN_IF_ERROR(OkOf(RunChecked({"ip", "-n", ns_, "link", "set", "lo", "up"})));
    RETURN_IF_ERROR(OkOf(RunChecked({"ip", "-n", ns_, "route", "add", "default", "via", "169.254.0.22"})));
    std::filesystem::create_directories("/etc/netns/" + ns_);
    std::ofstream("/etc/netns/" + ns_ + "/resolv.conf") << "nameserver 169.254.0.22\noptions timeout:2 attempts:1\n";
    fd_.Reset(::open(("/run/netns/" + ns_).c_str(), O_RDONLY | O_CLOEXEC));
    return fd_ ? OkStatus() : ErrnoError("open guest netns");
  }
  ~Guest() {
    fd_.Reset();
    if (!ns_.empty()) {
      (void)Run({"ip", "netns", "del", ns_});
      std::error_code ec;
      std::filesystem::remove_all("/etc/netns/" + ns_, ec);
    }
  }
  // Runs a command in the guest: {exit code, stdout}.
  std::pair<int, std::string> Exec(std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_});
    auto r = Run(argv);
    if (!r.ok()) return {-1, r.status().ToString()};
    return {r->status.ShellCode(), r->out + r->err};
  }
  std::pair<int, std::string> Curl(std::vector<std::string> args) {
    std::vector<std::string> argv = {"curl", "-sS", "--max-time", "5", "--noproxy", "*"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Exec(argv);
  }
  UniqueFd Socket(int family, int type) {
    int s = -1;
    std::thread([&] {
      if (::setns(fd_.get(), CLONE_NEWNET) == 0) s = ::socket(family, type | SOCK_CLOEXEC, 0);
    }).join();
    return UniqueFd(s);
  }
  UniqueFd RawIcmpSocket() {
    int s = -1;
    std::thread([&] {
      if (::setns(fd_.get(), CLONE_NEWNET) == 0) s = ::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
    }).join();
    return UniqueFd(s);
  }
  const std::string& ns() const { return ns_; }

 private:
  std::string ns_;
  UniqueFd fd_;
};

}  // namespace airlock::test_util
