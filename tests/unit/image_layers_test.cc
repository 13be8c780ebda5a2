// The two rootfs layers: which inputs each key covers, and that staging a
// template never writes into the base layer it hard-links.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "image/builders.h"
#include "image/command.h"
#include "image/fs_util.h"
#include "image/hash.h"
#include "image/image.h"

namespace airlock::image {
namespace {

const std::vector<std::string> kPackages = {"bash", "git"};

TEST(LayersTest, AgentChangesTemplateKeyOnly) {
  std::string base = BaseLayerKey("base", "bookworm", kPackages);
  EXPECT_EQ(base.size(), 20u);
  EXPECT_EQ(base, BaseLayerKey("base", "bookworm", kPackages));
  std::string a = TemplateRootfsKey(base, std::string(64, 'a'));
  std::string b = TemplateRootfsKey(base, std::string(64, 'b'));
  EXPECT_EQ(a.size(), 20u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, TemplateRootfsKey(base, std::string(64, 'a')));
  // The base key has no agent input at all: same call, same key.
  EXPECT_EQ(BaseLayerKey("base", "bookworm", kPackages), base);
}

TEST(LayersTest, BaseInputsChangeBothKeys) {
  std::string base = BaseLayerKey("base", "bookworm", kPackages);
  std::string agent(64, 'a');
  for (const std::string& other :
       {BaseLayerKey("base", "trixie", kPackages), BaseLayerKey("other", "bookworm", kPackages),
        BaseLayerKey("base", "bookworm", {"bash", "git", "curl"}),
        BaseLayerKey("base", "bookworm", {"git", "bash"}),
        // A layer's post-install command (docker's group) is one of its inputs.
        BaseLayerKey("base", "bookworm", kPackages, "", "usermod --append --groups docker user")}) {
    EXPECT_NE(other, base);
    EXPECT_NE(TemplateRootfsKey(other, agent), TemplateRootfsKey(base, agent));
  }
  EXPECT_EQ(BaseLayerRecipe().size(), 64u);
}

class StageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/image_layers_testXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    base_ = dir_ + "/base";
    ASSERT_TRUE(MakeDirs(base_ + "/usr/sbin").ok());
    ASSERT_TRUE(MakeDirs(base_ + "/etc/airlock").ok());
    ASSERT_EQ(::symlink("usr/sbin", (base_ + "/sbin").c_str()), 0);
    // Files the staging step replaces: they must survive unchanged.
    ASSERT_TRUE(WriteFile(base_ + "/usr/sbin/airlock-agent", "old agent", 0755).ok());
    ASSERT_TRUE(WriteFile(base_ + "/etc/airlock/rootfs-id", "old id\n").ok());
    ASSERT_TRUE(WriteFile(base_ + "/etc/hostname", "airlock\n").ok());
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  static ino_t Inode(const std::string& p) {
    struct stat st {};
    ::lstat(p.c_str(), &st);
    return st.st_ino;
  }

