// EnsureImage / FindImage: the cache under <state_dir>/images/ (layout in
// docs/image.md) and the order of the build steps.
#include "image/image.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <algorithm>

#include "common/disk_records.h"
#include "common/log.h"
#include "image/builders.h"
#include "image/fs_util.h"
#include "image/hash.h"

namespace airlock::image {
namespace {

using json = nlohmann::json;

constexpr std::string_view kElfMagic(
    "\x7f"
    "ELF",
    4);

struct Layout {
  std::string root;  // <state_dir>/images
  std::string lock() const { return root + "/.lock"; }
  std::string tmp() const { return root + "/tmp"; }
  std::string debs() const { return root + "/cache/debs"; }
  std::string boot(const std::string& key = "") const {
    return root + "/boot" + (key.empty() ? "" : "/" + key);
  }
  std::string rootfs(const std::string& key = "") const {
    return root + "/rootfs" + (key.empty() ? "" : "/" + key);
  }
  // Base layers (unpacked, root-only: mode 0700).
  std::string base(const std::string& key = "") const {
    return root + "/base" + (key.empty() ? "" : "/" + key);
  }
  std::string templates() const { return root + "/templates"; }
  std::string pointer(const std::string& name) const { return templates() + "/" + name + ".json"; }
};

Layout LayoutFor(const std::string& state_dir) { return Layout{state_dir + "/images"}; }

void Say(const Progress& p, const std::string& s) {
  LOG_INFO("image: {}", s);
  if (p) p(s);
}

Status ValidTemplateName(const std::string& name) {
  if (name.empty() || name.size() > 64 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_") != std::string::npos) {
    return InvalidArgument("template name \"" + name + "\" must be 1-64 of [a-z0-9_-]");
  }
  return OkStatus();
}

// The pointer file: which boot and rootfs builds make up a template's image,
// the base layer the rootfs was made from, and the rootfs it replaced (kept
// so that sandboxes started just before a rebuild keep their backing file).
struct Pointer {
  std::string id, boot_key, rootfs_key, base_key, previous_rootfs_key, boot_local, kernel_name,
      kernel_version, kernel_release;
  // A custom template build's (InstallBuiltImage); empty/0 for built-ins.
  std::string console_marker, console_failure, owner;
  int vcpus = 0, memory_mib = 0;
};

StatusOr<Pointer> ReadPointer(const Layout& l, const std::string& name) {
  std::string path = l.pointer(name);
  auto text = ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFound("no guest image for template \"" + name + "\" in " + l.root + " (run: airlock image build" +
                      (name == "base" ? "" : " --template " + name) + ")");
    }
    return text.status();
  }
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return NotFound(path + " is not valid JSON (run: airlock image build)");
  }
  Pointer p;
  auto get = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
  };
  p.id = get("id");
  p.boot_key = get("boot_key");
  p.rootfs_key = get("rootfs_key");
  p.base_key = get("base_key");
  p.previous_rootfs_key = get("previous_rootfs_key");
  p.boot_local = get("boot_local_inputs");
  p.kernel_name = get("kernel_package");
  p.kernel_version = get("kernel_version");
  p.kernel_release = get("kernel_release");
  p.console_marker = get("console_marker");
  p.console_failure = get("console_failure");
  p.owner = get("owner");
  if (j.contains("vcpus") && j["vcpus"].is_number_integer()) p.vcpus = j["vcpus"].get<int>();
  if (j.contains("memory_mib") && j["memory_mib"].is_number_integer()) p.memory_mib = j["memory_mib"].get<int>();
  if (p.id.empty() || p.boot_key.empty() || p.rootfs_key.empty() || p.kernel_release.empty()) {
    return NotFound(path + " is incomplete (run: airlock image build)");
  }
  return p;
}

Status WritePointer(const Layout& l, const std::string& name, const Pointer& p) {
  json j = {{"template", name},
            {"id", p.id},
            {"boot_key", p.boot_key},
            {"rootfs_key", p.rootfs_key},
            {"base_key", p.base_key},
            {"previous_rootfs_key", p.previous_rootfs_key},
            {"boot_local_inputs", p.boot_local},
            {"kernel_package", p.kernel_name},
            {"kernel_version", p.kernel_version},
            {"kernel_release", p.kernel_release},
            {"builder_version", kBuilderVersion}};
  if (!p.console_marker.empty()) j["console_marker"] = p.console_marker;
  if (!p.console_failure.empty()) j["console_failure"] = p.console_failure;
  if (!p.owner.empty()) j["owner"] = p.owner;
  if (p.vcpus > 0) j["vcpus"] = p.vcpus;
  if (p.memory_mib > 0) j["memory_mib"] = p.memory_mib;
  return WriteFileAtomic(l.pointer(name), j.dump(2) + "\n");
}

StatusOr<GuestImage> ImageFrom(const Layout& l, const std::string& name, const Pointer& p) {
  GuestImage g;
  g.kernel = l.boot(p.boot_key) + "/vmlinux";
  g.initrd = l.boot(p.boot_key) + "/initrd.cpio.gz";
  g.rootfs = l.rootfs(p.rootfs_key) + "/rootfs.ext4";
  g.kernel_release = p.kernel_release;
  g.kernel_package = p.kernel_name + " " + p.kernel_version;
  g.template_name = name;
  g.id = p.id;
  for (const auto* f : {&g.kernel, &g.initrd, &g.rootfs}) {
    if (!Exists(*f)) {
      return NotFound("guest image for template \"" + name + "\" is incomplete: " + *f +
                      " is missing (run: airlock image build)");
    }
  }
  return g;
}

