// Artefact digests, their sidecars, the Range form served, and the pieces
// of the extent encoding (artefacts.h "Wire"; artefact_hash.h).
#include "cluster/artefacts.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
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

void AppendExtentHeader(std::string& out, char kind, int64_t offset, int64_t length) {
  char h[kExtentHeaderSize];
  h[0] = kind;
  for (int i = 0; i < 8; ++i) h[1 + i] = static_cast<char>(static_cast<uint64_t>(offset) >> (56 - 8 * i));
  for (int i = 0; i < 4; ++i) h[9 + i] = static_cast<char>(static_cast<uint64_t>(length) >> (24 - 8 * i));
  out.append(h, sizeof h);
}

namespace {

std::string_view Trim(std::string_view v) {
  const size_t b = v.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return v.substr(b, v.find_last_not_of(" \t") - b + 1);
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

bool AcceptsExtents(std::string_view accept) {
  while (!accept.empty()) {
    const size_t comma = accept.find(',');
    std::string_view item = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    size_t semi = item.find(';');
    if (!EqualsIgnoreCase(Trim(item.substr(0, semi)), kExtentsType)) continue;
    bool refused = false;
    while (semi != std::string_view::npos) {
      item.remove_prefix(semi + 1);
      semi = item.find(';');
      const std::string_view param = Trim(item.substr(0, semi));
      if (param.size() > 2 && EqualsIgnoreCase(param.substr(0, 2), "q=")) {
        const std::string_view q = param.substr(2);
        refused = q[0] == '0' && q.find_first_not_of("0.") == std::string_view::npos;
      }
    }
    if (!refused) return true;
  }
  return false;
}

StatusOr<bool> ChunkedDecoder::TakeLine(std::string_view& in, size_t limit) {
  const size_t nl = in.find('\n');
  const size_t take = nl == std::string_view::npos ? in.size() : nl + 1;
  if (line_.size() + take > limit)
    return Unavailable("chunked framing: a line over " + std::to_string(limit) + " bytes");
  line_.append(in.substr(0, take));
  in.remove_prefix(take);
  if (nl == std::string_view::npos) return false;
  if (line_.size() < 2 || line_[line_.size() - 2] != '\r') return Unavailable("chunked framing: a line without CRLF");
  line_.resize(line_.size() - 2);
  return true;
}

Status ChunkedDecoder::Feed(std::string_view in, const Out& out) {
  constexpr size_t kMaxSizeLine = 1024, kMaxTrailers = 16 * 1024;
  while (!in.empty()) {
    switch (state_) {
      case State::kSize: {
        ASSIGN_OR_RETURN(bool whole, TakeLine(in, kMaxSizeLine));
        if (!whole) break;
        const std::string_view digits = std::string_view(line_).substr(0, line_.find(';'));
        uint64_t n = 0;
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n, 16);
        if (digits.empty() || digits.size() > 15 || ec != std::errc() || end != digits.data() + digits.size()) {
          return Unavailable("chunked framing: a bad chunk size \"" + line_.substr(0, 40) + "\"");
        }
        line_.clear();
        left_ = n;
        state_ = n > 0 ? State::kData : State::kTrailer;
        break;
      }
      case State::kData: {
        const auto k = static_cast<size_t>(std::min<uint64_t>(left_, in.size()));
        RETURN_IF_ERROR(out(in.substr(0, k)));
        in.remove_prefix(k);
        left_ -= k;
        if (left_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd: {  // CRLF; line_ holds the CR once seen
        if (in[0] != (line_.empty() ? '\r' : '\n')) return Unavailable("chunked framing: a chunk longer than its size");
        in.remove_prefix(1);
        if (line_.empty()) {
          line_ = "\r";
        } else {
          line_.clear();
          state_ = State::kSize;
        }
        break;
      }
      case State::kTrailer: {
        const size_t before = in.size();
        ASSIGN_OR_RETURN(bool whole, TakeLine(in, kMaxTrailers));
        trailer_ += before - in.size();
        if (trailer_ > kMaxTrailers) return Unavailable("chunked framing: trailers over 16 KiB");
        if (!whole) break;
        if (line_.empty()) state_ = State::kDone;
        line_.clear();
        break;
      }
      case State::kDone:
        return Unavailable("chunked framing: bytes after the last chunk");
    }
  }
  return OkStatus();
}

Status ExtentReader::Feed(std::string_view body, const Sinks& sinks) {
  while (!body.empty()) {
    if (data_left_ > 0) {
      const auto k = static_cast<size_t>(std::min<int64_t>(data_left_, static_cast<int64_t>(body.size())));
      RETURN_IF_ERROR(sinks.data(body.substr(0, k)));
      body.remove_prefix(k);
      data_left_ -= static_cast<int64_t>(k);
      off_ += static_cast<int64_t>(k);
      continue;
    }
    const std::string at = "extent record at byte " + std::to_string(off_) + ": ";
    if (off_ == size_) return Unavailable(at + "bytes past the end of the artefact");
    const size_t take = std::min(kExtentHeaderSize - header_.size(), body.size());
    header_.append(body.substr(0, take));
    body.remove_prefix(take);
    if (header_.size() < kExtentHeaderSize) break;
    const auto* h = reinterpret_cast<const unsigned char*>(header_.data());
    uint64_t offset = 0, length = 0;
    for (int i = 0; i < 8; ++i) offset = offset << 8 | h[1 + i];
    for (int i = 0; i < 4; ++i) length = length << 8 | h[9 + i];
    const char kind = header_[0];
    header_.clear();
    if (kind != kExtentData && kind != kExtentZeros) {
      return Unavailable(at + "unknown kind 0x" + HexEncode(&kind, 1));
    }
    if (offset != static_cast<uint64_t>(off_)) {
      return Unavailable(at + "it says byte " + std::to_string(offset) +
                         (offset < static_cast<uint64_t>(off_) ? " (an overlap)" : " (a gap)"));
    }
    if (length == 0 || length > static_cast<uint64_t>(size_ - off_)) {
      return Unavailable(at + "length " + std::to_string(length) + " with " + std::to_string(size_ - off_) +
                         " bytes left");
    }
    if (kind == kExtentZeros) {
      RETURN_IF_ERROR(sinks.zeros(static_cast<int64_t>(length)));
      off_ += static_cast<int64_t>(length);
    } else {
      data_left_ = static_cast<int64_t>(length);
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
