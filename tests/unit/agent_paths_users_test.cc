#include <sys/stat.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "agent/cgroups.h"
#include "agent/fs_util.h"
#include "agent/init.h"
#include "agent/paths.h"
#include "agent/users.h"

namespace airlock::agent {
namespace {

TEST(Cgroups, DefaultLimitsLeaveTheAgentRoom) {
  constexpr int64_t kMiB = 1 << 20;
  // 512 MiB guest: threads-max 3840 (RAM / 128 KiB).
  CgroupLimits l = DefaultCgroupLimits(3840, 512 * kMiB);
  EXPECT_EQ(l.total_pids, 3840 - 256);
  EXPECT_EQ(l.pids_per_command, 512);  // one per MiB
  EXPECT_EQ(l.memory_max, 480 * kMiB);
  // 8 GiB: a command may take half the tasks; 1/16 of RAM is kept.
  l = DefaultCgroupLimits(61440, 8192 * kMiB);
  EXPECT_EQ(l.pids_per_command, 8192);
  EXPECT_EQ(l.memory_max, 7680 * kMiB);
  l = DefaultCgroupLimits(4000, 64 * kMiB * 1024);
  EXPECT_EQ(l.pids_per_command, (4000 - 256) / 2);
  // Tiny or unknown sizes: floors, and memory left alone.
  l = DefaultCgroupLimits(0, 0);
  EXPECT_EQ(l.total_pids, 128);
  EXPECT_EQ(l.pids_per_command, 64);
  EXPECT_EQ(l.memory_max, 0);
}

TEST(Paths, Resolve) {
  const std::string home = "/home/user";
  EXPECT_EQ(*ResolvePath("/etc/passwd", home), "/etc/passwd");
  EXPECT_EQ(*ResolvePath("a.txt", home), "/home/user/a.txt");
  EXPECT_EQ(*ResolvePath("~", home), "/home/user");
  EXPECT_EQ(*ResolvePath("~/x/y", home), "/home/user/x/y");
  EXPECT_EQ(*ResolvePath("", home), "/home/user");
  EXPECT_EQ(*ResolvePath("../../../etc", home), "/etc");
  EXPECT_EQ(*ResolvePath("/a/./b//c/../d/", home), "/a/b/d");
  EXPECT_EQ(*ResolvePath("/../..", home), "/");
  EXPECT_EQ(*ResolvePath("dir/..", home), "/home/user");
  EXPECT_EQ(*ResolvePath("~/../other", home), "/home/other");
  EXPECT_FALSE(ResolvePath("~root/x", home).ok());
  EXPECT_FALSE(ResolvePath(std::string("a\0b", 3), home).ok());
  EXPECT_EQ(ParentPath("/a/b"), "/a");
  EXPECT_EQ(ParentPath("/a"), "/");
  EXPECT_EQ(BaseName("/a/b"), "b");
  EXPECT_EQ(BaseName("/"), "/");
}

TEST(Users, ParsePasswdAndGroup) {
  auto db = UserDb::Parse(
      "# comment\n"
      "root:x:0:0:root:/root:/bin/bash\n"
      "broken line\n"
      "bad:x:notanumber:0::/:/bin/sh\n"
      "user:x:1000:1000:User,,,:/home/user:/bin/bash\r\n"
      "nosh:x:1001:1001::/home/nosh:\n",
      "root:x:0:\n"
      "sudo:x:27:user,other\n"
      "user:x:1000:\n"
      "docker:x:999:other,user\n"
      "garbage\n");
  auto u = db.Lookup("user");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->uid, 1000u);
  EXPECT_EQ(u->gid, 1000u);
  EXPECT_EQ(u->home, "/home/user");
  EXPECT_EQ(u->shell, "/bin/bash");
  EXPECT_EQ(u->groups, (std::vector<gid_t>{1000, 27, 999}));
  auto r = db.Lookup("root");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->groups, (std::vector<gid_t>{0}));
  EXPECT_EQ(db.Lookup("bad").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(db.Lookup("nobody").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(db.Lookup("nosh")->shell, "");
  EXPECT_EQ(db.UserName(1000), "user");
  EXPECT_EQ(db.UserName(4242), "4242");
  EXPECT_EQ(db.GroupName(27), "sudo");
  EXPECT_EQ(db.GroupName(4242), "4242");
}

TEST(Users, LoadMissingFilesIsEmpty) {
  auto db = UserDb::Load("/nonexistent-root");
  EXPECT_FALSE(db.Lookup("root").ok());
}

TEST(FsUtil, PermissionString) {
  EXPECT_EQ(PermissionString(S_IFREG | 0644), "-rw-r--r--");
  EXPECT_EQ(PermissionString(S_IFDIR | 0755), "drwxr-xr-x");
  EXPECT_EQ(PermissionString(S_IFLNK | 0777), "lrwxrwxrwx");
  EXPECT_EQ(PermissionString(S_IFDIR | 01777), "drwxrwxrwt");
  EXPECT_EQ(PermissionString(S_IFREG | 04755), "-rwsr-xr-x");
  EXPECT_EQ(PermissionString(S_IFREG | 02644), "-rw-r-Sr--");
}

TEST(Init, KernelCmdline) {
  auto c = ParseKernelCmdline(
      "console=ttyS0 airlock.hostname=sbx-1 airlock.ip=169.254.0.21/30 airlock.gw=169.254.0.22 quiet\n");
  EXPECT_EQ(c.hostname, "sbx-1");
  EXPECT_EQ(c.ip, "169.254.0.21/30");
  EXPECT_EQ(c.gateway, "169.254.0.22");
  EXPECT_FALSE(c.default_route);
  EXPECT_TRUE(ParseKernelCmdline("airlock.route=default").default_route);
  EXPECT_FALSE(ParseKernelCmdline("").ip.has_value());
  EXPECT_EQ(ParseKernelCmdline("airlock.dns=169.254.0.22").dns, "169.254.0.22");
}

TEST(Init, ResolvConf) {
  std::string path = "/tmp/airlock-resolv-" + std::to_string(::getpid());
  BootConfig c;
  c.dns = "169.254.0.22";
  ASSERT_TRUE(WriteResolvConf(c, path).ok());
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("nameserver 169.254.0.22\n", 0), 0u) << text;
  ::unlink(path.c_str());
  c.dns = "not-an-ip";
  EXPECT_FALSE(WriteResolvConf(c, path).ok());
  EXPECT_TRUE(WriteResolvConf(BootConfig{}, path).ok());  // nothing to write
}

}  // namespace
}  // namespace airlock::agent
