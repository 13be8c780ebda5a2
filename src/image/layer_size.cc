#include "image/layer_size.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/fd.h"
#include "common/subprocess.h"

namespace airlock::image {
namespace {
// A named namespace inside the anonymous one: the image library may be
// built as one unity file.
namespace layer_size {

constexpr size_t kBlock = 512;
constexpr uint64_t kMaxExtensionBytes = 1 << 20;  // a PAX or GNU long-name header (Go's archive/tar: 1 MiB)
constexpr uint64_t kMiB = 1 << 20;

Status DataLoss(std::string message) { return Status(StatusCode::kDataLoss, std::move(message)); }

uint64_t RoundUp(uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// A numeric header field: octal text, or base-256 when the top bit of the
// first byte is set (GNU, for sizes of 8 GiB and more).
bool ParseNumber(const unsigned char* f, size_t n, uint64_t& out) {
  out = 0;
  if (f[0] & 0x80) {
    if (f[0] == 0xff) return false;  // negative
    uint64_t v = f[0] & 0x7f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | f[i];
    }
    out = v;
    return true;
  }
  size_t i = 0;
  while (i < n && (f[i] == ' ' || f[i] == 0)) ++i;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (out >> 60) return false;
    out = out * 8 + (f[i] - '0');
  }
  return true;
}

bool ChecksumOk(const unsigned char* h) {
  uint64_t want;
  if (!ParseNumber(h + 148, 8, want)) return false;
  uint64_t u = 0;
  int64_t s = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    u += c;
    s += static_cast<signed char>(c);
  }
  return want == u || static_cast<int64_t>(want) == s;
}

// Types whose size field is ignored (no data follows), as Go's archive/tar
// reads them: hard link, symlink, char, block, directory, FIFO.
bool HeaderOnly(char type) { return type >= '1' && type <= '6'; }

}  // namespace layer_size
}  // namespace

Status TarCounter::PaxRecords(std::string_view text) {
  using layer_size::DataLoss;
  // "<len> <key>=<value>\n" records.
  while (!text.empty()) {
    size_t sp = text.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp > 20) return DataLoss("malformed PAX header");
    uint64_t len = 0;
    for (size_t i = 0; i < sp; ++i) {
      if (text[i] < '0' || text[i] > '9') return DataLoss("malformed PAX header");
      len = len * 10 + static_cast<uint64_t>(text[i] - '0');
    }
    if (len <= sp + 1 || len > text.size()) return DataLoss("malformed PAX header");
    std::string_view rec = text.substr(sp + 1, len - sp - 1);
    text.remove_prefix(len);
    if (!rec.empty() && rec.back() == '\n') rec.remove_suffix(1);
    size_t eq = rec.find('=');
    if (eq == std::string_view::npos) return DataLoss("malformed PAX record");
    std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
    auto number = [&](uint64_t& out) -> Status {
      out = 0;
      if (value.empty() || value.size() > 19) return DataLoss("PAX " + std::string(key) + " is not a size");
      for (char c : value) {
        if (c < '0' || c > '9') return DataLoss("PAX " + std::string(key) + " is not a size");
        out = out * 10 + static_cast<uint64_t>(c - '0');
      }
      return OkStatus();
    };
    if (key == "size") {
      RETURN_IF_ERROR(number(pax_size_));
      pax_has_size_ = true;
    } else if (key == "GNU.sparse.realsize" || key == "GNU.sparse.size") {
      RETURN_IF_ERROR(number(pax_real_size_));
      pax_has_real_size_ = true;
    }
  }
  return OkStatus();
}

Status TarCounter::Header(const unsigned char* h) {
  using namespace layer_size;
  if (std::all_of(h, h + kBlock, [](unsigned char c) { return c == 0; })) {
    ++zero_blocks_;
    return OkStatus();
  }
  if (zero_blocks_ > 0) return DataLoss("a tar header after the end-of-archive block");
  if (!ChecksumOk(h)) return DataLoss("not a tar archive (bad header checksum)");
  uint64_t size;
  if (!ParseNumber(h + 124, 12, size)) return DataLoss("a tar header with a bad size field");
  const char type = static_cast<char>(h[156]);
  switch (type) {
    case 'x':  // PAX: records for the next entry
    case 'g':  // PAX global
    case 'L':  // GNU long name
    case 'K':  // GNU long link name
      if (size > kMaxExtensionBytes) return DataLoss("a tar extension header larger than 1 MiB");
      collect_ = type == 'x';
      pax_.clear();
      pax_left_ = size;
      skip_ = RoundUp(size);
      if (skip_ == 0 && collect_) collect_ = false;
      return OkStatus();
    default:
      break;
  }
  uint64_t physical = HeaderOnly(type) ? 0 : (pax_has_size_ ? pax_size_ : size);
  uint64_t logical = physical;
  if (!HeaderOnly(type)) {
    if (pax_has_real_size_) {
      logical = std::max(logical, pax_real_size_);
    } else if (type == 'S') {  // old GNU sparse: the real size at 483
      uint64_t real;
      if (ParseNumber(h + 483, 12, real)) logical = std::max(logical, real);
    }
  }
  pax_has_size_ = pax_has_real_size_ = false;
  tally_.entries += 1;
  tally_.bytes += kBlock + std::min<uint64_t>(logical, UINT64_MAX / 4);
  skip_ = RoundUp(physical);
  if (tally_.bytes > limit_) {
    return ResourceExhausted("expands to more than " + std::to_string(limit_ / kMiB) + " MiB (" +
                             std::to_string(tally_.entries) + " entries counted)");
  }
  return OkStatus();
}

