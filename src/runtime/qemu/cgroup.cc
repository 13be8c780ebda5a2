#include "runtime/qemu/cgroup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

namespace airlock::qemu {
namespace {

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

Status WriteValue(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  if (!f) return ErrnoError("open " + path);
  f << value;
  f.flush();
  if (!f) return ErrnoError("write " + path);
  return OkStatus();
}

Status MkdirIfMissing(const std::string& p) {
  if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + p);
  return OkStatus();
}

}  // namespace

CgroupVersion DetectCgroupVersion(const std::string& root) {
  if (Exists(root + "/cgroup.controllers")) return CgroupVersion::kV2;
  if (Exists(root + "/memory/tasks") || Exists(root + "/pids/tasks")) return CgroupVersion::kV1;
  return CgroupVersion::kNone;
}

StatusOr<VmCgroup> VmCgroup::Create(const std::string& id, const CgroupLimits& limits, const std::string& root) {
  const uint64_t memory_bytes = limits.memory_bytes;
  const int pids_max = limits.pids_max;
  const std::string quota = std::to_string(uint64_t(limits.cpus) * kCpuPeriodUs);
  VmCgroup cg;
  cg.version_ = DetectCgroupVersion(root);
  Status st;
  if (cg.version_ == CgroupVersion::kV2) {
    std::string parent = root + "/airlock";
    RETURN_IF_ERROR(MkdirIfMissing(parent));
    // Enable the controllers for our children (fails if not delegated to us).
    const std::string ctls = limits.cpus > 0 ? "+memory +pids +cpu" : "+memory +pids";
    (void)WriteValue(root + "/cgroup.subtree_control", ctls);
    RETURN_IF_ERROR(WriteValue(parent + "/cgroup.subtree_control", ctls));
    std::string dir = parent + "/" + id;
    RETURN_IF_ERROR(MkdirIfMissing(dir));
    cg.dirs_.push_back(dir);
    st = WriteValue(dir + "/memory.max", std::to_string(memory_bytes));
    if (st.ok()) st = WriteValue(dir + "/pids.max", std::to_string(pids_max));
    if (st.ok() && limits.cpus > 0) st = WriteValue(dir + "/cpu.max", quota + " " + std::to_string(kCpuPeriodUs));
    cg.procs_.push_back(dir + "/cgroup.procs");
  } else if (cg.version_ == CgroupVersion::kV1) {
    std::vector<std::string> ctls = {"memory", "pids"};
    if (limits.cpus > 0) ctls.push_back("cpu");
    for (const std::string& ctl : ctls) {
      std::string base = root + "/" + ctl;
      if (!Exists(base + "/tasks")) {
        (void)cg.Remove();
        return FailedPrecondition("cgroup v1 controller '" + ctl + "' not mounted under " + root);
      }
      std::string parent = base + "/airlock";
      st = MkdirIfMissing(parent);
      if (!st.ok()) break;
      std::string dir = parent + "/" + id;
      st = MkdirIfMissing(dir);
      if (!st.ok()) break;
      cg.dirs_.push_back(dir);
      cg.procs_.push_back(dir + "/cgroup.procs");
      if (ctl == "memory") {
        st = WriteValue(dir + "/memory.limit_in_bytes", std::to_string(memory_bytes));
      } else if (ctl == "pids") {
        st = WriteValue(dir + "/pids.max", std::to_string(pids_max));
      } else {
        st = WriteValue(dir + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs));
        if (st.ok()) st = WriteValue(dir + "/cpu.cfs_quota_us", quota);
      }
      if (!st.ok()) break;
    }
  } else {
    return FailedPrecondition("no cgroup hierarchy found under " + root);
  }
  if (!st.ok()) {
    (void)cg.Remove();
    return st;
  }
  // After the parent's controllers are enabled (v2 has no cpu.weight before).
  if (limits.cpus > 0) SetGuestGroupCpuWeight("airlock", root);
  return cg;
}

VmCgroup VmCgroup::Existing(const std::string& id, const std::string& root) {
  VmCgroup cg;
  if (id.empty() || id.find('/') != std::string::npos || id[0] == '.') return cg;
  cg.version_ = DetectCgroupVersion(root);
  std::vector<std::string> candidates;
  if (cg.version_ == CgroupVersion::kV2) candidates = {root + "/airlock/" + id};
  if (cg.version_ == CgroupVersion::kV1) candidates = {root + "/memory/airlock/" + id, root + "/pids/airlock/" + id};
  for (const auto& dir : candidates) {
    if (!Exists(dir)) continue;
    cg.dirs_.push_back(dir);
    cg.procs_.push_back(dir + "/cgroup.procs");
  }
  return cg;
}

Status VmCgroup::Remove() {
  Status first;
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    // The last task may take a moment to leave after it has been reaped.
    int tries = 0;
    while (::rmdir(it->c_str()) != 0) {
      if (errno == ENOENT) break;
      if (errno == EBUSY && ++tries < 50) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (first.ok()) first = ErrnoError("rmdir " + *it);
      break;
    }
  }
  dirs_.clear();
  procs_.clear();
  return first;
}

}  // namespace airlock::qemu
