// Snapshots of a QEMU microVM: on-disk format, manifest, and the checks that
// a snapshot fits the machine it is restored into (docs/snapshots.md).
//
// A snapshot is a directory:
//   memory         QEMU migration stream (device state + RAM), as QEMU wrote it
//   disk.qcow2     the VM's disk overlay frozen at snapshot time (read-only
//                  from then on; its backing file is the template, or the disk
//                  of the snapshot the VM was itself restored from)
//   ram            (format 2: shared-RAM templates and fork files) the guest
//                  RAM as a plain file, root's and 0444: `memory` then holds
//                  device state only (x-ignore-shared) and every restore
//                  maps `ram` copy-on-write (docs/snapshots.md "Shared-RAM
//                  templates", "RAM deltas and fork files")
// A format 3 snapshot (a *RAM delta*) holds in `memory` only the pages that
// differ from another snapshot's `ram` (its `ram_source`, e.g. the template
// the VM was cloned from); its restore maps that file and loads the delta.
//   manifest.json  written last, by temp + rename: the commit point. A
//                  directory without a manifest, or whose files do not match
//                  the sizes it records, is not a snapshot.
// QemuVm::SaveSnapshot / QemuVm::Restore (qemu_vm.h) write and read it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "runtime/qemu/accel_probe.h"

namespace airlock::qemu {

struct VmSpec;

inline constexpr int kSnapshotFormatVersion = 1;
// A snapshot whose RAM is a shared file (`ram_file`): builds that read only
// version 1 refuse it instead of loading a stream without the RAM.
inline constexpr int kSnapshotFormatSharedRam = 2;
// The stream holds only the pages that differ from `ram_source` (the RAM
// file of a format 2 snapshot): builds that do not know it would restore a
// guest with holes in its memory, so they must refuse it.
inline constexpr int kSnapshotFormatRamDelta = 3;
inline constexpr char kSnapshotRam[] = "ram";
inline constexpr char kSnapshotManifest[] = "manifest.json";
inline constexpr char kSnapshotMemory[] = "memory";
inline constexpr char kSnapshotDisk[] = "disk.qcow2";

struct SaveSnapshotOptions {
  // true: `cont` after the save (a checkpoint); false: the VM stays stopped
  // (pause semantics: the caller destroys it, or Resume()s it).
  bool keep_running = true;
  // GuestImage::id of the image the VM runs (recorded, checked on restore).
  std::string image_id;
  // Bound on the whole save (migration + disk copy); on expiry the migration
  // is cancelled and the VM resumed.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // A VM whose RAM is a memory backend (a clone, a resumed or forked VM):
  // true writes its RAM into <dir>/ram, a file every restore maps
  // copy-on-write (a format 2 snapshot, as a template's: a fork), instead of
  // into the stream. Ignored for other VMs (their RAM block is microvm's own).
  bool ram_file = false;
  // A VM that maps its RAM from another snapshot's `ram` (a clone of a
  // template or of a fork): true (default) keeps in the stream only the pages
  // that differ from that file (format 3), false all of them. Falls back to
  // all (with a warning) when the file cannot be read.
  bool ram_delta = true;
};

struct RestoreOptions {
  // When non-empty, the manifest's image id must equal it.
  std::string image_id;
  // Bound on launch + loading the memory stream.
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
  // false: the VM's overlay is a new copy-on-write layer on <dir>/disk.qcow2
  // (the snapshot must outlive the VM). true: the overlay is a private copy of
  // <dir>/disk.qcow2 (same backing file as the snapshot's disk), so the
  // snapshot may be deleted once the VM runs and pause/resume cycles never
  // lengthen the backing chain.
  bool private_disk = false;
  // true: boot the kernel afresh on (a private copy of) the snapshot's disk,
  // ignoring its memory (pause with keepMemory=false). Implies private_disk.
  bool disk_only = false;
};

struct SnapshotManifest {
  int format_version = kSnapshotFormatVersion;
  std::string image_id;
  std::string kernel, initrd, rootfs;  // absolute paths the VM was started with
  int vcpus = 0;
  int memory_mib = 0;
  std::string accel;         // "tcg" | "kvm"
  bool network = false;      // has a virtio-net device
  std::string machine_hash;  // MachineShapeHash()
  std::string qemu_version;  // "7.2.22": restored only by the same major.minor
  std::string memory_file = kSnapshotMemory;
  uint64_t memory_bytes = 0;
  uint32_t memory_crc32 = 0;
  std::string disk_file = kSnapshotDisk;
  uint64_t disk_bytes = 0;
  std::string disk_backing;         // absolute path of disk.qcow2's backing file
  std::string disk_backing_format;  // "raw" | "qcow2"
  // FileStamp() of `rootfs` when the VM was launched. Empty in snapshots
  // written before the field existed (not checked).
  std::string rootfs_stamp;
  std::string source_sandbox_id;
  std::string created_at;  // RFC 3339, UTC
  uint64_t host_tsc_khz = 0;
  uint64_t save_ms = 0;
  uint64_t migrate_ms = 0;  // of save_ms: `migrate` until the stream is on disk (information; 0 in older manifests)
  // The RAM block the stream was written from: "" microvm's own
  // ("microvm.ram"), "mem0" a memory backend (a VM restored from a
  // shared-RAM template), restored into an anonymous backend of that name.
  std::string ram_backend;
  // Shared-RAM template (format 2): plain file name of the RAM file, its
  // size (= memory_mib MiB) and RamFileCrc32 of its contents. Empty name: the
  // RAM is in the stream.
  std::string ram_file;
  uint64_t ram_bytes = 0;
  uint32_t ram_crc32 = 0;
  uint64_t ram_data_bytes = 0;  // bytes of non-zero pages (information)
  bool shared_ram() const { return !ram_file.empty(); }
  // The migration capability the stream was written with (a restore sets the
  // same: QEMU refuses a mismatch). Absent in older manifests: true for
  // format 2, false otherwise.
  bool x_ignore_shared = false;
  // RAM delta (format 3): the absolute path of the format 2 snapshot's `ram`
  // file whose pages the stream leaves out, and that file's ram_crc32 when
  // the delta was written (a restore refuses another file under that name).
  std::string ram_source;
  uint32_t ram_source_crc32 = 0;
  uint64_t ram_pages_in_stream = 0;  // of the guest RAM's pages, those the stream holds (information)
  bool ram_delta() const { return !ram_source.empty(); }

