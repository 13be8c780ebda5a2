// Template root filesystem: mmdebstrap a Debian suite with the template's
// packages, add user `user` and the agent, and export it as a sparse ext4
// image with mkfs.ext4 -d.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>

#include "image/builders.h"
#include "image/command.h"
#include "image/fs_util.h"
#include "image/hash.h"

namespace airlock::image {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kFreeSpace = 2048 * kMiB;  // room for the sandbox's files

// Paths dpkg leaves out of the rootfs (copyright files are kept).
constexpr const char* kDpkgOpts[] = {
    "path-exclude=/usr/share/man/*",           "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright", "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",        "path-exclude=/usr/share/lintian/*",
};

void Say(const Progress& p, const std::string& s) {
  if (p) p(s);
}

// The host's apt sources (one-line and deb822 files), handed to mmdebstrap
// as MIRROR arguments: the chroot uses exactly the mirrors the host uses.
StatusOr<std::vector<std::string>> HostAptSources() {
  std::vector<std::string> out;
  if (Exists("/etc/apt/sources.list")) out.push_back("/etc/apt/sources.list");
  if (auto names = ListDir("/etc/apt/sources.list.d"); names.ok()) {
    std::sort(names->begin(), names->end());
    for (const auto& n : *names) {
      auto ends = [&](std::string_view s) {
        return n.size() > s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
      };
      if (ends(".list") || ends(".sources")) out.push_back("/etc/apt/sources.list.d/" + n);
    }
  }
  if (out.empty()) {
    return FailedPrecondition(
        "the host has no apt sources (/etc/apt/sources.list{,.d}); "
        "the rootfs is built from the host's mirrors");
  }
  return out;
}

Status Chroot(const std::string& root, std::vector<std::string> argv, const std::string& log) {
  argv.insert(argv.begin(), {"chroot", root});
  return RunCommand(argv, LogTo(log));
}

}  // namespace

Status BuildRootfs(const RootfsInputs& in, const std::string& work_dir, const std::string& out_dir,
                   const Progress& progress) {
  std::string root = work_dir + "/root";
  std::string log = work_dir + "/mmdebstrap.log";
  ASSIGN_OR_RETURN(std::vector<std::string> sources, HostAptSources());

  std::string include;
  for (const auto& p : in.packages) include += (include.empty() ? "" : ",") + p;
  // mmdebstrap runs in its own PID and mount namespaces: if this process dies,
  // unshare is killed (PR_SET_PDEATHSIG), which kills the namespace's init
  // (--kill-child) and with it every process mmdebstrap forked; the proc,
  // sys and dev mounts it makes in the chroot vanish with the namespace
  // instead of lingering on the host.
  std::vector<std::string> argv = {"unshare",
                                   "--pid",
                                   "--fork",
                                   "--kill-child",
                                   "--mount",
                                   "--propagation",
                                   "private",
                                   "mmdebstrap",
                                   "--mode=root",
                                   "--variant=apt",
                                   "--include=" + include};
  for (const char* o : kDpkgOpts) argv.push_back(std::string("--dpkgopt=") + o);
  argv.push_back(in.suite);
  argv.push_back(root);
  argv.insert(argv.end(), sources.begin(), sources.end());
  Say(progress, "installing " + in.suite + " with " + std::to_string(in.packages.size()) +
                    " packages (mmdebstrap; a few minutes; log: " + log + ")");
  RETURN_IF_ERROR(RunCommand(argv, LogTo(log)));

  Say(progress, "configuring the template (user, agent, hostname)");
  RETURN_IF_ERROR(Chroot(root, {"groupadd", "--gid", "1000", "user"}, log));
  RETURN_IF_ERROR(Chroot(root,
                         {"useradd", "--uid", "1000", "--gid", "1000", "--create-home",
                          "--home-dir", "/home/user", "--shell", "/bin/bash", "user"},
                         log));
  RETURN_IF_ERROR(CopyFile(in.agent_binary, root + "/sbin/airlock-agent", 0755));
  ASSIGN_OR_RETURN(std::string copied_sha, Sha256File(root + "/sbin/airlock-agent"));
  if (copied_sha != in.agent_sha256) {
    return Status(StatusCode::kAborted,
                  "agent binary " + in.agent_binary + " changed during the build; run it again");
  }
  RETURN_IF_ERROR(WriteFile(root + "/etc/hostname", "airlock\n"));
  RETURN_IF_ERROR(WriteFile(root + "/etc/hosts",
                            "127.0.0.1\tlocalhost\n127.0.1.1\tairlock\n"
                            "::1\t\tlocalhost ip6-localhost ip6-loopback\n"
                            "ff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n"));
  // The host's resolver must not leak into the template; the agent writes
  // the sandbox's resolver configuration at start.
  RETURN_IF_ERROR(WriteFile(root + "/etc/resolv.conf", ""));
  RETURN_IF_ERROR(MakeDirs(root + "/etc/airlock"));
  RETURN_IF_ERROR(WriteFile(root + "/etc/airlock/rootfs-id", in.key + "\n"));
  RETURN_IF_ERROR(RunCommand({"chroot", root, "dpkg-query", "-W", "-f", "${Package} ${Version}\\n"},
                             LogTo(out_dir + "/packages.txt")));

  ASSIGN_OR_RETURN(TreeUsage usage, MeasureTree(root));
  // ext4 metadata: ~256 B per inode plus block-group overhead; 10% slack.
  uint64_t bytes = usage.bytes + usage.bytes / 10 + usage.inodes * 256 + 64 * kMiB + kFreeSpace;
  uint64_t mib = (bytes + kMiB - 1) / kMiB;
  std::string image = out_dir + "/rootfs.ext4";
  Say(progress, "writing ext4 image (" + std::to_string(usage.bytes / kMiB) + " MiB used, " +
                    std::to_string(mib) + " MiB image)");
  RETURN_IF_ERROR(RunCommand({"mkfs.ext4", "-q", "-F", "-L", "airlock-root", "-m", "0",
                              // Initialise inode tables and journal now: otherwise the guest's
                              // ext4lazyinit thread writes them into every sandbox's overlay.
                              "-E", "lazy_itable_init=0,lazy_journal_init=0", "-d", root, image,
                              std::to_string(mib) + "M"},
                             LogTo(work_dir + "/mkfs.log")));
  if (::chmod(image.c_str(), 0444) != 0) return ErrnoError("chmod " + image);
  return OkStatus();
}

}  // namespace airlock::image
