// User metadata of files (spec §4.1, §3.3 EntryInfo.metadata).
//
// POST /files carries `X-Metadata-<key>: <value>` headers; each becomes the
// extended attribute `user.e2b.<key>` (key lower-cased) of every file of
// that upload. An upload replaces the whole user.e2b.* set: the file is
// written under a fresh temporary name and renamed into place, so the
// attributes of a replaced file never survive. EntryInfo.metadata (Stat,
// ListDir, the upload response) is read back from the inode, so it follows
// renames and shows attributes set inside the guest (setfattr, os.setxattr).
//
// Rules (a request breaking one gets 400 and writes nothing):
//   - keys: 1..kMaxMetadataKeyBytes bytes of printable ASCII (0x20..0x7e),
//     each at most once (case-insensitively);
//   - values: printable ASCII (empty allowed);
//   - at most kMaxMetadataEntries keys and kMaxMetadataTotalBytes in all
//     (sum of "user.e2b." + key + value), which fits one ext4 inode block.
// Reading skips attributes whose key or value is not printable ASCII /
// valid UTF-8 (set in the guest with arbitrary bytes) and bounds what it
// reads (kMaxMetadataReadBytes per file).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace airlock::agent {

inline constexpr std::string_view kMetadataHeaderPrefix = "x-metadata-";
inline constexpr std::string_view kMetadataXattrPrefix = "user.e2b.";
// The VFS limits an xattr name to 255 bytes, prefix included.
inline constexpr size_t kMaxMetadataKeyBytes = 255 - kMetadataXattrPrefix.size();
inline constexpr size_t kMaxMetadataTotalBytes = 4096;
inline constexpr size_t kMaxMetadataEntries = 64;
inline constexpr size_t kMaxMetadataReadBytes = 64 * 1024;

using Metadata = std::map<std::string, std::string>;

// Pure: the metadata of a request's headers (name, value pairs; names in
// any case). Headers without the prefix are ignored. invalid_argument with
// the reason when a rule above is broken.
StatusOr<Metadata> MetadataFromHeaders(const std::vector<std::pair<std::string, std::string>>& headers);
// invalid_argument when `m` breaks a rule above.
Status ValidateMetadata(const Metadata& m);

// user.e2b.* attributes of `path` (symlinks followed, as envd). A
// filesystem without xattrs, a missing file or an unreadable attribute
// give an empty or partial map, never an error: it is part of a listing.
Metadata ReadMetadata(const std::string& path);

// Sets `m` on the open file `fd` (a fresh file: nothing to remove).
// Errors: failed_precondition when the filesystem of `display_path` does
// not support user extended attributes (e.g. tmpfs on Linux < 6.6),
// resource_exhausted on ENOSPC/EDQUOT/E2BIG, else the errno.
Status WriteMetadata(int fd, const std::string& display_path, const Metadata& m);

}  // namespace airlock::agent
