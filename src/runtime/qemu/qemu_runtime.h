// The QEMU backend of the core Runtime interface (runtime/runtime.h): turns a
// VmStartRequest into a QemuVm.
#pragma once

#include <memory>
#include <string>

#include "runtime/runtime.h"
#include "runtime/qemu/accel_probe.h"
#include "runtime/qemu/uid_pool.h"

namespace airlock::qemu {

// The VMM jail (jail.h, docs/runtime-qemu.md "Jail").
struct VmmJailOptions {
  // false: QEMU runs as root, unjailed (debugging only; logged loudly).
  bool enabled = true;
  uid_t uid_base = kDefaultVmmUidBase;  // VMM uids: [uid_base, uid_base + uid_count)
  uint32_t uid_count = kDefaultVmmUidCount;
  std::string lease_root = "/run/airlock";  // host-wide: <lease_root>/vmm-uids
};

// Probes the accelerator once (cached under state_dir), checks that QEMU is
// installed and, with the jail on, that a jailed QEMU runs here (ProbeJail);
// FailedPrecondition naming the fix otherwise: never a silent fallback to root.
StatusOr<std::unique_ptr<Runtime>> NewQemuRuntime(const std::string& state_dir, const VmmJailOptions& jail = {});

// Runs QEMU --version jailed as a uid leased from `jail`'s range (scratch
// dir under <state_dir>/run): OK, or the jail step that failed.
Status CheckVmmJail(const std::string& state_dir, const VmmJailOptions& jail = {});

}  // namespace airlock::qemu
