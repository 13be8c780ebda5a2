// VolumeFs (core/volume_fs.h): the daemon's reads and writes inside a
// tenant's volume, whose tree a hostile guest also wrote. Every method's
// happy path, then the guest's tricks: a symlink as a parent component or
// as the entry itself, "..", a fifo, a tree too deep. A symlink planted to
// write through points at a directory of the test's own ("outside"), never
// at a host directory, so a regression cannot damage the machine; /etc is
// used for the refusals that only read.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/volume_fs.h"
#include "tests/unit/scoped_dir.h"

namespace airlock {
namespace {

using test_util::MakeTempDir;
using test_util::ScopedDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& data) { std::ofstream(path) << data; }

std::string ReadFd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

struct stat Lstat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::vector<std::string> Paths(const std::vector<VolumeEntry>& entries) {
  std::vector<std::string> out;
  for (const VolumeEntry& e : entries) out.push_back(e.path);
  return out;
}

class VolumeFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.path = MakeTempDir("volume-fs");
    ASSERT_FALSE(tmp_.path.empty());
    root_ = tmp_.path + "/volume";
    outside_ = tmp_.path + "/outside";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    WriteFile(outside_ + "/secret", "host data");
    ASSERT_EQ(::chmod((outside_ + "/secret").c_str(), 0600), 0);
    auto fs = VolumeFs::Open(root_);
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs_.emplace(std::move(fs).value());
  }

  // What the outside directory holds is what SetUp left there.
  void ExpectOutsideUntouched() {
    EXPECT_EQ(ReadFile(outside_ + "/secret"), "host data");
    struct stat st = Lstat(outside_ + "/secret");
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_uid, 0u);
    auto n = std::distance(std::filesystem::directory_iterator(outside_), std::filesystem::directory_iterator());
    EXPECT_EQ(n, 1) << "something was made in the outside directory";
  }

  const VolumeFs& fs() { return *fs_; }

  ScopedDir tmp_;
  std::string root_, outside_;
  std::optional<VolumeFs> fs_;
};

TEST_F(VolumeFsTest, PathsAreNormalisedAndDotComponentsRefused) {
  ASSERT_EQ(::mkdir((root_ + "/a").c_str(), 0755), 0);
  WriteFile(root_ + "/a/b", "x");
  for (const char* p : {"a/b", "/a/b", "//a//b/", "a/b/"}) {
    auto e = fs().Stat(p);
    ASSERT_TRUE(e.ok()) << p << ": " << e.status().ToString();
    EXPECT_EQ(e->path, "/a/b");
    EXPECT_EQ(e->name, "b");
  }
  for (const char* p : {"", "/", "//"}) {
    auto e = fs().Stat(p);
    ASSERT_TRUE(e.ok()) << p;
    EXPECT_EQ(e->path, "/");
    EXPECT_EQ(e->name, "/");
    EXPECT_EQ(e->type, VolumeEntry::Type::kDirectory);
  }
  const std::vector<std::string> bad = {"..",
                                        "/..",
                                        "a/../..",
                                        "a/..",
                                        ".",
                                        "a/./b",
                                        "../outside/secret",
                                        std::string("a\0b", 3),
                                        std::string(4097, 'a'),
                                        "a/" + std::string(256, 'x')};
  for (const std::string& p : bad) {
    EXPECT_EQ(fs().Stat(p).status().code(), StatusCode::kInvalidArgument) << p;
    EXPECT_EQ(fs().List(p, 1).status().code(), StatusCode::kInvalidArgument) << p;
    EXPECT_EQ(fs().CreateFile(p, {}, true).status().code(), StatusCode::kInvalidArgument) << p;
    EXPECT_EQ(fs().MakeDir(p, {}, true).status().code(), StatusCode::kInvalidArgument) << p;
    EXPECT_EQ(fs().OpenRead(p).status().code(), StatusCode::kInvalidArgument) << p;
    EXPECT_EQ(fs().Update(p, 0, 0, 0777).status().code(), StatusCode::kInvalidArgument) << p;
    EXPECT_EQ(fs().Remove(p).code(), StatusCode::kInvalidArgument) << p;
  }
  // At the limits: a 255-byte name and a 4096-byte path are fine.
  EXPECT_EQ(fs().Stat(std::string(255, 'x')).status().code(), StatusCode::kNotFound);
  std::string long_path;
  while (long_path.size() + 101 <= 4096) long_path += "/" + std::string(100, 'y');
  EXPECT_EQ(fs().Stat(long_path).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Exists(root_ + "/a/b"));
  ExpectOutsideUntouched();
}

