// common/hex.h and common/file_util.h: the one hex encoder and the one
// file-write helper every module uses.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/fd.h"
#include "common/file_util.h"
#include "common/hex.h"
#include "tests/unit/scoped_dir.h"

namespace airlock {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Hex, EncodesEveryByteLowerCaseHighNibbleFirst) {
  EXPECT_EQ(HexEncode(""), "");
  EXPECT_EQ(HexEncode(std::string_view("\x00\x01\x7f\x80\xff", 5)), "00017f80ff");
  const unsigned char b[] = {0xde, 0xad, 0xbe, 0xef};
  EXPECT_EQ(HexEncode(b, sizeof b), "deadbeef");
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  std::string hex = HexEncode(all);
  ASSERT_EQ(hex.size(), 512u);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(std::stoi(hex.substr(2 * i, 2), nullptr, 16), i);
  std::string out = "%";
  AppendHexByte(out, 0xab, /*upper=*/true);
  AppendHexByte(out, 0x0c);
  EXPECT_EQ(out, "%AB0c");
}

TEST(FileUtil, WriteAllWritesEveryByteThroughShortWrites) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd r(p[0]), w(p[1]);
  // 1 MiB through a 64 KiB pipe: write(2) returns short counts; a reader drains.
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(r.get(), buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  });
  Status st = WriteAll(w.get(), data, "the pipe");
  w.Reset();
  reader.join();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, data);
}

TEST(FileUtil, WriteAllErrorsNameTheSyscallAndWhat) {
  EXPECT_EQ(WriteAllRaw(-1, "x", 1), EBADF);
  Status st = WriteAll(-1, "x", "/some/path");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("write /some/path"), std::string::npos) << st.ToString();
  // A reader that went away: EPIPE, not a signal (SIGPIPE ignored here).
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ::close(p[0]);
  auto old = ::signal(SIGPIPE, SIG_IGN);
  EXPECT_EQ(WriteAllRaw(p[1], "x", 1), EPIPE);
  ::signal(SIGPIPE, old);
  ::close(p[1]);
}

TEST(FileUtil, WriteFileAtomicReplacesWithTheModeAndLeavesNoTemporary) {
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-common")};
  const std::string path = dir.path + "/record.json";
  ASSERT_TRUE(WriteFileAtomic(path, "old\n").ok());
  EXPECT_EQ(Slurp(path), "old\n");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ino_t old_inode = st.st_ino;

  mode_t old_umask = ::umask(0077);  // the mode is exact, whatever the umask
  Status w = WriteFileAtomic(path, "new and longer\n", 0640);
  ::umask(old_umask);
  ASSERT_TRUE(w.ok()) << w.ToString();
  EXPECT_EQ(Slurp(path), "new and longer\n");
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_NE(st.st_ino, old_inode) << "replaced by rename, not written in place";
  EXPECT_EQ(Names(dir.path), std::vector<std::string>{"record.json"});
}

TEST(FileUtil, WriteFileAtomicFailureKeepsTheOldFileAndNamesThePath) {
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-common")};
  Status missing = WriteFileAtomic(dir.path + "/no/such/dir/f", "x");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  EXPECT_NE(missing.message().find("open " + dir.path + "/no/such/dir/f.tmp."), std::string::npos)
      << missing.ToString();
  // The target is a directory: rename fails, the temporary file is removed.
  ASSERT_TRUE(fs::create_directory(dir.path + "/d"));
  ASSERT_TRUE(WriteFileAtomic(dir.path + "/d/keep", "kept").ok());
  Status onto_dir = WriteFileAtomic(dir.path + "/d", "x");
  EXPECT_FALSE(onto_dir.ok());
  EXPECT_NE(onto_dir.message().find("rename "), std::string::npos) << onto_dir.ToString();
  EXPECT_EQ(Names(dir.path), std::vector<std::string>{"d"});
  EXPECT_EQ(Slurp(dir.path + "/d/keep"), "kept");
  EXPECT_TRUE(FsyncDir(dir.path).ok());
  EXPECT_FALSE(FsyncDir(dir.path + "/d/keep").ok());  // not a directory
}

}  // namespace
}  // namespace airlock