StatusOr<std::string> AbsolutePath(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (r == nullptr) return ErrnoError("realpath " + path);
  std::string s = r;
  ::free(r);
  return s;
}

// Builds one artefact directory: `build` fills a fresh out dir, which then
// replaces `dest` atomically (rename); a previous `dest` is removed after.
Status BuildInto(
    const Layout& l, const std::string& dest,
    const std::function<Status(const std::string& work, const std::string& out)>& build) {
  ASSIGN_OR_RETURN(std::string work, MakeTempDir(l.tmp(), "build-"));
  std::string out = work + "/out";
  Status st = MakeDirs(out);
  if (st.ok()) st = build(work, out);
  if (st.ok() && IsDirectory(dest)) {
    std::string old = work + "/old";
    if (::rename(dest.c_str(), old.c_str()) != 0) st = ErrnoError("rename " + dest);
  }
  if (st.ok() && ::rename(out.c_str(), dest.c_str()) != 0)
    st = ErrnoError("rename " + out + " -> " + dest);
  Status rm = RemoveTree(work);
  if (!rm.ok()) LOG_WARN("image: cleaning {}: {}", work, rm.ToString());
  return st;
}

// The templates that have a pointer file (templates/<name>.json).
std::vector<std::string> TemplateNames(const Layout& l) {
  std::vector<std::string> out;
  auto names = ListDir(l.templates());
  if (!names.ok()) return out;
  for (const auto& n : *names) {
    if (n.size() <= 5 || n.compare(n.size() - 5, 5, ".json") != 0) continue;
    if (std::string name = n.substr(0, n.size() - 5); ValidTemplateName(name).ok()) out.push_back(name);
  }
  return out;
}

// Boot and rootfs builds that something other than a template pointer
// still runs on or will be restored onto: every string in a VMM record
// (<state_dir>/run/<id>/vm/vm.json: a running or re-adoptable sandbox) or a
// snapshot manifest (<state_dir>/snapshots/{paused,forks,named}/<name>/
// manifest.json) that names a file under images/boot/<key>/ or
// images/rootfs/<key>/. Template snapshots do not pin: they are a cache,
// re-made for the current image (core/template_snapshots.cc).
void PinnedByVmsAndSnapshots(const Layout& l, std::set<std::string>& boot, std::set<std::string>& rootfs) {
  auto pin = [](const std::string& value, const std::string& prefix, std::set<std::string>& keys) {
    if (value.compare(0, prefix.size(), prefix) != 0) return;
    keys.insert(value.substr(prefix.size(), value.find('/', prefix.size()) - prefix.size()));
  };
  for (const auto& path : DiskRecordFiles(l.root.substr(0, l.root.rfind('/')), /*with_template_snapshots=*/false)) {
    std::ifstream f(path);
    if (!f) continue;
    json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;
    for (const auto& [k, v] : j.items()) {
      if (!v.is_string()) continue;
      pin(v.get<std::string>(), l.boot() + "/", boot);
      pin(v.get<std::string>(), l.rootfs() + "/", rootfs);
    }
  }
}

// Removes boot builds, base layers and rootfs builds no template points at
// (a template keeps its current and previous rootfs) and no sandbox or
// snapshot uses (PinnedByVmsAndSnapshots), and kernel packages other than
// the ones in use.
void CollectGarbageIn(const Layout& l) {
  std::set<std::string> boot, rootfs, base, debs;
  for (const auto& name : TemplateNames(l)) {
    auto p = ReadPointer(l, name);
    if (!p.ok()) continue;
    boot.insert(p->boot_key);
    rootfs.insert(p->rootfs_key);
    if (!p->previous_rootfs_key.empty()) rootfs.insert(p->previous_rootfs_key);
    if (!p->base_key.empty()) base.insert(p->base_key);
    std::string v;
    for (char c : p->kernel_version) v += c == ':' ? std::string("%3a") : std::string(1, c);
    debs.insert(p->kernel_name + "_" + v + "_");
  }
  // The current base layer of every built-in template, built or not yet
  // pointed at (EnsureBaseLayers makes them before any image of theirs).
  for (const auto& name : KnownTemplates()) {
    if (auto key = TemplateBaseLayerKey(name); key.ok()) base.insert(*key);
  }
  PinnedByVmsAndSnapshots(l, boot, rootfs);
  auto sweep = [](const std::string& dir, const std::function<bool(const std::string&)>& keep) {
    auto entries = ListDir(dir);
    if (!entries.ok()) return;
    for (const auto& e : *entries) {
      if (keep(e)) continue;
      LOG_INFO("image: removing superseded {}/{}", dir, e);
      if (Status st = RemoveTree(dir + "/" + e); !st.ok()) LOG_WARN("image: {}", st.ToString());
    }
  };
  sweep(l.boot(), [&](const std::string& e) { return boot.count(e) > 0; });
  sweep(l.rootfs(), [&](const std::string& e) { return rootfs.count(e) > 0; });
  sweep(l.base(), [&](const std::string& e) { return base.count(e) > 0; });
  sweep(l.debs(), [&](const std::string& e) {
    for (const auto& prefix : debs) {
      if (e.rfind(prefix, 0) == 0) return true;
    }
    return false;
  });
}

std::string FindBusybox() {
  for (const char* p : {"/bin/busybox", "/usr/bin/busybox"}) {
    if (Exists(p)) return p;
  }
  return "";
}

}  // namespace

