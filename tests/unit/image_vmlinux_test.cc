// ExtractVmlinux on synthetic bzImages: a boot header plus an LZ4 legacy
// payload of a fake ELF, and corrupted variants.
#include <gtest/gtest.h>
#include <lz4.h>

#include <cstdint>
#include <string>

#include "image/vmlinux.h"

namespace airlock::image {
namespace {

void PutLe32(std::string& b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::string Le32(uint32_t v) {
  std::string s(4, '\0');
  PutLe32(s, 0, v);
  return s;
}

// A fake ELF64 x86-64 "kernel" of `size` bytes.
std::string FakeElf(size_t size, uint16_t machine = 62) {
  std::string e(size, '\0');
  for (size_t i = 64; i < size; ++i) e[i] = static_cast<char>((i * 7) % 251);
  e.replace(0, 4,
            "\x7f"
            "ELF");
  e[4] = 2;  // ELFCLASS64
  e[5] = 1;  // little-endian
  e[6] = 1;
  e[16] = 2;  // ET_EXEC
  e[18] = static_cast<char>(machine & 0xff);
  e[19] = static_cast<char>(machine >> 8);
  return e;
}

// LZ4 legacy frame: magic, then per 8 MiB block its compressed size and data,
// then (as the kernel build does) the 4-byte uncompressed size.
std::string Lz4Legacy(const std::string& data, bool trailer = true) {
  std::string out = Le32(0x184C2102);
  const size_t kBlock = 8u << 20;
  for (size_t pos = 0; pos < data.size(); pos += kBlock) {
    size_t n = std::min(kBlock, data.size() - pos);
    std::string c(LZ4_compressBound(static_cast<int>(n)), '\0');
    int cn = LZ4_compress_default(data.data() + pos, c.data(), static_cast<int>(n),
                                  static_cast<int>(c.size()));
    out += Le32(static_cast<uint32_t>(cn));
    out.append(c.data(), cn);
  }
  if (trailer) out += Le32(static_cast<uint32_t>(data.size()));
  return out;
}

// A bzImage: setup_sects=3 (4 * 512 bytes of real-mode code), "HdrS",
// protocol 2.15, the payload at payload_offset into the protected-mode code.
std::string FakeBzImage(const std::string& payload, uint8_t setup_sects = 3) {
  size_t pm = (size_t{setup_sects == 0 ? 4u : setup_sects} + 1) * 512;
  const size_t kPayloadOffset = 0x3c0;
  std::string b(pm + kPayloadOffset, '\0');
  b[0x1f1] = static_cast<char>(setup_sects);
  b.replace(0x202, 4, "HdrS");
  b[0x206] = 0x0f;
  b[0x207] = 0x02;
  PutLe32(b, 0x248, kPayloadOffset);
  PutLe32(b, 0x24c, static_cast<uint32_t>(payload.size()));
  b += payload;
  b += std::string(100, '\xcc');  // trailing code after the payload
  return b;
}

TEST(VmlinuxTest, ExtractsLz4LegacyPayload) {
  std::string elf = FakeElf(100000);
  auto out = ExtractVmlinux(FakeBzImage(Lz4Legacy(elf)));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, elf);
}

TEST(VmlinuxTest, ExtractsMultiBlockPayloadAndZeroSetupSects) {
  std::string elf = FakeElf((8u << 20) * 2 + 12345);  // three blocks
  auto out = ExtractVmlinux(FakeBzImage(Lz4Legacy(elf), /*setup_sects=*/0));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->size(), elf.size());
  EXPECT_TRUE(*out == elf);
}

TEST(VmlinuxTest, AcceptsPayloadWithoutSizeTrailer) {
  std::string elf = FakeElf(5000);
  auto out = ExtractVmlinux(FakeBzImage(Lz4Legacy(elf, /*trailer=*/false)));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, elf);
}

TEST(VmlinuxTest, RejectsNonBzImage) {
  auto out = ExtractVmlinux(std::string(4096, 'x'));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("not a bzImage"), std::string::npos);
  EXPECT_FALSE(ExtractVmlinux("short").ok());
}

TEST(VmlinuxTest, NamesUnsupportedCompression) {
  std::string gz = "\x1f\x8b\x08\x00" + std::string(60, '\0');
  auto out = ExtractVmlinux(FakeBzImage(gz));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("gzip"), std::string::npos) << out.status().message();
  EXPECT_NE(out.status().message().find("1f8b0800"), std::string::npos);

  std::string zstd = "\x28\xb5\x2f\xfd" + std::string(60, '\0');
  out = ExtractVmlinux(FakeBzImage(zstd));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("zstd"), std::string::npos) << out.status().message();
}

TEST(VmlinuxTest, RejectsCorruptedBlock) {
  std::string payload = Lz4Legacy(FakeElf(100000));
  // Garble the compressed data of the first block.
  for (size_t i = 8; i < 200; ++i) payload[i] = static_cast<char>(0xff);
  auto out = ExtractVmlinux(FakeBzImage(payload));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("corrupted"), std::string::npos) << out.status().message();
}

TEST(VmlinuxTest, RejectsBlockSizeBeyondInput) {
  std::string payload = Lz4Legacy(FakeElf(100000));
  PutLe32(payload, 4, 0x7fffff);  // first block claims far more than there is
  auto out = ExtractVmlinux(FakeBzImage(payload));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("corrupted"), std::string::npos) << out.status().message();
}

TEST(VmlinuxTest, RejectsWrongSizeTrailer) {
  std::string elf = FakeElf(5000);
  std::string payload = Lz4Legacy(elf, false) + Le32(4999);
  auto out = ExtractVmlinux(FakeBzImage(payload));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("trailing size"), std::string::npos);
}

TEST(VmlinuxTest, RejectsPayloadOutOfBounds) {
  std::string b = FakeBzImage(Lz4Legacy(FakeElf(1000)));
  PutLe32(b, 0x24c, 0x7fffffff);
  auto out = ExtractVmlinux(b);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("outside"), std::string::npos);
}

TEST(VmlinuxTest, RejectsNonX86Elf) {
  auto out = ExtractVmlinux(FakeBzImage(Lz4Legacy(FakeElf(1000, /*machine=*/183))));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("x86-64"), std::string::npos);
  out = ExtractVmlinux(FakeBzImage(Lz4Legacy(std::string(1000, 'a'))));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("not an ELF"), std::string::npos);
}

TEST(VmlinuxTest, RejectsOldBootProtocol) {
  std::string b = FakeBzImage(Lz4Legacy(FakeElf(1000)));
  b[0x206] = 0x04;  // 2.04
  auto out = ExtractVmlinux(b);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("2.04"), std::string::npos);
}

}  // namespace
}  // namespace airlock::image
