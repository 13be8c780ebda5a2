#include "runtime/gvisor/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "common/fd.h"
#include "common/file_util.h"

namespace airlock::gvisor {
namespace {
namespace fs = std::filesystem;

// CRC-32 of a whole file, fsynced first when `sync` (a save's files must be
// on disk before the record that vouches for them).
StatusOr<uint32_t> FileCrc32(const std::string& path, bool sync) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  if (sync && ::fsync(fd.get()) != 0) {
    if (errno == ENOSPC) return ResourceExhausted("fsync " + path + ": disk full");
    return ErrnoError("fsync " + path);
  }
  std::vector<unsigned char> buf(1 << 20);
  uLong crc = crc32_z(0, nullptr, 0);
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + path);
    if (n == 0) break;
    crc = crc32_z(crc, buf.data(), static_cast<size_t>(n));
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

const char kNoDiskOnlySnapshots[] =
    "a gvisor checkpoint keeps the sandbox's files in its memory image (runsc --overlay2=root:memory), so it has no "
    "disk to keep without that memory; a gvisor sandbox pauses or forks without memory by exporting its files, which "
    "a template build's disk layers cannot use: build the template on the qemu runtime";

uint64_t SnapshotRecord::bytes() const {
  uint64_t n = 0;
  for (const auto& [name, f] : files) n += f.bytes;
  return n;
}

StatusOr<SnapshotRecord> CommitSnapshot(const std::string& dir, SnapshotRecord r) {
  std::error_code ec;
  r.files.clear();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    std::string name = e.path().filename().string();
    if (name == kSnapshotRecord) continue;
    // The guest's memory (its env, its tokens): the daemon's alone, as a
    // microVM's memory file is (runsc writes it 0644).
    if (::chmod(e.path().c_str(), 0600) != 0) return ErrnoError("chmod " + e.path().string());
    SnapshotFile f;
    f.bytes = e.file_size();
    ASSIGN_OR_RETURN(f.crc32, FileCrc32(e.path().string(), /*sync=*/true));
    r.files[name] = f;
  }
  if (ec) return Internal("list " + dir + ": " + ec.message());
  const char* needed = r.memory ? kCheckpointImage : kGuestRootChanges;
  if (!r.files.count(needed)) return Internal(std::string("no ") + needed + " in " + dir);
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [n, f] : r.files) files[n] = {{"bytes", f.bytes}, {"crc32", f.crc32}};
  nlohmann::json j = {{"format", kSnapshotFormat}, {"runtime", "gvisor"},   {"vcpus", r.vcpus},
                      {"memory_mib", r.memory_mib}, {"rootfs", r.rootfs},    {"rootfs_stamp", r.rootfs_stamp},
                      {"files", files},             {"save_ms", r.save_ms},    {"memory", r.memory}};
  RETURN_IF_ERROR(FsyncDir(dir));
  RETURN_IF_ERROR(WriteFileAtomic(dir + "/" + kSnapshotRecord, j.dump(1) + "\n", 0644));
  return r;
}

StatusOr<SnapshotRecord> ReadSnapshotRecord(const std::string& dir) {
  const std::string path = dir + "/" + kSnapshotRecord;
  std::ifstream f(path);
  if (!f) return NotFound("no gvisor snapshot in " + dir);
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not a JSON object");
  SnapshotRecord r;
  try {
    int format = j.at("format").get<int>();
    if (format != kSnapshotFormat)
      return FailedPrecondition(path + ": format " + std::to_string(format) + " (this airlock reads " +
                                std::to_string(kSnapshotFormat) + ")");
    r.vcpus = j.at("vcpus").get<int>();
    r.memory_mib = j.at("memory_mib").get<int>();
    r.rootfs = j.at("rootfs").get<std::string>();
    r.rootfs_stamp = j.at("rootfs_stamp").get<std::string>();
    r.save_ms = j.value("save_ms", uint64_t{0});
    r.memory = j.value("memory", true);
    for (const auto& [n, v] : j.at("files").items()) {
      SnapshotFile sf;
      sf.bytes = v.at("bytes").get<uint64_t>();
      sf.crc32 = v.at("crc32").get<uint32_t>();
      r.files[n] = sf;
    }
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
  if (r.vcpus <= 0 || r.memory_mib <= 0 || r.rootfs.empty() || r.rootfs[0] != '/')
    return InvalidArgument(path + ": bad machine shape or rootfs");
  const char* needed = r.memory ? kCheckpointImage : kGuestRootChanges;
  if (!r.files.count(needed)) return InvalidArgument(path + std::string(": names no ") + needed);
  for (const auto& [n, sf] : r.files) {
    if (n.empty() || n.find('/') != std::string::npos || n == "." || n == "..")
      return InvalidArgument(path + ": bad file name " + n);
    std::error_code ec;
    auto st = fs::symlink_status(dir + "/" + n, ec);
    if (ec || !fs::is_regular_file(st))
      return Status(StatusCode::kDataLoss, dir + "/" + n + ": missing or not a regular file");
    auto size = fs::file_size(dir + "/" + n, ec);
    if (ec) return Status(StatusCode::kDataLoss, dir + "/" + n + ": " + ec.message());
    if (size != sf.bytes)
      return Status(StatusCode::kDataLoss,
                    dir + "/" + n + ": " + std::to_string(size) + " bytes, recorded " + std::to_string(sf.bytes));
  }
  auto now = ImageFileStamp(r.rootfs);
  if (!now.ok()) return FailedPrecondition("snapshot " + dir + "'s rootfs: " + now.status().message());
  if (*now != r.rootfs_stamp)
    return FailedPrecondition(dir + ": rootfs " + r.rootfs + " was rebuilt after the snapshot was taken");
  return r;
}

Status VerifySnapshotFiles(const std::string& dir, const SnapshotRecord& record) {
  for (const auto& [n, sf] : record.files) {
    auto crc = FileCrc32(dir + "/" + n, /*sync=*/false);
    if (!crc.ok()) return Status(StatusCode::kDataLoss, crc.status().message());
    if (*crc != sf.crc32)
      return Status(StatusCode::kDataLoss, dir + "/" + n + ": content differs from what was saved (CRC-32 " +
                                               std::to_string(*crc) + ", recorded " + std::to_string(sf.crc32) + ")");
  }
  return OkStatus();
}

StatusOr<SnapshotShape> GvisorSnapshotStore::Read(const std::string& dir) const {
  ASSIGN_OR_RETURN(SnapshotRecord r, ReadSnapshotRecord(dir));
  SnapshotShape s;
  s.vcpus = r.vcpus;
  s.memory_mib = r.memory_mib;
  // A checkpoint holds the guest's writes in its memory image; a disk-only
  // snapshot, in the export.
  s.memory_bytes = r.memory ? r.bytes() : 0;
  s.disk_bytes = r.memory ? 0 : r.bytes();
  s.disk_backing = r.rootfs;
  return s;
}

Status GvisorSnapshotStore::Delete(const std::string& dir) const {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return OkStatus();
  if (::unlink((dir + "/" + kSnapshotRecord).c_str()) != 0 && errno != ENOENT)
    return ErrnoError("unlink " + dir + "/" + kSnapshotRecord);
  fs::remove_all(dir, ec);
  if (ec) return Internal("remove " + dir + ": " + ec.message());
  return OkStatus();
}

Status GvisorSnapshotStore::DropMemory(const std::string& dir) const {
  (void)dir;
  return Unimplemented(kNoDiskOnlySnapshots);
}

StatusOr<std::string> GvisorSnapshotStore::ImageStamp(const std::string& path) const { return ImageFileStamp(path); }

}  // namespace airlock::gvisor
