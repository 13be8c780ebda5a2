#include "agent/cgroups.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace airlock::agent {
namespace {

constexpr int64_t kAgentTasks = 256;
constexpr int64_t kMiB = 1 << 20;

Status WriteFile(const std::string& path, const std::string& value) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  if (write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return ErrnoError("write '" + value + "' to " + path);
  }
  return OkStatus();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool HasWord(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

// Enables pids (required) and, where `dir` offers them, cpu and memory in
// `dir`'s subtree; one write each, so a refused optional one costs only itself.
Status EnableControllers(const std::string& dir, bool memory) {
  std::string offered = ReadFile(dir + "/cgroup.controllers");
  if (!HasWord(offered, "pids")) return Unavailable("cgroup " + dir + " has no pids controller");
  RETURN_IF_ERROR(WriteFile(dir + "/cgroup.subtree_control", "+pids"));
  if (HasWord(offered, "cpu")) (void)WriteFile(dir + "/cgroup.subtree_control", "+cpu");
  if (memory && HasWord(offered, "memory")) (void)WriteFile(dir + "/cgroup.subtree_control", "+memory");
  return OkStatus();
}

Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + path);
  return OkStatus();
}

}  // namespace

CgroupLimits DefaultCgroupLimits(int64_t threads_max, int64_t mem_total) {
  CgroupLimits l;
  l.total_pids = std::max<int64_t>(128, threads_max - kAgentTasks);
  int64_t per = std::max<int64_t>(128, mem_total / kMiB);
  l.pids_per_command = std::max<int64_t>(64, std::min(per, l.total_pids / 2));
  if (mem_total > 0) l.memory_max = mem_total - std::max<int64_t>(32 * kMiB, mem_total / 16);
  if (l.memory_max < 64 * kMiB) l.memory_max = 0;  // too small to split: leave memory alone
  return l;
}

StatusOr<std::unique_ptr<CommandCgroups>> CommandCgroups::Setup(const std::string& root, const CgroupLimits& limits) {
  struct statfs fs;
  if (statfs(root.c_str(), &fs) != 0) return ErrnoError("statfs " + root);
  if (fs.f_type != CGROUP2_SUPER_MAGIC) return Unavailable(root + " is not a cgroup2 mount");
  RETURN_IF_ERROR(EnableControllers(root, limits.memory_max > 0));
  std::string commands = root + "/commands";
  RETURN_IF_ERROR(MakeDir(commands));
  RETURN_IF_ERROR(WriteFile(commands + "/pids.max", std::to_string(limits.total_pids)));
  CgroupLimits applied = limits;
  struct stat st;
  if (applied.memory_max > 0 && stat((commands + "/memory.max").c_str(), &st) == 0) {
    RETURN_IF_ERROR(WriteFile(commands + "/memory.max", std::to_string(applied.memory_max)));
  } else {
    applied.memory_max = 0;  // no memory controller: not limited
  }
  RETURN_IF_ERROR(EnableControllers(commands, false));
  return std::unique_ptr<CommandCgroups>(new CommandCgroups(commands, applied));
}

StatusOr<CommandCgroup> CommandCgroups::Create() {
  Sweep();
  CommandCgroup cg;
  for (int tries = 0;; ++tries) {
    cg.path = commands_ + "/c" + std::to_string(next_++);
    if (mkdir(cg.path.c_str(), 0755) == 0) break;
    if (errno != EEXIST || tries > 1000) return ErrnoError("mkdir " + cg.path);
  }
  Status st = WriteFile(cg.path + "/pids.max", std::to_string(limits_.pids_per_command));
  if (st.ok()) {
    cg.procs.Reset(open((cg.path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    if (!cg.procs) st = ErrnoError("open " + cg.path + "/cgroup.procs");
  }
  if (!st.ok()) {
    rmdir(cg.path.c_str());
    return st;
  }
  return cg;
}

Status CommandCgroups::Kill(const std::string& leaf) {
  Status st = WriteFile(leaf + "/cgroup.kill", "1");
  if (!st.ok() && st.code() == StatusCode::kNotFound) return OkStatus();
  return st;
}

bool CommandCgroups::Populated(const std::string& leaf) {
  std::istringstream in(ReadFile(leaf + "/cgroup.events"));
  std::string key, value;
  while (in >> key >> value) {
    if (key == "populated") return value == "1";
  }
  return false;
}

void CommandCgroups::Release(const std::string& leaf) {
  pending_.push_back(leaf);
  Sweep();
}

void CommandCgroups::Sweep() {
  std::erase_if(pending_, [](const std::string& p) { return rmdir(p.c_str()) == 0 || errno == ENOENT; });
}

}  // namespace airlock::agent
