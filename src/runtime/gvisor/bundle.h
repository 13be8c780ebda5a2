// The OCI runtime bundle (config.json, runtime-spec 1.0) of one gVisor
// sandbox (docs/runtime-gvisor.md "Bundle"): the agent as the container's
// init, as root with every capability (capabilities of the Sentry's own
// kernel, as root in a microVM has them), the guest netns, and the cgroup
// limits for the Sentry and gofer on the host.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace airlock::gvisor {

struct BundleSpec {
  std::string sandbox_id;   // the guest's hostname
  std::string rootfs;       // root.path (the read-only bind of the tree)
  std::string guest_netns;  // linux.namespaces network path
  std::string cgroup;       // linux.cgroupsPath, e.g. "/airlock-gvisor/<container>"
  int vcpus = 1;
  int memory_mib = 512;
  // Read-write bind mounts (volumes): {host source, guest destination}.
  std::vector<std::pair<std::string, std::string>> binds;
  // The template's tree, bound read-only at kTemplateTreeMount.
  std::string template_tree;
};

// Where every guest sees its template's tree, read-only: what its agent
// compares the root with when it exports the root's changes (a pause
// without memory; agent/root_changes.h kRootBaseMount, the same path).
inline constexpr char kTemplateTreeMount[] = "/.airlock-base";

// What the host's memory cgroup allows beyond the guest's memory: the
// Sentry's and gofer's own Go heaps and stacks (measured ~60 MiB idle with
// runsc 20221219 and ptrace; bench/runtimes.mjs prints host memory per
// sandbox).
inline constexpr int kSentryOverheadMib = 128;
// Host tasks of one sandbox (systrap and ptrace: a stub process per guest
// address space, threads for guest threads) before fork() fails in the guest.
inline constexpr int kPidsLimit = 4096;

// config.json's text.
std::string BundleConfigJson(const BundleSpec& spec);

// Writes <dir>/config.json (dir is created).
Status WriteBundle(const std::string& dir, const BundleSpec& spec);

}  // namespace airlock::gvisor
