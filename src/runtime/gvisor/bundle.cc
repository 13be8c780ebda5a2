#include "runtime/gvisor/bundle.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace airlock::gvisor {
namespace {

// Every capability runsc 20221219 knows (Linux up to CAP_AUDIT_READ; it
// refuses a spec naming CAP_PERFMON, CAP_BPF or CAP_CHECKPOINT_RESTORE).
const char* const kCaps[] = {
    "CAP_CHOWN",           "CAP_DAC_OVERRIDE",    "CAP_DAC_READ_SEARCH",    "CAP_FOWNER",       "CAP_FSETID",
    "CAP_KILL",            "CAP_SETGID",          "CAP_SETUID",             "CAP_SETPCAP",      "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",  "CAP_NET_ADMIN",          "CAP_NET_RAW",      "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",       "CAP_SYS_MODULE",      "CAP_SYS_RAWIO",          "CAP_SYS_CHROOT",   "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",       "CAP_SYS_ADMIN",       "CAP_SYS_BOOT",           "CAP_SYS_NICE",     "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",        "CAP_SYS_TTY_CONFIG",  "CAP_MKNOD",              "CAP_LEASE",        "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",   "CAP_SETFCAP",         "CAP_MAC_OVERRIDE",       "CAP_MAC_ADMIN",    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",      "CAP_BLOCK_SUSPEND",   "CAP_AUDIT_READ"};

}  // namespace

std::string BundleConfigJson(const BundleSpec& s) {
  using nlohmann::json;
  json caps = json::array();
  for (const char* c : kCaps) caps.push_back(c);
  // The agent reads its boot keys from here instead of a kernel command line
  // (agent --boot-config): same hostname and resolver as a microVM; the
  // address and route are eth0's, which runsc copies from the guest netns.
  std::string boot = "airlock.hostname=" + s.sandbox_id + " airlock.dns=169.254.0.22";
  const int64_t mib = 1024 * 1024;
  json config = {
      {"ociVersion", "1.0.0"},
      {"process",
       {{"terminal", false},
        {"user", {{"uid", 0}, {"gid", 0}}},
        {"args", {"/sbin/airlock-agent", "--boot-config", boot}},
        {"env", {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
        {"cwd", "/"},
        {"capabilities",
         {{"bounding", caps}, {"effective", caps}, {"inheritable", caps}, {"permitted", caps}, {"ambient", caps}}},
        {"rlimits", {{{"type", "RLIMIT_NOFILE"}, {"hard", 20000}, {"soft", 20000}}}},
        {"noNewPrivileges", false}}},
      {"root", {{"path", s.rootfs}, {"readonly", false}}},
      {"hostname", s.sandbox_id},
      {"mounts",
       {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
        {{"destination", "/dev"}, {"type", "tmpfs"}, {"source", "tmpfs"}, {"options", {"nosuid", "mode=755"}}},
        {{"destination", "/sys"}, {"type", "sysfs"}, {"source", "sysfs"}, {"options", {"nosuid", "noexec", "nodev", "ro"}}}}},
      {"linux",
       {{"namespaces",
         {{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}},
          {{"type", "network"}, {"path", s.guest_netns}}}},
        {"cgroupsPath", s.cgroup},
        {"resources",
         {{"memory", {{"limit", (int64_t{s.memory_mib} + kSentryOverheadMib) * mib}}},
          {"cpu", {{"quota", int64_t{s.vcpus} * 100000}, {"period", 100000}}},
          {"pids", {{"limit", kPidsLimit}}}}}}},
  };
  // The template's tree, as the root's lower layer shows it: read-only.
  if (!s.template_tree.empty()) {
    config["mounts"].push_back({{"destination", kTemplateTreeMount},
                                {"type", "bind"},
                                {"source", s.template_tree},
                                {"options", {"rbind", "ro", "nosuid", "nodev", "noexec"}}});
  }
  // Volumes: the gofer serves each host directory; no dev, suid or exec
  // from it, as on the host.
  for (const auto& [source, destination] : s.binds) {
    config["mounts"].push_back({{"destination", destination},
                                {"type", "bind"},
                                {"source", source},
                                {"options", {"rbind", "rw", "nosuid", "nodev"}}});
  }
  return config.dump(1);
}

Status WriteBundle(const std::string& dir, const BundleSpec& spec) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal("create " + dir + ": " + ec.message());
  return WriteFileAtomic(dir + "/config.json", BundleConfigJson(spec), 0644);
}

}  // namespace airlock::gvisor
