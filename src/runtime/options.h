// What every runtime is opened with (runtime/registry.h OpenRuntime): plain
// values, no backend types, so the core and the CLI configure a runtime
// without knowing which one it is.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace airlock {

// Default VMM uid range: far above login users (1000..60000), systemd's
// dynamic users (61184..65519) and its container ranges
// (524288..1879048191), below 2^31.
inline constexpr uid_t kDefaultVmmUidBase = 2100000000;
inline constexpr uint32_t kDefaultVmmUidCount = 65536;

// The VMM jail (docs/runtime-qemu.md "Jail"): each VMM as its own uid, no
// capabilities, its own mount namespace.
struct VmmJailOptions {
  // false: the VMM runs as root, unjailed (debugging only; logged loudly).
  bool enabled = true;
  uid_t uid_base = kDefaultVmmUidBase;  // VMM uids: [uid_base, uid_base + uid_count)
  uint32_t uid_count = kDefaultVmmUidCount;
  std::string lease_root = "/run/airlock";  // host-wide: <lease_root>/vmm-uids
};

struct RuntimeOptions {
  // The daemon's (or run's) state directory: probe caches, <state_dir>/run.
  std::string state_dir = "/var/lib/airlock";
  VmmJailOptions jail;
};

}  // namespace airlock
