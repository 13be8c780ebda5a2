// Staging a template tree a tenant supplied (an unpacked OCI image) on the
// host, as root: a symlink planted at any path staging touches must never
// lead a write, an unlink, a mkdir or a chmod outside the tree (issue 32,
// item 4; docs/image.md "Trees a tenant supplied"). Every case plants links
// into a "host" directory beside the tree, stages, and checks that the host
// directory is exactly as it was and that a refusal names the path as the
// image shows it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/subprocess.h"
#include "image/builders.h"
#include "image/fs_util.h"
#include "image/hash.h"
#include "image/tree_beneath.h"

namespace airlock::image {
namespace {

namespace fs = std::filesystem;

// Everything observable about a directory tree: per entry its type, mode,
// owner, inode, size, mtime and content (files) or target (links).
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  auto add = [&](const std::string& p) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      out[p] = "lstat failed";
      return;
    }
    std::string v = std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid) +
                    " ino " + std::to_string(st.st_ino) + " size " + std::to_string(st.st_size) + " mtime " +
                    std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    if (S_ISREG(st.st_mode)) {
      auto text = ReadFile(p);
      v += " " + (text.ok() ? *text : std::string("?"));
    }
    if (S_ISLNK(st.st_mode)) v += " -> " + fs::read_symlink(p).string();
    out[p] = v;
  };
  add(dir);
  for (auto& e : fs::recursive_directory_iterator(dir)) add(e.path().string());
  return out;
}

class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/image_staging_testXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // The host's directory an attacker aims at, with files of the names
    // staging writes.
    host_ = dir_ + "/host";
    ASSERT_TRUE(MakeDirs(host_ + "/sbin").ok());
    for (const char* f : {"rootfs-id", "airlock-agent", "hostname", "hosts", "resolv.conf", "sbin/airlock-agent"})
      ASSERT_TRUE(WriteFile(host_ + "/" + f, std::string("host's ") + f + "\n", 0600).ok());
    ASSERT_EQ(::chmod(host_.c_str(), 0711), 0);
    // An image tree as umoci unpacks one (merged /usr).
    base_ = dir_ + "/base/root";
    ASSERT_TRUE(MakeDirs(base_ + "/usr/sbin").ok());
    ASSERT_TRUE(MakeDirs(base_ + "/usr/local/bin").ok());
    ASSERT_TRUE(MakeDirs(base_ + "/etc").ok());
    ASSERT_EQ(::symlink("usr/sbin", (base_ + "/sbin").c_str()), 0);
    ASSERT_TRUE(WriteFile(base_ + "/etc/hostname", "image\n").ok());
    agent_ = dir_ + "/agent.sh";
    ASSERT_TRUE(WriteFile(agent_, "#!/bin/sh\necho agent\n", 0755).ok());
    extra_ = dir_ + "/extra.txt";
    ASSERT_TRUE(WriteFile(extra_, "extra\n", 0644).ok());
    before_ = Snapshot(host_);
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  // What the OCI path stages: the agent, rootfs-id, and the three /etc files.
  Status Stage(std::vector<StagedFile> extras = {}) {
    if (extras.empty()) {
      for (const char* d : {"/etc/hostname", "/etc/hosts", "/etc/resolv.conf"})
        extras.push_back(StagedFile{extra_, d, 0644, *Sha256File(extra_), ""});
    }
    std::error_code ec;
    fs::remove_all(dir_ + "/stage", ec);  // each call stages afresh
    return StageTemplateTree(base_, dir_ + "/stage", agent_, "key123", dir_ + "/log", extras);
  }
  void Link(const std::string& target, const std::string& rel) {
    std::error_code ec;
    fs::remove_all(base_ + "/" + rel, ec);
    ASSERT_EQ(::symlink(target.c_str(), (base_ + "/" + rel).c_str()), 0) << rel;
  }
  // The host directory is exactly as it was.
  void ExpectHostUntouched() { EXPECT_EQ(Snapshot(host_), before_); }
  void ExpectRefused(const Status& st, const std::string& image_path) {
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("'" + image_path + "'"), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("symlink"), std::string::npos) << st.ToString();
    // The image's path, not the host's staging directory.
    EXPECT_EQ(st.message().find(dir_ + "/stage"), std::string::npos) << st.ToString();
    ExpectHostUntouched();
  }
  std::string Staged(const std::string& rel) {
    struct stat st {};
    if (::lstat((dir_ + "/stage/" + rel).c_str(), &st) != 0) return "missing";
    if (!S_ISREG(st.st_mode)) return "not a regular file";
    auto text = ReadFile(dir_ + "/stage/" + rel);
    return text.ok() ? *text : "?";
  }

  std::string dir_, host_, base_, agent_, extra_;
  std::map<std::string, std::string> before_;
};

