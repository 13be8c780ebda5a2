// Kernel + initramfs: fetch Debian's cloud kernel package, extract vmlinux
// from its bzImage, and pack busybox, the virtio modules and /init into a
// gzip'd newc cpio.
#include <sys/stat.h>

#include <sstream>

#include "common/subprocess.h"
#include "image/builders.h"
#include "image/command.h"
#include "image/cpio.h"
#include "image/fs_util.h"
#include "image/kmod.h"
#include "image/vmlinux.h"

namespace airlock::image {

extern const char kInitramfsInitText[];  // generated from initramfs_init.sh

namespace {

// Busybox applets /init uses; each becomes a /bin symlink.
constexpr const char* kApplets[] = {
    "sh",       "mount",  "umount", "mkdir", "insmod", "sleep",    "switch_root",
    "poweroff", "reboot", "cat",    "echo",  "ls",     "test",     "[",
    "dmesg",    "tail",   "sync",   "mknod", "uname",  "modprobe", "lsmod",
};

// "linux-image-6.1.0-57-cloud-amd64" from `apt-cache depends` output.
std::string ParseDependsTarget(const std::string& out) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find("Depends: ");
    if (at == std::string::npos) continue;
    std::string target = line.substr(at + 9);
    while (!target.empty() && (target.back() == ' ' || target.back() == '\r')) target.pop_back();
    if (target.rfind("linux-image-", 0) == 0 && target.find('<') == std::string::npos) {
      return target;
    }
  }
  return "";
}

std::string ParseVersion(const std::string& show) {
  std::istringstream in(show);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Version: ", 0) == 0) return line.substr(9);
  }
  return "";
}

StatusOr<KernelPackage> LookUpKernel() {
  auto dep = Run({"apt-cache", "depends", kKernelMetapackage});
  if (!dep.ok()) return dep.status();
  std::string name = ParseDependsTarget(dep->out);
  if (!dep->status.success() || name.empty()) {
    return NotFound(std::string("apt has no candidate for ") + kKernelMetapackage);
  }
  ASSIGN_OR_RETURN(std::string show, RunChecked({"apt-cache", "show", "--no-all-versions", name}));
  KernelPackage k;
  k.name = name;
  k.version = ParseVersion(show);
  k.release = name.substr(std::string_view("linux-image-").size());
  if (k.version.empty()) return NotFound("apt-cache show " + name + ": no Version field");
  return k;
}

// Debian's file name for a package version ("1:2.3" -> "1%3a2.3").
std::string DebFileName(const KernelPackage& k) {
  std::string v;
  for (char c : k.version) v += c == ':' ? std::string("%3a") : std::string(1, c);
  return k.name + "_" + v + "_amd64.deb";
}

}  // namespace

const std::vector<std::string>& InitramfsModules() {
  static const std::vector<std::string> kModules = {
      "virtio_ring",  "virtio",     "virtio_mmio", "virtio_blk", "failover",
      "net_failover", "virtio_net", "virtio_rng",  "ext4",
      // The NFSv3 client (and sunrpc, lockd, grace, nfs_acl): volumes are
      // NFS exports the agent mounts (docs/volumes.md).
      "nfsv3",
  };
  return kModules;
}

std::string_view InitramfsInitScript() { return kInitramfsInitText; }

StatusOr<KernelPackage> ResolveKernelPackage(bool update, const std::string& work_dir,
                                             const Progress& progress) {
  std::string log = work_dir + "/apt.log";
  if (!update) {
    ReportProgress(progress, std::string("resolving ") + kKernelMetapackage);
    auto k = LookUpKernel();
    if (k.ok()) return k;
  }
  ReportProgress(progress, "updating apt package lists (apt-get update)");
  Status st = RunCommand({"apt-get", "update"}, LogTo(log));
  if (!st.ok()) return Unavailable("apt-get update failed: " + st.message());
  ReportProgress(progress, std::string("resolving ") + kKernelMetapackage);
  auto k = LookUpKernel();
  if (!k.ok()) return k.status().WithContext("after apt-get update");
  return k;
}

namespace {
// The kernel package's .deb in `deb_cache_dir`, fetched (apt-get download,
// which checks it against the signed index) when it is not there.
StatusOr<std::string> FetchKernelDeb(const KernelPackage& k, const std::string& deb_cache_dir,
                                     const std::string& work_dir, const Progress& progress) {
  RETURN_IF_ERROR(MakeDirs(deb_cache_dir));
  std::string deb = deb_cache_dir + "/" + DebFileName(k);
  if (!Exists(deb)) {
    ReportProgress(progress, "fetching kernel package " + k.name + " " + k.version);
    RETURN_IF_ERROR(RunCommand({"apt-get", "download", k.name + "=" + k.version},
                               LogTo(work_dir + "/apt.log", deb_cache_dir)));
    if (!Exists(deb)) return Internal("apt-get download did not produce " + deb);
  }
  return deb;
}
}  // namespace