namespace {
const std::vector<std::string>& BasePackages() {
  static const std::vector<std::string> v = {"bash",         "coreutils",
                                             "procps",       "iproute2",
                                             "netbase",      "ca-certificates",
                                             "curl",         "git",
                                             "less",         "mount",
                                             "xz-utils",     "unzip",
                                             "python3",      "python3-pip",
                                             "python3-venv", "python-is-python3",
                                             "nodejs",       "npm",
                                             "sudo"};
  return v;
}
// What a data-analysis agent expects of E2B's code interpreter, from Debian:
// the kernel, the scientific stack, plotting (with a font), spreadsheets,
// HTML/XML, HTTP, and TypeScript for the typescript kernel.
const std::vector<std::string>& InterpreterPackages() {
  static const std::vector<std::string> v = {
      "python3-ipykernel", "python3-numpy",    "python3-pandas",   "python3-matplotlib", "python3-scipy",
      "python3-pil",       "python3-requests", "python3-seaborn",  "python3-sklearn",    "python3-sympy",
      "python3-openpyxl",  "python3-bs4",      "python3-lxml",     "python3-tabulate",   "fonts-dejavu-core",
      "node-typescript"};
  return v;
}

// What @e2b/desktop runs in the guest (its dist/: Xvfb, startxfce4,
// xdpyinfo, xrandr, xdotool, scrot --pointer, x11vnc, /opt/noVNC's
// novnc_proxy with websockify, netstat for its port check, xdg-open,
// gtk-launch), the session bus XFCE wants, and what a computer-use agent
// opens: a text editor, a terminal, a browser. LibreOffice is not in it
// (~600 MB; the package needs none of it): a template built from this one
// adds it.
const std::vector<std::string>& DesktopPackages() {
  static const std::vector<std::string> v = {
      "xvfb",       "xauth",      "x11-utils", "x11-xserver-utils", "dbus-x11",       "xfce4",
      "xfce4-terminal", "mousepad", "xdotool", "scrot",             "x11vnc",         "novnc",
      "python3-websockify", "net-tools", "xdg-utils", "libgtk-3-bin", "firefox-esr", "fonts-dejavu-core"};
  return v;
}

// Docker Engine from Debian (dockerd, containerd, runc, iptables), modprobe
// for the modules the template carries, and a static busybox to make tiny
// images from (`docker import`) without a registry.
const std::vector<std::string>& DockerPackages() {
  static const std::vector<std::string> v = {"docker.io", "kmod", "busybox-static"};
  return v;
}
// `user` may use the daemon's socket, as on a workstation (docker.io made
// the group).
constexpr char kDockerPostInstall[] = "usermod --append --groups docker user";
}  // namespace

const std::vector<std::string>& KnownTemplates() {
  static const std::vector<std::string> v = {"base", "code-interpreter", "desktop", "docker"};
  return v;
}

std::string CanonicalTemplateName(const std::string& name) {
  if (name == "code-interpreter-v1") return "code-interpreter";
  return name;
}

bool TemplateHasInterpreter(const std::string& template_name) {
  return CanonicalTemplateName(template_name) == "code-interpreter";
}

bool TemplateHasDesktop(const std::string& template_name) { return CanonicalTemplateName(template_name) == "desktop"; }
bool TemplateHasDocker(const std::string& template_name) { return CanonicalTemplateName(template_name) == "docker"; }

std::string QemuOnlyTemplate(const std::string& template_name) {
  if (TemplateHasDocker(template_name)) return "docs/docker.md";
  return "";
}

namespace {
// The pointer of a template that is not built in (nullopt for built-ins and
// when there is none).
std::optional<Pointer> CustomPointer(const std::string& template_name, const std::string& state_dir) {
  if (state_dir.empty()) return std::nullopt;
  const std::string name = CanonicalTemplateName(template_name);
  if (std::find(KnownTemplates().begin(), KnownTemplates().end(), name) != KnownTemplates().end()) return std::nullopt;
  if (!ValidTemplateName(name).ok()) return std::nullopt;
  auto p = ReadPointer(LayoutFor(state_dir), name);
  if (!p.ok()) return std::nullopt;
  return *p;
}
}  // namespace

TemplateReadiness ReadinessOf(const std::string& template_name, const std::string& state_dir) {
  if (TemplateHasInterpreter(template_name)) return {kInterpreterReadyMarker, ""};
  if (TemplateHasDesktop(template_name)) return {kDesktopReadyMarker, kDesktopFailedMarker};
  if (TemplateHasDocker(template_name)) return {kDockerReadyMarker, kDockerFailedMarker};
  if (auto p = CustomPointer(template_name, state_dir)) return {p->console_marker, p->console_failure};
  return {};
}

std::optional<MachineShape> DefaultShapeOf(const std::string& template_name, const std::string& state_dir) {
  if (TemplateHasInterpreter(template_name) || TemplateHasDesktop(template_name) || TemplateHasDocker(template_name))
    return MachineShape{2, 2048};
  if (auto p = CustomPointer(template_name, state_dir); p && p->vcpus > 0 && p->memory_mib > 0)
    return MachineShape{p->vcpus, p->memory_mib};
  return std::nullopt;
}

bool HasBuiltRootfs(const std::string& state_dir, const std::string& id) {
  auto abs = AbsolutePath(state_dir);
  Layout l = LayoutFor(abs.ok() ? *abs : state_dir);
  return Exists(l.rootfs(id) + "/rootfs.ext4");
}

