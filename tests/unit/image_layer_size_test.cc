// What an OCI layer expands to, counted from its tar headers before umoci
// unpacks it (image/layer_size.h; issue 32 item 5: a 4 MB layer unpacked to
// about 3 GiB on the host).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "image/command.h"
#include "image/fs_util.h"
#include "image/layer_size.h"
#include "scoped_dir.h"

namespace airlock::image {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// A ustar header block; `size` octal when it fits 11 digits, else base-256.
std::string Header(const std::string& name, uint64_t size, char type = '0') {
  std::string h(512, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 99));
  std::snprintf(h.data() + 100, 8, "%07o", 0644);
  std::snprintf(h.data() + 108, 8, "%07o", 0);
  std::snprintf(h.data() + 116, 8, "%07o", 0);
  if (size < (1ull << 33)) {
    std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  } else {
    h[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) h[135 - i] = static_cast<char>((size >> (8 * i)) & 0xff);
  }
  std::snprintf(h.data() + 136, 12, "%011o", 0);
  h[156] = type;
  std::memcpy(h.data() + 257, "ustar\0" "00", 8);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  return h;
}
std::string Pad(std::string data) {
  data.resize((data.size() + 511) / 512 * 512, '\0');
  return data;
}
std::string Entry(const std::string& name, const std::string& data) { return Header(name, data.size()) + Pad(data); }
std::string End() { return std::string(1024, '\0'); }
std::string Pax(const std::string& records) { return Header("PaxHeaders/x", records.size(), 'x') + Pad(records); }
std::string PaxRecord(const std::string& kv) {
  // "<len> key=value\n", len counting its own digits.
  const size_t n = kv.size() + 2;
  for (size_t digits = 1;; ++digits) {
    if (std::to_string(n + digits).size() == digits) return std::to_string(n + digits) + " " + kv + "\n";
  }
}

StatusOr<TarTally> Count(const std::string& tar, uint64_t limit, size_t chunk) {
  TarCounter c(limit);
  for (size_t i = 0; i < tar.size(); i += chunk) {
    RETURN_IF_ERROR(c.Feed(std::string_view(tar).substr(i, chunk)));
    if (c.done()) break;
  }
  RETURN_IF_ERROR(c.Finish());
  return c.tally();
}

// gzip of `parts` in order, zeros(n) standing for n zero bytes, streamed
// through deflate (so a bomb never exists uncompressed).
struct Part {
  std::string bytes;
  uint64_t zeros = 0;
};
void WriteGzip(const std::string& path, const std::vector<Part>& parts) {
  gzFile f = gzopen(path.c_str(), "wb1");
  ASSERT_NE(f, nullptr);
  std::string zeros(1 << 20, '\0');
  for (const auto& p : parts) {
    if (!p.bytes.empty()) {
      ASSERT_EQ(gzwrite(f, p.bytes.data(), static_cast<unsigned>(p.bytes.size())), (int)p.bytes.size());
    }
    for (uint64_t left = p.zeros; left > 0;) {
      unsigned n = static_cast<unsigned>(std::min<uint64_t>(left, zeros.size()));
      ASSERT_EQ(gzwrite(f, zeros.data(), n), (int)n);
      left -= n;
    }
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

TEST(LayerSizeTest, CountsEntriesAndSizesInAnyChunking) {
  std::string tar = Entry("a.txt", "hello") + Header("dir/", 0, '5') + Entry("dir/b", std::string(1000, 'b')) +
                    Header("link", 0, '2') + End();
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{512}, size_t{4096}, tar.size()}) {
    auto t = Count(tar, 1 << 30, chunk);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->entries, 4u) << chunk;
    EXPECT_EQ(t->bytes, 4 * 512u + 5 + 1000) << chunk;
  }
}

TEST(LayerSizeTest, PaxSizeSparseRealSizeAndBase256Count) {
  // A PAX size overrides the header's; a GNU sparse real size counts in
  // full; a base-256 size field (>= 8 GiB) is read.
  std::string tar = Pax(PaxRecord("size=3")) + Header("p", 99) + Pad("abc") +
                    Pax(PaxRecord("GNU.sparse.realsize=1000000") + PaxRecord("path=sparse")) + Entry("s", "xy") +
                    End();
  auto t = Count(tar, 1 << 30, 100);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->entries, 2u);
  EXPECT_EQ(t->bytes, 2 * 512u + 3 + 1000000);
  auto big = Count(Header("huge", 20ull << 30), 16ull << 30, 512);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().ToString();
  // Header-only types carry no data whatever their size field says.
  auto dir = Count(Header("d/", 1ull << 40, '5') + End(), 1 << 20, 512);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->bytes, 512u);
}

TEST(LayerSizeTest, RefusesWhatIsNotATar) {
  auto t = Count(std::string(512, 'x'), 1 << 30, 512);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss) << t.status().ToString();
  auto cut = Count(Header("a", 10000) + std::string(512, 'a'), 1 << 30, 512);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss) << cut.status().ToString();
  auto pax = Count(Header("x", 2ull << 20, 'x'), 1 << 30, 512);
  EXPECT_EQ(pax.status().code(), StatusCode::kDataLoss) << pax.status().ToString();
}

