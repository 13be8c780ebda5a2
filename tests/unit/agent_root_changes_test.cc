// WriteRootChanges / RootChangesImporter (agent/root_changes.h): a tree's
// changes against its base, written as a tar and applied onto a fresh copy of
// the base, come back equal: contents, types, modes with set-id bits,
// owners, times, links, removals. GNU tar reads the archive. Hostile
// archives (.. paths, a symlink then a file through it, garbage, a cut
// archive) harm nothing outside the root.
#include "agent/root_changes.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace airlock::agent {
namespace {

namespace fs = std::filesystem;

std::string Sh(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = ::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

void Write(const fs::path& p, const std::string& data, mode_t mode = 0644) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
  ::chmod(p.c_str(), mode);
}

std::string Read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Everything below `root` that an import must reproduce, ctime aside (an
// import makes new inodes), and directory mtimes aside for `root` itself.
std::map<std::string, std::string> Describe(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    struct stat st;
    ::lstat(it->path().c_str(), &st);
    std::ostringstream d;
    d << std::oct << st.st_mode << std::dec << " " << st.st_uid << ":" << st.st_gid << " " << st.st_mtim.tv_sec << "."
      << st.st_mtim.tv_nsec;
    if (S_ISREG(st.st_mode)) d << " size=" << st.st_size << " data=" << Read(it->path());
    if (S_ISLNK(st.st_mode)) d << " -> " << fs::read_symlink(it->path()).string();
    if (S_ISCHR(st.st_mode)) d << " dev=" << major(st.st_rdev) << "," << minor(st.st_rdev);
    out[fs::relative(it->path(), root).string()] = d.str();
  }
  return out;
}

class RootChangesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("airlock-rootchanges-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    base_ = dir_ / "base";
    root_ = dir_ / "root";
    target_ = dir_ / "target";
    Write(base_ / "etc/hostname", "template\n");
    Write(base_ / "etc/passwd", "root:x:0:0::/root:/bin/sh\n");
    Write(base_ / "etc/shells", "/bin/sh\n");
    Write(base_ / "usr/bin/tool", "#!/bin/sh\n", 0755);
    Write(base_ / "usr/share/doc/a/README", "docs\n");
    Write(base_ / "usr/share/doc/b/README", "docs b\n");
    Write(base_ / "opt/keep", "unchanged\n");
    fs::create_symlink("usr/bin", base_ / "bin");
    // The guest's view: the same inodes (an untouched file reads the
    // template's, ctime included), directories with their times.
    ASSERT_EQ(std::system(("cp -al " + base_.string() + " " + root_.string()).c_str()), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Replaces `p` in root_ by a new inode (as a guest's copy-up does).
  void Rewrite(const std::string& rel, const std::string& data, mode_t mode = 0644) {
    fs::remove(root_ / rel);
    Write(root_ / rel, data, mode);
  }

  // Exports root_ against base_ into dir_/changes.tar, applies it onto a
  // fresh copy of base_ at target_.
  void RoundTrip(RootChangesStats* out = nullptr, RootChangesStats* in = nullptr,
                 const std::vector<std::string>& skip = {}) {
    const std::string tar = (dir_ / "changes.tar").string();
    int fd = ::open(tar.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    RootChangesStats stats;
    Status st = WriteRootChanges(root_.string(), base_.string(), skip, fd, &stats);
    ::close(fd);
    ASSERT_TRUE(st.ok()) << st.ToString();
    if (out) *out = stats;
    ASSERT_EQ(std::system(("cp -a " + base_.string() + " " + target_.string()).c_str()), 0);
    RootChangesImporter imp(target_.string());
    std::string bytes = Read(tar);
    // In uneven pieces, as a socket hands them over.
    for (size_t at = 0; at < bytes.size(); at += 777) ASSERT_TRUE(imp.Feed(std::string_view(bytes).substr(at, 777)).ok());
    Status fin = imp.Finish();
    ASSERT_TRUE(fin.ok()) << fin.ToString();
    if (in) *in = imp.stats();
  }

  fs::path dir_, base_, root_, target_;
};

// On a plain copy every directory's ctime differs from its base's, so each
// is entered and its header written; no file is.
TEST_F(RootChangesTest, AnUnchangedTreeExportsNoFile) {
  RootChangesStats out;
  RoundTrip(&out);
  EXPECT_EQ(out.bytes, 0u);
  EXPECT_EQ(out.deleted, 0u);
  EXPECT_EQ(out.entries, 8u);  // etc, opt, usr, usr/bin, usr/share, usr/share/doc, its a and b
  EXPECT_EQ(out.skipped, 0u);
  EXPECT_EQ(Describe(target_), Describe(root_));
}

TEST_F(RootChangesTest, EveryKindOfChangeComesBackExactly) {
  Rewrite("etc/hostname", "guest\n");
  Rewrite("usr/bin/tool", "#!/bin/sh\necho setuid\n", 04755);
  ASSERT_EQ(::chown((root_ / "usr/bin/tool").c_str(), 1000, 1000), 0);
  ASSERT_EQ(::chmod((root_ / "usr/bin/tool").c_str(), 04755), 0);
  fs::remove(root_ / "etc/shells");                 // a template file removed
  fs::remove_all(root_ / "usr/share/doc/a");        // a template directory removed
  Write(root_ / "home/user/project/main.py", std::string(200000, 'x') + "\n");  // new, several blocks
  Write(root_ / "home/user/empty", "");
  std::string long_name(180, 'n');
  Write(root_ / "home/user" / long_name / long_name, "deep\n");  // past ustar's 100 + 155
  fs::create_symlink("/etc/hostname", root_ / "home/user/link");
  fs::remove(root_ / "bin");
  fs::create_directories(root_ / "bin");  // a symlink turned into a directory
  Write(root_ / "bin/sh", "shell\n", 0755);
  ASSERT_EQ(::link((root_ / "home/user/empty").c_str(), (root_ / "home/user/hardlink").c_str()), 0);
  ASSERT_EQ(::mkfifo((root_ / "home/user/fifo").c_str(), 0600), 0);
  struct timespec t[2] = {{1000, 123456789}, {1000, 123456789}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (root_ / "home/user/project/main.py").c_str(), t, 0), 0);
  RootChangesStats out, in;
  RoundTrip(&out, &in);
  EXPECT_EQ(out.skipped, 0u) << out.first_error;
  EXPECT_EQ(in.skipped, 0u) << in.first_error;
  EXPECT_EQ(out.deleted, 2u);
  EXPECT_EQ(Describe(target_), Describe(root_));
  EXPECT_FALSE(fs::exists(target_ / "etc/shells"));
  EXPECT_FALSE(fs::exists(target_ / "usr/share/doc/a"));
  EXPECT_TRUE(fs::exists(target_ / "usr/share/doc/b/README"));
  struct stat a, b;
  ASSERT_EQ(::stat((target_ / "home/user/empty").c_str(), &a), 0);
  ASSERT_EQ(::stat((target_ / "home/user/hardlink").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  ASSERT_EQ(::stat((target_ / "usr/bin/tool").c_str(), &a), 0);
  EXPECT_EQ(a.st_mode & 07777, 04755u);
  EXPECT_EQ(a.st_uid, 1000u);
  // GNU tar reads it: every path is there.
  std::string listing = Sh("tar -tf " + (dir_ / "changes.tar").string() + " 2>/dev/null");
  EXPECT_NE(listing.find("home/user/project/main.py"), std::string::npos);
  EXPECT_NE(listing.find(long_name + "/" + long_name), std::string::npos);
}

TEST_F(RootChangesTest, SkippedMountPointsAreNeitherWalkedNorRemoved) {
  Write(root_ / "proc/1/status", "not a file system of the root\n");
  fs::remove_all(root_ / "opt");  // pretend /opt is a mount point with other contents
  fs::create_directories(root_ / "opt/volume");
  Write(root_ / "opt/volume/data", "a volume's\n");
  RootChangesStats out;
  RoundTrip(&out, nullptr, {"/proc", "/opt"});
  EXPECT_FALSE(fs::exists(target_ / "proc"));
  EXPECT_EQ(Read(target_ / "opt/keep"), "unchanged\n");  // not counted as removed
  EXPECT_FALSE(fs::exists(target_ / "opt/volume"));
}

// A tar a hostile guest might hand back: a path with "..", an absolute one,
// a symlink to a host directory and a file written through it.
TEST_F(RootChangesTest, AHostileArchiveStaysInsideTheRoot) {
  fs::path outside = dir_ / "outside";
  fs::create_directories(outside);
  fs::path work = dir_ / "work";
  Write(work / "d/x", "escape\n");
  fs::create_symlink(outside, work / "link");
  const std::string tar = "cd " + work.string() + " && tar --format=pax -P -cf ";
  ASSERT_EQ(std::system((tar + (dir_ / "bad.tar").string() + " --transform='s,^d/x$,../outside/x1,' d/x").c_str()), 0);
  ASSERT_EQ(std::system((tar + (dir_ / "bad2.tar").string() + " --transform='s,^d/x$,link/x2,' link d/x").c_str()), 0);
  fs::create_directories(target_);
  for (const char* name : {"bad.tar", "bad2.tar"}) {
    RootChangesImporter imp(target_.string());
    ASSERT_TRUE(imp.Feed(Read(dir_ / name)).ok());
    ASSERT_TRUE(imp.Finish().ok());
    EXPECT_GE(imp.stats().skipped, 1u) << name;
  }
  EXPECT_TRUE(fs::is_empty(outside));
  EXPECT_TRUE(fs::is_symlink(target_ / "link"));
}

// The guest's real shape: the root an overlay on the base's tree, where an
// untouched directory is the base's inode (and so is skipped whole).
TEST_F(RootChangesTest, OnAnOverlayOnlyWhatWasCopiedUpIsWalkedAndAllComesBack) {
  fs::remove_all(root_);
  fs::create_directories(root_);
  fs::create_directories(dir_ / "upper");
  fs::create_directories(dir_ / "work");
  const std::string opts = "lowerdir=" + base_.string() + ",upperdir=" + (dir_ / "upper").string() +
                           ",workdir=" + (dir_ / "work").string();
  if (::mount("airlock-test", root_.c_str(), "overlay", 0, opts.c_str()) != 0)
    GTEST_SKIP() << "cannot mount an overlay here: " << std::strerror(errno);
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{root_};
  {
    std::ofstream(root_ / "usr/share/doc/b/README", std::ios::app) << "appended\n";  // copied up in place
  }
  fs::remove(root_ / "etc/shells");
  Write(root_ / "home/user/new", "new\n");
  RootChangesStats out, in;
  RoundTrip(&out, &in);
  EXPECT_EQ(out.skipped, 0u) << out.first_error;
  EXPECT_EQ(out.deleted, 1u);
  // etc, home, home/user, usr, usr/share, usr/share/doc, its b; README and
  // new; the removal. opt, usr/bin and usr/share/doc/a were never copied up.
  EXPECT_EQ(out.entries, 10u);
  EXPECT_EQ(Describe(target_), Describe(root_));
  EXPECT_EQ(Read(target_ / "usr/share/doc/b/README"), "docs b\nappended\n");
  EXPECT_FALSE(fs::exists(target_ / "etc/shells"));
}

// A guest's tree deeper than the walk goes is refused whole (the pause then
// fails and the sandbox runs on), never a stack or fd table run out.
TEST_F(RootChangesTest, ATreeTooDeepIsRefusedNotCut) {
  // The walk holds a directory fd a level (two with a base), as the agent
  // may (runsc gives it 20000).
  struct rlimit nofile;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &nofile), 0);
  if (nofile.rlim_max < 9000) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << nofile.rlim_max << " < 9000";
  nofile.rlim_cur = nofile.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &nofile), 0);
  int fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 4100; ++i) {  // past PATH_MAX: made one level at a time
    ASSERT_EQ(::mkdirat(fd, "d", 0755), 0);
    int next = ::openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ::close(fd);
    ASSERT_GE(next, 0);
    fd = next;
  }
  ::close(fd);
  int out = ::open((dir_ / "deep.tar").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(out, 0);
  Status st = WriteRootChanges(root_.string(), base_.string(), {}, out, nullptr);
  ::close(out);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("directories deep"), std::string::npos) << st.ToString();
  // TearDown's remove_all names paths, which stop at PATH_MAX; GNU rm walks by fd.
  ASSERT_EQ(std::system(("rm -rf " + (root_ / "d").string()).c_str()), 0);
}

TEST_F(RootChangesTest, GarbageAndCutArchivesAreErrors) {
  RootChangesImporter garbage(root_.string());
  EXPECT_EQ(garbage.Feed(std::string(1024, 'A')).code(), StatusCode::kDataLoss);

  Rewrite("etc/hostname", "guest\n");
  RoundTrip();
  std::string tar = Read(dir_ / "changes.tar");
  fs::remove_all(target_);
  fs::create_directories(target_);
  RootChangesImporter cut(target_.string());
  ASSERT_TRUE(cut.Feed(std::string_view(tar).substr(0, tar.size() - 1024)).ok());
  EXPECT_EQ(cut.Finish().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace airlock::agent