  std::string dir_, base_;
};

TEST_F(StageTest, InstallsNewFilesAndLeavesBaseAlone) {
  std::string agent = dir_ + "/agent.sh";
  ASSERT_TRUE(WriteFile(agent, "#!/bin/sh\necho new\n", 0755).ok());
  std::string stage = dir_ + "/stage";
  Status st = StageTemplateTree(base_, stage, agent, "key123", dir_ + "/log");
  ASSERT_TRUE(st.ok()) << st.ToString();

  EXPECT_EQ(*ReadFile(stage + "/sbin/airlock-agent"), "#!/bin/sh\necho new\n");
  EXPECT_EQ(*ReadFile(stage + "/etc/airlock/rootfs-id"), "key123\n");
  EXPECT_EQ(*ReadFile(base_ + "/usr/sbin/airlock-agent"), "old agent");
  EXPECT_EQ(*ReadFile(base_ + "/etc/airlock/rootfs-id"), "old id\n");
  EXPECT_NE(Inode(stage + "/usr/sbin/airlock-agent"), Inode(base_ + "/usr/sbin/airlock-agent"));
  // Untouched files are hard links, not copies.
  EXPECT_EQ(Inode(stage + "/etc/hostname"), Inode(base_ + "/etc/hostname"));
  struct stat s {};
  ASSERT_EQ(::stat((stage + "/sbin/airlock-agent").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0755u);
}

TEST_F(StageTest, RefusesSbinLinkLeavingTheTree) {
  ASSERT_EQ(::unlink((base_ + "/sbin").c_str()), 0);
  ASSERT_EQ(::symlink("/usr/sbin", (base_ + "/sbin").c_str()), 0);
  std::string agent = dir_ + "/agent.sh";
  ASSERT_TRUE(WriteFile(agent, "#!/bin/sh\n", 0755).ok());
  Status st = StageTemplateTree(base_, dir_ + "/stage", agent, "k", dir_ + "/log");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
}

// Two builds of the same agent in different directories differ in their
// debug info and build-id; the guest's copy (and so the image key) does not.
TEST_F(StageTest, GuestAgentCopyDropsWhatNamesTheBuild) {
  for (const char* d : {"a", "b"}) {
    std::string src = dir_ + "/src-" + d + "/x/y";
    ASSERT_TRUE(MakeDirs(src).ok());
    ASSERT_TRUE(WriteFile(src + "/m.c", "int main(void) { return 0; }\n").ok());
    Status st = RunCommand({"sh", "-c", "cd " + src + " && cc -g -Wl,--build-id=sha1 -o prog m.c"},
                           LogTo(dir_ + "/cc.log"));
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(GuestAgentCopy(src + "/prog", dir_ + "/guest-" + d, dir_ + "/log").ok());
  }
  EXPECT_NE(*Sha256File(dir_ + "/src-a/x/y/prog"), *Sha256File(dir_ + "/src-b/x/y/prog"));
  EXPECT_EQ(*Sha256File(dir_ + "/guest-a"), *Sha256File(dir_ + "/guest-b"));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/guest-a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  // No debug sections left, and staging installs it byte for byte.
  Status sections = RunCommand({"sh", "-c", "objdump -h " + dir_ + "/guest-a | grep -c debug_info"},
                               LogTo(dir_ + "/sections.log"));
  EXPECT_FALSE(sections.ok()) << "grep found .debug_info";
  ASSERT_TRUE(StageTemplateTree(base_, dir_ + "/stage", dir_ + "/guest-a", "k", dir_ + "/log").ok());
  EXPECT_EQ(*Sha256File(dir_ + "/stage/usr/sbin/airlock-agent"), *Sha256File(dir_ + "/guest-a"));
}

// The image cache keeps what a template points at and what a sandbox or a
// snapshot still runs on; the rest goes.
TEST_F(StageTest, CollectGarbageKeepsWhatVmsAndSnapshotsUse) {
  const std::string state = dir_ + "/state", img = state + "/images";
  for (const char* k : {"cur", "prev", "paused", "running", "named", "old"}) {
    ASSERT_TRUE(MakeDirs(img + "/rootfs/" + k).ok());
    ASSERT_TRUE(WriteFile(img + "/rootfs/" + k + "/rootfs.ext4", "x").ok());
  }
  for (const char* k : {"bootcur", "bootpaused", "bootold"}) ASSERT_TRUE(MakeDirs(img + "/boot/" + k).ok());
  ASSERT_TRUE(MakeDirs(img + "/templates").ok());
  ASSERT_TRUE(WriteFile(img + "/templates/base.json",
                        R"({"id":"i","boot_key":"bootcur","rootfs_key":"cur","previous_rootfs_key":"prev",)"
                        R"("kernel_release":"6.1"})")
                  .ok());
  auto record = [&](const std::string& path, const std::string& json) {
    ASSERT_TRUE(MakeDirs(path.substr(0, path.rfind('/'))).ok());
    ASSERT_TRUE(WriteFile(path, json).ok());
  };
  record(state + "/snapshots/paused/sb1/manifest.json",
         R"({"rootfs":")" + img + R"(/rootfs/paused/rootfs.ext4","kernel":")" + img + R"(/boot/bootpaused/vmlinux"})");
  record(state + "/run/sb2/vm/vm.json", R"({"rootfs_template":")" + img + R"(/rootfs/running/rootfs.ext4"})");
  record(state + "/snapshots/named/n1/manifest.json", R"({"rootfs":")" + img + R"(/rootfs/named/rootfs.ext4"})");
  // Template snapshots are a cache: they pin nothing.
  record(state + "/snapshots/templates/t1/manifest.json", R"({"rootfs":")" + img + R"(/rootfs/old/rootfs.ext4"})");
  record(state + "/snapshots/forks/f1/manifest.json", "not json");

  CollectGarbage(state);
  for (const char* k : {"cur", "prev", "paused", "running", "named"})
    EXPECT_TRUE(IsDirectory(img + "/rootfs/" + k)) << k;
  EXPECT_FALSE(IsDirectory(img + "/rootfs/old"));
  EXPECT_TRUE(IsDirectory(img + "/boot/bootcur"));
  EXPECT_TRUE(IsDirectory(img + "/boot/bootpaused"));
  EXPECT_FALSE(IsDirectory(img + "/boot/bootold"));
}

// A built-in template's current base layer stays though no template points
// at it yet (make build makes them before any image: EnsureBaseLayers); a
// base layer of other inputs goes.
TEST_F(StageTest, CollectGarbageKeepsTheCurrentBaseLayers) {
  const std::string state = dir_ + "/state", img = state + "/images";
  std::vector<std::string> current;
  for (const auto& name : KnownTemplates()) {
    auto key = TemplateBaseLayerKey(name);
    ASSERT_TRUE(key.ok()) << name;
    current.push_back(*key);
  }
  for (const auto& k : current) ASSERT_TRUE(MakeDirs(img + "/base/" + k + "/root").ok());
  ASSERT_TRUE(MakeDirs(img + "/base/stale/root").ok());
  ASSERT_TRUE(MakeDirs(img + "/templates").ok());

  CollectGarbage(state);
  for (const auto& k : current) EXPECT_TRUE(IsDirectory(img + "/base/" + k)) << k;
  EXPECT_FALSE(IsDirectory(img + "/base/stale"));
}

}  // namespace
}  // namespace airlock::image