StatusOr<GuestImage> InstallBuiltImage(const std::string& state_dir, const BuiltImage& b) {
  RETURN_IF_ERROR(ValidTemplateName(b.name));
  if (std::find(KnownTemplates().begin(), KnownTemplates().end(), CanonicalTemplateName(b.name)) != KnownTemplates().end())
    return InvalidArgument("a built image may not take the built-in template name " + b.name);
  if (b.id.size() != 20 || b.id.find_first_not_of("0123456789abcdef") != std::string::npos)
    return InvalidArgument("built image id must be 20 hex digits");
  auto abs = AbsolutePath(state_dir);
  Layout l = LayoutFor(abs.ok() ? *abs : state_dir);
  ASSIGN_OR_RETURN(UniqueFd lock, LockFile(l.lock(), [] {}));
  ASSIGN_OR_RETURN(Pointer base, ReadPointer(l, "base"));
  const std::string dest = l.rootfs(b.id);
  if (Exists(dest + "/rootfs.ext4")) {
    if (!b.rootfs.empty()) ::unlink(b.rootfs.c_str());
  } else {
    if (b.rootfs.empty()) return NotFound("no rootfs for built image " + b.id);
    // A state dir with no rootfs of its own yet (a cluster node's fetch).
    RETURN_IF_ERROR(MakeDirs(l.rootfs()));
    RETURN_IF_ERROR(MakeDirs(l.tmp()));
    RETURN_IF_ERROR(BuildInto(l, dest, [&](const std::string&, const std::string& out) -> Status {
      if (::rename(b.rootfs.c_str(), (out + "/rootfs.ext4").c_str()) != 0) return ErrnoError("rename " + b.rootfs);
      return OkStatus();
    }));
  }
  Pointer p;
  p.id = b.id;
  p.boot_key = base.boot_key;
  p.rootfs_key = b.id;
  p.boot_local = base.boot_local;
  p.kernel_name = base.kernel_name;
  p.kernel_version = base.kernel_version;
  p.kernel_release = base.kernel_release;
  p.console_marker = b.readiness.console_marker;
  p.console_failure = b.readiness.console_failure;
  p.owner = b.owner;
  p.vcpus = b.shape.vcpus;
  p.memory_mib = b.shape.memory_mib;
  RETURN_IF_ERROR(MakeDirs(l.templates()));
  RETURN_IF_ERROR(WritePointer(l, b.name, p));
  return ImageFrom(l, b.name, p);
}

std::map<std::string, std::string> CustomImages(const std::string& state_dir) {
  auto abs = AbsolutePath(state_dir);
  Layout l = LayoutFor(abs.ok() ? *abs : state_dir);
  std::map<std::string, std::string> out;
  for (const auto& name : TemplateNames(l)) {
    if (std::find(KnownTemplates().begin(), KnownTemplates().end(), name) != KnownTemplates().end()) continue;
    auto p = ReadPointer(l, name);
    if (p.ok()) out[name] = p->owner;
  }
  return out;
}

