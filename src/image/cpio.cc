#include "image/cpio.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>

namespace airlock::image {
namespace {

void Pad4(std::string& s) {
  while (s.size() % 4 != 0) s.push_back('\0');
}

std::string_view StripSlash(std::string_view p) {
  while (!p.empty() && p.front() == '/') p.remove_prefix(1);
  return p;
}

}  // namespace

void CpioWriter::AddEntry(std::string_view path, uint32_t mode, std::string_view data,
                          unsigned rmajor, unsigned rminor) {
  std::string name(StripSlash(path));
  char hdr[111];
  std::snprintf(hdr, sizeof hdr, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
                next_ino_++, mode, 0u, 0u, S_ISDIR(mode) ? 2u : 1u, 0u,
                static_cast<unsigned>(data.size()), 0u, 0u, rmajor, rminor,
                static_cast<unsigned>(name.size() + 1), 0u);
  buf_.append(hdr, 110);
  buf_.append(name);
  buf_.push_back('\0');
  Pad4(buf_);
  buf_.append(data);
  Pad4(buf_);
}

void CpioWriter::AddDirectory(std::string_view path, mode_t perm) {
  AddEntry(path, S_IFDIR | (perm & 07777), {}, 0, 0);
}
void CpioWriter::AddFile(std::string_view path, std::string_view data, mode_t perm) {
  AddEntry(path, S_IFREG | (perm & 07777), data, 0, 0);
}
void CpioWriter::AddSymlink(std::string_view path, std::string_view target) {
  AddEntry(path, S_IFLNK | 0777, target, 0, 0);
}
void CpioWriter::AddCharDevice(std::string_view path, unsigned major, unsigned minor, mode_t perm) {
  AddEntry(path, S_IFCHR | (perm & 07777), {}, major, minor);
}

std::string CpioWriter::Finish() {
  next_ino_ = 0;  // the trailer conventionally has inode 0
  AddEntry("TRAILER!!!", 0, {}, 0, 0);
  next_ino_ = 1;
  return std::move(buf_);
}

StatusOr<std::vector<CpioEntry>> ReadCpio(std::string_view a) {
  std::vector<CpioEntry> out;
  size_t pos = 0;
  auto field = [&](size_t i, uint32_t* v) -> bool {
    std::string h(a.substr(pos + 6 + 8 * i, 8));
    char* end = nullptr;
    unsigned long x = std::strtoul(h.c_str(), &end, 16);
    *v = static_cast<uint32_t>(x);
    return end == h.c_str() + 8;
  };
  for (;;) {
    if (a.size() - pos < 110) {
      return InvalidArgument("cpio: truncated header at offset " + std::to_string(pos));
    }
    if (a.substr(pos, 6) != "070701") {
      return InvalidArgument("cpio: bad magic at offset " + std::to_string(pos));
    }
    uint32_t f[13];
    for (size_t i = 0; i < 13; ++i) {
      if (!field(i, &f[i])) {
        return InvalidArgument("cpio: bad header field at offset " + std::to_string(pos));
      }
    }
    uint32_t filesize = f[6], namesize = f[11];
    size_t name_at = pos + 110;
    if (namesize == 0 || a.size() - name_at < namesize) {
      return InvalidArgument("cpio: truncated name at offset " + std::to_string(pos));
    }
    std::string name(a.substr(name_at, namesize - 1));
    size_t data_at = (name_at + namesize + 3) & ~size_t{3};
    if (data_at > a.size() || a.size() - data_at < filesize) {
      return InvalidArgument("cpio: truncated data for " + name);
    }
    if (name == "TRAILER!!!") break;
    CpioEntry e;
    e.path = std::move(name);
    e.mode = f[1];
    e.uid = f[2];
    e.gid = f[3];
    e.rdev_major = f[9];
    e.rdev_minor = f[10];
    e.data = std::string(a.substr(data_at, filesize));
    out.push_back(std::move(e));
    pos = (data_at + filesize + 3) & ~size_t{3};
  }
  return out;
}

StatusOr<std::string> Gzip(std::string_view data, int level) {
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
    return Internal("deflateInit2 failed");
  }
  std::string out(deflateBound(&zs, data.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&zs, Z_FINISH);
  size_t n = zs.total_out;
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return Internal("deflate failed: " + std::to_string(rc));
  out.resize(n);
  return out;
}

}  // namespace airlock::image
