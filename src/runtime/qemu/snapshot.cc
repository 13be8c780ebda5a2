// Snapshot save/restore for QemuVm, and the snapshot directory format
// (docs/snapshots.md).
//
// Why we stream the migration ourselves: QEMU runs under
// `-sandbox ...,spawn=deny`, so `exec:cat > file` would kill it with SIGSYS,
// and QEMU 7.2 has no `file:` URI. QEMU instead talks to a unix socket in its
// run dir (the path is not netns-scoped): on save it connects to us and we
// write the file; on restore it listens and we feed the file. Both ends are
// bounded (size, deadline) and CRC-32 the bytes on the way through, so a
// corrupted memory file is refused before the guest runs a single
// instruction.
#include "runtime/qemu/snapshot.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/subprocess.h"
#include "runtime/qemu/migration_stream.h"
#include "runtime/qemu/qemu_vm.h"

namespace airlock::qemu {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
namespace {

constexpr size_t kChunk = 1 << 20;
constexpr uint64_t kStreamOverheadBytes = 256ull << 20;  // device state etc. beyond guest RAM
constexpr int kTickMs = 200;                             // how often a blocked stream checks on QEMU
constexpr uint64_t kMaxBandwidth = 1ull << 40;           // bytes/s; QEMU's default is 32 MiB/s

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}
int MsLeft(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, kTickMs));
}

std::string Rfc3339Now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

Status CopyFileSynced(const std::string& from, const std::string& to, mode_t mode) {
  // `from` may be a VMM's own overlay, in a directory the VMM writes: never
  // follow a symlink it put there, nor block on a FIFO.
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!in) return ErrnoError("open " + from);
  struct stat fst;
  if (::fstat(in.get(), &fst) != 0) return ErrnoError("stat " + from);
  if (!S_ISREG(fst.st_mode)) return FailedPrecondition("copy " + from + ": not a regular file");
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!out) return ErrnoError("create " + to);
  bool fallback = false;
  std::vector<char> buf;
  while (true) {
    ssize_t n;
    if (!fallback) {
      n = ::copy_file_range(in.get(), nullptr, out.get(), nullptr, 64 << 20, 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
        fallback = true;
        buf.resize(kChunk);
        continue;
      }
    } else {
      n = ::read(in.get(), buf.data(), buf.size());
      if (n > 0) RETURN_IF_ERROR(WriteAll(out.get(), {buf.data(), static_cast<size_t>(n)}, to));
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("copy " + from + " to " + to);
    if (n == 0) break;
  }
  if (::fsync(out.get()) != 0) return ErrnoError("fsync " + to);
  return OkStatus();
}

