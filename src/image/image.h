// Guest images: the kernel, initramfs and template root filesystem a microVM
// boots from (docs/image.md).
//
// EnsureImage builds what is missing under <state_dir>/images/ and returns the
// paths; FindImage only looks. Both are safe to call from several processes at
// once (an flock serialises builders; readers see complete artefacts only,
// because every artefact is built in a temporary directory and rename()d into
// place).
//
// Shapes:
//   kernel  - uncompressed ELF64 x86-64 vmlinux (boots under QEMU microvm via
//             PVH and under Firecracker).
//   initrd  - gzip'd newc cpio: busybox, virtio modules, /init.
//   rootfs  - raw ext4 image of the template. Never written at run time:
//             sandboxes put a qcow2 overlay on it. Sparse; its apparent size
//             includes ~2 GiB of free space for the sandbox's files.
// Errors: InvalidArgument for bad options (e.g. agent binary missing or not
// executable, unknown template); NotFound from FindImage when nothing is
// built (the message says "run: airlock image build"); Unavailable when the
// package mirror cannot be reached; Internal/other codes from failed tools,
// with the command and the tail of its output in the message.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::image {

inline constexpr char kDefaultStateDir[] = "/var/lib/airlock";

struct ImageOptions {
  std::string state_dir = kDefaultStateDir;
  std::string template_name = "base";  // only "base" exists so far
  // The static airlock-agent, installed in the rootfs at /sbin/airlock-agent.
  std::string agent_binary;
  // Rebuild everything even when a cached build matches.
  bool force = false;
  // Ask apt again which kernel package linux-image-cloud-amd64 points to
  // (after `apt-get update`) instead of trusting the last build. Without it an
  // unchanged rebuild is a no-op that does not touch the network.
  bool refresh = false;
  // Called with one human-readable line per build step ("fetching kernel
  // package linux-image-..."). May be empty.
  std::function<void(std::string_view step)> progress;
};

struct GuestImage {
  std::string kernel;          // absolute path of vmlinux
  std::string initrd;          // absolute path of initrd.cpio.gz
  std::string rootfs;          // absolute path of rootfs.ext4 (template, read-only)
  std::string kernel_release;  // e.g. "6.1.0-57-cloud-amd64"
  std::string kernel_package;  // e.g. "linux-image-6.1.0-57-cloud-amd64 6.1.192-3"
  std::string template_name;   // "base"
  // 20 hex digits hashing the inputs of the kernel, initramfs and rootfs builds
  // (not their bytes): equal ids mean the same inputs. A template snapshot is
  // keyed by the id and by the rootfs file's stamp (a rebuild under the same
  // id lays out a new filesystem; core/template_snapshots.cc).
  std::string id;
};

StatusOr<GuestImage> EnsureImage(const ImageOptions& options);

// The current image of a template, without building. NotFound when absent or
// incomplete.
StatusOr<GuestImage> FindImage(const std::string& state_dir, const std::string& template_name);

// The current image of every template that has a complete one (FindImage
// for each templates/<name>.json).
std::vector<GuestImage> CurrentImages(const std::string& state_dir);

// Removes, under the image lock, every build under <state_dir>/images that
// no template points at (its current and previous rootfs) and no running
// sandbox or paused/forked/named snapshot still needs (their vm.json and
// manifest.json name the files). EnsureImage runs it after every build.
void CollectGarbage(const std::string& state_dir);

// The Debian packages of a template's rootfs (what the cache key covers).
StatusOr<std::vector<std::string>> TemplatePackages(const std::string& template_name);

}  // namespace airlock::image
