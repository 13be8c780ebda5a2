// A writer (and a reader, for tests and checks) for the "newc" cpio format
// (magic 070701) the Linux kernel unpacks as an initramfs.
//
// Entries get inode numbers 1, 2, ... in insertion order, nlink 1 (2 for
// directories), uid/gid 0 and mtime 0, so the same calls always produce the
// same bytes. Paths are given without a leading '/' ("bin/busybox"); parent
// directories must be added before their children.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::image {

class CpioWriter {
 public:
  void AddDirectory(std::string_view path, mode_t perm = 0755);
  void AddFile(std::string_view path, std::string_view data, mode_t perm = 0644);
  void AddSymlink(std::string_view path, std::string_view target);
  // Character device node (e.g. dev/console 5:1), created without privileges.
  void AddCharDevice(std::string_view path, unsigned major, unsigned minor, mode_t perm = 0600);
  // Appends the TRAILER!!! entry and returns the archive. The writer is empty
  // afterwards.
  std::string Finish();

 private:
  void AddEntry(std::string_view path, uint32_t mode, std::string_view data, unsigned rmajor,
                unsigned rminor);
  std::string buf_;
  uint32_t next_ino_ = 1;
};

struct CpioEntry {
  std::string path;
  uint32_t mode = 0;  // type and permission bits (S_IFREG | 0755 ...)
  uint32_t uid = 0, gid = 0;
  unsigned rdev_major = 0, rdev_minor = 0;
  std::string data;  // file content, or symlink target
};
// Parses a newc archive up to TRAILER!!!; InvalidArgument on malformed input.
StatusOr<std::vector<CpioEntry>> ReadCpio(std::string_view archive);

// gzip (RFC 1952) of `data` at the given zlib level.
StatusOr<std::string> Gzip(std::string_view data, int level = 9);

}  // namespace airlock::image
