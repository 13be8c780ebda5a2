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

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::image {

inline constexpr char kDefaultStateDir[] = "/var/lib/airlock";

struct ImageOptions {
  std::string state_dir = kDefaultStateDir;
  std::string template_name = "base";  // KnownTemplates(); aliases accepted
  // The static airlock-agent, installed in the rootfs at /sbin/airlock-agent.
  std::string agent_binary;
  // Templates with the code interpreter (TemplateHasInterpreter): the static
  // airlock-interpreter (installed at kInterpreterPath) and the directory of
  // its kernel files (kernels.json and what it names; installed in
  // kInterpreterKernelsDir). Ignored by other templates.
  std::string interpreter_binary;
  std::string interpreter_kernels_dir;
  // desktop only: the close_range clamp preloaded in the guest
  // (libairlock-close-range.so, src/image/desktop/close_range.c).
  std::string close_range_lib;
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

// What of options.template_name's image needs neither the agent nor the
// airlock binary: the boot files (kernel, initramfs) and the template's
// base layer (mmdebstrap, minutes). Built unless present, under the same
// lock as EnsureImage, which then finds them up to date; `agent_binary` is
// ignored. `make build` runs it (airlock-image-tool base) while the C++
// compiles. Errors: PermissionDenied unless root; the build step's.
Status EnsureBaseLayers(const ImageOptions& options);

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
// `code-interpreter` is `base`'s list plus the data-analysis packages
// (docs/code-interpreter.md).
StatusOr<std::vector<std::string>> TemplatePackages(const std::string& template_name);

// The built-in template whose base layer a template's is built on ("" for
// none): code-interpreter's is base's plus its packages (builders.h
// BaseLayerInputs::parent_root).
std::string ParentTemplate(const std::string& template_name);
// The key of a built-in template's base layer (BaseLayerKey, with its
// parent's key). InvalidArgument for an unknown template.
StatusOr<std::string> TemplateBaseLayerKey(const std::string& template_name);

// The built-in templates, in build order: "base", "code-interpreter",
// "desktop", "docker".
const std::vector<std::string>& KnownTemplates();
// The template an alias names ("code-interpreter-v1", what
// @e2b/code-interpreter's Sandbox.create() asks for, is "code-interpreter");
// any other name is returned as is.
std::string CanonicalTemplateName(const std::string& name);
// Whether the template carries the code interpreter (server, kernels, the
// service declaration that makes the agent start it).
bool TemplateHasInterpreter(const std::string& template_name);

// Whether the template is the desktop (docs/desktop.md): Xvfb, XFCE,
// x11vnc and noVNC, with its session started by the agent's service
// "desktop" before the template snapshot.
bool TemplateHasDesktop(const std::string& template_name);
inline constexpr char kDesktopSessionPath[] = "/usr/local/lib/airlock/desktop/session";
inline constexpr char kDesktopCloseRangeLib[] = "/usr/local/lib/airlock/libairlock-close-range.so";
// The agent's lines for that service (agent/services.h ServiceReadyLine,
// ServiceFailedLine; a unit test holds them equal).
inline constexpr char kDesktopReadyMarker[] = "airlock-agent: service desktop ready";
inline constexpr char kDesktopFailedMarker[] = "airlock-agent: service desktop ended before ready:";

// Whether the template is docker (docs/docker.md): Docker Engine, started
// by the agent's service "docker" before the template snapshot, and the boot
// kernel's modules.
bool TemplateHasDocker(const std::string& template_name);
inline constexpr char kDockerDaemonPath[] = "/usr/local/lib/airlock/docker/dockerd";
inline constexpr char kDockerReadyMarker[] = "airlock-agent: service docker ready";
inline constexpr char kDockerFailedMarker[] = "airlock-agent: service docker ended before ready:";
// The doc that says why a built-in template runs on QEMU only (docker), or
// "" for one that runs on every runtime.
std::string QemuOnlyTemplate(const std::string& template_name);

inline constexpr char kInterpreterPath[] = "/usr/local/bin/airlock-interpreter";
inline constexpr char kInterpreterKernelsDir[] = "/usr/local/lib/airlock/interpreter";
inline constexpr uint16_t kInterpreterPort = 49999;

// What must have happened before a template's memory snapshot is taken,
// besides the agent's ready line: the guest printing `console_marker` on its
// console ("" means nothing more). The code interpreter's server prints
// kInterpreterReadyMarker once its default python kernel has answered, so
// every sandbox made from the snapshot has that kernel warm. A console line,
// not a TCP probe: the snapshot must come before the guest's first TCP
// handshake (docs/snapshots.md "Fresh before the first TCP"), so the server
// talks to its kernels over unix sockets too.
inline constexpr char kInterpreterReadyMarker[] = "airlock-interpreter: ready";
//
// A custom template (src/templates) keeps its own in its pointer file
// (InstallBuiltImage): the agent's ready line of its start command, and
// the line that says the start command ended before it was ready
// (console_failure); `state_dir` is where to look for it ("" = built-in
// templates only).
struct TemplateReadiness {
  std::string console_marker;
  std::string console_failure;  // "" = none; seen first: the start command failed
};
TemplateReadiness ReadinessOf(const std::string& template_name, const std::string& state_dir = "");

// The machine a create of the template gets when it names none (E2B's create
// carries no cpuCount/memoryMB: a template brings its own). `code-interpreter`
// (and `desktop`: Xvfb, XFCE and a browser) is 2 vCPUs and 2048 MiB, the shape E2B builds its code-interpreter
// template with (its template/build_prod.py): a few kernels of ~110 MiB each
// (numpy, pandas and matplotlib loaded) and a Node child of ~100 MiB do not
// fit in 512. nullopt: the server's default (serve --cpus/--memory).
struct MachineShape {
  int vcpus = 0;
  int memory_mib = 0;
};
// A custom template's is its build's cpuCount/memoryMB (from its pointer
// file, under `state_dir`).
std::optional<MachineShape> DefaultShapeOf(const std::string& template_name, const std::string& state_dir = "");

// A custom template build's guest image (src/templates): `rootfs` (a raw
// ext4 file the caller made, moved into images/rootfs/<id>/) with the
// kernel and initramfs of the current `base` image, under the template
// name `name` ([a-z0-9_-], at most 64). `id` (20 hex digits) names the
// rootfs build: an existing one with the same id is reused and `rootfs` is
// removed. Errors: NotFound when base has no image; errno statuses.
struct BuiltImage {
  std::string owner;  // the daemon registry whose build it is (CustomImages)
  std::string name;
  std::string id;
  std::string rootfs;
  TemplateReadiness readiness;
  MachineShape shape;
};
StatusOr<GuestImage> InstallBuiltImage(const std::string& state_dir, const BuiltImage& built);
// Whether a rootfs with this id is installed already (a cached build).
bool HasBuiltRootfs(const std::string& state_dir, const std::string& id);
// Removes a template's pointer file (its builds go with the next
// CollectGarbage, once no sandbox or snapshot needs them). OK when absent.
Status RemoveTemplateImage(const std::string& state_dir, const std::string& name);
// The installed custom template images: name -> owner (BuiltImage::owner).
std::map<std::string, std::string> CustomImages(const std::string& state_dir);

}  // namespace airlock::image
