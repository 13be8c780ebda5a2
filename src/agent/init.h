// PID 1 duties for the guest (run only when the agent is PID 1 or --init):
// a checklist of small named steps. Each step logs its own failure to the
// console and the agent carries on serving what it can (PID 1 must never
// exit: the kernel would panic).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace airlock::agent {

// Settings read from the kernel command line (airlock.* keys).
struct BootConfig {
  std::string hostname;             // airlock.hostname=
  std::optional<std::string> ip;    // airlock.ip=169.254.0.21/30 (address/prefix)
  std::optional<std::string> gateway;  // airlock.gw=169.254.0.22
  bool default_route = false;       // airlock.route=default
  std::optional<std::string> dns;   // airlock.dns=169.254.0.22 → /etc/resolv.conf
};
BootConfig ParseKernelCmdline(std::string_view cmdline);

Status MountFilesystems();
Status SetHostname(const std::string& name);
Status ConfigureNetwork(const BootConfig& cfg);
// Writes /etc/resolv.conf ("nameserver <dns>") when airlock.dns is given.
Status WriteResolvConf(const BootConfig& cfg, const std::string& path = "/etc/resolv.conf");
// Ignores SIGTERM/SIGINT (PID 1) and SIGPIPE; makes fds 0-2 valid.
void SetupProcessBasics(bool pid1);
// Runs every step above; errors are logged, never fatal.
// `boot_config`: the airlock.* keys to use instead of /proc/cmdline (a
// runtime without a guest kernel, e.g. gVisor, passes them as
// --boot-config; nullopt: read /proc/cmdline).
void RunPid1Setup(const std::optional<std::string>& boot_config = std::nullopt);
// Writes one line to /dev/console (falls back to stderr).
void ConsoleLine(const std::string& line);

}  // namespace airlock::agent
