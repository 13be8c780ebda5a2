// gVisor snapshot directories (docs/runtime-gvisor.md "Snapshots"): what
// `runsc checkpoint --image-path DIR` writes, plus airlock's commit record.
//
// runsc 0.0~20240729 writes one file, checkpoint.img: the Sentry's whole
// state, flate-compressed (runsc's default, --compression=flate-best-speed):
// its kernel objects, the guest's memory and, with --overlay2=root:memory,
// every file the guest wrote, so a gVisor snapshot has no disk of its own.
// A disk-only snapshot (pause or fork without memory) has no checkpoint:
// its one file is the guest's export of its root's changes
// (kGuestRootChanges, runtime.h), and "memory": false.
// runsc keeps no checksum of it (its statefile is only authenticated when
// given a key, which the CLI never does), so the record holds a CRC-32 of
// each file that Restore checks first: a flipped byte is DataLoss, never a
// guest that runs on corrupt memory.
//
// The record, gvisor-snapshot.json, is written last and atomically:
//   {"format": 2, "runtime": "gvisor", "vcpus": N, "memory_mib": N,
//    "rootfs": "<template ext4 image>", "rootfs_stamp": "<ImageFileStamp>",
//    "memory": true,
//    "files": {"checkpoint.img": {"bytes": N, "crc32": N}}, "save_ms": N}
// Format 2: guests have the template's tree bound at /.airlock-base (a
// checkpoint of format 1 has one mount fewer, which runsc restore refuses).
// A restore needs the same template tree under the same stamp: the gofer
// serves the template's files again, and the checkpoint's overlay holds only
// what the guest changed on top of them.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "runtime/runtime.h"

namespace airlock::gvisor {

inline constexpr char kSnapshotRecord[] = "gvisor-snapshot.json";
inline constexpr char kCheckpointImage[] = "checkpoint.img";  // runsc's name (runsc/cmd/checkpoint.go)
inline constexpr int kSnapshotFormat = 2;

struct SnapshotFile {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;  // zlib's CRC-32 of the whole file
};

struct SnapshotRecord {
  int vcpus = 0;
  int memory_mib = 0;
  std::string rootfs;
  std::string rootfs_stamp;
  std::map<std::string, SnapshotFile> files;  // name → size and CRC, everything runsc wrote
  uint64_t save_ms = 0;
  bool memory = true;  // false: disk only, kGuestRootChanges and no checkpoint
  uint64_t bytes() const;
};

// Lists, sizes and checksums the files runsc wrote into `dir` and commits the
// record (after an fsync of the files and the directory). Internal when
// runsc wrote no checkpoint.img (or, disk only, there is no
// kGuestRootChanges); ResourceExhausted when the disk is full.
StatusOr<SnapshotRecord> CommitSnapshot(const std::string& dir, SnapshotRecord record);

// SnapshotStore::Read's contract over the record: NotFound, InvalidArgument,
// DataLoss on a missing or resized file, FailedPrecondition for another
// format or a rebuilt rootfs.
StatusOr<SnapshotRecord> ReadSnapshotRecord(const std::string& dir);

// DataLoss naming the file when a file's CRC-32 differs from the record's.
Status VerifySnapshotFiles(const std::string& dir, const SnapshotRecord& record);

// Why a gVisor checkpoint cannot lose its memory (DropMemory): the sandbox's
// files are in it. Disk-only snapshots are the guest's export instead.
extern const char kNoDiskOnlySnapshots[];

class GvisorSnapshotStore final : public SnapshotStore {
 public:
  StatusOr<SnapshotShape> Read(const std::string& dir) const override;
  Status Delete(const std::string& dir) const override;
  // Always Unimplemented (kNoDiskOnlySnapshots), `dir` untouched: what
  // CheckDropsMemory (core/runtime_set.h) asks before a save.
  Status DropMemory(const std::string& dir) const override;
  StatusOr<std::string> ImageStamp(const std::string& path) const override;
};

}  // namespace airlock::gvisor