Status RemoveTemplateImage(const std::string& state_dir, const std::string& name) {
  RETURN_IF_ERROR(ValidTemplateName(name));
  auto abs = AbsolutePath(state_dir);
  Layout l = LayoutFor(abs.ok() ? *abs : state_dir);
  if (::unlink(l.pointer(name).c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + l.pointer(name));
  return OkStatus();
}

StatusOr<std::vector<std::string>> TemplatePackages(const std::string& template_name) {
  std::string name = CanonicalTemplateName(template_name);
  if (name == "base") return BasePackages();
  if (name == "code-interpreter" || name == "desktop" || name == "docker") {
    std::vector<std::string> v = BasePackages();
    const auto& more = name == "desktop"  ? DesktopPackages()
                       : name == "docker" ? DockerPackages()
                                          : InterpreterPackages();
    v.insert(v.end(), more.begin(), more.end());
    return v;
  }
  return InvalidArgument("unknown template \"" + template_name + "\" (known: base, code-interpreter, desktop, docker)");
}

std::string ParentTemplate(const std::string& template_name) {
  const std::string name = CanonicalTemplateName(template_name);
  return name == "code-interpreter" || name == "desktop" || name == "docker" ? "base" : "";
}

namespace {
std::string TemplatePostInstall(const std::string& template_name) {
  return TemplateHasDocker(template_name) ? kDockerPostInstall : "";
}
}  // namespace

StatusOr<std::string> TemplateBaseLayerKey(const std::string& template_name) {
  const std::string name = CanonicalTemplateName(template_name);
  ASSIGN_OR_RETURN(std::vector<std::string> packages, TemplatePackages(name));
  std::string parent_key;
  if (std::string parent = ParentTemplate(name); !parent.empty()) {
    ASSIGN_OR_RETURN(parent_key, TemplateBaseLayerKey(parent));
  }
  return BaseLayerKey(name, kSuite, packages, parent_key, TemplatePostInstall(name));
}

void CollectGarbage(const std::string& state_dir) {
  auto abs = AbsolutePath(state_dir);
  Layout l = LayoutFor(abs.ok() ? *abs : state_dir);
  auto lock = LockFile(l.lock(), [] {});
  if (!lock.ok()) return;
  CollectGarbageIn(l);
}

std::vector<GuestImage> CurrentImages(const std::string& state_dir) {
  auto abs = AbsolutePath(state_dir);
  Layout l = LayoutFor(abs.ok() ? *abs : state_dir);
  std::vector<GuestImage> out;
  for (const auto& name : TemplateNames(l)) {
    auto p = ReadPointer(l, name);
    if (!p.ok()) continue;
    if (auto img = ImageFrom(l, name, *p); img.ok()) out.push_back(*std::move(img));
  }
  return out;
}

StatusOr<GuestImage> FindImage(const std::string& state_dir, const std::string& requested) {
  std::string template_name = CanonicalTemplateName(requested);
  RETURN_IF_ERROR(ValidTemplateName(template_name));
  auto abs = AbsolutePath(state_dir);
  Layout l = LayoutFor(abs.ok() ? *abs : state_dir);
  ASSIGN_OR_RETURN(Pointer p, ReadPointer(l, template_name));
  return ImageFrom(l, template_name, p);
}

namespace {

// The code interpreter's files as the guest gets them, copied into `dir`
// first (so what is hashed is what is installed): the server (stripped like
// the agent), every regular file of the kernels directory, and the service
// declaration that makes the agent start the server (agent/services.h).
StatusOr<std::vector<StagedFile>> InterpreterFiles(const ImageOptions& o, const std::string& dir) {
  if (o.interpreter_binary.empty() || o.interpreter_kernels_dir.empty()) {
    return InvalidArgument("template " + o.template_name +
                           " needs the airlock-interpreter binary and its kernels directory (--interpreter, "
                           "--interpreter-kernels)");
  }
  std::vector<StagedFile> out;
  auto add = [&](const std::string& source, const std::string& dest, unsigned mode) -> Status {
    ASSIGN_OR_RETURN(std::string sha, Sha256File(source));
    out.push_back(StagedFile{source, dest, mode, sha, ""});
    return OkStatus();
  };
  std::string server = dir + "/airlock-interpreter";
  RETURN_IF_ERROR(GuestAgentCopy(o.interpreter_binary, server, dir + "/objcopy-interpreter.log")
                      .WithContext("interpreter " + o.interpreter_binary));
  RETURN_IF_ERROR(add(server, kInterpreterPath, 0755));
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(o.interpreter_kernels_dir));
  std::sort(names.begin(), names.end());
  RETURN_IF_ERROR(MakeDirs(dir + "/kernels"));
  bool has_table = false;
  for (const auto& n : names) {
    std::string src = o.interpreter_kernels_dir + "/" + n;
    struct stat st;
    if (n[0] == '.') continue;  // the build's .stamp, editor files
    if (::stat(src.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (n == "kernels.json") has_table = true;
    RETURN_IF_ERROR(CopyFile(src, dir + "/kernels/" + n, 0644));
    RETURN_IF_ERROR(add(dir + "/kernels/" + n, std::string(kInterpreterKernelsDir) + "/" + n, 0644));
  }
  if (!has_table) return InvalidArgument("no kernels.json in " + o.interpreter_kernels_dir);
  json service = {{"name", "interpreter"},
                  {"argv",
                   {kInterpreterPath, "--kernels", std::string(kInterpreterKernelsDir) + "/kernels.json", "--console",
                    "/dev/console"}},
                  {"user", "root"},
                  {"cwd", "/"}};
  std::string service_file = dir + "/interpreter.json";
  {
    std::ofstream f(service_file);
    f << service.dump(2) << "\n";
    if (!f) return ErrnoError("write " + service_file);
  }
  RETURN_IF_ERROR(add(service_file, "/etc/airlock/services/interpreter.json", 0644));
  return out;
}

// The desktop's files as the guest gets them, written into `dir` first (so
// what is hashed is what is installed): the session script and the two
// wrappers that adopt what it started (src/image/desktop/), the service
// declaration that makes the agent run the session once per boot as `user`
// and say "service desktop ready" (kDesktopReadyMarker) once XFCE's
// session, window manager, desktop and panel run, and /opt/noVNC, where
// @e2b/desktop runs noVNC from, as a link to Debian's noVNC; and the
// close_range clamp (`close_range_lib`) listed in /etc/ld.so.preload, without
// which no GLib program can start another under gVisor (close_range.c); and
// XFCE's keyboard default, key autorepeat off (keyboards.xml says why).
StatusOr<std::vector<StagedFile>> DesktopFiles(const std::string& dir, const std::string& close_range_lib) {
  if (close_range_lib.empty() || !Exists(close_range_lib)) {
    return InvalidArgument("template desktop needs libairlock-close-range.so (built beside airlock; not found at '" +
                           close_range_lib + "')");
  }
  std::vector<StagedFile> out;
  {
    const std::string lib = dir + "/libairlock-close-range.so";
    RETURN_IF_ERROR(CopyFile(close_range_lib, lib, 0644));
    ASSIGN_OR_RETURN(std::string sha, Sha256File(lib));
    out.push_back(StagedFile{lib, kDesktopCloseRangeLib, 0644, sha, ""});
  }
  auto add = [&](const std::string& name, std::string_view text, const std::string& dest, unsigned mode) -> Status {
    const std::string source = dir + "/" + name;
    RETURN_IF_ERROR(WriteFile(source, text));
    ASSIGN_OR_RETURN(std::string sha, Sha256File(source));
    out.push_back(StagedFile{source, dest, mode, sha, ""});
    return OkStatus();
  };
  RETURN_IF_ERROR(add("desktop-session", kDesktopSessionText, kDesktopSessionPath, 0755));
  RETURN_IF_ERROR(add("desktop-xvfb", kDesktopXvfbText, "/usr/local/bin/Xvfb", 0755));
  RETURN_IF_ERROR(add("desktop-startxfce4", kDesktopStartXfce4Text, "/usr/local/bin/startxfce4", 0755));
  RETURN_IF_ERROR(add("desktop-keyboards.xml", kDesktopKeyboardsText,
                      "/etc/xdg/xfce4/xfconf/xfce-perchannel-xml/keyboards.xml", 0644));
  json service = {
      {"name", "desktop"},
      {"argv", {kDesktopSessionPath}},
      {"user", "user"},
      {"cwd", "/home/user"},
      {"env", {{"DISPLAY", ":0"}}},
      {"restart", "on-failure"},
      {"ready_cmd",
       "pgrep -x xfce4-session >/dev/null && pgrep -x xfwm4 >/dev/null && pgrep -x xfdesktop >/dev/null && "
       "pgrep -x xfce4-panel >/dev/null"}};
  RETURN_IF_ERROR(add("desktop.json", service.dump(2) + "\n", "/etc/airlock/services/desktop.json", 0644));
  out.push_back(StagedFile{"", "/opt/noVNC", 0, "", "/usr/share/novnc"});
  RETURN_IF_ERROR(add("ld.so.preload", std::string(kDesktopCloseRangeLib) + "\n", "/etc/ld.so.preload", 0644));
  return out;
}

// The docker template's files: the daemon's start script, the service
// declaration that makes the agent run it as root from boot (restarted when
// it dies) and say "service docker ready" (kDockerReadyMarker) once `docker
// info` answers, and the boot kernel's modules (`moddir`, an unpacked
// lib/modules/<release> with depmod's index) at /usr/lib/modules/<release>,
// for the guest's modprobe.
StatusOr<std::vector<StagedFile>> DockerFiles(const std::string& dir, const std::string& moddir,
                                              const std::string& release) {
  std::vector<StagedFile> out;
  const std::string script = dir + "/docker-dockerd";
  RETURN_IF_ERROR(WriteFile(script, kDockerDaemonText));
  ASSIGN_OR_RETURN(std::string sha, Sha256File(script));
  out.push_back(StagedFile{script, kDockerDaemonPath, 0755, sha, ""});
  json service = {{"name", "docker"},
                  {"argv", {kDockerDaemonPath}},
                  {"user", "root"},
                  {"cwd", "/"},
                  {"ready_cmd", "docker info >/dev/null 2>&1"}};
  const std::string decl = dir + "/docker.json";
  RETURN_IF_ERROR(WriteFile(decl, service.dump(2) + "\n"));
  ASSIGN_OR_RETURN(sha, Sha256File(decl));
  out.push_back(StagedFile{decl, "/etc/airlock/services/docker.json", 0644, sha, ""});
  std::vector<std::string> rels;
  std::function<Status(const std::string&)> walk = [&](const std::string& rel) -> Status {
    ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(moddir + rel));
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      struct stat st;
      const std::string r = rel + "/" + n;
      if (::lstat((moddir + r).c_str(), &st) != 0) return ErrnoError("stat " + moddir + r);
      if (S_ISDIR(st.st_mode)) {
        RETURN_IF_ERROR(walk(r));
      } else if (S_ISREG(st.st_mode)) {
        rels.push_back(r);  // the package's build/source links point at headers it does not hold
      }
    }
    return OkStatus();
  };
  RETURN_IF_ERROR(walk(""));
  for (const auto& r : rels) {
    ASSIGN_OR_RETURN(sha, Sha256File(moddir + r));
    out.push_back(StagedFile{moddir + r, "/usr/lib/modules/" + release + r, 0644, sha, ""});
  }
  return out;
}

}  // namespace