TEST_F(StagingTest, CleanTreeStages) {
  Status st = Stage();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Staged("usr/sbin/airlock-agent"), "#!/bin/sh\necho agent\n");
  EXPECT_EQ(Staged("etc/airlock/rootfs-id"), "key123\n");
  EXPECT_EQ(Staged("etc/resolv.conf"), "extra\n");
  ExpectHostUntouched();
}

// Directories staging creates or enters: a link there is refused.
TEST_F(StagingTest, EtcAirlockAbsoluteDirLinkIsRefused) {
  Link(host_, "etc/airlock");
  ExpectRefused(Stage(), "/etc/airlock");
}

TEST_F(StagingTest, EtcAirlockRelativeDirLinkIsRefused) {
  // From <dir>/stage/etc: ../../host is the host directory.
  Link("../../../../../../../../../.." + host_, "etc/airlock");
  ExpectRefused(Stage(), "/etc/airlock");
  Link("../../host", "etc/airlock");
  ExpectRefused(Stage(), "/etc/airlock");
}

TEST_F(StagingTest, EtcLinkIsRefused) {
  ASSERT_TRUE(MakeDirs(host_ + "/airlock").ok());
  before_ = Snapshot(host_);
  Link(host_, "etc");
  ExpectRefused(Stage(), "/etc");
}

TEST_F(StagingTest, SbinThroughALinkedUsrIsRefused) {
  // sbin -> usr/sbin is the merged-/usr shape; usr itself leads out.
  Link(host_, "usr");
  ExpectRefused(Stage(), "/usr");
  Link("../host", "usr");
  ExpectRefused(Stage(), "/usr");
}

TEST_F(StagingTest, SbinLinkLeavingTheTreeIsRefused) {
  for (const std::string& target : {host_ + "/sbin", std::string("../host/sbin"), std::string("usr/../../host/sbin")}) {
    Link(target, "sbin");
    Status st = Stage();
    EXPECT_FALSE(st.ok()) << target;
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("'/sbin'"), std::string::npos) << st.ToString();
    ExpectHostUntouched();
  }
}

TEST_F(StagingTest, SbinLinkToALinkIsRefused) {
  // sbin -> usr/sbin, and usr/sbin itself a link out.
  Link(host_ + "/sbin", "usr/sbin");
  ExpectRefused(Stage(), "/usr/sbin");
}

// Files staging writes: a link there is removed (never followed) and a new
// file made in the tree.
TEST_F(StagingTest, FileLinksAreReplacedNotFollowed) {
  ASSERT_TRUE(MakeDirs(base_ + "/etc/airlock").ok());
  Link(host_ + "/rootfs-id", "etc/airlock/rootfs-id");
  Link("../../../host/sbin/airlock-agent", "usr/sbin/airlock-agent");
  Link(host_ + "/hostname", "etc/hostname");
  Link("../../host/hosts", "etc/hosts");
  Link("../../../../../../../../../.." + host_ + "/resolv.conf", "etc/resolv.conf");
  Status st = Stage();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectHostUntouched();
  EXPECT_EQ(Staged("etc/airlock/rootfs-id"), "key123\n");
  EXPECT_EQ(Staged("usr/sbin/airlock-agent"), "#!/bin/sh\necho agent\n");
  for (const char* f : {"etc/hostname", "etc/hosts", "etc/resolv.conf"}) EXPECT_EQ(Staged(f), "extra\n") << f;
  // The base layer's links are as they were (staging works on a copy).
  EXPECT_EQ(fs::read_symlink(base_ + "/etc/airlock/rootfs-id").string(), host_ + "/rootfs-id");
}

