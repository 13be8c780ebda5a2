// gVisor snapshot directories (docs/runtime-gvisor.md "Snapshots"): what
// `runsc checkpoint --image-path DIR` writes (checkpoint.img: the Sentry's
// whole state, the guest's memory and, with --overlay2=root:memory, every
// file the guest wrote) plus airlock's commit record, gvisor-snapshot.json,
// written last and atomically:
//   {"format": 1, "runtime": "gvisor", "vcpus": N, "memory_mib": N,
//    "rootfs": "<template ext4 image>", "rootfs_stamp": "<ImageFileStamp>",
//    "files": {"checkpoint.img": <bytes>, ...}, "save_ms": N}
// A restore needs the same template tree under the same stamp: the
// checkpoint names the gofer's files by path.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "runtime/runtime.h"

namespace airlock::gvisor {

inline constexpr char kSnapshotRecord[] = "gvisor-snapshot.json";
inline constexpr int kSnapshotFormat = 1;

struct SnapshotRecord {
  int vcpus = 0;
  int memory_mib = 0;
  std::string rootfs;
  std::string rootfs_stamp;
  std::map<std::string, uint64_t> files;  // name → bytes, everything runsc wrote
  uint64_t save_ms = 0;
  uint64_t bytes() const;
};

// Lists the files runsc wrote into `dir` and commits the record.
StatusOr<SnapshotRecord> CommitSnapshot(const std::string& dir, SnapshotRecord record);

// SnapshotStore::Read's contract over the record.
StatusOr<SnapshotRecord> ReadSnapshotRecord(const std::string& dir);

class GvisorSnapshotStore final : public SnapshotStore {
 public:
  StatusOr<SnapshotShape> Read(const std::string& dir) const override;
  Status Delete(const std::string& dir) const override;
  // A gVisor sandbox's files live in its memory: there is no disk to keep.
  Status DropMemory(const std::string& dir) const override;
  StatusOr<std::string> ImageStamp(const std::string& path) const override;
};

}  // namespace airlock::gvisor