namespace {

// The image directory of a build: made, locked against other builds (held
// while `lock` lives), and cleared of what a killed build left in tmp/.
struct OpenImages {
  Layout layout;
  UniqueFd lock;
};
StatusOr<OpenImages> OpenForBuild(const std::string& requested_state_dir, const Progress& progress) {
  if (requested_state_dir.empty()) return InvalidArgument("state_dir is empty");
  RETURN_IF_ERROR(MakeDirs(requested_state_dir + "/images"));
  ASSIGN_OR_RETURN(std::string state_dir, AbsolutePath(requested_state_dir));
  Layout l = LayoutFor(state_dir);
  for (const auto& d : {l.tmp(), l.debs(), l.boot(), l.rootfs(), l.base(), l.templates()}) {
    RETURN_IF_ERROR(MakeDirs(d));
  }
  ASSIGN_OR_RETURN(UniqueFd lock, LockFile(l.lock(), [&] {
                     Say(progress, "waiting for another image build to finish");
                   }));
  // Stale build directories from a killed build (we hold the lock).
  if (auto stale = ListDir(l.tmp()); stale.ok()) {
    for (const auto& s : *stale) {
      if (Status st = RemoveTree(l.tmp() + "/" + s); !st.ok()) return st;
    }
  }
  return OpenImages{std::move(l), std::move(lock)};
}

// What the boot files depend on besides the kernel package: the builder,
// the initramfs's init script and modules, busybox.
StatusOr<std::string> BootLocalKey(const std::string& busybox) {
  ASSIGN_OR_RETURN(std::string busybox_sha, Sha256File(busybox));
  return KeyBuilder()
      .Add("builder", kBuilderVersion)
      .Add("init", InitramfsInitScript())
      .Add("modules", InitramfsModules())
      .Add("busybox", busybox_sha)
      .Digest();
}

// The kernel package of the last build of the template (no apt), else the
// one apt resolves now (`refresh`: after apt-get update).
StatusOr<KernelPackage> KernelFor(const Layout& l, const StatusOr<Pointer>& prev, bool refresh,
                                  const Progress& progress) {
  if (prev.ok() && !refresh && !prev->kernel_name.empty() && !prev->kernel_version.empty()) {
    return KernelPackage{prev->kernel_name, prev->kernel_version, prev->kernel_release};
  }
  ASSIGN_OR_RETURN(std::string work, MakeTempDir(l.tmp(), "apt-"));
  auto k = ResolveKernelPackage(refresh, work, progress);
  (void)RemoveTree(work);
  return k;
}

// The boot files (vmlinux, initramfs) of `kernel`, built unless present;
// returns their key.
StatusOr<std::string> EnsureBoot(const Layout& l, const KernelPackage& kernel, const std::string& busybox,
                                 const std::string& boot_local, bool force, const Progress& progress) {
  std::string boot_key = KeyBuilder()
                             .Add("builder", kBuilderVersion)
                             .Add("kernel_package", kernel.name)
                             .Add("kernel_version", kernel.version)
                             .Add("local", boot_local)
                             .ShortDigest();
  if (force || !Exists(l.boot(boot_key) + "/initrd.cpio.gz")) {
    BootInputs in{kernel, busybox, l.debs()};
    RETURN_IF_ERROR(BuildInto(l, l.boot(boot_key), [&](const std::string& w, const std::string& out) {
      return BuildBoot(in, w, out, progress);
    }));
  } else {
    Say(progress, "kernel and initramfs up to date (" + kernel.name + " " + kernel.version + ")");
  }
  return boot_key;
}

// The template's base layer (mmdebstrap, or its parent template's layer
// plus packages; does not depend on the agent), built unless present, its
// parent's first; returns its directory. `force` rebuilds this layer, not
// its parent's.
StatusOr<std::string> EnsureBaseLayer(const Layout& l, const std::string& name, bool force,
                                      const Progress& progress) {
  ASSIGN_OR_RETURN(std::vector<std::string> packages, TemplatePackages(name));
  ASSIGN_OR_RETURN(std::string base_key, TemplateBaseLayerKey(name));
  // A base layer directory is complete once it exists (renamed into place).
  std::string base_dir = l.base(base_key);
  if (force || !Exists(base_dir + "/packages.txt")) {
    BaseLayerInputs in{kSuite, packages, "", TemplatePostInstall(name)};
    if (std::string parent = ParentTemplate(name); !parent.empty()) {
      ASSIGN_OR_RETURN(std::string parent_dir, EnsureBaseLayer(l, parent, false, progress));
      in.parent_root = parent_dir + "/root";
    }
    // Base layers are unpacked root filesystems (device nodes, setuid
    // files, other users' files): root only.
    if (::chmod(l.base().c_str(), 0700) != 0) return ErrnoError("chmod " + l.base());
    RETURN_IF_ERROR(BuildInto(l, base_dir, [&](const std::string& w, const std::string& out) {
      return BuildBaseLayer(in, w, out, progress);
    }));
  } else {
    Say(progress, "base layer up to date (" + base_key + ")");
  }
  return base_dir;
}

}  // namespace

