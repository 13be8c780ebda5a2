// The newc cpio writer: parsed back by our reader and by cpio(1) if present.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "image/cpio.h"

namespace airlock::image {
namespace {

std::string Sample() {
  CpioWriter w;
  w.AddDirectory("bin");
  w.AddDirectory("/dev");
  w.AddCharDevice("dev/console", 5, 1);
  w.AddFile("bin/busybox",
            std::string("\x7f"
                        "ELF-ish binary\0data",
                        19),
            0755);
  w.AddSymlink("bin/sh", "busybox");
  w.AddFile("etc-empty", "");
  w.AddFile("init", "#!/bin/sh\necho hi\n", 0755);
  return w.Finish();
}

TEST(CpioTest, RoundTripsThroughReader) {
  std::string a = Sample();
  EXPECT_EQ(a.size() % 4, 0u);
  auto entries = ReadCpio(a);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), 7u);
  const auto& e = *entries;
  EXPECT_EQ(e[0].path, "bin");
  EXPECT_TRUE(S_ISDIR(e[0].mode));
  EXPECT_EQ(e[1].path, "dev");  // leading slash stripped
  EXPECT_TRUE(S_ISCHR(e[2].mode));
  EXPECT_EQ(e[2].rdev_major, 5u);
  EXPECT_EQ(e[2].rdev_minor, 1u);
  EXPECT_EQ(e[3].path, "bin/busybox");
  EXPECT_EQ(e[3].mode, static_cast<uint32_t>(S_IFREG | 0755));
  EXPECT_EQ(e[3].data.size(), 19u);
  EXPECT_TRUE(S_ISLNK(e[4].mode));
  EXPECT_EQ(e[4].data, "busybox");
  EXPECT_EQ(e[5].data, "");
  EXPECT_EQ(e[6].data, "#!/bin/sh\necho hi\n");
}

TEST(CpioTest, IsDeterministic) { EXPECT_EQ(Sample(), Sample()); }

TEST(CpioTest, ReaderRejectsGarbage) {
  EXPECT_FALSE(ReadCpio("070701xyz").ok());
  std::string a = Sample();
  EXPECT_FALSE(ReadCpio(a.substr(0, a.size() / 2)).ok());
  a[0] = '1';
  EXPECT_FALSE(ReadCpio(a).ok());
}

TEST(CpioTest, ListedByCpioTool) {
  if (std::system("command -v cpio >/dev/null 2>&1") != 0) GTEST_SKIP() << "cpio(1) not installed";
  char tmpl[] = "/tmp/image_cpio_testXXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  std::string a = Sample();
  ASSERT_EQ(::write(fd, a.data(), a.size()), static_cast<ssize_t>(a.size()));
  ::close(fd);
  std::string cmd = std::string("cpio -t --quiet < ") + tmpl + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  ::unlink(tmpl);
  EXPECT_EQ(out, "bin\ndev\ndev/console\nbin/busybox\nbin/sh\netc-empty\ninit\n");
}

TEST(CpioTest, GzipRoundTrips) {
  std::string a = Sample();
  auto gz = Gzip(a);
  ASSERT_TRUE(gz.ok());
  ASSERT_GE(gz->size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>((*gz)[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>((*gz)[1]), 0x8b);
  z_stream zs{};
  ASSERT_EQ(inflateInit2(&zs, 15 + 16), Z_OK);
  std::string out(a.size() + 16, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(gz->data());
  zs.avail_in = static_cast<uInt>(gz->size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(inflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  inflateEnd(&zs);
  EXPECT_EQ(out, a);
}

}  // namespace
}  // namespace airlock::image