  nlohmann::json ToJson() const;
  // InvalidArgument naming the bad field.
  static StatusOr<SnapshotManifest> FromJson(const nlohmann::json& j);
};

// Which build of a template rootfs a file is: "ext4-uuid:<32 hex>" for an
// ext4 image (mkfs.ext4 picks a random UUID per build; it survives copies,
// `touch`, rename), else "<size>:<mtime in ns>". A template rebuilt at the
// same path (same image key, new bytes: mkfs.ext4 lays out a new filesystem)
// has a new one. Guest memory whose page cache and ext4 metadata describe
// the old filesystem, restored over the new one, fails inside the guest with
// ext4 checksum errors (EBADMSG, "Bad message"), so such a snapshot is
// refused instead. ErrnoError when the file cannot be read.
StatusOr<std::string> FileStamp(const std::string& path);

// Reads and validates <dir>/manifest.json against the files next to it:
// NotFound when there is no manifest (not a snapshot, or a save that never
// committed); DataLoss when a file is missing or its size differs from the
// manifest (truncated, half-copied); FailedPrecondition for an unknown
// format version, a missing disk backing file, or a rootfs whose FileStamp()
// differs from the one recorded (rebuilt since), or a RAM delta whose
// ram_source file is gone.
StatusOr<SnapshotManifest> ReadSnapshot(const std::string& dir);

// Identity of the machine a migration stream can be loaded into: the QEMU
// command line of `spec` with everything per-sandbox (id, run dir, tap name,
// uid, kernel cmdline extras, seccomp) normalised away. "fnv1a64:<16 hex>".
std::string MachineShapeHash(const VmSpec& spec, Accel accel);

// OK when a VM built from (spec, accel) can load this snapshot; otherwise
// FailedPrecondition listing every mismatch ("memory_mib: snapshot 512, spec 256").
Status CheckSnapshotFits(const SnapshotManifest& m, const VmSpec& spec, Accel accel,
                         const std::string& expected_image_id);

// Removes a snapshot directory: the manifest first (so a crash part-way
// leaves an invalid snapshot, never a valid-looking broken one), then the rest.
Status DeleteSnapshot(const std::string& dir);

// Turns a snapshot into a disk-only one (pause with keepMemory=false): the
// memory file is emptied and the manifest rewritten (atomically) with
// memory_bytes = 0. Such a snapshot can only be booted (RestoreOptions::disk_only).
Status DropSnapshotMemory(const std::string& dir);

// The files a VM's overlay reads through, as our records say (never as the
// qcow2 headers say: a VMM can write those): `backing` (absolute) and, while
// it is a snapshot's disk.qcow2, the disk_backing its manifest records, down
// to the raw template. FailedPrecondition for a qcow2 that is not a
// snapshot's disk or an unreadable manifest; at most 64 disks.
StatusOr<std::vector<std::string>> DiskChain(const std::string& backing, const std::string& format);
// SnapshotStore::ExportDisk: `qemu-img convert -O raw` of the snapshot's
// disk over the chain DiskChain records, spelled out as a json: block graph
// (so no backing file named by a qcow2 header, which a VMM wrote, is
// opened); a qcow2 with an external data file is refused.
Status ExportSnapshotDisk(const std::string& dir, const std::string& out, const std::string& qemu_img = "qemu-img");

// CRC-32 (zlib) of a guest RAM file, independent of how the filesystem lays
// it out: over every 4 KiB page that is not all zeros, its page index
// (8 bytes, little-endian) then its bytes (holes and zero pages skipped).
// `visit`, when set, sees each such page (offset, bytes). `data_bytes` gets
// the bytes of those pages.
StatusOr<uint32_t> RamFileCrc32(int fd, uint64_t size, uint64_t* data_bytes,
                                const std::function<Status(uint64_t, const char*, size_t)>& visit = nullptr);

// The sealed memfd clones of the shared-RAM template in `dir` map (one per
// RAM file per process, built on first use): a copy of <dir>/<ram_file>
// checked against the manifest's CRC (DataLoss otherwise), sealed against
// writes, resizing and hole punching (F_SEAL_WRITE|SHRINK|GROW|SEAL). QEMU
// 7.2 opens a memory-backend-file O_RDWR even with share=off, so a clone
// gets this (as /proc/self/fd/3), never the file: it can map it
// copy-on-write and nothing more. Forgotten by DeleteSnapshot.
StatusOr<std::shared_ptr<const UniqueFd>> SealedTemplateRam(const std::string& dir, const SnapshotManifest& m);

// What SealedTemplateRam keeps per RAM file, for the saves that compare a
// VM's RAM with it (RAM deltas): the memfd, mapped read-only once, and
// which of its 4 KiB pages are not all zeros (taken while it was copied).
struct SealedRam {
  UniqueFd memfd;
  const unsigned char* map = nullptr;  // `bytes` long, PROT_READ
  size_t bytes = 0;
  std::vector<bool> nonzero;  // per page
  SealedRam() = default;
  SealedRam(const SealedRam&) = delete;
  SealedRam& operator=(const SealedRam&) = delete;
  ~SealedRam();
};
StatusOr<std::shared_ptr<const SealedRam>> SealedRamOf(const std::string& dir, const SnapshotManifest& m);

// Copies a file (copy_file_range: a reflink where the filesystem can) to a
// new file `to` (O_EXCL, `mode`) and fsyncs it. ENOSPC is ResourceExhausted.
Status CopyFileSynced(const std::string& from, const std::string& to, mode_t mode);

}  // namespace airlock::qemu