TEST_F(VolumeFsTest, StatReportsFilesDirectoriesAndSymlinks) {
  WriteFile(root_ + "/f", "hello");
  ASSERT_EQ(::chmod((root_ + "/f").c_str(), 0640), 0);
  ASSERT_EQ(::chown((root_ + "/f").c_str(), 1234, 2345), 0);
  ASSERT_EQ(::mkdir((root_ + "/d").c_str(), 0710), 0);
  ASSERT_EQ(::chmod((root_ + "/d").c_str(), 0710), 0);
  ASSERT_EQ(::symlink("/etc/passwd", (root_ + "/l").c_str()), 0);

  auto f = fs().Stat("/f");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->type, VolumeEntry::Type::kFile);
  EXPECT_EQ(f->size, 5);
  EXPECT_EQ(f->mode, 0640u);
  EXPECT_EQ(f->uid, 1234u);
  EXPECT_EQ(f->gid, 2345u);
  EXPECT_TRUE(f->target.empty());
  struct stat st = Lstat(root_ + "/f");
  EXPECT_EQ(f->mtime_ms, int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1000000);

  auto d = fs().Stat("d");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->type, VolumeEntry::Type::kDirectory);
  EXPECT_EQ(d->mode, 0710u);

  auto l = fs().Stat("/l");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->type, VolumeEntry::Type::kSymlink);
  EXPECT_EQ(l->target, "/etc/passwd");
  EXPECT_EQ(l->size, 11);

  auto missing = fs().Stat("/nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'/nope'"), std::string::npos) << missing.status().message();
  EXPECT_EQ(fs().Stat("/nope/x").status().code(), StatusCode::kNotFound);
  auto through_file = fs().Stat("f/x");
  EXPECT_EQ(through_file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(through_file.status().message().find("a component of 'f/x' is not a directory"), std::string::npos)
      << through_file.status().message();
}

TEST_F(VolumeFsTest, EntryJsonIsE2bsVolumeEntryStat) {
  VolumeEntry e;
  e.name = "b";
  e.path = "/a/b";
  e.type = VolumeEntry::Type::kFile;
  e.size = 42;
  e.mode = 0644;
  e.uid = 1000;
  e.gid = 1001;
  e.atime_ms = 1796637600123;  // 2026-12-07T10:00:00.123Z
  e.mtime_ms = 1796637600000;
  e.ctime_ms = 1796637601005;
  nlohmann::json j = VolumeEntryJson(e);
  EXPECT_EQ(j, nlohmann::json::parse(R"({"name":"b","path":"/a/b","type":"file","size":42,"mode":420,
      "uid":1000,"gid":1001,"atime":"2026-12-07T10:00:00.123Z","mtime":"2026-12-07T10:00:00.000Z",
      "ctime":"2026-12-07T10:00:01.005Z"})"));
  e.type = VolumeEntry::Type::kDirectory;
  EXPECT_EQ(VolumeEntryJson(e)["type"], "directory");
  e.type = VolumeEntry::Type::kUnknown;
  EXPECT_EQ(VolumeEntryJson(e)["type"], "unknown");
  e.type = VolumeEntry::Type::kSymlink;
  e.target = "../x";
  EXPECT_EQ(VolumeEntryJson(e)["type"], "symlink");
  EXPECT_EQ(VolumeEntryJson(e)["target"], "../x");
}

