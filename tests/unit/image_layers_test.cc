// The two rootfs layers: which inputs each key covers, and that staging a
// template never writes into the base layer it hard-links.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "image/builders.h"
#include "image/fs_util.h"

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
        BaseLayerKey("base", "bookworm", {"git", "bash"})}) {
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

TEST_F(StageTest, StripsElfAgent) {
  std::string agent = dir_ + "/true";
  ASSERT_TRUE(CopyFile("/bin/true", agent, 0755).ok());
  Status st = StageTemplateTree(base_, dir_ + "/stage", agent, "k", dir_ + "/log");
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto installed = ReadFile(dir_ + "/stage/usr/sbin/airlock-agent");
  ASSERT_TRUE(installed.ok());
  EXPECT_EQ(installed->substr(0, 4), std::string("\x7f" "ELF", 4));
  EXPECT_EQ(*ReadFile(base_ + "/usr/sbin/airlock-agent"), "old agent");
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

}  // namespace
}  // namespace airlock::image
