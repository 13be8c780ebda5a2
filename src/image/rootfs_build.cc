// Template root filesystem, in two layers (builders.h, docs/image.md):
//   BuildBaseLayer      - mmdebstrap a Debian suite with the template's
//                         packages, add user `user`, hostname, hosts, an empty
//                         resolv.conf; kept unpacked. Or, for a template
//                         built on another's layer, a copy of that layer
//                         plus the packages it lacks (apt-get in a chroot).
//   BuildTemplateRootfs - hard-link copy of the base layer + the stripped
//                         agent, exported as a sparse ext4 image with
//                         mkfs.ext4 -d.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <set>

#include "common/file_util.h"
#include "image/builders.h"
#include "image/command.h"
#include "image/fs_util.h"
#include "image/hash.h"
#include "image/tree_beneath.h"

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

constexpr char kHostname[] = "airlock\n";
constexpr char kHosts[] =
    "127.0.0.1\tlocalhost\n127.0.1.1\tairlock\n"
    "::1\t\tlocalhost ip6-localhost ip6-loopback\n"
    "ff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n";
// The host's resolver must not leak into the template; the agent writes the
// sandbox's resolver configuration at start.
constexpr char kResolvConf[] = "";
// E2B's base template lets `user` run anything as root without a password
// (agents' scripts use `sudo apt-get ...`); root in the guest is already
// allowed through the API, the VM is the isolation boundary. Installed when
// the template has sudo, as a drop-in (Debian's /etc/sudoers includes
// /etc/sudoers.d), mode 0440 as sudo requires, checked with visudo.
constexpr char kSudoersPath[] = "/etc/sudoers.d/airlock-user";
constexpr char kSudoers[] = "user ALL=(ALL:ALL) NOPASSWD: ALL\n";

// Installs packages ($2...) in the base-layer tree $1 (ExtendBaseLayer), in
// private PID and mount namespaces: /proc, /dev and the host's resolver are
// mounted for apt and dpkg and vanish with the namespace. Part of the key
// of a layer built this way. The cleanup is mmdebstrap 1.3's (run_cleanup).
constexpr char kExtendScript[] = R"(set -eu
r=$1; shift
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount --bind /etc/resolv.conf "$r/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' > "$r/usr/sbin/policy-rc.d"
chmod 755 "$r/usr/sbin/policy-rc.d"
chroot "$r" apt-get update -q
chroot "$r" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
chroot "$r" apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/dev/null update -q
chroot "$r" apt-get clean
rm -rf "$r/var/lib/apt/lists/auxfiles"
rm -f "$r/usr/sbin/policy-rc.d" "$r/var/log/dpkg.log" "$r/var/log/apt/history.log" "$r/var/log/apt/term.log" \
  "$r/var/log/alternatives.log" "$r/var/cache/ldconfig/aux-cache" "$r/var/log/apt/eipp.log.xz"
umount "$r/etc/resolv.conf"
find "$r/tmp" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
find "$r/run" -mindepth 1 -maxdepth 1 ! -name lock -exec rm -rf --one-file-system {} +
)";

