// Artefact digests, their sidecars and the Range form served (artefacts.h).
#include "cluster/artefacts.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>

#include "cluster/artefact_hash.h"
#include "common/fd.h"
#include "common/hex.h"
#include "common/log.h"

namespace airlock::cluster {

namespace artefact_internal {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) { Reset(); }
Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }
void Sha256::Reset() { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
void Sha256::Update(std::string_view bytes) { EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()); }
void Sha256::UpdateZeros(int64_t n) {
  static const std::string kZeros(1 << 20, '\0');
  while (n > 0) {
    const auto k = static_cast<size_t>(std::min<int64_t>(n, static_cast<int64_t>(kZeros.size())));
    Update(std::string_view(kZeros.data(), k));
    n -= static_cast<int64_t>(k);
  }
}
std::string Sha256::FinalHex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx_, md, &n);
  return HexEncode(md, n);
}

Status HashPrefix(int fd, int64_t len, Sha256& h, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("fstat " + path);
  if (st.st_size < len) {
    return OutOfRange(path + " holds " + std::to_string(st.st_size) + " bytes, fewer than " + std::to_string(len));
  }
  std::string buf(1 << 20, '\0');
  bool holes = true;  // SEEK_DATA works here; false: read everything
  int64_t off = 0;
  while (off < len) {
    int64_t data_end = len;
    if (holes) {
      off_t data = ::lseek(fd, off, SEEK_DATA);
      if (data < 0 && errno == ENXIO) data = len;  // only a hole from here on
      if (data < 0) {
        holes = false;  // EINVAL: the file system cannot say
      } else if (data > off) {
        const int64_t to = std::min<int64_t>(data, len);
        h.UpdateZeros(to - off);
        off = to;
        continue;
      } else {
        off_t hole = ::lseek(fd, off, SEEK_HOLE);
        if (hole > off) data_end = std::min<int64_t>(hole, len);
      }
    }
    while (off < data_end) {
      const auto want = static_cast<size_t>(std::min<int64_t>(data_end - off, static_cast<int64_t>(buf.size())));
      ssize_t n = ::pread(fd, buf.data(), want, off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("read " + path);
      if (n == 0) return OutOfRange(path + " ended at byte " + std::to_string(off) + " while hashed");
      h.Update(std::string_view(buf.data(), static_cast<size_t>(n)));
      off += n;
    }
  }
  return OkStatus();
}

}  // namespace artefact_internal

namespace {

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::string SidecarLine(const std::string& sha256, const struct stat& st) {
  return sha256 + " " + std::to_string(st.st_size) + " " + std::to_string(MtimeNs(st)) + " " +
         std::to_string(static_cast<uint64_t>(st.st_ino)) + "\n";
}

// The sidecar's digest when it describes `st` (size, mtime, inode).
std::optional<std::string> ReadSidecar(const std::string& path, const struct stat& st) {
  UniqueFd fd(::open((path + ".sha256").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  char buf[256];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n <= 0 || n == static_cast<ssize_t>(sizeof buf)) return std::nullopt;
  std::string line(buf, static_cast<size_t>(n));
  if (line.size() < 66 || !IsArtefactDigest(std::string_view(line).substr(0, 64))) return std::nullopt;
  if (line != SidecarLine(line.substr(0, 64), st)) return std::nullopt;
  return line.substr(0, 64);
}

}  // namespace

bool IsArtefactDigest(std::string_view digest) {
  return digest.size() == 64 && std::all_of(digest.begin(), digest.end(),
                                            [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Status WriteDigestSidecar(const std::string& path, const std::string& sha256) {
  if (!IsArtefactDigest(sha256)) return InvalidArgument("not a SHA-256 digest: " + sha256);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("stat " + path);
  static std::atomic<uint64_t> seq{0};
  const std::string sidecar = path + ".sha256";
  const std::string tmp = sidecar + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++seq);
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return ErrnoError("open " + tmp);
  const std::string line = SidecarLine(sha256, st);
  if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    Status s = ErrnoError("write " + tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  fd.Reset();
  if (::rename(tmp.c_str(), sidecar.c_str()) != 0) {
    Status s = ErrnoError("rename " + tmp + " to " + sidecar);
    ::unlink(tmp.c_str());
    return s;
  }
  return OkStatus();
}

StatusOr<FileDigest> DigestOf(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("fstat " + path);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + " is not a regular file");
  FileDigest d;
  d.size = st.st_size;
  d.allocated = static_cast<int64_t>(st.st_blocks) * 512;
  if (auto cached = ReadSidecar(path, st)) {
    d.sha256 = std::move(*cached);
    return d;
  }
  artefact_internal::Sha256 h;
  RETURN_IF_ERROR(artefact_internal::HashPrefix(fd.get(), st.st_size, h, path));
  d.sha256 = h.FinalHex();
  struct stat after {};
  if (::fstat(fd.get(), &after) != 0) return ErrnoError("fstat " + path);
  if (after.st_size != st.st_size || MtimeNs(after) != MtimeNs(st)) {
    return Unavailable(path + " changed while it was hashed");
  }
  // A cache only: a directory we cannot write costs a hash next time.
  if (Status s = WriteDigestSidecar(path, d.sha256); !s.ok())
    LOG_DEBUG("artefacts: no digest sidecar: {}", s.message());
  return d;
}

StatusOr<std::optional<int64_t>> ParseArtefactRange(std::string_view value) {
  if (value.empty()) return std::optional<int64_t>();
  constexpr std::string_view kUnit = "bytes=";
  const auto bad = [&] {
    return InvalidArgument("Range \"" + std::string(value.substr(0, 64)) + "\": only \"bytes=N-\" is served");
  };
  if (value.substr(0, kUnit.size()) != kUnit || value.back() != '-') return bad();
  std::string_view digits = value.substr(kUnit.size(), value.size() - kUnit.size() - 1);
  if (digits.empty() || digits.size() > 18) return bad();
  int64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n < 0) return bad();
  return std::optional<int64_t>(n);
}

}  // namespace airlock::cluster
