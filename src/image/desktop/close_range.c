// libairlock-close-range.so: preloaded in the desktop template
// (/etc/ld.so.preload; docs/desktop.md "Runtimes"), so XFCE can start
// programs under gVisor.
//
// GLib 2.74 (Debian bookworm) sets up every child it spawns with
// close_range(lowfd, ~0U, 0) and treats any error but ENOSYS as fatal
// ("Failed to close file descriptor for child process (Invalid argument)").
// Linux clamps an upper bound beyond the largest descriptor; the runsc
// Debian ships (0.0~20240729) answers EINVAL for one above INT_MAX
// (gVisor clamps it since). This clamps it to INT_MAX first: the same
// descriptors are closed on both kernels (none can be above INT_MAX), so
// under QEMU nothing changes. Only close_range is replaced; the call goes
// straight to the kernel, as glibc's does.
#define _GNU_SOURCE
#include <limits.h>
#include <sys/syscall.h>
#include <unistd.h>

int close_range(unsigned int first, unsigned int last, int flags) {
  if (last > INT_MAX) last = INT_MAX;
  return (int)syscall(SYS_close_range, first, last, flags);
}
