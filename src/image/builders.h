// Internal to the image module: the build steps EnsureImage chains.
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
// Tells `progress` (if any) about a build step.
inline void ReportProgress(const Progress& progress, std::string_view step) {
  if (progress) progress(step);
}

// Bumped whenever a build step changes what it produces; part of every key.
inline constexpr char kBuilderVersion[] = "2";
inline constexpr char kSuite[] = "bookworm";
inline constexpr char kKernelMetapackage[] = "linux-image-cloud-amd64";

// The kernel modules the initramfs loads (plus their dependencies); modules
// built into the kernel are skipped.
const std::vector<std::string>& InitramfsModules();
// The /init script (src/image/initramfs_init.sh, embedded at build time).
std::string_view InitramfsInitScript();

// The desktop template's guest scripts (src/image/desktop/{session,xvfb,
// startxfce4}.sh, embedded at build time by embed_text.cmake).
extern const char kDesktopSessionText[];
extern const char kDesktopXvfbText[];
extern const char kDesktopStartXfce4Text[];
extern const char kDesktopKeyboardsText[];
// The docker template's (src/image/docker/dockerd.sh).
extern const char kDockerDaemonText[];

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
// The kernel package's module tree, unpacked under work_dir and indexed by
// depmod: returns its lib/modules/<release> directory (the docker
// template installs it, so the guest's modprobe finds overlay, bridge,
// netfilter...). The .deb is fetched into deb_cache_dir when missing.
StatusOr<std::string> UnpackKernelModules(const KernelPackage& k, const std::string& deb_cache_dir,
                                          const std::string& work_dir, const Progress& progress);

// Writes out_dir/{vmlinux,initrd.cpio.gz,modules.txt}.
Status BuildBoot(const BootInputs& in, const std::string& work_dir, const std::string& out_dir,
                 const Progress& progress);

// The template rootfs is built in two cached layers (docs/image.md):
//   base layer  - mmdebstrap + everything that does not depend on the agent,
//                 kept unpacked as <out_dir>/root (root-owned, device nodes);
//   template    - a hard-link copy of the base layer plus the agent, exported
//                 as rootfs.ext4.
// An agent change therefore rebuilds only the second layer (seconds).

// Everything the base-layer build does besides installing the packages
// (dpkg path excludes, user, files it writes), as canonical text: part of
// the base-layer key, so changing a step here changes the key.
std::string BaseLayerRecipe();

// Key of the base layer: builder version, template, suite, package list,
// BaseLayerRecipe(), and for a layer built on another (BaseLayerInputs::
// parent_root) that layer's key and the script that extends it. Does not
// depend on the agent.
// `post_install` (a layer built on a parent's only): a shell command run in
// the layer's chroot after its packages are installed, part of the key when
// not empty (docker's `usermod --append --groups docker user`).
std::string BaseLayerKey(std::string_view template_name, std::string_view suite,
                         const std::vector<std::string>& packages, std::string_view parent_key = "",
                         std::string_view post_install = "");
// Key of the template rootfs: builder version, base-layer key, agent SHA-256,
// and (when not empty) the digest of the template's extra files
// (ExtraFilesDigest); an empty digest leaves the key as it was before extra
// files existed, so `base` keeps its key.
std::string TemplateRootfsKey(std::string_view base_key, std::string_view agent_sha256,
                              std::string_view extras_digest = "");

// A file a template adds to its tree besides the agent (the code
// interpreter's server, kernels and service declaration): `source` on the
// host (already as the guest gets it) installed as a new file at `dest`
// (absolute, inside the tree) with `mode`, owned by root.
// With `link_target` set, a symlink at `dest` to it instead (no source,
// mode or hash; the target is what the key covers): the desktop's
// /opt/noVNC -> /usr/share/novnc.
struct StagedFile {
  std::string source;
  std::string dest;
  unsigned mode = 0644;
  std::string sha256;  // of source: what the key covers
  std::string link_target;
};
// Digest over every file's dest, mode and SHA-256, in order ("" for none).
std::string ExtraFilesDigest(const std::vector<StagedFile>& files);

