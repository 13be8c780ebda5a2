// The VMM jail (docs/runtime-qemu.md, "Jail"): QEMU is exec'd as an
// unprivileged per-sandbox uid, with no capabilities (effective, permitted,
// inheritable, ambient and bounding sets all empty), no_new_privs, in its own
// mount namespace whose root is a read-only tmpfs holding exactly:
//   /usr (read-only; the binary, its libraries, firmware and modules), the
//   host's /lib* and /bin symlinks, /etc/ld.so.cache, /dev/{null,zero,
//   random,urandom}, /dev/net/tun and (KVM only) /dev/kvm as device nodes
//   owned by the uid, the VMM's own dir read-write (its overlay, QMP,
//   console and migration sockets), and each file it reads (kernel, initrd,
//   every disk of the overlay's backing chain) read-only, all at their host
//   paths, so no path on QEMU's command line or in a qcow2 header changes.
// No /proc (except, for a VMM handed an fd, a private procfs showing only
// its own uid's processes and no system files: subset=pid,hidepid=invisible,
// so that /proc/self/fd/3 names the fd), no /sys, nothing else of the host (state dir, database, keys,
// other sandboxes) exists in that namespace.
//
// PlanJail() is pure but for stat/realpath of the inputs (unit-tested);
// SpawnJailed() forks, and the child runs only async-signal-safe system
// calls over the precomputed plan: join cgroups → setns(net) → give the tap
// to the uid (TUNSETOWNER) → unshare(CLONE_NEWNS) → tmpfs → pivot_root →
// mounts and nodes → drop the old root → drop credentials → exec. A failing
// step is reported back (FailedPrecondition "vmm jail: <step> <path>: <errno
// text>") before anything runs, never silently skipped.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"

namespace airlock::qemu {

// What the jailed VMM may see and who it runs as.
struct JailSpec {
  uid_t uid = 0;                      // must not be 0
  gid_t gid = 0;                      // must not be 0
  std::string vmm_dir;                // read-write, owned by uid (absolute)
  std::vector<std::string> ro_files;  // read-only (absolute; kernel, initrd, disks)
  bool kvm = false;                   // give it /dev/kvm
  // Mount a procfs of its own at /proc (subset=pid, hidepid=invisible: its
  // uid's processes only, i.e. itself) so a passed fd is openable as
  // /proc/self/fd/N (QEMU 7.2's memory-backend-file takes only a path).
  bool proc = false;
  // The tmpfs is mounted here inside the new namespace before pivot_root
  // (must exist; nothing on the host sees the mount). Usually the run dir.
  std::string base_dir;
};

struct JailPlan {
  struct Bind {
    std::string source;  // host path (canonical), as seen under the old root
    std::string target;  // path inside the jail
    bool writable = false;
    bool exec = false;
    bool dir = false;
  };
  struct Node {
    std::string path;
    dev_t rdev = 0;
    mode_t mode = 0;     // permission bits
    bool owned = false;  // chown to the jail's uid (else root)
  };
  struct Symlink {
    std::string path, target;
  };
  uid_t uid = 0;
  gid_t gid = 0;
  std::string base_dir;
  std::string cwd;                 // chdir here before exec (the VMM dir)
  std::vector<std::string> dirs;   // created in this order inside the jail
  std::vector<std::string> files;  // empty files created as bind targets
  std::vector<Symlink> symlinks;
  std::vector<Bind> binds;
  std::vector<Node> nodes;
  bool proc = false;  // mount a private procfs at /proc (JailSpec::proc)
};

// InvalidArgument for uid/gid 0 or relative paths; ErrnoError naming a file
// that cannot be resolved.
StatusOr<JailPlan> PlanJail(const JailSpec& spec);

// How to run the process in the jail.
struct JailProcess {
  std::vector<std::string> argv;          // argv[0]: absolute path inside the jail
  std::vector<std::string> env;           // "K=V"; the daemon's environment is not inherited
  std::vector<std::string> cgroup_procs;  // cgroup.procs files joined before anything else
  int netns_fd = -1;                      // setns(CLONE_NEWNET) when >= 0
  std::string tap;                        // tap in that netns handed to the uid (TUNSETOWNER)
  int stdout_fd = -1, stderr_fd = -1;     // -1: /dev/null
  bool die_with_parent = true;            // PR_SET_PDEATHSIG(SIGKILL), set after the uid change
  int pass_fd = -1;                       // >= 0: becomes fd 3 of the process (borrowed; every other fd is closed)
};

StatusOr<Child> SpawnJailed(const JailPlan& plan, const JailProcess& process);

// Runs `<qemu_binary> --version` in a jail as `uid` (a throw-away vmm dir
// under `scratch_dir`): OK with QEMU's first line when the host can jail a
// VMM; otherwise the failing step and what to do.
StatusOr<std::string> ProbeJail(const std::string& qemu_binary, uid_t uid, const std::string& scratch_dir);

}  // namespace airlock::qemu
