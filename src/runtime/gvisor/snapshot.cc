#include "runtime/gvisor/snapshot.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_util.h"

namespace airlock::gvisor {
namespace {
namespace fs = std::filesystem;
}  // namespace

uint64_t SnapshotRecord::bytes() const {
  uint64_t n = 0;
  for (const auto& [name, size] : files) n += size;
  return n;
}

StatusOr<SnapshotRecord> CommitSnapshot(const std::string& dir, SnapshotRecord r) {
  std::error_code ec;
  r.files.clear();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    std::string name = e.path().filename().string();
    if (name == kSnapshotRecord) continue;
    r.files[name] = e.file_size();
  }
  if (ec) return Internal("list " + dir + ": " + ec.message());
  if (!r.files.count("checkpoint.img")) return Internal("runsc wrote no checkpoint.img into " + dir);
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [n, s] : r.files) files[n] = s;
  nlohmann::json j = {{"format", kSnapshotFormat}, {"runtime", "gvisor"},   {"vcpus", r.vcpus},
                      {"memory_mib", r.memory_mib}, {"rootfs", r.rootfs},    {"rootfs_stamp", r.rootfs_stamp},
                      {"files", files},             {"save_ms", r.save_ms}};
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
    for (const auto& [n, s] : j.at("files").items()) r.files[n] = s.get<uint64_t>();
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
  for (const auto& [n, s] : r.files) {
    if (n.find('/') != std::string::npos || n == "..") return InvalidArgument(path + ": bad file name " + n);
    std::error_code ec;
    auto size = fs::file_size(dir + "/" + n, ec);
    if (ec) return Status(StatusCode::kDataLoss, dir + "/" + n + ": " + ec.message());
    if (size != s)
      return Status(StatusCode::kDataLoss, dir + "/" + n + ": " + std::to_string(size) + " bytes, recorded " + std::to_string(s));
  }
  auto now = ImageFileStamp(r.rootfs);
  if (!now.ok()) return FailedPrecondition("snapshot's rootfs: " + now.status().message());
  if (*now != r.rootfs_stamp)
    return FailedPrecondition(dir + ": rootfs " + r.rootfs + " was rebuilt after the snapshot was taken");
  return r;
}

StatusOr<SnapshotShape> GvisorSnapshotStore::Read(const std::string& dir) const {
  ASSIGN_OR_RETURN(SnapshotRecord r, ReadSnapshotRecord(dir));
  SnapshotShape s;
  s.vcpus = r.vcpus;
  s.memory_mib = r.memory_mib;
  s.memory_bytes = r.bytes();
  s.disk_bytes = 0;
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
  return Unimplemented(
      "the gvisor runtime keeps a sandbox's files in its memory (runsc --overlay2=root:memory): a snapshot "
      "without memory would have no files; pause keeping memory instead");
}

StatusOr<std::string> GvisorSnapshotStore::ImageStamp(const std::string& path) const { return ImageFileStamp(path); }

}  // namespace airlock::gvisor
