// Small filesystem helpers for the image builder. Every error names the
// failing operation and path.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/file_util.h"
#include "common/status.h"

namespace airlock::image {

StatusOr<std::string> ReadFile(const std::string& path);
// Atomic replace of a file: airlock::WriteFileAtomic (common/file_util.h).
// Plain (non-atomic) write, for files inside a directory that is itself
// renamed into place afterwards.
Status WriteFile(const std::string& path, std::string_view data, mode_t mode = 0644);
Status CopyFile(const std::string& from, const std::string& to, mode_t mode);
Status MakeDirs(const std::string& path);
// rm -rf that first lazily unmounts anything mounted below `path` and never
// crosses a mount point; a missing path is not an error.
Status RemoveTree(const std::string& path);
bool Exists(const std::string& path);
bool IsDirectory(const std::string& path);
// Names (not paths) of the entries of a directory; NotFound if it is missing.
StatusOr<std::vector<std::string>> ListDir(const std::string& path);
// Bytes allocated by a tree (like `du -s --bytes` of st_blocks), hard links
// counted once; does not follow symlinks. Also returns the inode count.
struct TreeUsage {
  uint64_t bytes = 0;
  uint64_t inodes = 0;
};
StatusOr<TreeUsage> MeasureTree(const std::string& path);
// A fresh, empty directory `<parent>/<prefix>XXXXXX` (mkdtemp).
StatusOr<std::string> MakeTempDir(const std::string& parent, const std::string& prefix);
// Exclusive flock() on `path` (created if missing); blocks until held,
// calling `on_wait` once first if another process holds it. Released when
// the returned fd is closed.
StatusOr<UniqueFd> LockFile(const std::string& path, const std::function<void()>& on_wait = {});

}  // namespace airlock::image
