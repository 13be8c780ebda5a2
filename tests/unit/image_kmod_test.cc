// modules.dep parsing and load-order resolution.
#include <gtest/gtest.h>

#include <algorithm>

#include "image/kmod.h"

namespace airlock::image {
namespace {

// Shaped like bookworm's cloud kernel (after depmod).
constexpr char kDep[] =
    "kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\n"
    "kernel/drivers/virtio/virtio_ring.ko:\n"
    "kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio_ring.ko "
    "kernel/drivers/virtio/virtio.ko\n"
    "kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko "
    "kernel/drivers/virtio/virtio.ko\n"
    "kernel/net/core/failover.ko:\n"
    "kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\n"
    "kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko "
    "kernel/net/core/failover.ko kernel/drivers/virtio/virtio_ring.ko "
    "kernel/drivers/virtio/virtio.ko\n"
    "kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio_ring.ko "
    "kernel/drivers/virtio/virtio.ko\n"
    "kernel/lib/crc16.ko:\n";

size_t IndexOf(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), s) - v.begin());
}

TEST(KmodTest, NamesFromPaths) {
  EXPECT_EQ(ModuleNameFromPath("kernel/drivers/char/hw_random/virtio-rng.ko"), "virtio_rng");
  EXPECT_EQ(ModuleNameFromPath("kernel/fs/ext4/ext4.ko.xz"), "ext4");
  EXPECT_EQ(ModuleNameFromPath("virtio.ko"), "virtio");
}

TEST(KmodTest, ResolvesDependenciesBeforeDependents) {
  auto deps = ParseModulesDep(kDep);
  ASSERT_TRUE(deps.ok()) << deps.status().ToString();
  std::set<std::string> builtin =
      ParseModulesBuiltin("kernel/fs/ext4/ext4.ko\nkernel/fs/jbd2/jbd2.ko\n");
  auto order = ResolveLoadOrder(
      *deps, {"virtio_net", "virtio-rng", "virtio_blk", "virtio_mmio", "ext4"}, builtin);
  ASSERT_TRUE(order.ok()) << order.status().ToString();
  const auto& o = *order;
  // Each module once, the built-in ext4 skipped, crc16 not pulled in.
  EXPECT_EQ(o.size(), 8u);
  for (const auto& [dependent, dep] : std::vector<std::pair<std::string, std::string>>{
           {"kernel/drivers/net/virtio_net.ko", "kernel/drivers/net/net_failover.ko"},
           {"kernel/drivers/net/net_failover.ko", "kernel/net/core/failover.ko"},
           {"kernel/drivers/net/virtio_net.ko", "kernel/drivers/virtio/virtio.ko"},
           {"kernel/drivers/block/virtio_blk.ko", "kernel/drivers/virtio/virtio_ring.ko"},
           {"kernel/drivers/virtio/virtio_mmio.ko", "kernel/drivers/virtio/virtio.ko"},
           {"kernel/drivers/char/hw_random/virtio-rng.ko", "kernel/drivers/virtio/virtio.ko"}}) {
    ASSERT_LT(IndexOf(o, dep), o.size()) << dep;
    ASSERT_LT(IndexOf(o, dependent), o.size()) << dependent;
    EXPECT_LT(IndexOf(o, dep), IndexOf(o, dependent)) << dep << " before " << dependent;
  }
  EXPECT_EQ(o.front(), "kernel/drivers/virtio/virtio_ring.ko");
  EXPECT_LT(IndexOf(o, "kernel/drivers/virtio/virtio_ring.ko"),
            IndexOf(o, "kernel/drivers/virtio/virtio.ko"));
}

TEST(KmodTest, OrderIsStable) {
  auto deps = ParseModulesDep(kDep);
  ASSERT_TRUE(deps.ok());
  auto a = ResolveLoadOrder(*deps, {"virtio_net", "virtio_blk"}, {});
  auto b = ResolveLoadOrder(*deps, {"virtio_net", "virtio_blk"}, {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(KmodTest, UnknownModuleIsNotFound) {
  auto deps = ParseModulesDep(kDep);
  ASSERT_TRUE(deps.ok());
  auto order = ResolveLoadOrder(*deps, {"virtio_vsock"}, {});
  ASSERT_FALSE(order.ok());
  EXPECT_EQ(order.status().code(), StatusCode::kNotFound);
  EXPECT_NE(order.status().message().find("virtio_vsock"), std::string::npos);
}

TEST(KmodTest, MissingDependencyEntryIsNotFound) {
  auto deps = ParseModulesDep("kernel/a.ko: kernel/missing.ko\n");
  ASSERT_TRUE(deps.ok());
  auto order = ResolveLoadOrder(*deps, {"a"}, {});
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.status().message().find("kernel/missing.ko"), std::string::npos);
}

TEST(KmodTest, CycleIsReported) {
  auto deps = ParseModulesDep("kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n");
  ASSERT_TRUE(deps.ok());
  auto order = ResolveLoadOrder(*deps, {"a"}, {});
  ASSERT_FALSE(order.ok());
  EXPECT_EQ(order.status().code(), StatusCode::kFailedPrecondition);
}

TEST(KmodTest, BadLineIsRejected) {
  auto deps = ParseModulesDep("kernel/a.ko:\nno colon here\n");
  ASSERT_FALSE(deps.ok());
  EXPECT_NE(deps.status().message().find("line 2"), std::string::npos);
}

}  // namespace
}  // namespace airlock::image
