// Internal to the image module: the two build steps EnsureImage chains.
// Each writes its artefacts into `out_dir` (an existing empty directory that
// the caller renames into the cache when the step succeeds) and may use
// `work_dir` (existing, removed by the caller) for scratch files.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::image {

using Progress = std::function<void(std::string_view)>;

// Bumped whenever a build step changes what it produces; part of every key.
inline constexpr char kBuilderVersion[] = "1";
inline constexpr char kSuite[] = "bookworm";
inline constexpr char kKernelMetapackage[] = "linux-image-cloud-amd64";

// The kernel modules the initramfs loads (plus their dependencies); modules
// built into the kernel are skipped.
const std::vector<std::string>& InitramfsModules();
// The /init script (src/image/initramfs_init.sh, embedded at build time).
std::string_view InitramfsInitScript();

struct KernelPackage {
  std::string name;     // linux-image-6.1.0-57-cloud-amd64
  std::string version;  // 6.1.192-3
  std::string release;  // 6.1.0-57-cloud-amd64
};
// Asks apt which package the metapackage depends on. Runs `apt-get update`
// first when `update` is set, or when the lookup fails without it.
StatusOr<KernelPackage> ResolveKernelPackage(bool update, const std::string& work_dir,
                                             const Progress& progress);

struct BootInputs {
  KernelPackage kernel;
  std::string busybox_path;   // a static busybox
  std::string deb_cache_dir;  // where kernel .debs are kept between builds
};
// Writes out_dir/{vmlinux,initrd.cpio.gz,modules.txt}.
Status BuildBoot(const BootInputs& in, const std::string& work_dir, const std::string& out_dir,
                 const Progress& progress);

struct RootfsInputs {
  std::string suite;
  std::vector<std::string> packages;
  std::string agent_binary;
  std::string agent_sha256;  // what the key was computed from
  std::string key;           // written to /etc/airlock/rootfs-id
};
// Writes out_dir/{rootfs.ext4,packages.txt}.
Status BuildRootfs(const RootfsInputs& in, const std::string& work_dir, const std::string& out_dir,
                   const Progress& progress);

}  // namespace airlock::image
