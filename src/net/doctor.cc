#include "net/doctor.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "common/fd.h"
#include "common/subprocess.h"

namespace airlock::net {
namespace {

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

std::vector<DoctorCheck> NetworkDoctorChecks() {
  std::vector<DoctorCheck> out;
  bool root = ::geteuid() == 0;
  {
    DoctorCheck c{"iproute2", false, "", "apt-get install iproute2"};
    auto v = RunChecked({"ip", "-V"});
    c.ok = v.ok();
    c.detail = v.ok() ? FirstLine(*v) : v.status().message();
    out.push_back(c);
  }
  // A scratch netns whose name does not start with "al-", so a concurrent
  // CleanupLeftovers leaves it alone.
  const std::string ns = "airlock-doctor-" + std::to_string(::getpid());
  bool ns_ok = false;
  {
    DoctorCheck c{"ip netns", false, "", "run as root; the kernel needs CONFIG_NET_NS"};
    if (!root) {
      c.detail = "not root (euid " + std::to_string(::geteuid()) + ")";
    } else {
      auto r = RunChecked({"ip", "netns", "add", ns});
      ns_ok = c.ok = r.ok();
      c.detail = r.ok() ? "created and removed a network namespace" : r.status().message();
    }
    out.push_back(c);
  }
  {
    DoctorCheck c{"nftables", false, "", "apt-get install nftables; kernel needs nf_tables with inet nat"};
    auto v = RunChecked({"nft", "--version"});
    if (!v.ok()) {
      c.detail = v.status().message();
    } else if (!ns_ok) {
      c.detail = FirstLine(*v) + " (rules not tested: no scratch netns)";
    } else {
      std::string p = "/run/netns/" + ns;
      UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
      auto r = RunChecked({"nft", "add", "table", "inet", "doctor", "{", "chain", "p", "{", "type", "nat", "hook",
                           "prerouting", "priority", "dstnat", ";", "}", ";", "}"},
                          fd.get());
      c.ok = r.ok();
      c.detail = FirstLine(*v) + (r.ok() ? ", inet nat table loads" : ": " + r.status().message());
      // The egress ruleset's L3 audit: an inet ingress hook and NFLOG (log group).
      if (r.ok()) {
        auto a = RunChecked(
            {"nft",  "add",     "table",  "inet", "doctor_audit", "{",      "chain", "i", "{", "type", "filter",
             "hook", "ingress", "device", "lo",   "priority",     "filter", ";",     "}", ";", "}"},
            fd.get());
        if (a.ok())
          a = RunChecked({"nft", "add", "rule", "inet", "doctor_audit", "i", "limit", "rate", "1/second", "log",
                          "group", "7", "prefix", "\"doctor\""},
                         fd.get());
        c.ok = a.ok();
        c.detail += a.ok() ? ", ingress hook + NFLOG (L3 audit) load"
                           : "; L3 audit rules (inet ingress hook, log group) fail: " + a.status().message();
      }
    }
    out.push_back(c);
  }
  if (ns_ok) (void)RunChecked({"ip", "netns", "del", ns});
  {
    DoctorCheck c{"/dev/net/tun", false, "", "modprobe tun; the device must be 10:200"};
    UniqueFd fd(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
    c.ok = fd.valid();
    c.detail = c.ok ? "opens read-write" : std::string("open /dev/net/tun: ") + strerror(errno);
    out.push_back(c);
  }
  {
    DoctorCheck c{"sysctl", false, "", "apt-get install procps"};
    auto r = FindExecutable("sysctl");
    c.ok = r.ok();
    c.detail = r.ok() ? *r : r.status().message();
    out.push_back(c);
  }
  return out;
}

}  // namespace airlock::net