Status EnsureBaseLayers(const ImageOptions& options) {
  const std::string name = CanonicalTemplateName(options.template_name);
  RETURN_IF_ERROR(ValidTemplateName(name));
  RETURN_IF_ERROR(TemplatePackages(name).status());
  std::string busybox = FindBusybox();
  if (busybox.empty()) return FailedPrecondition("no static busybox found (apt-get install busybox-static)");
  if (::geteuid() != 0) return PermissionDenied("building the guest image needs root (mmdebstrap, chroot)");
  ASSIGN_OR_RETURN(OpenImages open, OpenForBuild(options.state_dir, options.progress));
  const Layout& l = open.layout;
  ASSIGN_OR_RETURN(std::string boot_local, BootLocalKey(busybox));
  ASSIGN_OR_RETURN(KernelPackage kernel, KernelFor(l, ReadPointer(l, name), options.refresh, options.progress));
  RETURN_IF_ERROR(EnsureBoot(l, kernel, busybox, boot_local, options.force, options.progress).status());
  return EnsureBaseLayer(l, name, options.force, options.progress).status();
}

StatusOr<GuestImage> EnsureImage(const ImageOptions& options) {
  ImageOptions o = options;
  o.template_name = CanonicalTemplateName(o.template_name);
  const Progress& progress = o.progress;
  RETURN_IF_ERROR(ValidTemplateName(o.template_name));
  RETURN_IF_ERROR(TemplatePackages(o.template_name).status());
  if (o.state_dir.empty()) return InvalidArgument("state_dir is empty");
  if (o.agent_binary.empty()) return InvalidArgument("no agent binary given");
  struct stat ast;
  if (::stat(o.agent_binary.c_str(), &ast) != 0)
    return ErrnoError("agent binary " + o.agent_binary).WithContext("image");
  if (!S_ISREG(ast.st_mode) || (ast.st_mode & 0111) == 0) {
    return InvalidArgument("agent binary " + o.agent_binary + " is not an executable file");
  }
  {
    // PID 1 in the guest: the kernel must be able to exec it.
    std::ifstream f(o.agent_binary, std::ios::binary);
    char magic[4] = {};
    f.read(magic, sizeof magic);
    std::string_view head(magic, static_cast<size_t>(f.gcount()));
    if (head != kElfMagic && head.substr(0, 2) != "#!") {
      return InvalidArgument("agent binary " + o.agent_binary +
                             " is neither an ELF executable nor a #! script");
    }
  }
  std::string busybox = FindBusybox();
  if (busybox.empty()) {
    return FailedPrecondition("no static busybox found (apt-get install busybox-static)");
  }

  ASSIGN_OR_RETURN(OpenImages open, OpenForBuild(o.state_dir, progress));
  const Layout& l = open.layout;
  // Inputs known without asking apt. The agent's key is the hash of what
  // the guest gets (GuestAgentCopy), not of the build's binary, whose debug
  // info names the build directory.
  ASSIGN_OR_RETURN(std::string agent_dir, MakeTempDir(l.tmp(), "agent-"));
  struct RemoveOnExit {
    std::string dir;
    ~RemoveOnExit() { (void)RemoveTree(dir); }
  } agent_dir_cleanup{agent_dir};
  const std::string guest_agent = agent_dir + "/airlock-agent";
  RETURN_IF_ERROR(GuestAgentCopy(o.agent_binary, guest_agent, agent_dir + "/objcopy.log").WithContext("agent"));
  ASSIGN_OR_RETURN(std::string agent_sha, Sha256File(guest_agent));
  ASSIGN_OR_RETURN(std::string boot_local, BootLocalKey(busybox));
  std::vector<StagedFile> extras;
  if (TemplateHasInterpreter(o.template_name)) {
    ASSIGN_OR_RETURN(extras, InterpreterFiles(o, agent_dir));
  }
  if (TemplateHasDesktop(o.template_name)) {
    ASSIGN_OR_RETURN(extras, DesktopFiles(agent_dir, o.close_range_lib));
  }
  auto prev = ReadPointer(l, o.template_name);
  std::optional<KernelPackage> kernel_early;
  if (TemplateHasDocker(o.template_name)) {
    // Its modules must be the boot kernel's, so the kernel is known first.
    ASSIGN_OR_RETURN(KernelPackage k, KernelFor(l, prev, o.refresh, progress));
    ASSIGN_OR_RETURN(std::string moddir, UnpackKernelModules(k, l.debs(), agent_dir, progress));
    ASSIGN_OR_RETURN(extras, DockerFiles(agent_dir, moddir, k.release));
    kernel_early = k;
  }
  {
    // pip installs system-wide as root, as in E2B's images (a template's
    // pipInstall is `pip install ...` as root); Debian's pip refuses that
    // without this (PEP 668, "externally-managed-environment").
    const std::string pip_conf = agent_dir + "/pip.conf";
    RETURN_IF_ERROR(WriteFile(pip_conf, "[global]\nbreak-system-packages = true\n"));
    ASSIGN_OR_RETURN(std::string sha, Sha256File(pip_conf));
    extras.push_back(StagedFile{pip_conf, "/etc/pip.conf", 0644, sha, ""});
  }
  ASSIGN_OR_RETURN(std::string base_key, TemplateBaseLayerKey(o.template_name));
  std::string rootfs_key = TemplateRootfsKey(base_key, agent_sha, ExtraFilesDigest(extras));

  if (!o.force && !o.refresh && prev.ok() && prev->boot_local == boot_local &&
      prev->rootfs_key == rootfs_key) {
    if (auto img = ImageFrom(l, o.template_name, *prev); img.ok()) return img;
  }

  if (::geteuid() != 0) {
    return PermissionDenied("building the guest image needs root (mmdebstrap, chroot)");
  }

  KernelPackage kernel;
  if (kernel_early) {
    kernel = *kernel_early;
  } else {
    ASSIGN_OR_RETURN(kernel, KernelFor(l, prev, o.refresh, progress));
  }
  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::string boot_key, EnsureBoot(l, kernel, busybox, boot_local, o.force, progress));
  if (o.force || !Exists(l.rootfs(rootfs_key) + "/rootfs.ext4")) {
    ASSIGN_OR_RETURN(std::string base_dir, EnsureBaseLayer(l, o.template_name, o.force, progress));
    TemplateInputs in{base_dir, guest_agent, agent_sha, rootfs_key, extras, /*keep_tree=*/true};
    RETURN_IF_ERROR(
        BuildInto(l, l.rootfs(rootfs_key), [&](const std::string& w, const std::string& out) {
          return BuildTemplateRootfs(in, w, out, progress);
        }));
  } else {
    Say(progress, "template rootfs up to date");
  }

  Pointer p;
  p.boot_key = boot_key;
  p.rootfs_key = rootfs_key;
  p.base_key = base_key;
  if (prev.ok()) {
    p.previous_rootfs_key =
        prev->rootfs_key != rootfs_key ? prev->rootfs_key : prev->previous_rootfs_key;
  }
  if (p.previous_rootfs_key.empty() || p.previous_rootfs_key == rootfs_key ||
      !Exists(l.rootfs(p.previous_rootfs_key) + "/rootfs.ext4")) {
    p.previous_rootfs_key.clear();
  }
  p.boot_local = boot_local;
  p.kernel_name = kernel.name;
  p.kernel_version = kernel.version;
  p.kernel_release = kernel.release;
  p.id = KeyBuilder().Add("boot", boot_key).Add("rootfs", rootfs_key).ShortDigest();
  RETURN_IF_ERROR(WritePointer(l, o.template_name, p));
  CollectGarbageIn(l);
  auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0);
  Say(progress, "image " + p.id + " ready (" + std::to_string(secs.count()) + " s)");
  return ImageFrom(l, o.template_name, p);
}

}  // namespace airlock::image