const std::vector<std::string>& GroupAdd() {
  static const std::vector<std::string> v = {"groupadd", "--gid", "1000", "user"};
  return v;
}
const std::vector<std::string>& SudoGroup() {
  static const std::vector<std::string> v = {"usermod", "--append", "--groups", "sudo", "user"};
  return v;
}
const std::vector<std::string>& UserAdd() {
  static const std::vector<std::string> v = {
      "useradd",    "--uid",      "1000",    "--gid",     "1000", "--create-home",
      "--home-dir", "/home/user", "--shell", "/bin/bash", "user"};
  return v;
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

bool IsElf(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  f.read(magic, sizeof magic);
  return f.gcount() == 4 && std::string_view(magic, 4) == std::string_view("\x7f" "ELF", 4);
}

// The tree's /sbin, where the agent goes: a real directory, or a relative
// symlink without ".." (merged /usr: sbin -> usr/sbin) to one, every
// component of the target itself a real directory (tree_beneath.h). The one
// link staging follows, read by hand and never past the tree.
StatusOr<UniqueFd> SbinDir(int root_fd) {
  struct stat st;
  if (::fstatat(root_fd, "sbin", &st, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoError("the image's '/sbin'");
  if (!S_ISLNK(st.st_mode)) return OpenDirInTree(root_fd, "sbin", /*create=*/false);
  char buf[4096];
  ssize_t n = ::readlinkat(root_fd, "sbin", buf, sizeof buf - 1);
  if (n < 0) return ErrnoError("readlink the image's '/sbin'");
  std::string target(buf, static_cast<size_t>(n));
  if (target.empty() || target[0] == '/' || target.find("..") != std::string::npos) {
    return FailedPrecondition("the image's '/sbin' is a symlink (-> " + target +
                              ") that is not a relative path inside the tree: refused");
  }
  return OpenDirInTree(root_fd, target, /*create=*/false);
}

}  // namespace

std::string BaseLayerRecipe() {
  KeyBuilder k;
  k.Add("variant", "apt");
  for (const char* o : kDpkgOpts) k.Add("dpkgopt", o);
  k.Add("groupadd", GroupAdd()).Add("useradd", UserAdd());
  k.Add("sudo-group", SudoGroup()).Add(kSudoersPath, kSudoers);
  k.Add("/etc/hostname", kHostname).Add("/etc/hosts", kHosts).Add("/etc/resolv.conf", kResolvConf);
  return k.Digest();
}

std::string BaseLayerKey(std::string_view template_name, std::string_view suite,
                         const std::vector<std::string>& packages, std::string_view parent_key,
                         std::string_view post_install) {
  KeyBuilder k;
  k.Add("builder", kBuilderVersion)
      .Add("template", template_name)
      .Add("suite", suite)
      .Add("packages", packages)
      .Add("recipe", BaseLayerRecipe());
  if (!parent_key.empty()) k.Add("on", parent_key).Add("extend", kExtendScript);
  if (!post_install.empty()) k.Add("post-install", post_install);
  return k.ShortDigest();
}

std::string TemplateRootfsKey(std::string_view base_key, std::string_view agent_sha256,
                              std::string_view extras_digest) {
  KeyBuilder k;
  k.Add("builder", kBuilderVersion).Add("base", base_key).Add("agent", agent_sha256);
  if (!extras_digest.empty()) k.Add("extras", extras_digest);
  return k.ShortDigest();
}

std::string ExtraFilesDigest(const std::vector<StagedFile>& files) {
  if (files.empty()) return "";
  KeyBuilder k;
  for (const auto& f : files) {
    if (!f.link_target.empty()) {
      k.Add("dest", f.dest).Add("link", f.link_target);
      continue;
    }
    k.Add("dest", f.dest).Add("mode", std::to_string(f.mode)).Add("sha256", f.sha256);
  }
  return k.Digest();
}

namespace {

// The files every base layer ends with, whatever its packages wrote there
// (through the same helper as a tenant's tree, tree_beneath.h: replaced,
// never written through), then its package list.
Status FinishBaseLayer(const std::string& root, const std::string& out_dir, bool sudo, const std::string& log) {
  ASSIGN_OR_RETURN(UniqueFd root_fd, OpenTreeRoot(root));
  if (sudo) {
    RETURN_IF_ERROR(WriteFileInTree(root_fd.get(), kSudoersPath, kSudoers, 0440));
    RETURN_IF_ERROR(Chroot(root, {"visudo", "--check", "--strict", "--file", kSudoersPath}, log));
  }
  RETURN_IF_ERROR(WriteFileInTree(root_fd.get(), "/etc/hostname", kHostname, 0644));
  RETURN_IF_ERROR(WriteFileInTree(root_fd.get(), "/etc/hosts", kHosts, 0644));
  RETURN_IF_ERROR(WriteFileInTree(root_fd.get(), "/etc/resolv.conf", kResolvConf, 0644));
  return RunCommand({"chroot", root, "dpkg-query", "-W", "-f", "${Package} ${Version}\\n"},
                    LogTo(out_dir + "/packages.txt"));
}

// The packages of `want` the tree at `root` does not have installed.
StatusOr<std::vector<std::string>> LackingPackages(const std::string& root, const std::vector<std::string>& want,
                                                   const std::string& log) {
  RETURN_IF_ERROR(RunCommand({"chroot", root, "dpkg-query", "-W", "-f", "${Package}\\n"}, LogTo(log + ".have")));
  std::ifstream listed(log + ".have");
  if (!listed) return ErrnoError("read " + log + ".have");
  std::set<std::string> have;
  for (std::string name; std::getline(listed, name);) have.insert(name);
  std::vector<std::string> out;
  for (const auto& p : want) {
    if (!have.count(p)) out.push_back(p);
  }
  return out;
}

// A copy of the parent layer (which has the user, sudoers and dpkg's path
// excludes: mmdebstrap keeps --dpkgopt in /etc/dpkg/dpkg.cfg.d) plus the
// packages it lacks, installed as mmdebstrap installs its --include list:
// apt-get inside the chroot, no recommends (same package set and versions
// as one mmdebstrap of the whole list, the same file list, checked when this was written), no
// service started (policy-rc.d), the host's resolver for the download only,
// then mmdebstrap's cleanup (apt lists and cache, logs, /tmp, /run).
Status ExtendBaseLayer(const BaseLayerInputs& in, const std::string& work_dir, const std::string& out_dir,
                       const Progress& progress) {
  if (::chmod(out_dir.c_str(), 0700) != 0) return ErrnoError("chmod " + out_dir);
  const std::string root = out_dir + "/root", log = work_dir + "/extend.log";
  ReportProgress(progress, "copying the base layer " + in.parent_root);
  // A real copy (apt-get rewrites files the parent shares otherwise).
  RETURN_IF_ERROR(RunCommand({"cp", "-a", "--", in.parent_root, root}, LogTo(log)));
  ASSIGN_OR_RETURN(std::vector<std::string> lacking, LackingPackages(root, in.packages, log));
  ReportProgress(progress, "installing " + std::to_string(lacking.size()) +
                    " packages on it (apt-get in a chroot; a minute or two; log: " + log + ")");
  if (!lacking.empty()) {
    // Its own PID and mount namespaces, as mmdebstrap's (BuildBaseLayer):
    // the mounts and every process go with this one.
    std::vector<std::string> argv = {"unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation",
                                     "private", "sh", "-c", kExtendScript, "airlock-extend", root};
    argv.insert(argv.end(), lacking.begin(), lacking.end());
    RETURN_IF_ERROR(RunCommand(argv, LogTo(log)));
  }
  if (!in.post_install.empty()) {
    ReportProgress(progress, "in the layer: " + in.post_install);
    RETURN_IF_ERROR(RunCommand({"chroot", root, "/bin/sh", "-c", in.post_install}, LogTo(log)));
  }
  return FinishBaseLayer(root, out_dir,
                         std::find(in.packages.begin(), in.packages.end(), "sudo") != in.packages.end(), log);
}

}  // namespace

Status BuildBaseLayer(const BaseLayerInputs& in, const std::string& work_dir,
                      const std::string& out_dir, const Progress& progress) {
  if (!in.parent_root.empty()) return ExtendBaseLayer(in, work_dir, out_dir, progress);
  // mmdebstrap runs as root and the tree holds device nodes and other
  // users' files: only root may enter it.
  if (::chmod(out_dir.c_str(), 0700) != 0) return ErrnoError("chmod " + out_dir);
  std::string root = out_dir + "/root";
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
  ReportProgress(progress, "installing " + in.suite + " with " + std::to_string(in.packages.size()) +
                    " packages (mmdebstrap; a few minutes; log: " + log + ")");
  RETURN_IF_ERROR(RunCommand(argv, LogTo(log)));

  ReportProgress(progress, "configuring the base layer (user, hostname)");
  RETURN_IF_ERROR(Chroot(root, GroupAdd(), log));
  RETURN_IF_ERROR(Chroot(root, UserAdd(), log));
  if (std::find(in.packages.begin(), in.packages.end(), "sudo") != in.packages.end()) {
    ReportProgress(progress, "configuring passwordless sudo for user");
    RETURN_IF_ERROR(Chroot(root, SudoGroup(), log));
  }
  return FinishBaseLayer(root, out_dir,
                         std::find(in.packages.begin(), in.packages.end(), "sudo") != in.packages.end(), log);
}

Status GuestAgentCopy(const std::string& agent, const std::string& dest, const std::string& log) {
  if (!IsElf(agent)) return CopyFile(agent, dest, 0755);
  // objcopy creates `dest` (a new inode); debug info is most of a
  // development build's size and useless in the guest.
  RETURN_IF_ERROR(RunCommand(
      {"objcopy", "--strip-debug", "--remove-section=.note.gnu.build-id", agent, dest}, LogTo(log)));
  if (::chmod(dest.c_str(), 0755) != 0) return ErrnoError("chmod " + dest);
  return OkStatus();
}

Status StageTemplateTree(const std::string& base_root, const std::string& stage,
                         const std::string& agent, const std::string& rootfs_id,
                         const std::string& log, const std::vector<StagedFile>& extras) {
  // -a keeps ownership, modes, times and xattrs of the directories and
  // symlinks it creates; regular files and device nodes become hard links.
  RETURN_IF_ERROR(RunCommand({"cp", "-al", "--", base_root, stage}, LogTo(log)));
  // The staged tree may be a tenant's (an OCI image): everything below is
  // done beneath its root fd, no symlink of the tree followed, and a file
  // installed by unlinking what had its name (tree_beneath.h).
  for (const auto& f : extras) {
    if (f.dest.empty() || f.dest[0] != '/' || f.dest.find("/../") != std::string::npos ||
        f.dest.find("/./") != std::string::npos || f.dest.back() == '/' ||
        f.dest.compare(f.dest.size() - std::min<size_t>(f.dest.size(), 3), 3, "/..") == 0) {
      return InvalidArgument("extra file destination \"" + f.dest + "\" is not a clean absolute path");
    }
  }
  ASSIGN_OR_RETURN(UniqueFd root, OpenTreeRoot(stage));
  {
    ASSIGN_OR_RETURN(UniqueFd sbin, SbinDir(root.get()));
    RETURN_IF_ERROR(CopyFileInTree(sbin.get(), "airlock-agent", agent, 0755).WithContext("installing the agent"));
  }
  RETURN_IF_ERROR(WriteFileInTree(root.get(), "/etc/airlock/rootfs-id", rootfs_id + "\n", 0644));
  for (const auto& f : extras) {
    RETURN_IF_ERROR(f.link_target.empty() ? CopyFileInTree(root.get(), f.dest, f.source, f.mode)
                                          : SymlinkInTree(root.get(), f.dest, f.link_target));
  }
  return OkStatus();
}

Status BuildTemplateRootfs(const TemplateInputs& in, const std::string& work_dir,
                           const std::string& out_dir, const Progress& progress) {
  std::string log = work_dir + "/template.log";
  // The agent (already a GuestAgentCopy) is copied first and the copy
  // hashed: what is installed is exactly what the key was computed from.
  std::string agent = work_dir + "/airlock-agent";
  RETURN_IF_ERROR(CopyFile(in.agent_binary, agent, 0755));
  ASSIGN_OR_RETURN(std::string copied_sha, Sha256File(agent));
  if (copied_sha != in.agent_sha256) {
    return Status(StatusCode::kAborted,
                  "agent binary " + in.agent_binary + " changed during the build; run it again");
  }
  std::string stage = work_dir + "/stage";
  ReportProgress(progress, "staging the template (hard links to the base layer + stripped agent)");
  for (const auto& f : in.extras) {
    if (!f.link_target.empty()) continue;
    ASSIGN_OR_RETURN(std::string sha, Sha256File(f.source));
    if (sha != f.sha256) {
      return Status(StatusCode::kAborted, "template file " + f.source + " changed during the build; run it again");
    }
  }
  RETURN_IF_ERROR(StageTemplateTree(in.base_dir + "/root", stage, agent, in.key, log, in.extras));
  RETURN_IF_ERROR(CopyFile(in.base_dir + "/packages.txt", out_dir + "/packages.txt", 0644));

  ASSIGN_OR_RETURN(TreeUsage usage, MeasureTree(stage));
  // ext4 metadata: ~256 B per inode plus block-group overhead; 10% slack.
  uint64_t bytes = usage.bytes + usage.bytes / 10 + usage.inodes * 256 + 64 * kMiB + kFreeSpace;
  uint64_t mib = (bytes + kMiB - 1) / kMiB;
  std::string image = out_dir + "/rootfs.ext4";
  ReportProgress(progress, "writing ext4 image (" + std::to_string(usage.bytes / kMiB) + " MiB used, " +
                    std::to_string(mib) + " MiB image)");
  RETURN_IF_ERROR(RunCommand({"mkfs.ext4", "-q", "-F", "-L", "airlock-root", "-m", "0",
                              // Initialise inode tables and journal now: otherwise the guest's
                              // ext4lazyinit thread writes them into every sandbox's overlay.
                              "-E", "lazy_itable_init=0,lazy_journal_init=0", "-d", stage, image,
                              std::to_string(mib) + "M"},
                             LogTo(work_dir + "/mkfs.log")));
  if (::chmod(image.c_str(), 0444) != 0) return ErrnoError("chmod " + image);
  if (in.keep_tree) {
    // The very tree mkfs copied: what extracting the image would give back,
    // less lost+found. The stamp goes last (a tree without one is remade).
    ASSIGN_OR_RETURN(std::string stamp, ImageFileStamp(image));
    const std::string tree = out_dir + "/" + kRootTreeDir;
    if (::rename(stage.c_str(), tree.c_str()) != 0) return ErrnoError("rename " + stage + " to " + tree);
    RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/" + kRootTreeStampFile, stamp + "\n", 0644));
  }
  // Otherwise the staging tree (links only) goes with work_dir, which the
  // caller removes after renaming out_dir into place.
  return OkStatus();
}

}  // namespace airlock::image