TEST_F(VolumeFsTest, ListIsSortedPreOrderToTheDepthAsked) {
  for (const char* d : {"/b", "/b/y", "/b/y/deep", "/a", "/c"}) ASSERT_EQ(::mkdir((root_ + d).c_str(), 0755), 0);
  for (const char* f : {"/z", "/b/x", "/b/y/f", "/b/y/deep/g", "/a/1"}) WriteFile(root_ + f, "");
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/c/out").c_str()), 0);
  ASSERT_EQ(::symlink("/etc", (root_ + "/etc").c_str()), 0);

  auto one = fs().List("/", 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(Paths(*one), (std::vector<std::string>{"/a", "/b", "/c", "/etc", "/z"}));
  EXPECT_EQ(Paths(*fs().List("", 0)), Paths(*one));  // depth < 1 is 1
  EXPECT_EQ(Paths(*fs().List("/", -5)), Paths(*one));

  auto three = fs().List("/", 3);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(Paths(*three), (std::vector<std::string>{"/a", "/a/1", "/b", "/b/x", "/b/y", "/b/y/deep", "/b/y/f", "/c",
                                                     "/c/out", "/etc", "/z"}));
  // Symlinks are listed with their targets, never entered.
  for (const VolumeEntry& e : *three) {
    if (e.path == "/etc") {
      EXPECT_EQ(e.type, VolumeEntry::Type::kSymlink);
      EXPECT_EQ(e.target, "/etc");
      EXPECT_EQ(e.name, "etc");
    }
  }

  auto sub = fs().List("b/", 10);
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(Paths(*sub), (std::vector<std::string>{"/b/x", "/b/y", "/b/y/deep", "/b/y/deep/g", "/b/y/f"}));
  EXPECT_EQ(sub->front().name, "x");

  EXPECT_EQ(fs().List("/", 11).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().List("/nope", 1).status().code(), StatusCode::kNotFound);
  auto file = fs().List("/z", 1);
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(file.status().message().find("not a directory"), std::string::npos) << file.status().message();
  auto link = fs().List("/c/out", 1);
  EXPECT_EQ(link.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(link.status().message().find("'/c/out' is a symlink"), std::string::npos) << link.status().message();
}

TEST_F(VolumeFsTest, MakeDirSetsOwnerAndExactModeWhateverTheUmask) {
  mode_t old = ::umask(077);
  auto d = fs().MakeDir("/d", {.uid = 1234, .gid = 2345, .mode = 0775}, false);
  auto deep = fs().MakeDir("p/q/r", {.uid = 1234, .gid = 2345, .mode = 0700}, true);
  auto dflt = fs().MakeDir("/dflt", {}, false);
  ::umask(old);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->type, VolumeEntry::Type::kDirectory);
  EXPECT_EQ(d->path, "/d");
  EXPECT_EQ(d->mode, 0775u);
  EXPECT_EQ(Lstat(root_ + "/d").st_mode & 07777, 0775u);
  EXPECT_EQ(Lstat(root_ + "/d").st_uid, 1234u);
  EXPECT_EQ(Lstat(root_ + "/d").st_gid, 2345u);

  ASSERT_TRUE(deep.ok()) << deep.status().ToString();
  EXPECT_EQ(deep->path, "/p/q/r");
  EXPECT_EQ(Lstat(root_ + "/p/q/r").st_mode & 07777, 0700u);
  for (const char* parent : {"/p", "/p/q"}) {
    struct stat st = Lstat(root_ + parent);
    EXPECT_EQ(st.st_mode & 07777, 0755u) << parent;
    EXPECT_EQ(st.st_uid, 1234u) << parent;
    EXPECT_EQ(st.st_gid, 2345u) << parent;
  }
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt->mode, 0755u);
  EXPECT_EQ(dflt->uid, 1000u);
  EXPECT_EQ(dflt->gid, 1000u);

  // Without parents: the parent must exist, the entry must not.
  EXPECT_EQ(fs().MakeDir("/x/y", {}, false).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(Exists(root_ + "/x"));
  EXPECT_EQ(fs().MakeDir("/d", {}, false).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(fs().MakeDir("/", {}, false).status().code(), StatusCode::kAlreadyExists);
  // With parents: an existing directory is fine and left as it is.
  auto again = fs().MakeDir("/d", {.uid = 1, .gid = 1, .mode = 0700}, true);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->mode, 0775u);
  EXPECT_EQ(again->uid, 1234u);
  EXPECT_TRUE(fs().MakeDir("/", {}, true).ok());
  WriteFile(root_ + "/file", "");
  EXPECT_EQ(fs().MakeDir("/file", {}, true).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(fs().MakeDir("/file", {}, false).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(fs().MakeDir("/file/sub", {}, true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().MakeDir("/m", {.mode = 010000}, false).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(VolumeFsTest, CreateFileWritesAndOverwritesARegularFile) {
  mode_t old = ::umask(077);
  auto fd = fs().CreateFile("/f", {.uid = 1234, .gid = 2345, .mode = 0664}, false);
  ::umask(old);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_EQ(::write(fd->get(), "hello world", 11), 11);
  auto e = fs().FinishFile("f", fd->get());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->name, "f");
  EXPECT_EQ(e->path, "/f");
  EXPECT_EQ(e->type, VolumeEntry::Type::kFile);
  EXPECT_EQ(e->size, 11);
  EXPECT_EQ(e->mode, 0664u);
  EXPECT_EQ(e->uid, 1234u);
  EXPECT_EQ(e->gid, 2345u);
  EXPECT_EQ(ReadFile(root_ + "/f"), "hello world");

  // An existing file is truncated and takes the new owner and mode.
  auto again = fs().CreateFile("f", {}, false);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(::write(again->get(), "bye", 3), 3);
  auto e2 = fs().FinishFile("/f", again->get());
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ(e2->size, 3);
  EXPECT_EQ(e2->mode, 0644u);
  EXPECT_EQ(e2->uid, 1000u);
  EXPECT_EQ(ReadFile(root_ + "/f"), "bye");

  // The parent must exist, unless force: then it is made like MakeDir's.
  EXPECT_EQ(fs().CreateFile("/new/dir/f", {}, false).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(Exists(root_ + "/new"));
  auto forced = fs().CreateFile("/new/dir/f", {.uid = 7, .gid = 8, .mode = {}}, true);
  ASSERT_TRUE(forced.ok()) << forced.status().ToString();
  EXPECT_EQ(Lstat(root_ + "/new/dir").st_mode & 07777, 0755u);
  EXPECT_EQ(Lstat(root_ + "/new/dir").st_uid, 7u);
  EXPECT_EQ(Lstat(root_ + "/new/dir/f").st_gid, 8u);

  ASSERT_EQ(::mkdir((root_ + "/d").c_str(), 0755), 0);
  auto dir = fs().CreateFile("/d", {}, true);
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("directory"), std::string::npos) << dir.status().message();
  EXPECT_EQ(fs().CreateFile("/", {}, true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().CreateFile("/m", {.mode = 0100644}, true).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(VolumeFsTest, OpenReadReadsRegularFilesOnly) {
  WriteFile(root_ + "/f", "content");
  auto fd = fs().OpenRead("/f");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_EQ(ReadFd(fd->get()), "content");
  EXPECT_EQ(fs().OpenRead("/nope").status().code(), StatusCode::kNotFound);
  ASSERT_EQ(::mkdir((root_ + "/d").c_str(), 0755), 0);
  auto dir = fs().OpenRead("/d");
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos) << dir.status().message();
  EXPECT_EQ(fs().OpenRead("/").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(VolumeFsTest, SymlinkAsAParentComponentIsRefused) {
  ASSERT_EQ(::symlink("/etc", (root_ + "/etc").c_str()), 0);
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/dir").c_str()), 0);
  ASSERT_EQ(::symlink("../outside", (root_ + "/rel").c_str()), 0);
  ASSERT_EQ(::mkdir((root_ + "/real").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/real/nested").c_str()), 0);

  // Reads: a host directory.
  auto st = fs().Stat("/etc/passwd");
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("'/etc' is a symlink"), std::string::npos) << st.status().message();
  EXPECT_EQ(fs().List("/etc", 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().List("/etc/ssl", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().OpenRead("/etc/passwd").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().OpenRead("/etc/hostname").status().code(), StatusCode::kInvalidArgument);

  // Writes: a directory of the test's, by absolute and by relative link.
  for (const std::string link : {"dir", "rel", "real/nested"}) {
    EXPECT_EQ(fs().Stat(link + "/secret").status().code(), StatusCode::kInvalidArgument) << link;
    EXPECT_EQ(fs().List(link, 1).status().code(), StatusCode::kInvalidArgument) << link;
    EXPECT_EQ(fs().OpenRead(link + "/secret").status().code(), StatusCode::kInvalidArgument) << link;
    for (bool force : {false, true}) {
      EXPECT_EQ(fs().CreateFile(link + "/secret", {}, force).status().code(), StatusCode::kInvalidArgument) << link;
      EXPECT_EQ(fs().CreateFile(link + "/new", {}, force).status().code(), StatusCode::kInvalidArgument) << link;
      EXPECT_EQ(fs().CreateFile(link + "/a/b", {}, force).status().code(), StatusCode::kInvalidArgument) << link;
      EXPECT_EQ(fs().MakeDir(link + "/sub", {}, force).status().code(), StatusCode::kInvalidArgument) << link;
      EXPECT_EQ(fs().MakeDir(link + "/a/b", {}, force).status().code(), StatusCode::kInvalidArgument) << link;
    }
    EXPECT_EQ(fs().Update(link + "/secret", 1000, 1000, 0777).status().code(), StatusCode::kInvalidArgument) << link;
    EXPECT_EQ(fs().Remove(link + "/secret").code(), StatusCode::kInvalidArgument) << link;
  }
  ExpectOutsideUntouched();
  EXPECT_EQ(Lstat(root_ + "/dir").st_mode & S_IFMT, static_cast<mode_t>(S_IFLNK));
  EXPECT_EQ(Lstat(root_ + "/real/nested").st_mode & S_IFMT, static_cast<mode_t>(S_IFLNK));
}

TEST_F(VolumeFsTest, SymlinkAsTheEntryIsNeverFollowed) {
  ASSERT_EQ(::symlink((outside_ + "/secret").c_str(), (root_ + "/link").c_str()), 0);
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/dirlink").c_str()), 0);

  auto st = fs().Stat("/link");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, VolumeEntry::Type::kSymlink);
  EXPECT_EQ(st->target, outside_ + "/secret");

  auto read = fs().OpenRead("/link");
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find("symlink"), std::string::npos) << read.status().message();
  for (bool force : {false, true}) {
    auto write = fs().CreateFile("/link", {}, force);
    EXPECT_EQ(write.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(write.status().message().find("symlink"), std::string::npos) << write.status().message();
    EXPECT_EQ(fs().MakeDir("/link", {}, force).status().code(), StatusCode::kAlreadyExists);
  }
  EXPECT_EQ(fs().Update("/link", std::nullopt, std::nullopt, 0777).status().code(), StatusCode::kInvalidArgument);
  // A chown changes the link itself.
  auto chown = fs().Update("/link", 4321, 4321, std::nullopt);
  ASSERT_TRUE(chown.ok()) << chown.status().ToString();
  EXPECT_EQ(chown->uid, 4321u);
  EXPECT_EQ(Lstat(root_ + "/link").st_uid, 4321u);

  // Remove unlinks the link, never what it points at.
  EXPECT_TRUE(fs().Remove("/link").ok());
  EXPECT_TRUE(fs().Remove("/dirlink").ok());
  EXPECT_FALSE(Exists(root_ + "/link"));
  EXPECT_FALSE(Exists(root_ + "/dirlink"));
  ExpectOutsideUntouched();
}

TEST_F(VolumeFsTest, FifoIsRefusedWithoutBlocking) {
  // A regression here hangs (no reader or writer ever comes): the test's
  // timeout reports it.
  ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0666), 0);
  auto read = fs().OpenRead("/fifo");
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find("fifo"), std::string::npos) << read.status().message();
  auto write = fs().CreateFile("/fifo", {}, false);
  EXPECT_EQ(write.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(write.status().message().find("fifo"), std::string::npos) << write.status().message();
  auto st = fs().Stat("/fifo");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, VolumeEntry::Type::kUnknown);
  EXPECT_TRUE(fs().Remove("/fifo").ok());
  EXPECT_FALSE(Exists(root_ + "/fifo"));
}

TEST_F(VolumeFsTest, UpdateChangesModeAndOwner) {
  WriteFile(root_ + "/f", "x");
  ASSERT_EQ(::mkdir((root_ + "/d").c_str(), 0755), 0);
  auto f = fs().Update("/f", 1234, std::nullopt, 04750);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->mode, 04750u);  // chown first, so the set-id bit stays
  EXPECT_EQ(f->uid, 1234u);
  EXPECT_EQ(f->gid, 0u);
  auto d = fs().Update("d", std::nullopt, 99, 0700);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(Lstat(root_ + "/d").st_mode & 07777, 0700u);
  EXPECT_EQ(Lstat(root_ + "/d").st_gid, 99u);
  EXPECT_EQ(Lstat(root_ + "/d").st_uid, 0u);
  auto root = fs().Update("/", 1000, 1000, 0770);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->path, "/");
  EXPECT_EQ(Lstat(root_).st_mode & 07777, 0770u);
  EXPECT_EQ(Lstat(root_).st_uid, 1000u);
  EXPECT_EQ(fs().Update("/f", std::nullopt, std::nullopt, 010000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().Update("/nope", 1, 1, std::nullopt).status().code(), StatusCode::kNotFound);
}

TEST_F(VolumeFsTest, RemoveFilesAndTrees) {
  EXPECT_EQ(fs().Remove("/").code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fs().Remove("//").message().find("cannot delete the volume's root"), std::string::npos);
  EXPECT_EQ(fs().Remove("/nope").code(), StatusCode::kNotFound);
  WriteFile(root_ + "/f", "x");
  EXPECT_TRUE(fs().Remove("f").ok());
  EXPECT_FALSE(Exists(root_ + "/f"));

  // A tree with files, a fifo, links out of it and a wide directory.
  for (const char* d : {"/t", "/t/a", "/t/a/b", "/t/wide"}) ASSERT_EQ(::mkdir((root_ + d).c_str(), 0755), 0);
  WriteFile(root_ + "/t/a/b/f", "x");
  ASSERT_EQ(::mkfifo((root_ + "/t/a/fifo").c_str(), 0600), 0);
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/t/a/out").c_str()), 0);
  ASSERT_EQ(::symlink((outside_ + "/secret").c_str(), (root_ + "/t/a/b/secret").c_str()), 0);
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(::mkdir((root_ + "/t/wide/" + std::to_string(i)).c_str(), 0755), 0);
    WriteFile(root_ + "/t/wide/" + std::to_string(i) + "/f", "x");
  }
  ::chmod((root_ + "/t/a/b").c_str(), 0);  // root removes it whatever its mode
  EXPECT_TRUE(fs().Remove("/t").ok());
  EXPECT_FALSE(Exists(root_ + "/t"));
  ExpectOutsideUntouched();
  EXPECT_EQ(fs().Remove("/t").code(), StatusCode::kNotFound);
}

// Makes `levels` nested directories "d" in `dir_fd`, fd-relative (the path
// outgrows PATH_MAX), with a file in each when `files`.
void MakeChain(int dir_fd, int levels, bool files) {
  UniqueFd cur(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  for (int i = 0; i < levels; ++i) {
    ASSERT_EQ(::mkdirat(cur.get(), "d", 0755), 0) << i;
    if (files) {
      ASSERT_TRUE(UniqueFd(::openat(cur.get(), "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644)).valid());
    }
    UniqueFd next(::openat(cur.get(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(next.valid()) << i;
    cur = std::move(next);
  }
}

TEST_F(VolumeFsTest, RemoveDeepTree) {
  ASSERT_EQ(::mkdir((root_ + "/deep").c_str(), 0755), 0);
  UniqueFd deep(::open((root_ + "/deep").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_NO_FATAL_FAILURE(MakeChain(deep.get(), 1500, true));  // far more than Remove keeps fds for
  EXPECT_TRUE(fs().Remove("/deep").ok());
  EXPECT_FALSE(Exists(root_ + "/deep"));
}

TEST_F(VolumeFsTest, RemoveRefusesATreeDeeperThanTheLimit) {
  ASSERT_EQ(::mkdir((root_ + "/deep").c_str(), 0755), 0);
  UniqueFd deep(::open((root_ + "/deep").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_NO_FATAL_FAILURE(MakeChain(deep.get(), VolumeFs::kMaxRemoveDepth + 5, false));
  Status st = fs().Remove("/deep");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_TRUE(Exists(root_ + "/deep"));
  // Cut the chain in two (each within the limit) so both halves go.
  UniqueFd mid(::fcntl(deep.get(), F_DUPFD_CLOEXEC, 0));
  for (int i = 0; i < 2000; ++i) mid.Reset(::openat(mid.get(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(mid.valid());
  UniqueFd root(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_EQ(::renameat(mid.get(), "d", root.get(), "half"), 0);
  EXPECT_TRUE(fs().Remove("/deep").ok());
  EXPECT_TRUE(fs().Remove("/half").ok());
  EXPECT_FALSE(Exists(root_ + "/half"));
}

// Unmounts at scope exit (declared after the ScopedDir it is inside).
struct ScopedMount {
  std::string path;
  ~ScopedMount() {
    if (!path.empty()) ::umount2(path.c_str(), MNT_DETACH);
  }
};

TEST_F(VolumeFsTest, NothingCrossesIntoAnotherFilesystem) {
  ASSERT_EQ(::mkdir((root_ + "/mnt").c_str(), 0755), 0);
  if (::mount("tmpfs", (root_ + "/mnt").c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  ScopedMount mount{root_ + "/mnt"};
  WriteFile(root_ + "/mnt/x", "other fs");
  ASSERT_EQ(::mkdir((root_ + "/mnt/d").c_str(), 0755), 0);

  auto st = fs().Stat("/mnt/x");
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("another filesystem"), std::string::npos) << st.status().message();
  EXPECT_EQ(fs().Stat("/mnt").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().List("/mnt", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().OpenRead("/mnt/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().CreateFile("/mnt/x", {}, true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().MakeDir("/mnt/d/e", {}, true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().Update("/mnt/x", 1, 1, 0777).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().Update("/mnt", 1, 1, 0777).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().Remove("/mnt/x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fs().Remove("/mnt").code(), StatusCode::kInvalidArgument);
  // Listed, never entered.
  auto all = fs().List("/", 3);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(Paths(*all), std::vector<std::string>{"/mnt"});
  // A tree with a mount in it is not removed through the mount.
  EXPECT_EQ(fs().Remove("/").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadFile(root_ + "/mnt/x"), "other fs");
  EXPECT_TRUE(Exists(root_ + "/mnt/d"));
  EXPECT_EQ(Lstat(root_ + "/mnt/x").st_mode & 07777, 0644u);
}

TEST(VolumeFsOpen, RefusesASymlinkOrMissingRoot) {
  ScopedDir tmp{MakeTempDir("volume-fs-open")};
  ASSERT_FALSE(tmp.path.empty());
  EXPECT_EQ(VolumeFs::Open(tmp.path + "/nope").status().code(), StatusCode::kNotFound);
  ASSERT_EQ(::symlink("/etc", (tmp.path + "/link").c_str()), 0);
  EXPECT_FALSE(VolumeFs::Open(tmp.path + "/link").ok());
  EXPECT_TRUE(VolumeFs::Open(tmp.path).ok());
}

}  // namespace
}  // namespace airlock
