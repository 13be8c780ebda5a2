// How airlock runs Debian's runsc (docs/runtime-gvisor.md "Running runsc").
//
// Every call runs in the sandbox's guest netns (GuestLink::kVethNetns): runsc
// reaches a sandbox over an abstract unix socket, and abstract sockets belong
// to a network namespace. Calls that start a sandbox (run, restore, and
// restore) also go through a small wrapper: eth0's address and route put
// back (see RunscStart), then a private mount namespace in which
//   - /proc/sys holds every directory but net/: runsc 20221219 decides it is
//     in the host's root netns when /proc/sys/net/core/rmem_default exists,
//     which on kernels >= 5.x (that sysctl became per-netns) is every netns,
//     and then refuses --network=sandbox;
//   - the bundle's rootfs is a read-only overlay of the template's root
//     tree under a small tmpfs holding the bind mounts' mount points: the
//     gofer serves it, writes land in the Sentry's in-memory overlay
//     (--overlay2=root:memory), and even a gofer told to write cannot. The
//     mounts go away with the sandbox's last process.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"

namespace airlock::gvisor {

struct RunscConfig {
  std::string binary = "runsc";
  std::string root;      // runsc --root: its container state files
  std::string platform;  // "ptrace" | "kvm" (platform_probe.h)
};

// runsc's global flags for every call (runsc keeps none of them in its state).
std::vector<std::string> RunscGlobalFlags(const RunscConfig& config);

struct RunscStart {
  std::vector<std::string> args;  // the subcommand and its flags: {"run", "--bundle", b, "--detach", id}
  std::string guest_netns;        // "/run/netns/alg-<id>"
  std::string tree;               // the template's root tree (read-only source)
  std::string rootfs_mount;       // the bundle's root.path (an empty directory)
  std::string scratch;            // an empty directory for the /proc/sys view
  int output_fd = -1;             // runsc's and the guest's stdout/stderr (the console log)
  // eth0's address ("169.254.0.21/30") and gateway, put back first: runsc
  // takes the address off eth0 when it starts a sandbox, and a restore into
  // the same netns (a rollback) would find none to copy. "": left alone.
  std::string eth0_address;
  std::string eth0_gateway;
  // Guest paths of the bundle's bind mounts (the template tree's, volumes;
  // absolute, of [A-Za-z0-9._/-]; at least one). runsc's gofer makes each
  // mount point in the root it serves, so the root is an overlay of the tree
  // under a tmpfs (mount_upper, an empty directory) holding only those
  // directories, still read-only to the gofer; the tree is never written.
  std::vector<std::string> mount_points;
  std::string mount_upper;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// Runs a sandbox-starting runsc call through the wrapper; OK when runsc
// exited 0. Its errors are in output_fd (the caller quotes the console).
Status RunscStartCall(const RunscConfig& config, const RunscStart& call);

// Runs any other runsc call in `guest_netns` ("" = the caller's), capturing
// its output; the error carries the command and stderr.
StatusOr<RunResult> RunscCall(const RunscConfig& config, const std::vector<std::string>& args,
                              const std::string& guest_netns,
                              std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The pids runsc recorded for container `id` (its state file under
// config.root): the sandbox (Sentry) and the gofer. NotFound when absent.
struct RunscPids {
  pid_t sandbox = -1;
  pid_t gofer = -1;
};
StatusOr<RunscPids> ReadRunscPids(const RunscConfig& config, const std::string& id);

}  // namespace airlock::gvisor
