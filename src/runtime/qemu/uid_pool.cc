#include "runtime/qemu/uid_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/fd.h"
#include "common/file_util.h"
#include "common/subprocess.h"

namespace airlock::qemu {
namespace fs = std::filesystem;
namespace {


std::string OwnerText(const std::string& id, pid_t pid) {
  return "sandbox=" + id + "\npid=" + std::to_string(pid) + "\nstart=" + std::to_string(ProcessStartTicks(pid)) + "\n";
}

// Is the owner recorded in a lease file still running?
bool OwnerAlive(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  pid_t pid = 0;
  unsigned long long start = 0;
  while (std::getline(f, line)) {
    try {
      if (line.rfind("pid=", 0) == 0) pid = static_cast<pid_t>(std::stol(line.substr(4)));
      if (line.rfind("start=", 0) == 0) start = std::stoull(line.substr(6));
    } catch (...) {
    }
  }
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  unsigned long long now = ProcessStartTicks(pid);
  return now != 0 && now == start;
}

Status WriteFile(const std::string& path, const std::string& text, int flags) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | flags, 0600));
  if (!fd) return ErrnoError("open " + path);
  return WriteAll(fd.get(), text, path);
}

struct DirLock {
  UniqueFd fd;
  static StatusOr<DirLock> Take(const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return Internal("mkdir " + dir + ": " + ec.message());
    ::chmod(dir.c_str(), 0700);
    DirLock l;
    l.fd.Reset(::open((dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!l.fd) return ErrnoError("open " + dir + "/.lock");
    while (::flock(l.fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return ErrnoError("flock " + dir + "/.lock");
    }
    return l;
  }
};

}  // namespace

VmmUidPool::VmmUidPool(std::string lease_root, uid_t base, uint32_t count)
    : dir_(std::move(lease_root) + "/vmm-uids"), base_(base), count_(count) {}

StatusOr<UidLease> VmmUidPool::Acquire(const std::string& sandbox_id) {
  if (base_ == 0 || count_ == 0 || uint64_t(base_) + count_ > 0xFFFFFFFEull)
    return InvalidArgument("bad VMM uid range " + std::to_string(base_) + "+" + std::to_string(count_));
  ASSIGN_OR_RETURN(DirLock lock, DirLock::Take(dir_));
  for (uint32_t i = 0; i < count_; ++i) {
    UidLease l{static_cast<uid_t>(base_ + i), dir_ + "/" + std::to_string(base_ + i), sandbox_id};
    Status st = WriteFile(l.path, OwnerText(sandbox_id, ::getpid()), O_CREAT | O_EXCL);
    if (st.ok()) return l;
    if (errno != EEXIST) return st;
    if (OwnerAlive(l.path)) continue;
    // Stale: its VMM and whoever leased it are gone.
    RETURN_IF_ERROR(WriteFile(l.path, OwnerText(sandbox_id, ::getpid()), O_TRUNC));
    return l;
  }
  return ResourceExhausted("every VMM uid in " + std::to_string(base_) + "+" + std::to_string(count_) +
                           " is in use (" + dir_ + ")");
}

Status VmmUidPool::Adopt(const UidLease& lease, pid_t owner) {
  if (lease.path.empty()) return OkStatus();
  ASSIGN_OR_RETURN(DirLock lock, DirLock::Take(fs::path(lease.path).parent_path().string()));
  return WriteFile(lease.path, OwnerText(lease.sandbox_id, owner), O_TRUNC);
}

Status VmmUidPool::Release(const UidLease& lease) {
  if (lease.path.empty()) return OkStatus();
  ASSIGN_OR_RETURN(DirLock lock, DirLock::Take(fs::path(lease.path).parent_path().string()));
  std::ifstream f(lease.path);
  std::string first;
  if (!f || !std::getline(f, first)) return OkStatus();  // gone
  if (first != "sandbox=" + lease.sandbox_id) return OkStatus();  // another sandbox's by now
  if (::unlink(lease.path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + lease.path);
  return OkStatus();
}

}  // namespace airlock::qemu