namespace {

StatusOr<UniqueFd> ListenUnix(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) return InvalidArgument("socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return ErrnoError("socket");
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return ErrnoError("bind " + path);
  if (::listen(fd.get(), 1) != 0) return ErrnoError("listen " + path);
  return fd;
}

StatusOr<UniqueFd> ConnectUnix(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) return InvalidArgument("socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoError("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return ErrnoError("connect " + path);
  return fd;
}

uint64_t Fnv1a64(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string QemuVersionOf(const nlohmann::json& greeting) {
  const auto* v = &greeting;
  for (const char* k : {"QMP", "version", "qemu"}) {
    if (!v->is_object() || !v->contains(k)) return "";
    v = &(*v)[k];
  }
  auto num = [&](const char* k) { return v->contains(k) && (*v)[k].is_number() ? (*v)[k].get<int>() : -1; };
  return std::to_string(num("major")) + "." + std::to_string(num("minor")) + "." + std::to_string(num("micro"));
}
std::string MajorMinor(const std::string& v) { return v.substr(0, v.rfind('.')); }

}  // namespace

// ---- manifest ------------------------------------------------------------------

nlohmann::json SnapshotManifest::ToJson() const {
  return {{"format", "airlock-snapshot"},
          {"format_version", format_version},
          {"image_id", image_id},
          {"kernel", kernel},
          {"initrd", initrd},
          {"rootfs", rootfs},
          {"vcpus", vcpus},
          {"memory_mib", memory_mib},
          {"accel", accel},
          {"network", network},
          {"machine_hash", machine_hash},
          {"qemu_version", qemu_version},
          {"memory_file", memory_file},
          {"memory_bytes", memory_bytes},
          {"memory_crc32", memory_crc32},
          {"disk_file", disk_file},
          {"disk_bytes", disk_bytes},
          {"disk_backing", disk_backing},
          {"disk_backing_format", disk_backing_format},
          {"rootfs_stamp", rootfs_stamp},
          {"source_sandbox_id", source_sandbox_id},
          {"created_at", created_at},
          {"host_tsc_khz", host_tsc_khz},
          {"save_ms", save_ms},
          {"migrate_ms", migrate_ms},
          {"ram_backend", ram_backend},
          {"ram_file", ram_file},
          {"ram_bytes", ram_bytes},
          {"ram_crc32", ram_crc32},
          {"ram_data_bytes", ram_data_bytes},
          {"x_ignore_shared", x_ignore_shared},
          {"ram_source", ram_source},
          {"ram_source_crc32", ram_source_crc32},
          {"ram_pages_in_stream", ram_pages_in_stream}};
}

StatusOr<SnapshotManifest> SnapshotManifest::FromJson(const nlohmann::json& j) {
  if (!j.is_object() || j.value("format", "") != "airlock-snapshot")
    return InvalidArgument("manifest: not an airlock snapshot manifest");
  SnapshotManifest m;
  auto str = [&](const char* k, std::string& out) -> Status {
    if (!j.contains(k) || !j[k].is_string())
      return InvalidArgument(std::string("manifest: field ") + k + " missing or not a string");
    out = j[k].get<std::string>();
    return OkStatus();
  };
  auto num = [&](const char* k, auto& out) -> Status {
    if (!j.contains(k) || !j[k].is_number_integer())
      return InvalidArgument(std::string("manifest: field ") + k + " missing or not an integer");
    out = j[k].get<std::remove_reference_t<decltype(out)>>();
    return OkStatus();
  };
  RETURN_IF_ERROR(num("format_version", m.format_version));
  for (auto [k, f] :
       std::initializer_list<std::pair<const char*, std::string*>>{{"image_id", &m.image_id},
                                                                   {"kernel", &m.kernel},
                                                                   {"initrd", &m.initrd},
                                                                   {"rootfs", &m.rootfs},
                                                                   {"accel", &m.accel},
                                                                   {"machine_hash", &m.machine_hash},
                                                                   {"qemu_version", &m.qemu_version},
                                                                   {"memory_file", &m.memory_file},
                                                                   {"disk_file", &m.disk_file},
                                                                   {"disk_backing", &m.disk_backing},
                                                                   {"disk_backing_format", &m.disk_backing_format},
                                                                   {"source_sandbox_id", &m.source_sandbox_id},
                                                                   {"created_at", &m.created_at}}) {
    RETURN_IF_ERROR(str(k, *f));
  }
  RETURN_IF_ERROR(num("vcpus", m.vcpus));
  RETURN_IF_ERROR(num("memory_mib", m.memory_mib));
  RETURN_IF_ERROR(num("memory_bytes", m.memory_bytes));
  RETURN_IF_ERROR(num("memory_crc32", m.memory_crc32));
  RETURN_IF_ERROR(num("disk_bytes", m.disk_bytes));
  RETURN_IF_ERROR(num("host_tsc_khz", m.host_tsc_khz));
  RETURN_IF_ERROR(num("save_ms", m.save_ms));
  // Optional: absent in snapshots written before they existed.
  if (j.contains("rootfs_stamp")) RETURN_IF_ERROR(str("rootfs_stamp", m.rootfs_stamp));
  if (j.contains("migrate_ms")) RETURN_IF_ERROR(num("migrate_ms", m.migrate_ms));
  if (j.contains("ram_backend")) RETURN_IF_ERROR(str("ram_backend", m.ram_backend));
  if (j.contains("ram_file")) {
    RETURN_IF_ERROR(str("ram_file", m.ram_file));
    RETURN_IF_ERROR(num("ram_bytes", m.ram_bytes));
    RETURN_IF_ERROR(num("ram_crc32", m.ram_crc32));
    if (j.contains("ram_data_bytes")) RETURN_IF_ERROR(num("ram_data_bytes", m.ram_data_bytes));
  }
  m.x_ignore_shared = m.format_version == kSnapshotFormatSharedRam;
  if (j.contains("x_ignore_shared")) {
    if (!j["x_ignore_shared"].is_boolean()) return InvalidArgument("manifest: field x_ignore_shared is not a boolean");
    m.x_ignore_shared = j["x_ignore_shared"].get<bool>();
  }
  if (j.contains("ram_source")) {
    RETURN_IF_ERROR(str("ram_source", m.ram_source));
    if (m.ram_delta()) RETURN_IF_ERROR(num("ram_source_crc32", m.ram_source_crc32));
  }
  if (j.contains("ram_pages_in_stream")) RETURN_IF_ERROR(num("ram_pages_in_stream", m.ram_pages_in_stream));
  if (!m.ram_backend.empty() && m.ram_backend != "mem0")
    return InvalidArgument("manifest: unknown ram_backend '" + m.ram_backend + "'");
  if (m.shared_ram() && m.format_version != kSnapshotFormatSharedRam)
    return InvalidArgument("manifest: ram_file in a format " + std::to_string(m.format_version) + " manifest");
  if (m.format_version == kSnapshotFormatSharedRam && !m.shared_ram())
    return InvalidArgument("manifest: format 2 without ram_file");
  if (m.ram_delta() != (m.format_version == kSnapshotFormatRamDelta))
    return InvalidArgument("manifest: ram_source goes with format 3 only");
  if (m.ram_delta() && (m.ram_source[0] != '/' || m.ram_backend.empty() || !m.x_ignore_shared))
    return InvalidArgument("manifest: a RAM delta needs an absolute ram_source, ram_backend and x_ignore_shared");
  if (!j.contains("network") || !j["network"].is_boolean()) return InvalidArgument("manifest: field network missing");
  m.network = j["network"].get<bool>();
  // File names are plain names inside the snapshot dir, never paths.
  for (const std::string* f : {&m.memory_file, &m.disk_file, &m.ram_file}) {
    if (f == &m.ram_file && f->empty()) continue;
    if (f->empty() || f->find('/') != std::string::npos || *f == "." || *f == "..")
      return InvalidArgument("manifest: bad file name '" + *f + "'");
  }
  return m;
}

Status DropSnapshotMemory(const std::string& dir) {
  ASSIGN_OR_RETURN(SnapshotManifest m, ReadSnapshot(dir));
  const std::string mem = dir + "/" + m.memory_file;
  if (::truncate(mem.c_str(), 0) != 0) return ErrnoError("truncate " + mem);
  m.memory_bytes = 0;
  m.memory_crc32 = 0;
  if (m.ram_delta()) {
    // Nothing of the memory is left: no longer a delta of anything (and no
    // longer keeping its ram_source's snapshot from the GC).
    m.ram_source.clear();
    m.ram_source_crc32 = 0;
    m.format_version = kSnapshotFormatVersion;
  }
  return WriteFileAtomic(dir + "/" + kSnapshotManifest, m.ToJson().dump(2) + "\n");
}

StatusOr<SnapshotManifest> ReadSnapshot(const std::string& dir) {
  std::string path = dir + "/" + kSnapshotManifest;
  std::ifstream f(path);
  if (!f)
    return NotFound("no snapshot at " + dir + " (" + kSnapshotManifest +
                    " missing: never saved, or the save did not commit)");
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(path + ": not JSON");
  auto m = SnapshotManifest::FromJson(j);
  if (!m.ok()) return m.status().WithContext(path);
  if (m->format_version < kSnapshotFormatVersion || m->format_version > kSnapshotFormatRamDelta)
    return FailedPrecondition(path + ": format version " + std::to_string(m->format_version) + ", this build reads " +
                              std::to_string(kSnapshotFormatVersion) + " to " +
                              std::to_string(kSnapshotFormatRamDelta));
  if (m->ram_delta()) {
    struct stat st;
    if (::stat(m->ram_source.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      return FailedPrecondition(path + ": the RAM file this snapshot's memory is a delta of (" + m->ram_source +
                                ") is gone");
  }
  if (m->shared_ram()) {
    // The template's RAM: clones map it, so it must be exactly what was
    // saved and writable by nobody but root.
    std::string p = dir + "/" + m->ram_file;
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) return Status(StatusCode::kDataLoss, ErrnoError("snapshot file " + p).message());
    if (!S_ISREG(st.st_mode)) return Status(StatusCode::kDataLoss, "snapshot file " + p + " is not a regular file");
    if (static_cast<uint64_t>(st.st_size) != m->ram_bytes || m->ram_bytes != (uint64_t(m->memory_mib) << 20))
      return Status(StatusCode::kDataLoss, "snapshot file " + p + " is " + std::to_string(st.st_size) +
                                               " bytes, manifest says " + std::to_string(m->ram_bytes));
    if (st.st_uid != 0 || (st.st_mode & 0222) != 0)
      return FailedPrecondition("snapshot RAM file " + p + " is writable (owner " + std::to_string(st.st_uid) +
                                ", mode " + std::to_string(st.st_mode & 07777) +
                                "): a template's RAM must be root's, read-only");
  }
  for (auto [name, want] : {std::pair{m->memory_file, m->memory_bytes}, std::pair{m->disk_file, m->disk_bytes}}) {
    struct stat st;
    std::string p = dir + "/" + name;
    if (::stat(p.c_str(), &st) != 0) return Status(StatusCode::kDataLoss, ErrnoError("snapshot file " + p).message());
    if (static_cast<uint64_t>(st.st_size) != want)
      return Status(StatusCode::kDataLoss, "snapshot file " + p + " is " + std::to_string(st.st_size) +
                                               " bytes, manifest says " + std::to_string(want) +
                                               " (truncated or replaced)");
  }
  if (m->memory_bytes > (uint64_t(m->memory_mib) << 20) + kStreamOverheadBytes)
    return InvalidArgument(path + ": memory file larger than guest RAM + overhead");
  struct stat st;
  if (::stat(m->disk_backing.c_str(), &st) != 0)
    return FailedPrecondition(ErrnoError("snapshot disk's backing file " + m->disk_backing).message());
  if (!m->rootfs_stamp.empty()) {
    auto now = FileStamp(m->rootfs);
    if (!now.ok()) return FailedPrecondition("snapshot's rootfs: " + now.status().message());
    if (*now != m->rootfs_stamp)
      return FailedPrecondition(path + ": rootfs " + m->rootfs + " was rebuilt after the snapshot was taken (" +
                                m->rootfs_stamp + ", now " + *now + "): its memory and disk no longer match it");
  }
  return m;
}

StatusOr<std::string> FileStamp(const std::string& path) { return ImageFileStamp(path); }

std::string MachineShapeHash(const VmSpec& spec, Accel accel) {
  VmSpec n;
  n.sandbox_id = "snapshot";
  n.kernel = fs::absolute(spec.kernel).string();
  n.initrd = fs::absolute(spec.initrd).string();
  n.run_dir = "/snapshot";
  n.vcpus = spec.vcpus;
  n.memory_mib = spec.memory_mib;
  n.tap_name = spec.tap_name.empty() ? "" : "tap0";
  n.qemu_binary = "qemu";
  uint64_t h = Fnv1a64("airlock-machine-v1");
  // Paths as they were before the vmm/ dir, so hashes of older snapshots still match.
  for (const auto& a : BuildQemuArgv(n, accel, VmPaths::Legacy(n.run_dir), false, 0)) h = Fnv1a64(a + '\0', h);
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Status CheckSnapshotFits(const SnapshotManifest& m, const VmSpec& spec, Accel accel,
                         const std::string& expected_image_id) {
  std::string diffs;
  auto diff = [&](const std::string& what, const std::string& snap, const std::string& mine) {
    if (snap != mine) diffs += (diffs.empty() ? "" : "; ") + what + ": snapshot " + snap + ", spec " + mine;
  };
  if (!expected_image_id.empty()) diff("image_id", m.image_id, expected_image_id);
  diff("kernel", m.kernel, fs::absolute(spec.kernel).string());
  diff("initrd", m.initrd, fs::absolute(spec.initrd).string());
  diff("rootfs", m.rootfs, fs::absolute(spec.rootfs_template).string());
  diff("vcpus", std::to_string(m.vcpus), std::to_string(spec.vcpus));
  diff("memory_mib", std::to_string(m.memory_mib), std::to_string(spec.memory_mib));
  diff("accel", m.accel, std::string(AccelName(accel)));
  diff("network", m.network ? "yes" : "no", spec.tap_name.empty() ? "no" : "yes");
  if (diffs.empty()) diff("machine_hash", m.machine_hash, MachineShapeHash(spec, accel));
  if (!diffs.empty()) return FailedPrecondition("snapshot does not fit this machine: " + diffs);
  return OkStatus();
}

namespace {
// SealedTemplateRam's memfds: RAM file (path, device, inode, mtime) → memfd.
struct SealedRamKey {
  std::string path;
  dev_t dev;
  ino_t ino;
  int64_t mtime_ns;
  bool operator<(const SealedRamKey& o) const {
    return std::tie(path, dev, ino, mtime_ns) < std::tie(o.path, o.dev, o.ino, o.mtime_ns);
  }
};
std::mutex sealed_mu;
std::map<SealedRamKey, std::shared_ptr<const SealedRam>>& SealedRams() {
  static auto* m = new std::map<SealedRamKey, std::shared_ptr<const SealedRam>>();
  return *m;
}
Status PwriteAll(int fd, const char* p, size_t len, uint64_t off) {
  while (len > 0) {
    ssize_t n = ::pwrite(fd, p, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write memfd");
    p += n;
    len -= static_cast<size_t>(n);
    off += static_cast<uint64_t>(n);
  }
  return OkStatus();
}
void ForgetSealedRam(const std::string& dir) {
  std::lock_guard<std::mutex> l(sealed_mu);
  auto& rams = SealedRams();
  for (auto it = rams.begin(); it != rams.end();) {
    if (it->first.path.rfind(dir + "/", 0) == 0)
      it = rams.erase(it);
    else
      ++it;
  }
}
}  // namespace

StatusOr<uint32_t> RamFileCrc32(int fd, uint64_t size, uint64_t* data_bytes,
                                const std::function<Status(uint64_t, const char*, size_t)>& visit) {
  constexpr size_t kPage = 4096;
  std::vector<char> buf(kChunk);
  static const char kZero[kPage] = {};
  uLong crc = crc32_z(0, nullptr, 0);
  uint64_t data = 0;
  off_t pos = 0;
  while (static_cast<uint64_t>(pos) < size) {
    off_t start = ::lseek(fd, pos, SEEK_DATA);
    if (start < 0 && errno == ENXIO) break;  // only a hole is left
    if (start < 0) return ErrnoError("lseek SEEK_DATA");
    off_t end = ::lseek(fd, start, SEEK_HOLE);
    if (end < 0) return ErrnoError("lseek SEEK_HOLE");
    start &= ~static_cast<off_t>(kPage - 1);
    for (off_t off = start; off < end;) {
      size_t want = static_cast<size_t>(std::min<off_t>(static_cast<off_t>(buf.size()), end - off));
      want = (want + kPage - 1) & ~(kPage - 1);
      ssize_t n = ::pread(fd, buf.data(), want, off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("read RAM file");
      if (n == 0) break;
      for (size_t i = 0; i < static_cast<size_t>(n); i += kPage) {
        size_t len = std::min(kPage, static_cast<size_t>(n) - i);
        if (std::memcmp(buf.data() + i, kZero, len) == 0) continue;
        uint64_t page = (static_cast<uint64_t>(off) + i) / kPage;
        unsigned char le[8];
        for (int b = 0; b < 8; ++b) le[b] = static_cast<unsigned char>(page >> (8 * b));
        crc = crc32_z(crc, le, sizeof le);
        crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buf.data() + i), len);
        data += len;
        if (visit) RETURN_IF_ERROR(visit(static_cast<uint64_t>(off) + i, buf.data() + i, len));
      }
      off += n;
    }
    pos = end;
  }
  if (data_bytes) *data_bytes = data;
  return static_cast<uint32_t>(crc);
}

SealedRam::~SealedRam() {
  if (map) ::munmap(const_cast<unsigned char*>(map), bytes);
}

StatusOr<std::shared_ptr<const UniqueFd>> SealedTemplateRam(const std::string& dir, const SnapshotManifest& m) {
  ASSIGN_OR_RETURN(std::shared_ptr<const SealedRam> r, SealedRamOf(dir, m));
  return std::shared_ptr<const UniqueFd>(r, &r->memfd);
}

StatusOr<std::shared_ptr<const SealedRam>> SealedRamOf(const std::string& dir, const SnapshotManifest& m) {
  if (!m.shared_ram()) return InvalidArgument("snapshot " + dir + " has no shared RAM file");
  const std::string path = fs::absolute(dir + "/" + m.ram_file).lexically_normal().string();
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!file) return ErrnoError("open " + path);
  struct stat st;
  if (::fstat(file.get(), &st) != 0) return ErrnoError("stat " + path);
  if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 0222) != 0 ||
      static_cast<uint64_t>(st.st_size) != m.ram_bytes)
    return FailedPrecondition("template RAM file " + path + " is not the root-owned, read-only file of its manifest");
  SealedRamKey key{path, st.st_dev, st.st_ino, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  std::lock_guard<std::mutex> l(sealed_mu);  // one build at a time; a hit costs a map lookup
  if (auto it = SealedRams().find(key); it != SealedRams().end()) return it->second;
  const auto t0 = Clock::now();
  auto r = std::make_shared<SealedRam>();
  r->memfd.Reset(::memfd_create("airlock-template-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!r->memfd) return ErrnoError("memfd_create");
  if (::ftruncate(r->memfd.get(), static_cast<off_t>(m.ram_bytes)) != 0) return ErrnoError("truncate memfd");
  r->nonzero.assign(m.ram_bytes / 4096, false);
  uint64_t data = 0;
  auto crc = RamFileCrc32(file.get(), m.ram_bytes, &data, [&](uint64_t off, const char* p, size_t len) -> Status {
    for (uint64_t page = off / 4096; page < r->nonzero.size() && page * 4096 < off + len; ++page)
      r->nonzero[page] = true;
    return PwriteAll(r->memfd.get(), p, len, off);
  });
  if (!crc.ok()) return crc.status().WithContext("copy " + path + " into a memfd");
  if (*crc != m.ram_crc32) {
    char got[16], want[16];
    std::snprintf(got, sizeof got, "%08x", *crc);
    std::snprintf(want, sizeof want, "%08x", m.ram_crc32);
    return Status(StatusCode::kDataLoss,
                  "template RAM file " + path + " is corrupt (crc32 " + got + ", manifest " + want + ")");
  }
  if (::fcntl(r->memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return ErrnoError("seal the template RAM memfd");
  void* p = ::mmap(nullptr, m.ram_bytes, PROT_READ, MAP_SHARED, r->memfd.get(), 0);
  if (p == MAP_FAILED) return ErrnoError("map the template RAM memfd");
  r->map = static_cast<const unsigned char*>(p);
  r->bytes = m.ram_bytes;
  SealedRams()[key] = r;
  LOG_INFO("template RAM sealed file={} data_bytes={} ms={}", path, data, MsSince(t0));
  return std::shared_ptr<const SealedRam>(r);
}

Status DeleteSnapshot(const std::string& dir) {
  ForgetSealedRam(dir);
  std::string manifest = dir + "/" + kSnapshotManifest;
  if (::unlink(manifest.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + manifest);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return Internal("remove " + dir + ": " + ec.message());
  return OkStatus();
}

StatusOr<std::vector<std::string>> DiskChain(const std::string& backing, const std::string& format) {
  std::vector<std::string> chain;
  std::string file = backing, fmt = format;
  for (int depth = 0; depth < 64; ++depth) {
    if (file.empty() || file[0] != '/')
      return InvalidArgument("disk chain: backing file '" + file + "' is not absolute");
    chain.push_back(file);
    if (fmt == "raw") return chain;
    if (fmt != "qcow2") return InvalidArgument("disk chain: unknown format '" + fmt + "' of " + file);
    // A qcow2 backing file is always a snapshot's frozen disk: its own
    // backing file is what that snapshot's manifest (ours) says.
    fs::path p(file);
    if (p.filename() != kSnapshotDisk)
      return FailedPrecondition("disk chain: " + file + " is not a snapshot's " + kSnapshotDisk);
    ASSIGN_OR_RETURN(SnapshotManifest m, ReadSnapshot(p.parent_path().string()));
    file = m.disk_backing;
    fmt = m.disk_backing_format;
  }
  return FailedPrecondition("disk chain of " + backing + " is longer than 64 disks");
}

Status ExportSnapshotDisk(const std::string& dir, const std::string& out, const std::string& qemu_img) {
  ASSIGN_OR_RETURN(SnapshotManifest m, ReadSnapshot(dir));
  const std::string top = fs::absolute(dir + "/" + m.disk_file).string();
  ASSIGN_OR_RETURN(std::vector<std::string> below, DiskChain(m.disk_backing, m.disk_backing_format));
  std::vector<std::string> chain = {top};
  chain.insert(chain.end(), below.begin(), below.end());
  // Every qcow2 of the chain: no external data file (it would be opened as
  // named by the header).
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    ASSIGN_OR_RETURN(std::string info, RunChecked({qemu_img, "info", "-U", "--output=json", "-f", "qcow2", chain[i]}));
    auto j = nlohmann::json::parse(info, nullptr, false);
    if (j.is_discarded()) return Internal("qemu-img info " + chain[i] + ": not JSON");
    if (j.contains("format-specific") && j["format-specific"].is_object() &&
        j["format-specific"].value("data", nlohmann::json::object()).contains("data-file"))
      return FailedPrecondition("export " + dir + ": " + chain[i] + " has an external data file");
  }
  // The graph from the bottom (raw) up.
  nlohmann::json node = {{"driver", "raw"}, {"file", {{"driver", "file"}, {"filename", chain.back()}}}};
  for (size_t i = chain.size() - 1; i-- > 0;) {
    node = {{"driver", "qcow2"}, {"file", {{"driver", "file"}, {"filename", chain[i]}}}, {"backing", node}};
  }
  auto r = RunChecked({qemu_img, "convert", "-U", "-O", "raw", "json:" + node.dump(), out});
  if (!r.ok()) {
    ::unlink(out.c_str());
    if (r.status().message().find("No space left") != std::string::npos)
      return ResourceExhausted("export " + dir + ": " + r.status().message());
    return r.status().WithContext("export " + dir);
  }
  return OkStatus();
}

// ---- QemuVm ---------------------------------------------------------------------

Status QemuVm::Pause() {
  RETURN_IF_ERROR(CheckAlive());
  auto r = qmp_->Execute("stop");
  return r.ok() ? OkStatus() : r.status();
}

Status QemuVm::Resume() {
  RETURN_IF_ERROR(CheckAlive());
  auto r = qmp_->Execute("cont");
  if (!r.ok()) return r.status();
  auto st = qmp_->Execute("query-status");
  if (!st.ok()) return st.status();
  if (!st->value("running", false)) return Internal("cont: guest not running, status " + st->value("status", "?"));
  return OkStatus();
}

namespace {

// Polls query-migrate until the migration leaves setup/active. Returns the
// final status object; Internal naming the status and QEMU's error otherwise.
StatusOr<nlohmann::json> WaitMigration(QemuVm& vm, Clock::time_point deadline, const char* what) {
  while (true) {
    RETURN_IF_ERROR(vm.CheckAlive().WithContext(what));
    auto q = vm.qmp().Execute("query-migrate");
    if (!q.ok()) {
      // A closed QMP socket usually means QEMU exited: say how, with its stderr.
      (void)vm.WaitForExit(std::chrono::milliseconds(500));
      RETURN_IF_ERROR(vm.CheckAlive().WithContext(what));
      return q.status().WithContext(what);
    }
    std::string s = q->value("status", "none");
    if (s == "completed") return *q;
    if (s == "failed" || s == "cancelled") {
      return Internal(std::string(what) + ": migration " + s +
                      (q->contains("error-desc") ? ": " + q->value("error-desc", "") : ""));
    }
    if (Clock::now() > deadline)
      return DeadlineExceeded(std::string(what) + ": migration still '" + s + "' at the deadline");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The socket QEMU writes its stream to: bounded in size (QEMU is
// untrusted) and time, and noticing a QEMU that died or gave up (`check`,
// run whenever nothing arrived for a tick) instead of blocking on it.
class MigrationSocketReader final : public StreamReader {
 public:
  MigrationSocketReader(int fd, uint64_t limit, Clock::time_point deadline, std::function<Status()> check)
      : fd_(fd), limit_(limit), deadline_(deadline), check_(std::move(check)) {}
  StatusOr<size_t> ReadSome(char* p, size_t max) override {
    while (true) {
      pollfd pf{fd_, POLLIN, 0};
      int r = ::poll(&pf, 1, MsLeft(deadline_));
      if (r < 0 && errno != EINTR) return ErrnoError("poll migration stream");
      if (r <= 0) {
        RETURN_IF_ERROR(check_());
        continue;
      }
      ssize_t n = ::read(fd_, p, max);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("read migration stream");
      total_ += static_cast<uint64_t>(n);
      if (total_ > limit_)
        return ResourceExhausted("migration stream exceeds " + std::to_string(limit_) +
                                 " bytes (guest RAM + overhead)");
      return static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
  uint64_t limit_, total_ = 0;
  Clock::time_point deadline_;
  std::function<Status()> check_;
};

// The snapshot's memory file: what is written, its size and CRC-32.
class MemoryFileWriter final : public StreamWriter {
 public:
  MemoryFileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status Write(const char* p, size_t n) override {
    crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(p), n);
    bytes_ += n;
    return WriteAll(fd_, {p, n}, path_);
  }
  uint64_t bytes() const { return bytes_; }
  uint32_t crc32() const { return static_cast<uint32_t>(crc_); }

 private:
  int fd_;
  std::string path_;
  uLong crc_ = crc32_z(0, nullptr, 0);
  uint64_t bytes_ = 0;
};

// The RAM file a clone maps (another snapshot's `ram`), readable here for a
// delta save: SealedRamOf's memfd (the one the clones map), its read-only
// mapping and its non-zero pages (zero pages are never read: most of a
// template's RAM, and reading a memfd hole through a mapping would
// allocate a page in it).
struct DeltaBase {
  std::shared_ptr<const SealedRam> ram;
  uint32_t crc = 0;
};

StatusOr<std::unique_ptr<DeltaBase>> OpenDeltaBase(const std::string& ram_path, uint64_t bytes) {
  const std::string dir = fs::path(ram_path).parent_path().string();
  ASSIGN_OR_RETURN(SnapshotManifest bm, ReadSnapshot(dir));
  if (!bm.shared_ram() || fs::path(dir + "/" + bm.ram_file).lexically_normal().string() != ram_path)
    return FailedPrecondition(dir + " is not the shared-RAM snapshot of " + ram_path);
  if (bm.ram_bytes != bytes)
    return FailedPrecondition(ram_path + " is " + std::to_string(bm.ram_bytes) + " bytes, the guest RAM " +
                              std::to_string(bytes));
  auto b = std::make_unique<DeltaBase>();
  ASSIGN_OR_RETURN(b->ram, SealedRamOf(dir, bm));
  b->crc = bm.ram_crc32;
  return b;
}

// What SaveSnapshot does with the pages of a VM's RAM backend.
enum class RamSave { kStream, kDelta, kFile };
struct RamSavePlan {
  RamSave mode = RamSave::kStream;
  RamPagePolicy policy;
  std::unique_ptr<DeltaBase> base;  // kDelta
  UniqueFd file;                    // kFile: <dir>/ram.tmp
};

// kFile when asked for a VM with a RAM backend (a fork); kDelta for a VM
// that maps another snapshot's RAM file, unless that file cannot be read
// (then the whole RAM is streamed, with a warning); kStream otherwise.
StatusOr<RamSavePlan> PlanRamSave(const SaveSnapshotOptions& o, const std::string& dir, RamKind kind,
                                  const std::string& ram_source, int memory_mib, const std::string& sandbox_id) {
  RamSavePlan p;
  p.policy.block = kRamBackendId;
  p.policy.block_bytes = uint64_t(memory_mib) << 20;
  if (kind == RamKind::kMachine || kind == RamKind::kSharedFile) return p;
  if (o.ram_file) {
    const std::string tmp = dir + "/" + kSnapshotRam + ".tmp";
    p.file.Reset(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!p.file) return ErrnoError("create " + tmp);
    if (::ftruncate(p.file.get(), static_cast<off_t>(p.policy.block_bytes)) != 0) return ErrnoError("size " + tmp);
    p.policy.file_fd = p.file.get();
    p.mode = RamSave::kFile;
    return p;
  }
  if (kind != RamKind::kPrivateFile || ram_source.empty() || !o.ram_delta) return p;
  auto base = OpenDeltaBase(ram_source, p.policy.block_bytes);
  if (!base.ok()) {
    LOG_WARN("snapshot sandbox={}: RAM saved whole, not as a delta of {}: {}", sandbox_id, ram_source,
             base.status().ToString());
    return p;
  }
  p.base = std::move(*base);
  p.policy.base = p.base->ram->map;
  p.policy.base_data = &p.base->ram->nonzero;
  p.mode = RamSave::kDelta;
  return p;
}

// A RAM file that restores will map, made final: read-only, on disk, CRC'd
// into `m`, renamed from <dir>/ram.tmp to <dir>/ram. `fd` is the file.
Status CommitRamFile(const UniqueFd& fd, const std::string& dir, int memory_mib, SnapshotManifest& m) {
  const std::string tmp = dir + "/" + kSnapshotRam + ".tmp";
  const uint64_t size = uint64_t(memory_mib) << 20;
  if (::fchown(fd.get(), 0, 0) != 0) return ErrnoError("chown " + tmp);
  if (::fchmod(fd.get(), 0444) != 0) return ErrnoError("chmod " + tmp);
  if (::fsync(fd.get()) != 0) return ErrnoError("fsync " + tmp);
  ASSIGN_OR_RETURN(m.ram_crc32, RamFileCrc32(fd.get(), size, &m.ram_data_bytes));
  if (::rename(tmp.c_str(), (dir + "/" + kSnapshotRam).c_str()) != 0) return ErrnoError("rename " + tmp);
  m.ram_file = kSnapshotRam;
  m.ram_bytes = size;
  return OkStatus();
}

}  // namespace

Status QemuVm::FreezeRamFile(const std::string& dir, SnapshotManifest& m) {
  // Out of the VMM's reach by path first (into root's 0700 snapshot dir),
  // then the VMM is ended: nothing may write the file once it is frozen.
  const std::string tmp = dir + "/" + kSnapshotRam + ".tmp";
  if (::rename(paths_.ram.c_str(), tmp.c_str()) != 0) return ErrnoError("rename " + paths_.ram + " to " + tmp);
  RETURN_IF_ERROR(Destroy().WithContext("end the template VMM"));
  UniqueFd fd(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) return ErrnoError("open " + tmp);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + tmp);
  const uint64_t size = uint64_t(spec_.memory_mib) << 20;
  if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || static_cast<uint64_t>(st.st_size) != size)
    return FailedPrecondition(tmp + ": not the VMM's RAM file (a regular file of " + std::to_string(size) +
                              " bytes with one link)");
  return CommitRamFile(fd, dir, spec_.memory_mib, m);
}

StatusOr<SnapshotManifest> QemuVm::SaveSnapshot(const std::string& dir, const SaveSnapshotOptions& o) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + o.timeout;
  RETURN_IF_ERROR(CheckAlive());
  if (dir.empty() || dir[0] != '/') return InvalidArgument("snapshot dir must be an absolute path: " + dir);
  // A VM whose RAM is its own shared file saves it as a shared-RAM template:
  // the file becomes the snapshot's, so the VM must end with the save.
  const bool shared = ram_.kind == RamKind::kSharedFile;
  if (shared && o.keep_running)
    return InvalidArgument("a VM with shared-file RAM is saved only with keep_running = false (the save ends it)");
  std::error_code ec;
  bool created = !fs::exists(dir, ec);
  if (!created && !fs::is_empty(dir, ec)) return FailedPrecondition("snapshot dir " + dir + " exists and is not empty");
  fs::create_directories(dir, ec);
  if (ec) return Internal("mkdir " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);

  ASSIGN_OR_RETURN(auto st0, qmp_->Execute("query-status"));
  const bool was_running = st0.value("running", false);
  const std::string sock = paths_.migrate_out_socket;
  const std::string mem_tmp = dir + "/" + kSnapshotMemory + ".tmp";
  const std::string disk_tmp = dir + "/" + kSnapshotDisk + ".tmp";
  SnapshotManifest m;
  m.qemu_version = QemuVersionOf(qmp_->greeting());  // now: a shared-RAM save ends the VMM (and its QMP)
  uint64_t stop_ms = 0, migrate_ms = 0, disk_ms = 0;
  RamSavePlan ram_plan;
  if (!shared) {
    auto plan = PlanRamSave(o, dir, ram_.kind, ram_source_, spec_.memory_mib, spec_.sandbox_id);
    if (!plan.ok()) {
      ::unlink((dir + "/" + kSnapshotRam + ".tmp").c_str());
      if (created) fs::remove(dir, ec);
      return plan.status().WithContext("snapshot " + dir);
    }
    ram_plan = std::move(*plan);
  }

  auto save = [&]() -> Status {
    if (was_running) RETURN_IF_ERROR(Pause().WithContext("stop"));  // also drains + flushes the block layer
    stop_ms = MsSince(t0);
    auto p = qmp_->Execute("migrate-set-parameters", {{"max-bandwidth", kMaxBandwidth}});
    if (!p.ok()) return p.status();
    if (ram_.kind != RamKind::kMachine) {
      // On for every VM whose RAM is a memory backend. shared: the stream
      // then holds device state only, the RAM stays in the file. Others
      // (private or anonymous RAM, which the capability does not skip) send
      // their pages, which the RAM plan keeps, drops or moves; the stream's
      // block list then carries each block's address, and its restore sets
      // the capability too (x_ignore_shared in the manifest).
      auto c = qmp_->Execute(
          "migrate-set-capabilities",
          {{"capabilities", nlohmann::json::array({{{"capability", "x-ignore-shared"}, {"state", true}}})}});
      if (!c.ok()) return c.status().WithContext("x-ignore-shared");
      m.x_ignore_shared = true;
    }
    ASSIGN_OR_RETURN(UniqueFd listener, ListenUnix(sock));
    // QEMU, as the jail uid, must be able to connect. lchown: the VMM's dir
    // is its own, so never follow what may have replaced the socket there.
    if (spec_.jail && ::lchown(sock.c_str(), spec_.jail->first, spec_.jail->second) != 0)
      return ErrnoError("chown " + sock);
    UniqueFd out(::open(mem_tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!out) return ErrnoError("create " + mem_tmp);
    auto mig = qmp_->Execute("migrate", {{"uri", "unix:" + sock}});
    if (!mig.ok()) return mig.status();

    // Bounded receive: QEMU is untrusted, so cap the size and the time, and
    // notice when it dies or gives up instead of blocking on a dead socket.
    const uint64_t limit = (uint64_t(spec_.memory_mib) << 20) + kStreamOverheadBytes;
    auto check_qemu = [&]() -> Status {
      RETURN_IF_ERROR(CheckAlive());
      auto q = qmp_->Execute("query-migrate");
      if (!q.ok()) {
        (void)WaitForExit(std::chrono::milliseconds(500));
        RETURN_IF_ERROR(CheckAlive());
        return q.status();
      }
      std::string s = q->value("status", "none");
      if (s == "failed" || s == "cancelled")
        return Internal("migration " + s + (q->contains("error-desc") ? ": " + q->value("error-desc", "") : ""));
      if (Clock::now() > deadline)
        return DeadlineExceeded("snapshot not written within " + std::to_string(o.timeout.count()) + " ms");
      return OkStatus();
    };
    UniqueFd conn;
    while (!conn) {
      pollfd pf{listener.get(), POLLIN, 0};
      int r = ::poll(&pf, 1, MsLeft(deadline));
      if (r < 0 && errno != EINTR) return ErrnoError("poll " + sock);
      if (r > 0) {
        conn.Reset(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!conn && errno != EAGAIN && errno != EINTR) return ErrnoError("accept " + sock);
      }
      if (!conn) RETURN_IF_ERROR(check_qemu());
    }
    listener.Reset();
    ::unlink(sock.c_str());
    MigrationSocketReader reader(conn.get(), limit, deadline, check_qemu);
    MemoryFileWriter writer(out.get(), mem_tmp);
    if (ram_plan.mode == RamSave::kStream) {
      std::vector<char> buf(kChunk);
      while (true) {
        ASSIGN_OR_RETURN(size_t n, reader.ReadSome(buf.data(), buf.size()));
        if (n == 0) break;
        RETURN_IF_ERROR(writer.Write(buf.data(), n));
      }
    } else {
      // Page by page (migration_stream.h): a delta keeps what differs from
      // the RAM file restores map; a fork moves the RAM into a file of its own.
      ASSIGN_OR_RETURN(MigrationFilterStats fs, FilterMigrationStream(reader, writer, ram_plan.policy));
      m.ram_pages_in_stream = fs.pages_kept;
      LOG_INFO(
          "snapshot RAM sandbox={} mode={} stream_in={} stream_out={} pages_kept={} pages_dropped={} "
          "pages_to_file={} other_pages={}",
          spec_.sandbox_id, ram_plan.mode == RamSave::kDelta ? "delta" : "file", fs.bytes_in, fs.bytes_out,
          fs.pages_kept, fs.pages_dropped, fs.pages_to_file, fs.other_pages);
    }
    m.memory_bytes = writer.bytes();
    m.memory_crc32 = writer.crc32();
    RETURN_IF_ERROR(WaitMigration(*this, deadline, "snapshot").status());
    if (::fsync(out.get()) != 0) return ErrnoError("fsync " + mem_tmp);
    out.Reset();
    if (::rename(mem_tmp.c_str(), (dir + "/" + kSnapshotMemory).c_str()) != 0) return ErrnoError("rename " + mem_tmp);
    migrate_ms = MsSince(t0) - stop_ms;

    // Disk: after a completed migration QEMU has flushed and inactivated the
    // overlay and will not write it again before `cont`, so a copy now is
    // exactly the disk the memory image refers to.
    RETURN_IF_ERROR(CopyFileSynced(paths_.overlay, disk_tmp, 0444));
    if (::rename(disk_tmp.c_str(), (dir + "/" + kSnapshotDisk).c_str()) != 0) return ErrnoError("rename " + disk_tmp);
    struct stat ds;
    if (::stat((dir + "/" + kSnapshotDisk).c_str(), &ds) != 0) return ErrnoError("stat disk");
    m.disk_bytes = static_cast<uint64_t>(ds.st_size);
    disk_ms = MsSince(t0) - stop_ms - migrate_ms;
    if (shared) RETURN_IF_ERROR(FreezeRamFile(dir, m).WithContext("template RAM"));
    if (ram_plan.mode == RamSave::kFile)
      RETURN_IF_ERROR(CommitRamFile(ram_plan.file, dir, spec_.memory_mib, m).WithContext("fork RAM file"));
    RETURN_IF_ERROR(FsyncDir(dir));

    m.image_id = o.image_id;
    m.kernel = fs::absolute(spec_.kernel).string();
    m.initrd = fs::absolute(spec_.initrd).string();
    m.rootfs = fs::absolute(spec_.rootfs_template).string();
    m.vcpus = spec_.vcpus;
    m.memory_mib = spec_.memory_mib;
    m.accel = std::string(AccelName(accel_));
    m.network = !spec_.tap_name.empty();
    m.machine_hash = MachineShapeHash(spec_, accel_);
    m.disk_backing = disk_backing_;
    m.disk_backing_format = disk_backing_format_;
    m.rootfs_stamp = rootfs_stamp_;
    m.source_sandbox_id = spec_.sandbox_id;
    m.created_at = Rfc3339Now();
    m.host_tsc_khz = HostTscKhz();
    m.save_ms = static_cast<uint64_t>(MsSince(t0));
    m.migrate_ms = migrate_ms;
    m.ram_backend = ram_.kind == RamKind::kMachine ? "" : kRamBackendId;
    if (shared || ram_plan.mode == RamSave::kFile) m.format_version = kSnapshotFormatSharedRam;
    if (ram_plan.mode == RamSave::kDelta) {
      m.format_version = kSnapshotFormatRamDelta;
      m.ram_source = ram_source_;
      m.ram_source_crc32 = ram_plan.base->crc;
    }
    return WriteFileAtomic(dir + "/" + kSnapshotManifest, m.ToJson().dump(2) + "\n");  // the commit point
  };

  Status st = save();
  if (!st.ok()) {
    auto cancel = qmp_ ? qmp_->Execute("migrate_cancel") : StatusOr<nlohmann::json>(Internal("no qmp"));
    (void)cancel;
    ::unlink(sock.c_str());
    ram_plan.file.Reset();
    for (const char* f : {kSnapshotManifest, kSnapshotMemory, kSnapshotDisk, kSnapshotRam}) {
      ::unlink((dir + "/" + f).c_str());
      ::unlink((dir + "/" + f + ".tmp").c_str());
    }
    if (created) fs::remove(dir, ec);
    if (was_running && CheckAlive().ok()) {
      // Give a cancelled migration a moment to settle; cont is refused mid-cancel.
      Status r;
      for (int i = 0; i < 50; ++i) {
        r = Resume();
        if (r.ok()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!r.ok()) LOG_WARN("resume after failed snapshot failed sandbox={} error={}", spec_.sandbox_id, r.ToString());
    }
    LOG_WARN("snapshot failed sandbox={} dir={} error={}", spec_.sandbox_id, dir, st.ToString());
    return st.WithContext("snapshot " + dir);
  }
  if (o.keep_running && was_running) RETURN_IF_ERROR(Resume().WithContext("snapshot saved, but cont failed"));
  LOG_INFO(
      "snapshot saved sandbox={} dir={} memory_bytes={} disk_bytes={} stop_ms={} migrate_ms={} disk_ms={} total_ms={}",
      spec_.sandbox_id, dir, m.memory_bytes, m.disk_bytes, stop_ms, migrate_ms, disk_ms, MsSince(t0));
  return m;
}

StatusOr<std::unique_ptr<QemuVm>> QemuVm::Restore(const VmSpec& spec, const std::string& dir, const RestoreOptions& o) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + o.timeout;
  ASSIGN_OR_RETURN(SnapshotManifest m, ReadSnapshot(dir));
  VmSpec s = spec;
  if (!s.accel) s.accel = (s.state_dir.empty() ? ProbeAccel() : ProbeAccelCached(s.state_dir)).accel;
  RETURN_IF_ERROR(CheckSnapshotFits(m, s, *s.accel, o.image_id).WithContext("restore " + dir));
  if (o.disk_only) {
    LaunchPlan boot;
    boot.copy_overlay_from = fs::absolute(dir + "/" + m.disk_file).string();
    boot.backing = m.disk_backing;
    boot.backing_format = m.disk_backing_format;
    return Launch(s, boot);
  }
  const std::string mem_path = dir + "/" + m.memory_file;
  UniqueFd in(::open(mem_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return ErrnoError("open " + mem_path);

  LaunchPlan plan;
  if (o.private_disk) {
    plan.copy_overlay_from = fs::absolute(dir + "/" + m.disk_file).string();
    plan.backing = m.disk_backing;
    plan.backing_format = m.disk_backing_format;
  } else {
    plan.backing = fs::absolute(dir + "/" + m.disk_file).string();
    plan.backing_format = "qcow2";
  }
  plan.incoming = true;
  std::shared_ptr<const UniqueFd> sealed;  // borrowed by Launch as the VMM's fd 3
  // The RAM file this VM maps copy-on-write: the snapshot's own (a template,
  // a fork), or the one its delta was taken against.
  std::string ram_dir;
  SnapshotManifest ram_m;
  if (m.shared_ram()) {
    ram_dir = dir;
    ram_m = m;
  } else if (m.ram_delta()) {
    ram_dir = fs::path(m.ram_source).parent_path().string();
    auto bm = ReadSnapshot(ram_dir);
    if (!bm.ok()) return bm.status().WithContext("restore " + dir + ": the RAM its delta is taken against");
    ram_m = std::move(*bm);
    if (!ram_m.shared_ram() || fs::path(ram_dir + "/" + ram_m.ram_file).lexically_normal().string() != m.ram_source ||
        ram_m.ram_crc32 != m.ram_source_crc32 || ram_m.ram_bytes != (uint64_t(s.memory_mib) << 20))
      return FailedPrecondition("restore " + dir + ": " + m.ram_source +
                                " is not the RAM file its delta was taken against (replaced since)");
  }
  if (!ram_dir.empty()) {
    // Copy-on-write of that RAM: a jailed VMM gets the sealed memfd (it can
    // map it privately, never write it); an unjailed one (debugging only)
    // the file itself.
    plan.ram_source = fs::absolute(ram_dir + "/" + ram_m.ram_file).lexically_normal().string();
    if (s.jail) {
      ASSIGN_OR_RETURN(sealed, SealedTemplateRam(ram_dir, ram_m));
      plan.ram_fd = sealed->get();
      plan.ram = {RamKind::kPrivateFile, "/proc/self/fd/3"};
    } else {
      plan.ram = {RamKind::kPrivateFile, plan.ram_source};
    }
  } else if (!m.ram_backend.empty()) {
    plan.ram = {RamKind::kAnon, ""};  // the stream's RAM block is a backend's
  }
  ASSIGN_OR_RETURN(std::unique_ptr<QemuVm> vm, Launch(s, plan));
  const auto launched_ms = MsSince(t0);
  // From here on, returning destroys the VM (and its run dir).
  std::string version = QemuVersionOf(vm->qmp_->greeting());
  if (MajorMinor(version) != MajorMinor(m.qemu_version))
    return FailedPrecondition("restore " + dir + ": snapshot written by QEMU " + m.qemu_version + ", this is " +
                              version);

  if (m.x_ignore_shared) {
    // Same stream format as the save (QEMU refuses a mismatch).
    auto c = vm->qmp_->Execute(
        "migrate-set-capabilities",
        {{"capabilities", nlohmann::json::array({{{"capability", "x-ignore-shared"}, {"state", true}}})}});
    if (!c.ok()) return c.status().WithContext("restore " + dir + ": x-ignore-shared");
  }
  const std::string sock = vm->paths_.migrate_in_socket;
  auto inc = vm->qmp_->Execute("migrate-incoming", {{"uri", "unix:" + sock}});
  if (!inc.ok()) return inc.status().WithContext("restore " + dir);
  UniqueFd conn;
  while (!conn) {
    auto c = ConnectUnix(sock);
    if (c.ok()) {
      conn = std::move(*c);
      break;
    }
    RETURN_IF_ERROR(vm->CheckAlive().WithContext("restore " + dir));
    if (Clock::now() > deadline) return c.status().WithContext("restore " + dir + ": qemu never listened");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  // Stream the memory file in, CRC-32 on the way; the guest stays stopped (-S)
  // until the whole stream is loaded and the CRC matches.
  std::vector<char> buf(kChunk);
  uLong crc = crc32_z(0, nullptr, 0);
  uint64_t sent = 0;  // bytes read from the file (and CRC'd)
  Status stream;      // why QEMU did not get them all
  bool read_all = false;
  while (true) {
    ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      stream = ErrnoError("read " + mem_path);
      break;
    }
    if (n == 0) {
      read_all = true;
      break;
    }
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<size_t>(n));
    sent += static_cast<uint64_t>(n);
    // Once QEMU stopped taking bytes, keep reading only to finish the CRC,
    // so a load failure can be told apart from a corrupt file.
    size_t off = 0;
    while (off < static_cast<size_t>(n) && stream.ok()) {
      pollfd pf{conn.get(), POLLOUT, 0};
      int r = ::poll(&pf, 1, MsLeft(deadline));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        stream = ErrnoError("poll migration stream");
      } else if (r == 0) {
        if (Clock::now() > deadline)
          stream = DeadlineExceeded("qemu stopped reading the memory stream");
        else
          stream = vm->CheckAlive();
      } else {
        ssize_t w = ::send(conn.get(), buf.data() + off, static_cast<size_t>(n) - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (w < 0)
          stream = ErrnoError("send memory stream to qemu");
        else
          off += static_cast<size_t>(w);
      }
    }
    if (!stream.ok() && (stream.code() == StatusCode::kDeadlineExceeded)) break;
  }
  conn.Reset();  // EOF: a truncated stream fails the load instead of hanging it
  const auto streamed_ms = MsSince(t0);
  // QEMU's own verdict first (it names what it could not load), then ours.
  auto done = WaitMigration(*vm, deadline, "restore: loading the memory stream");
  const bool corrupt = read_all && (sent != m.memory_bytes || static_cast<uint32_t>(crc) != m.memory_crc32);
  std::string corrupt_msg;
  if (corrupt) {
    char got[16], want[16];
    std::snprintf(got, sizeof got, "%08x", static_cast<unsigned>(crc));
    std::snprintf(want, sizeof want, "%08x", m.memory_crc32);
    corrupt_msg = std::string("memory file is corrupt (crc32 ") + got + ", manifest " + want + ", " +
                  std::to_string(sent) + " of " + std::to_string(m.memory_bytes) + " bytes); the guest was not started";
  }
  if (!done.ok()) {
    // A load failure on a file that fails its CRC is data loss; otherwise QEMU's words.
    if (corrupt)
      return Status(StatusCode::kDataLoss, "restore " + dir + ": " + corrupt_msg + "; " + done.status().message());
    return Status(done.status().code(), "restore " + dir + ": " + done.status().message() +
                                            (stream.ok() ? "" : "; stream: " + stream.message()));
  }
  if (!stream.ok()) return stream.WithContext("restore " + dir);
  if (corrupt) return Status(StatusCode::kDataLoss, "restore " + dir + ": " + corrupt_msg);
  const auto loaded_ms = MsSince(t0);
  RETURN_IF_ERROR(vm->Resume().WithContext("restore " + dir));
  LOG_INFO("vmm restored sandbox={} snapshot={} launch_ms={} stream_ms={} loaded_ms={} total_ms={}", s.sandbox_id, dir,
           launched_ms, streamed_ms, loaded_ms, MsSince(t0));
  return vm;
}

}  // namespace airlock::qemu