Status TarCounter::Feed(std::string_view data) {
  while (!data.empty() && !done()) {
    if (skip_ > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(skip_, data.size()));
      if (collect_ && pax_left_ > 0) {
        const size_t c = static_cast<size_t>(std::min<uint64_t>(n, pax_left_));
        pax_.append(data.substr(0, c));
        pax_left_ -= c;
      }
      skip_ -= n;
      data.remove_prefix(n);
      if (skip_ == 0 && collect_) {
        collect_ = false;
        RETURN_IF_ERROR(PaxRecords(pax_));
        pax_.clear();
      }
      continue;
    }
    if (header_.empty() && data.size() >= layer_size::kBlock) {
      RETURN_IF_ERROR(Header(reinterpret_cast<const unsigned char*>(data.data())));
      data.remove_prefix(layer_size::kBlock);
      continue;
    }
    const size_t c = std::min(layer_size::kBlock - header_.size(), data.size());
    header_.append(data.substr(0, c));
    data.remove_prefix(c);
    if (header_.size() == layer_size::kBlock) {
      std::string block = std::move(header_);
      header_.clear();
      RETURN_IF_ERROR(Header(reinterpret_cast<const unsigned char*>(block.data())));
    }
  }
  return OkStatus();
}

Status TarCounter::Finish() const {
  if (done() || (header_.empty() && skip_ == 0)) return OkStatus();
  return layer_size::DataLoss("the tar archive is truncated");
}

StatusOr<TarTally> TallyLayer(const std::string& path, uint64_t limit) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  unsigned char magic[4] = {};
  ssize_t m = ::pread(fd.get(), magic, sizeof magic, 0);
  if (m < 0) return ErrnoError("read " + path);
  TarCounter counter(limit);
  std::string in(1 << 16, '\0'), out(1 << 18, '\0');
  auto read_some = [&](int from, size_t& got) -> Status {
    for (;;) {
      ssize_t r = ::read(from, in.data(), in.size());
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoError("read " + path);
      got = static_cast<size_t>(r);
      return OkStatus();
    }
  };
  auto with_path = [&](const Status& st) { return Status(st.code(), path + ": " + st.message()); };

  if (m >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    // gzip, possibly several members (Go's reader reads them all).
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 16) != Z_OK) return Internal("inflateInit2 failed");
    struct End {
      z_stream* z;
      ~End() { inflateEnd(z); }
    } end{&zs};
    bool eof = false;
    while (!counter.done()) {
      if (zs.avail_in == 0) {
        if (eof) break;
        size_t got = 0;
        RETURN_IF_ERROR(read_some(fd.get(), got));
        if (got == 0) {
          eof = true;
          break;
        }
        zs.next_in = reinterpret_cast<Bytef*>(in.data());
        zs.avail_in = static_cast<uInt>(got);
      }
      zs.next_out = reinterpret_cast<Bytef*>(out.data());
      zs.avail_out = static_cast<uInt>(out.size());
      int rc = inflate(&zs, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        return layer_size::DataLoss(path + ": corrupt gzip data" + (zs.msg ? std::string(" (") + zs.msg + ")" : ""));
      const size_t produced = out.size() - zs.avail_out;
      if (Status st = counter.Feed(std::string_view(out.data(), produced)); !st.ok()) return with_path(st);
      if (rc == Z_STREAM_END && inflateReset(&zs) != Z_OK) return Internal("inflateReset failed");
    }
  } else if (m >= 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd) {
    // zstd: the zstd program decompresses into a pipe.
    if (!FindExecutable("zstd").ok())
      return FailedPrecondition("the image has a zstd-compressed layer and the server has no zstd program");
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe");
    UniqueFd rd(p[0]), wr(p[1]);
    SpawnOptions so;
    so.argv = {"zstd", "-dcq", "--", path};
    so.stdout_fd = wr.get();
    so.stderr_to_devnull = true;
    ASSIGN_OR_RETURN(Child child, Spawn(so));
    wr.Reset();
    bool eof = false;
    while (!counter.done()) {
      size_t got = 0;
      RETURN_IF_ERROR(read_some(rd.get(), got));
      if (got == 0) {
        eof = true;
        break;
      }
      if (Status st = counter.Feed(std::string_view(in.data(), got)); !st.ok()) return with_path(st);
    }
    if (eof) {
      ASSIGN_OR_RETURN(ExitStatus es, child.Wait());
      if (!es.success()) return layer_size::DataLoss(path + ": corrupt zstd data (zstd " + es.ToString() + ")");
    }
    // Stopped early: the child is killed and reaped with `child`.
  } else {
    while (!counter.done()) {
      size_t got = 0;
      RETURN_IF_ERROR(read_some(fd.get(), got));
      if (got == 0) break;
      if (Status st = counter.Feed(std::string_view(in.data(), got)); !st.ok()) return with_path(st);
    }
  }
  if (Status st = counter.Finish(); !st.ok()) return with_path(st);
  return counter.tally();
}

StatusOr<TarTally> CheckUnpackedSize(const std::vector<std::string>& layers, uint64_t max_bytes) {
  TarTally total;
  for (size_t i = 0; i < layers.size(); ++i) {
    auto t = TallyLayer(layers[i], max_bytes - total.bytes);
    if (!t.ok()) {
      if (t.status().code() == StatusCode::kResourceExhausted) {
        return ResourceExhausted("the image's layers expand to more than " +
                                 std::to_string(max_bytes / layer_size::kMiB) + " MiB when unpacked (passed in layer " +
                                 std::to_string(i + 1) + " of " + std::to_string(layers.size()) +
                                 "): the server's cap on an image's size (serve --max-image-unpack)");
      }
      return t.status().WithContext("layer " + std::to_string(i + 1) + " of " + std::to_string(layers.size()));
    }
    total.bytes += t->bytes;
    total.entries += t->entries;
  }
  return total;
}

}  // namespace airlock::image
