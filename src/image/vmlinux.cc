#include "image/vmlinux.h"

#include <lz4.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/hex.h"

namespace airlock::image {
namespace {

constexpr uint32_t kLz4LegacyMagic = 0x184C2102;
constexpr size_t kLz4LegacyBlock = 8u << 20;  // 8 MiB per block
constexpr size_t kMaxVmlinux = 1u << 30;      // sanity cap: 1 GiB

uint32_t Le32(std::string_view b, size_t off) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data() + off);
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint16_t Le16(std::string_view b, size_t off) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data() + off);
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

std::string HexBytes(std::string_view b, size_t n) { return HexEncode(b.substr(0, n)); }

// Names the compression of a payload from its magic, for error messages.
std::string_view CompressionName(std::string_view p) {
  auto starts = [&](std::string_view m) { return p.substr(0, m.size()) == m; };
  if (starts("\x1f\x8b")) return "gzip";
  if (starts(std::string_view("\xfd"
                              "7zXZ\0",
                              6)))
    return "xz";
  if (starts("\x28\xb5\x2f\xfd")) return "zstd";
  if (starts("BZh")) return "bzip2";
  if (starts(std::string_view("\x5d\x00\x00", 3))) return "lzma";
  if (starts("\x89LZO")) return "lzo";
  if (starts("\x04\x22\x4d\x18")) return "lz4 (modern frame)";
  return "unknown";
}

}  // namespace

StatusOr<std::string> DecompressLz4Legacy(std::string_view in) {
  if (in.size() < 4 || Le32(in, 0) != kLz4LegacyMagic) {
    return InvalidArgument("not an LZ4 legacy frame (magic " + HexBytes(in, 4) + ")");
  }
  size_t pos = 4;
  std::string out;
  const int bound = LZ4_compressBound(static_cast<int>(kLz4LegacyBlock));
  while (in.size() - pos >= 4) {
    uint32_t chunk = Le32(in, pos);
    if (chunk == kLz4LegacyMagic) {  // concatenated frames
      pos += 4;
      continue;
    }
    if (in.size() - pos == 4) {
      // The kernel build appends the uncompressed size; check it.
      if (chunk != static_cast<uint32_t>(out.size())) {
        return InvalidArgument("LZ4 payload: trailing size " + std::to_string(chunk) +
                               " does not match decompressed size " + std::to_string(out.size()));
      }
      pos += 4;
      break;
    }
    pos += 4;
    if (chunk == 0 || chunk > static_cast<uint32_t>(bound) || chunk > in.size() - pos) {
      return InvalidArgument("LZ4 payload corrupted: block at offset " + std::to_string(pos - 4) +
                             " claims " + std::to_string(chunk) + " bytes, " +
                             std::to_string(in.size() - pos) + " left");
    }
    if (out.size() + kLz4LegacyBlock > kMaxVmlinux) {
      return InvalidArgument("LZ4 payload decompresses to more than 1 GiB");
    }
    size_t old = out.size();
    out.resize(old + kLz4LegacyBlock);
    int n = LZ4_decompress_safe(in.data() + pos, out.data() + old, static_cast<int>(chunk),
                                static_cast<int>(kLz4LegacyBlock));
    if (n < 0) {
      return InvalidArgument("LZ4 payload corrupted: block at offset " + std::to_string(pos - 4) +
                             " does not decompress (LZ4 error " + std::to_string(n) + ")");
    }
    out.resize(old + static_cast<size_t>(n));
    pos += chunk;
  }
  if (pos != in.size()) {
    return InvalidArgument("LZ4 payload: " + std::to_string(in.size() - pos) +
                           " stray bytes at the end");
  }
  return out;
}

Status CheckElf64X86(std::string_view elf) {
  if (elf.size() < 64 || elf.substr(0, 4) !=
                             "\x7f"
                             "ELF") {
    return InvalidArgument("decompressed kernel is not an ELF file (starts with " +
                           HexBytes(elf, 4) + ")");
  }
  if (elf[4] != 2) return InvalidArgument("decompressed kernel is not ELF64 (EI_CLASS != 2)");
  if (elf[5] != 1) return InvalidArgument("decompressed kernel is not little-endian ELF");
  uint16_t machine = Le16(elf, 18);
  if (machine != 62) {
    return InvalidArgument("decompressed kernel is not x86-64 (e_machine " +
                           std::to_string(machine) + ", want 62)");
  }
  return OkStatus();
}

StatusOr<std::string> ExtractVmlinux(std::string_view bz) {
  if (bz.size() < 0x250 || bz.substr(0x202, 4) != "HdrS") {
    return InvalidArgument("not a bzImage: no \"HdrS\" boot header at 0x202");
  }
  uint16_t version = Le16(bz, 0x206);
  if (version < 0x0208) {
    char v[16];
    std::snprintf(v, sizeof v, "%u.%02u", version >> 8, version & 0xff);
    return InvalidArgument(std::string("bzImage boot protocol ") + v +
                           " has no payload fields (need >= 2.08)");
  }
  size_t setup_sects = static_cast<unsigned char>(bz[0x1f1]);
  if (setup_sects == 0) setup_sects = 4;
  size_t pm_start = (setup_sects + 1) * 512;
  size_t off = Le32(bz, 0x248);
  size_t len = Le32(bz, 0x24c);
  if (pm_start > bz.size() || off > bz.size() - pm_start || len > bz.size() - pm_start - off) {
    return InvalidArgument("bzImage payload (offset " + std::to_string(off) + ", length " +
                           std::to_string(len) + ") lies outside the " + std::to_string(bz.size()) +
                           "-byte file");
  }
  std::string_view payload = bz.substr(pm_start + off, len);
  if (payload.size() < 4 || Le32(payload, 0) != kLz4LegacyMagic) {
    return InvalidArgument(
        "unsupported kernel compression: " + std::string(CompressionName(payload)) +
        " (payload magic " + HexBytes(payload, 4) + "); only LZ4 legacy (02214c18) is supported");
  }
  ASSIGN_OR_RETURN(std::string elf, DecompressLz4Legacy(payload));
  RETURN_IF_ERROR(CheckElf64X86(elf));
  return elf;
}

}  // namespace airlock::image