// A few MB layer that expands to GiBs is stopped, naming the cap, and
// without decompressing it all.
TEST(LayerSizeTest, ExpandingGzipLayerIsStopped) {
  test_util::ScopedDir dir{test_util::MakeTempDir("layer_size")};
  const std::string bomb = dir.path + "/bomb.tar.gz";
  // 64 MiB of zeros in two files: ~130 KB of gzip.
  WriteGzip(bomb, {{Header("z1", 32 * kMiB), 0}, {"", 32 * kMiB}, {Header("z2", 32 * kMiB), 0}, {"", 32 * kMiB},
                   {End(), 0}});
  struct stat st {};
  ASSERT_EQ(::stat(bomb.c_str(), &st), 0);
  EXPECT_LT(st.st_size, 1 << 20);
  auto t = CheckUnpackedSize({bomb}, 48 * kMiB);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(t.status().message().find("more than 48 MiB"), std::string::npos) << t.status().ToString();
  EXPECT_NE(t.status().message().find("layer 1 of 1"), std::string::npos) << t.status().ToString();
  // Under a larger cap it is counted in full.
  auto ok = CheckUnpackedSize({bomb}, 1ull << 30);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->bytes, 64 * kMiB + 2 * 512);
}

TEST(LayerSizeTest, CapIsOnTheSumOfLayers) {
  test_util::ScopedDir dir{test_util::MakeTempDir("layer_size")};
  std::vector<std::string> layers;
  for (int i = 0; i < 3; ++i) {
    layers.push_back(dir.path + "/l" + std::to_string(i));
    WriteGzip(layers.back(), {{Header("f", 20 * kMiB), 20 * kMiB}, {End(), 0}});
  }
  auto t = CheckUnpackedSize(layers, 50 * kMiB);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(t.status().message().find("layer 3 of 3"), std::string::npos) << t.status().ToString();
  EXPECT_TRUE(CheckUnpackedSize(layers, 61 * kMiB).ok());
}

// Layers as registries serve them: GNU tar output, plain, gzip (two
// members, as Go reads them) and zstd.
TEST(LayerSizeTest, RealTarFilesInEveryCompression) {
  test_util::ScopedDir dir{test_util::MakeTempDir("layer_size")};
  ASSERT_TRUE(MakeDirs(dir.path + "/tree/sub").ok());
  ASSERT_TRUE(WriteFile(dir.path + "/tree/a", std::string(3000, 'a')).ok());
  ASSERT_TRUE(WriteFile(dir.path + "/tree/sub/b", std::string(70000, 'b')).ok());
  ASSERT_EQ(::symlink("a", (dir.path + "/tree/l").c_str()), 0);
  const std::string tar = dir.path + "/layer.tar";
  ASSERT_TRUE(RunCommand({"tar", "--format=pax", "-C", dir.path + "/tree", "-cf", tar, "."}, LogTo(dir.path + "/log")).ok());
  auto plain = TallyLayer(tar, 1 << 30);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->entries, 5u);  // ., a, l, sub, sub/b
  EXPECT_EQ(plain->bytes, 5 * 512u + 3000 + 70000);

  auto text = ReadFile(tar);
  ASSERT_TRUE(text.ok());
  const std::string gz = dir.path + "/layer.tar.gz";
  // Two gzip members, split mid-header.
  WriteGzip(dir.path + "/m1", {{text->substr(0, 700), 0}});
  WriteGzip(dir.path + "/m2", {{text->substr(700), 0}});
  ASSERT_TRUE(RunCommand({"sh", "-c", "cat " + dir.path + "/m1 " + dir.path + "/m2 > " + gz}, LogTo(dir.path + "/log")).ok());
  auto g = TallyLayer(gz, 1 << 30);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->bytes, plain->bytes);

  if (FindExecutable("zstd").ok()) {
    const std::string zst = dir.path + "/layer.tar.zst";
    ASSERT_TRUE(RunCommand({"zstd", "-q", "-o", zst, tar}, LogTo(dir.path + "/log")).ok());
    auto z = TallyLayer(zst, 1 << 30);
    ASSERT_TRUE(z.ok()) << z.status().ToString();
    EXPECT_EQ(z->bytes, plain->bytes);
    auto zc = TallyLayer(zst, 10000);
    EXPECT_EQ(zc.status().code(), StatusCode::kResourceExhausted) << zc.status().ToString();
  }
  // Corrupt gzip.
  ASSERT_TRUE(WriteFile(dir.path + "/bad.gz", std::string("\x1f\x8b\x08\x00garbage-garbage-garbage", 27)).ok());
  auto bad = TallyLayer(dir.path + "/bad.gz", 1 << 30);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status().ToString();
}

}  // namespace
}  // namespace airlock::image
