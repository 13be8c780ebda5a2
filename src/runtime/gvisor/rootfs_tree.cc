#include "runtime/gvisor/rootfs_tree.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/file_util.h"
#include "common/log.h"
#include "common/fd.h"
#include "common/subprocess.h"

namespace airlock::gvisor {
namespace {

namespace fs = std::filesystem;

std::string ReadLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

StatusOr<std::string> EnsureRootTree(const std::string& rootfs) {
  ASSIGN_OR_RETURN(std::string stamp, ImageFileStamp(rootfs));
  const std::string dir = fs::path(rootfs).parent_path().string();
  const std::string tree = dir + "/" + kRootTreeDir;
  if (ReadLine(dir + "/" + kRootTreeStampFile) == stamp && fs::is_directory(tree)) return tree;
  if (!FindExecutable("fuse2fs").ok())
    return FailedPrecondition("fuse2fs is not installed (fix: apt-get install fuse2fs, or run scripts/setup)");
  // Blocking: a second start waits for the first one's extraction.
  const std::string lock_path = tree + ".lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock || ::flock(lock.get(), LOCK_EX) != 0) return ErrnoError("lock " + lock_path);
  if (ReadLine(dir + "/" + kRootTreeStampFile) == stamp && fs::is_directory(tree)) return tree;
  LOG_INFO("gvisor: extracting {} into a root tree (once per image)", rootfs);
  const std::string tmp = tree + ".tmp", mnt = tree + ".mnt";
  std::error_code ec;
  (void)Run({"umount", "-l", mnt});
  fs::remove_all(tmp, ec);
  fs::create_directories(mnt, ec);
  auto mounted = RunChecked({"fuse2fs", "-o", "ro,fakeroot", rootfs, mnt});
  if (!mounted.ok()) return Internal("fuse2fs " + rootfs + ": " + mounted.status().message());
  auto copied = RunChecked({"cp", "-a", "--", mnt, tmp});
  (void)Run({"umount", mnt});
  fs::remove(mnt, ec);
  if (!copied.ok()) {
    fs::remove_all(tmp, ec);
    return Internal("copy the root tree of " + rootfs + ": " + copied.status().message());
  }
  // lost+found is the image's, not the guest's business; the tree is read only
  // to everyone through the sandbox's bind mount anyway.
  fs::remove_all(tmp + "/lost+found", ec);
  fs::remove_all(tree, ec);
  fs::rename(tmp, tree, ec);
  if (ec) return Internal("rename " + tmp + ": " + ec.message());
  RETURN_IF_ERROR(WriteFileAtomic(dir + "/" + kRootTreeStampFile, stamp + "\n", 0644));
  return tree;
}

}  // namespace airlock::gvisor
