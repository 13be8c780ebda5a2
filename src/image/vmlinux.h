// Extracting the uncompressed kernel (vmlinux, an ELF64 x86-64 file) from an
// x86 bzImage, as Firecracker needs it and QEMU microvm boots it via PVH.
//
// Input: the bytes of a bzImage (Linux x86 boot protocol >= 2.08). The
// protected-mode code starts at (setup_sects + 1) * 512 (setup_sects at 0x1f1,
// 0 meaning 4); the compressed payload lies at payload_offset (0x248) from
// there, payload_length (0x24c) bytes long. Supported payload: LZ4 legacy
// frame (magic 0x184C2102; blocks each prefixed by a 4-byte LE compressed
// size, each decompressing to <= 8 MiB; the kernel build appends a 4-byte LE
// total size, which is checked when present).
//
// Errors (InvalidArgument): not a bzImage (no "HdrS" at 0x202, or too short),
// boot protocol too old, payload out of bounds, unsupported compression (the
// message names the format detected and its magic bytes), corrupted LZ4 block,
// or the result not being an ELF64 x86-64 file.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace airlock::image {

StatusOr<std::string> ExtractVmlinux(std::string_view bzimage);

// OK if `elf` starts with an ELF64, little-endian, x86-64 header.
Status CheckElf64X86(std::string_view elf);

// The LZ4 legacy-frame decoder used above, exposed for tests.
StatusOr<std::string> DecompressLz4Legacy(std::string_view in);

}  // namespace airlock::image
