// A template rootfs (a raw ext4 image, image/image.h) as the directory tree
// runsc's gofer serves (docs/runtime-gvisor.md "Root filesystem").
//
// The tree lives next to the image (<image dir>/gvisor-root, so the image's
// garbage collection takes it too; common/file_util.h kRootTreeDir).
// `airlock image build` leaves it there, the tree it wrote the image from.
// For any other image it is extracted once, by fuse2fs: the image is
// parsed by e2fsprogs in user space, never mounted by the host kernel (a
// custom template's image was written by a guest), and `cp -a` keeps modes
// (setuid), owners, links and xattrs. Built in a temporary directory and
// renamed into place under a lock, so concurrent starts share one build.
#pragma once

#include <string>

#include "common/status.h"

namespace airlock::gvisor {

// The tree of the image at `rootfs` (absolute), extracting it if needed.
// Errors: FailedPrecondition when fuse2fs is missing (names the package);
// Internal with the tool's output; the image's errno status.
StatusOr<std::string> EnsureRootTree(const std::string& rootfs);

}  // namespace airlock::gvisor