TEST_F(StagingTest, LinksInARealSbinAndLinksToDirectoriesAreReplaced) {
  // /sbin a real directory (no merged /usr); a file link to a host file, a
  // file link to a host directory, a dangling link.
  Link(host_ + "/sbin", "sbin");
  ASSERT_EQ(::unlink((base_ + "/sbin").c_str()), 0);
  ASSERT_TRUE(MakeDirs(base_ + "/sbin").ok());
  ASSERT_TRUE(MakeDirs(base_ + "/etc/airlock").ok());
  Link(host_ + "/sbin/airlock-agent", "sbin/airlock-agent");
  Link(host_, "etc/airlock/rootfs-id");
  Link(host_ + "/missing", "etc/hosts");
  Status st = Stage();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectHostUntouched();
  EXPECT_EQ(Staged("sbin/airlock-agent"), "#!/bin/sh\necho agent\n");
  EXPECT_EQ(Staged("etc/airlock/rootfs-id"), "key123\n");
  EXPECT_EQ(Staged("etc/hosts"), "extra\n");
  EXPECT_FALSE(Exists(host_ + "/missing"));
}

TEST_F(StagingTest, ExtraFileParentLinkIsRefused) {
  Link(host_, "usr/local/bin");
  ExpectRefused(Stage({StagedFile{extra_, "/usr/local/bin/tool", 0755, *Sha256File(extra_), ""}}), "/usr/local/bin");
  Link("../../host", "usr/local");
  ExpectRefused(Stage({StagedFile{extra_, "/usr/local/bin/tool", 0755, *Sha256File(extra_), ""}}), "/usr/local");
}

TEST_F(StagingTest, ExtraFileParentMadeWhenMissing) {
  Status st = Stage({StagedFile{extra_, "/opt/x/y/tool", 0750, *Sha256File(extra_), ""}});
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Staged("opt/x/y/tool"), "extra\n");
  struct stat s {};
  ASSERT_EQ(::stat((dir_ + "/stage/opt/x/y/tool").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0750u);
  ExpectHostUntouched();
}

// A link a template adds (the desktop's /opt/noVNC) is made as a link,
// its target stored as given and never resolved on the host: whatever had
// its name (here a planted link into the host) is replaced, and a planted
// link at its parent is refused as for a file.
TEST_F(StagingTest, ExtraLinkIsMadeAsALinkAndReplacesWhatHadItsName) {
  ASSERT_TRUE(MakeDirs(base_ + "/opt").ok());
  Link(host_, "opt/noVNC");
  Status st = Stage({StagedFile{"", "/opt/noVNC", 0, "", "/usr/share/novnc"}});
  ASSERT_TRUE(st.ok()) << st.ToString();
  char target[256] = {};
  ssize_t n = ::readlink((dir_ + "/stage/opt/noVNC").c_str(), target, sizeof target - 1);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(target, static_cast<size_t>(n)), "/usr/share/novnc");
  ExpectHostUntouched();
  ASSERT_TRUE(RemoveTree(dir_ + "/stage").ok());
  ASSERT_TRUE(RemoveTree(base_ + "/opt").ok());
  Link(host_, "opt");
  ExpectRefused(Stage({StagedFile{"", "/opt/noVNC", 0, "", "/usr/share/novnc"}}), "/opt");
  ExpectHostUntouched();
}

// The key covers a link's target: another target is another image.
TEST(ExtraFilesDigestTest, CoversALinksTarget) {
  std::string a = ExtraFilesDigest({StagedFile{"", "/opt/noVNC", 0, "", "/usr/share/novnc"}});
  std::string b = ExtraFilesDigest({StagedFile{"", "/opt/noVNC", 0, "", "/usr/share/other"}});
  EXPECT_FALSE(a.empty());
  EXPECT_NE(a, b);
}

TEST_F(StagingTest, ExtraFileDestMustBeClean) {
  for (const char* bad : {"etc/x", "/etc/../x", "/etc/./x", "/etc/", "/..", "/etc/x/.."}) {
    Status st = Stage({StagedFile{extra_, bad, 0644, *Sha256File(extra_), ""}});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad << ": " << st.ToString();
  }
  ExpectHostUntouched();
}