struct BaseLayerInputs {
  std::string suite;
  std::vector<std::string> packages;
  // When set, a complete base layer's tree (<images>/base/<key>/root) whose
  // packages are a subset of `packages`: the layer is a copy of it plus the
  // packages it lacks, installed with apt-get in a chroot as mmdebstrap
  // would (about a third of a second mmdebstrap's time), not a new
  // mmdebstrap. The parent's user, sudoers and dpkg path excludes carry over.
  std::string parent_root;
  // With parent_root: run in the chroot after the packages (BaseLayerKey).
  std::string post_install;
};
// Writes out_dir/root (the unpacked tree) and out_dir/packages.txt; makes
// out_dir mode 0700.
Status BuildBaseLayer(const BaseLayerInputs& in, const std::string& work_dir,
                      const std::string& out_dir, const Progress& progress);

// Writes the agent as the guest gets it to `dest` (a new file, mode 0755):
// an ELF is copied by objcopy without debug info and without its
// .note.gnu.build-id (the linker hashes debug info, build paths included,
// into it), so two builds of the same sources in different directories give
// the same bytes and hence the same image key; anything else (a #! script)
// is copied as is.
Status GuestAgentCopy(const std::string& agent, const std::string& dest, const std::string& log);

struct TemplateInputs {
  std::string base_dir;      // a complete base layer (<images>/base/<key>)
  std::string agent_binary;  // a GuestAgentCopy(): installed as it is
  std::string agent_sha256;  // of agent_binary: what the key was computed from
  std::string key;           // written to /etc/airlock/rootfs-id
  std::vector<StagedFile> extras;
  // Keep the staged tree as the image's root tree (common/file_util.h
  // kRootTreeDir, stamped with the new image's ImageFileStamp), which the
  // gVisor runtime then serves instead of extracting the image (minutes).
  // Only for trees nothing but this build wrote: it is the same files,
  // hard links into the base layer, which gVisor mounts read-only.
  bool keep_tree = false;
};
// Writes out_dir/{rootfs.ext4,packages.txt} (and the tree with keep_tree);
// stages the tree in work_dir/stage (hard links into the base layer), which
// goes with work_dir.
Status BuildTemplateRootfs(const TemplateInputs& in, const std::string& work_dir,
                           const std::string& out_dir, const Progress& progress);

// The staging step of BuildTemplateRootfs, separate so it can be tested
// without root: `stage` (must not exist) becomes a hard-link copy of
// `base_root` (cp -al), then `agent` (already a GuestAgentCopy: installed
// byte for byte) as a new file at /sbin/airlock-agent (mode 0755) and
// `rootfs_id` + "\n" as a new /etc/airlock/rootfs-id. Files of the base tree
// are never written: every file this step adds replaces the link (unlink +
// create), and /sbin must be a directory or a relative symlink inside the tree.
// `extras` are installed the same way (parent directories created).
// The base tree may be a tenant's (an OCI image): every step works beneath
// the staged tree's fd (tree_beneath.h); a symlink at a directory staging
// enters or makes (/etc, /etc/airlock, an extra's parent, /usr of a
// merged-/usr /sbin) is refused (FailedPrecondition naming the image's
// path), one at a file staging writes is removed, never followed.
Status StageTemplateTree(const std::string& base_root, const std::string& stage,
                         const std::string& agent, const std::string& rootfs_id,
                         const std::string& log, const std::vector<StagedFile>& extras = {});

// What the initramfs and the agent need in a tree an OCI image brought
// (oci_base.cc): the mount points (initramfs_init.sh moves /proc /sys /dev;
// the agent mounts /tmp /run) and /sbin, made when missing; an existing
// entry, a symlink included, is left as it is (never followed). /etc must
// be a real directory (StageTemplateTree installs there). Beneath the
// tree's fd (tree_beneath.h).
Status PrepareOciTree(const std::string& root);

}  // namespace airlock::image
