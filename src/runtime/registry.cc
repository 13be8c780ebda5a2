#include "runtime/registry.h"

#include <sys/stat.h>

#include "runtime/gvisor/doctor.h"
#include "runtime/gvisor/gvisor_runtime.h"
#include "runtime/gvisor/snapshot.h"
#include "runtime/qemu/doctor.h"
#include "runtime/qemu/qemu_runtime.h"

namespace airlock {

std::vector<std::string> AvailableRuntimes() { return {kDefaultRuntime, gvisor::kRuntimeName}; }

std::string AvailableRuntimesText() {
  std::string out;
  for (const auto& n : AvailableRuntimes()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Status CheckRuntimeName(std::string_view name) {
  for (const auto& n : AvailableRuntimes()) {
    if (n == name) return OkStatus();
  }
  return InvalidArgument("unknown runtime '" + std::string(name) + "' (available: " + AvailableRuntimesText() + ")");
}

StatusOr<std::unique_ptr<Runtime>> OpenRuntime(std::string_view name, const RuntimeOptions& options) {
  RETURN_IF_ERROR(CheckRuntimeName(name));
  if (name == gvisor::kRuntimeName) return gvisor::NewGvisorRuntime(options);
  return qemu::NewQemuRuntime(options.state_dir, options.jail);
}

std::string RuntimeOfSnapshot(const std::string& dir) {
  // gVisor's commit record names it (runtime/gvisor/snapshot.h); every
  // other snapshot directory is qemu's (its format predates the others).
  struct stat st;
  if (::stat((dir + "/" + gvisor::kSnapshotRecord).c_str(), &st) == 0) return gvisor::kRuntimeName;
  return kDefaultRuntime;
}

std::vector<DoctorCheck> RuntimeDoctorChecks(std::string_view name, const std::string& state_dir) {
  if (Status st = CheckRuntimeName(name); !st.ok()) {
    return {DoctorCheck{"runtime", false, st.message(), "pick one of: " + AvailableRuntimesText()}};
  }
  if (name == gvisor::kRuntimeName) return gvisor::GvisorDoctorChecks(state_dir);
  return qemu::QemuDoctorChecks(state_dir);
}

}  // namespace airlock