StatusOr<std::string> UnpackKernelModules(const KernelPackage& k, const std::string& deb_cache_dir,
                                          const std::string& work_dir, const Progress& progress) {
  ASSIGN_OR_RETURN(std::string deb, FetchKernelDeb(k, deb_cache_dir, work_dir, progress));
  std::string pkg = work_dir + "/kernel-modules";
  RETURN_IF_ERROR(RunCommand({"dpkg-deb", "-x", deb, pkg}, LogTo(work_dir + "/dpkg.log")));
  RETURN_IF_ERROR(RunCommand({"depmod", "-b", pkg, k.release}, LogTo(work_dir + "/depmod.log")));
  std::string moddir = pkg + "/lib/modules/" + k.release;
  if (!Exists(moddir + "/modules.dep")) return Internal("depmod made no " + moddir + "/modules.dep");
  return moddir;
}

Status BuildBoot(const BootInputs& in, const std::string& work_dir, const std::string& out_dir,
                 const Progress& progress) {
  const KernelPackage& k = in.kernel;
  ASSIGN_OR_RETURN(std::string deb, FetchKernelDeb(k, in.deb_cache_dir, work_dir, progress));
  ReportProgress(progress, "unpacking " + DebFileName(k));
  std::string pkg = work_dir + "/pkg";
  RETURN_IF_ERROR(RunCommand({"dpkg-deb", "-x", deb, pkg}, LogTo(work_dir + "/dpkg.log")));

  ReportProgress(progress, "extracting vmlinux from vmlinuz-" + k.release);
  std::string vmlinuz = pkg + "/boot/vmlinuz-" + k.release;
  ASSIGN_OR_RETURN(std::string bz, ReadFile(vmlinuz));
  auto elf = ExtractVmlinux(bz);
  if (!elf.ok()) return elf.status().WithContext(vmlinuz);
  RETURN_IF_ERROR(WriteFile(out_dir + "/vmlinux", *elf, 0644));
  elf = StatusOr<std::string>(std::string());  // free ~30 MiB early

  ReportProgress(progress, "resolving kernel modules (depmod)");
  std::string moddir = pkg + "/lib/modules/" + k.release;
  RETURN_IF_ERROR(RunCommand({"depmod", "-b", pkg, k.release}, LogTo(work_dir + "/depmod.log")));
  ASSIGN_OR_RETURN(std::string dep_text, ReadFile(moddir + "/modules.dep"));
  ASSIGN_OR_RETURN(ModuleDeps deps, ParseModulesDep(dep_text));
  std::string builtin_text;
  if (auto b = ReadFile(moddir + "/modules.builtin"); b.ok()) builtin_text = *b;
  ASSIGN_OR_RETURN(std::vector<std::string> order,
                   ResolveLoadOrder(deps, InitramfsModules(), ParseModulesBuiltin(builtin_text)));

  ReportProgress(progress, "writing initramfs (" + std::to_string(order.size()) + " modules)");
  CpioWriter cpio;
  for (const char* d : {"bin", "dev", "etc", "etc/airlock", "lib", "lib/modules", "newroot", "proc",
                        "run", "sys", "tmp"}) {
    cpio.AddDirectory(d, std::string_view(d) == "tmp" ? 01777 : 0755);
  }
  cpio.AddCharDevice("dev/console", 5, 1, 0600);
  cpio.AddCharDevice("dev/null", 1, 3, 0666);
  ASSIGN_OR_RETURN(std::string busybox, ReadFile(in.busybox_path));
  cpio.AddFile("bin/busybox", busybox, 0755);
  for (const char* a : kApplets) cpio.AddSymlink(std::string("bin/") + a, "busybox");
  std::string list;
  for (const auto& rel : order) {
    std::string file = rel.substr(rel.rfind('/') + 1);
    if (file.size() < 3 || file.compare(file.size() - 3, 3, ".ko") != 0) {
      return Unimplemented("compressed kernel module " + rel +
                           " (only plain .ko modules are supported)");
    }
    ASSIGN_OR_RETURN(std::string ko, ReadFile(moddir + "/" + rel));
    cpio.AddFile("lib/modules/" + file, ko, 0644);
    list += file + "\n";
  }
  cpio.AddFile("etc/airlock/modules", list, 0644);
  cpio.AddFile("init", InitramfsInitScript(), 0755);
  ASSIGN_OR_RETURN(std::string gz, Gzip(cpio.Finish()));
  RETURN_IF_ERROR(WriteFile(out_dir + "/initrd.cpio.gz", gz, 0644));
  RETURN_IF_ERROR(WriteFile(out_dir + "/modules.txt", list, 0644));
  return OkStatus();
}

}  // namespace airlock::image