// The mount points and directories an OCI tree is given before staging.
TEST_F(StagingTest, PrepareOciTreeLeavesLinksAlone) {
  for (const char* d : {"proc", "tmp", "run", "dev", "sys"}) Link(host_, d);
  Status st = PrepareOciTree(base_);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectHostUntouched();
  Link(host_, "etc");
  st = PrepareOciTree(base_);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("'/etc'"), std::string::npos) << st.ToString();
  ExpectHostUntouched();
}

TEST_F(StagingTest, PrepareOciTreeMakesMissingDirs) {
  Status st = PrepareOciTree(base_);
  ASSERT_TRUE(st.ok()) << st.ToString();
  struct stat s {};
  ASSERT_EQ(::lstat((base_ + "/tmp").c_str(), &s), 0);
  EXPECT_TRUE(S_ISDIR(s.st_mode));
  EXPECT_EQ(s.st_mode & 07777, 01777u);
}

// The helper itself.
TEST_F(StagingTest, OpenDirInTreeNeverFollowsALink) {
  ASSERT_TRUE(MakeDirs(base_ + "/a").ok());
  Link(host_, "a/b");
  auto root = OpenTreeRoot(base_);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto d = OpenDirInTree(root->get(), "/a/b/c", /*create=*/true);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("'/a/b'"), std::string::npos) << d.status().ToString();
  EXPECT_NE(d.status().message().find(host_), std::string::npos) << "the link's target is shown";
  EXPECT_FALSE(OpenDirInTree(root->get(), "a/../../host", true).ok());
  EXPECT_FALSE(OpenDirInTree(root->get(), "etc/hostname", false).ok());
  auto made = OpenDirInTree(root->get(), "/a/c/d", true);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(IsDirectory(base_ + "/a/c/d"));
  ExpectHostUntouched();
}

// `airlock image build` keeps the tree it wrote the image from as the
// image's root tree for gVisor: the same files (hard links into the base
// layer, never written), stamped with the image's UUID, no lost+found.
TEST_F(StagingTest, BuildKeepsTheStagedTreeBesideTheImageWhenAsked) {
  if (::geteuid() != 0 || !FindExecutable("mkfs.ext4").ok()) GTEST_SKIP() << "needs root and mkfs.ext4";
  ASSERT_TRUE(WriteFile(dir_ + "/base/packages.txt", "busybox 1\n").ok());
  ASSERT_TRUE(WriteFile(base_ + "/usr/local/bin/tool", "tool\n", 0755).ok());
  std::string agent_sha = *Sha256File(agent_);
  for (bool keep : {false, true}) {
    SCOPED_TRACE(keep ? "keep_tree" : "no keep_tree");
    const std::string work = dir_ + (keep ? "/work1" : "/work0"), out = dir_ + (keep ? "/out1" : "/out0");
    ASSERT_TRUE(MakeDirs(work).ok());
    ASSERT_TRUE(MakeDirs(out).ok());
    TemplateInputs in{dir_ + "/base", agent_, agent_sha, "key123", {}, keep};
    Status st = BuildTemplateRootfs(in, work, out, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto stamp = ImageFileStamp(out + "/rootfs.ext4");
    ASSERT_TRUE(stamp.ok());
    const std::string tree = out + "/" + kRootTreeDir;
    if (!keep) {
      EXPECT_FALSE(fs::exists(tree));
      EXPECT_FALSE(fs::exists(out + "/" + kRootTreeStampFile));
      continue;
    }
    EXPECT_EQ(*ReadFile(out + "/" + kRootTreeStampFile), *stamp + "\n");
    EXPECT_EQ(*ReadFile(tree + "/usr/sbin/airlock-agent"), "#!/bin/sh\necho agent\n");
    EXPECT_EQ(*ReadFile(tree + "/etc/airlock/rootfs-id"), "key123\n");
    EXPECT_FALSE(fs::exists(tree + "/lost+found"));
    struct stat a {}, b {};
    ASSERT_EQ(::stat((tree + "/usr/local/bin/tool").c_str(), &a), 0);
    ASSERT_EQ(::stat((base_ + "/usr/local/bin/tool").c_str(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino) << "a hard link into the base layer, not a copy";
    EXPECT_FALSE(fs::exists(work + "/stage"));
  }
  ExpectHostUntouched();
}

}  // namespace
}  // namespace airlock::image
