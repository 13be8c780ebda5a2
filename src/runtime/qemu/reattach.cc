// QemuVm::Reattach: a daemon restarted while detached VMMs kept running takes
// them over with full control (QMP: pause, snapshot, fork), not just a pid.
// Each launch with spec.detach writes <run_dir>/vm.json (0600) holding the
// spec fields a snapshot manifest needs, the jail's uid:gid and uid lease;
// Reattach reads it back. The file is ours (root-written, in the root-owned
// 0700 run dir, outside the VMM's jail and its writable vmm/ dir), but is
// still parsed defensively.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_util.h"
#include "common/log.h"
#include "runtime/qemu/qemu_vm.h"

namespace airlock::qemu {

namespace {
constexpr char kVmRecord[] = "vm.json";
}

Status WriteVmRecord(const QemuVm& vm) {
  const VmSpec& s = vm.spec();
  nlohmann::json j = {
      {"sandbox_id", s.sandbox_id},
      {"kernel", s.kernel},
      {"initrd", s.initrd},
      {"rootfs_template", s.rootfs_template},
      {"vcpus", s.vcpus},
      {"memory_mib", s.memory_mib},
      {"extra_cmdline", s.extra_cmdline},
      {"tap_name", s.tap_name},
      {"accel", std::string(AccelName(vm.accel()))},
      {"disk_backing", vm.disk_backing()},
      {"disk_backing_format", vm.disk_backing_format()},
      {"rootfs_stamp", vm.rootfs_stamp()},
      // Guest RAM: a clone of a shared-RAM template maps
      // ram_source (the snapshot GC keeps its dir).
      {"ram_kind", std::string(RamKindName(vm.ram().kind))},
      {"ram_mem_path", vm.ram().mem_path},
      {"ram_source", vm.ram_source()},
      {"pid", vm.pid()},
      {"vmm_dir", vm.paths().vmm_dir},
      {"jail", s.jail ? nlohmann::json{{"uid", s.jail->first}, {"gid", s.jail->second}, {"uid_lease", s.uid_lease.path}}
                      : nlohmann::json(nullptr)}};
  return WriteFileAtomic(s.run_dir + "/" + kVmRecord, j.dump(), 0600);
}

bool QemuVm::AdoptedAlive() const {
  if (adopted_pid_ <= 0) return false;
  std::ifstream f("/proc/" + std::to_string(adopted_pid_) + "/cmdline", std::ios::binary);
  if (!f) return false;
  std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return cmdline.find(spec_.run_dir) != std::string::npos;
}

StatusOr<std::unique_ptr<QemuVm>> QemuVm::Reattach(const std::string& run_dir, pid_t pid) {
  std::string path = run_dir + "/" + kVmRecord;
  std::ifstream f(path);
  if (!f) return NotFound("no " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  std::unique_ptr<QemuVm> vm(new QemuVm());
  bool legacy_paths = false;
  try {
    vm->spec_.sandbox_id = j.at("sandbox_id").get<std::string>();
    vm->spec_.kernel = j.at("kernel").get<std::string>();
    vm->spec_.initrd = j.at("initrd").get<std::string>();
    vm->spec_.rootfs_template = j.at("rootfs_template").get<std::string>();
    vm->spec_.vcpus = j.at("vcpus").get<int>();
    vm->spec_.memory_mib = j.at("memory_mib").get<int>();
    vm->spec_.extra_cmdline = j.at("extra_cmdline").get<std::string>();
    vm->spec_.tap_name = j.at("tap_name").get<std::string>();
    vm->accel_ = j.at("accel").get<std::string>() == "kvm" ? Accel::kKvm : Accel::kTcg;
    vm->disk_backing_ = j.at("disk_backing").get<std::string>();
    vm->disk_backing_format_ = j.at("disk_backing_format").get<std::string>();
    // Absent in records written before the stamp existed: taken now.
    vm->rootfs_stamp_ = j.value("rootfs_stamp", "");
    // Absent in records written before guest RAM could be a backend: microvm's own.
    auto kind = ParseRamKind(j.value("ram_kind", "machine"));
    if (!kind.ok()) return kind.status().WithContext(path);
    vm->ram_ = {*kind, j.value("ram_mem_path", "")};
    vm->ram_source_ = j.value("ram_source", "");
    if (j.contains("jail") && j["jail"].is_object()) {
      const auto& jl = j["jail"];
      vm->spec_.jail = std::make_pair(jl.at("uid").get<uid_t>(), jl.at("gid").get<gid_t>());
      vm->spec_.uid_lease = {vm->spec_.jail->first, jl.value("uid_lease", ""), vm->spec_.sandbox_id};
    }
    legacy_paths = !j.contains("vmm_dir");
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
  if (vm->rootfs_stamp_.empty()) {
    if (auto now = FileStamp(vm->spec_.rootfs_template); now.ok()) vm->rootfs_stamp_ = *now;
  }
  vm->spec_.run_dir = run_dir;
  vm->spec_.detach = true;
  vm->spec_.accel = vm->accel_;
  vm->paths_ = legacy_paths ? VmPaths::Legacy(run_dir) : VmPaths::For(run_dir);
  vm->adopted_pid_ = pid;
  if (!vm->AdoptedAlive()) {
    vm->released_ = true;  // nothing of ours to destroy
    vm->spec_.run_dir.clear();
    return FailedPrecondition("pid " + std::to_string(pid) + " is not the QEMU of " + run_dir);
  }
  auto q = QmpClient::Connect(vm->paths_.qmp_socket, std::chrono::seconds(2));
  if (!q.ok()) {
    vm->released_ = true;
    return q.status().WithContext("reattach qmp");
  }
  // The socket lives in a directory the VMM writes: make sure the QEMU we
  // talk to is the one we adopt, not a socket it swapped in (another VMM's).
  if (vm->spec_.jail && (*q)->PeerPid() != pid) {
    vm->released_ = true;
    return FailedPrecondition("reattach: " + vm->paths_.qmp_socket + " is served by pid " +
                              std::to_string((*q)->PeerPid()) + ", not the VMM's " + std::to_string(pid));
  }
  vm->qmp_ = std::move(*q);
  // Its cgroup goes with it when it is destroyed.
  vm->cgroup_ = VmCgroup::Existing(vm->spec_.sandbox_id);
  LOG_INFO("vmm reattached sandbox={} pid={}", vm->spec_.sandbox_id, pid);
  return vm;
}

}  // namespace airlock::qemu
