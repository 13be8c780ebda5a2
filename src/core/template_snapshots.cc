// Template snapshots (docs/snapshots.md): a sandbox is created by restoring
// a snapshot of its template booted once, instead of booting the kernel.
//
//   snapshots/templates/<image id>-[<runtime>-]<rootfs stamp>-<vcpus>c-<memory>m[-shm]/
//       memory, disk.qcow2, [ram,] manifest.json
// Each runtime has its own (its name in the directory unless it is the
// default, qemu, whose directories kept their names), written, read and
// deleted through that runtime's store: "base" and "base-gvisor" never share one.
// With "-shm" (TemplateSnapshotsConfig::shared_memory, the default) the RAM is
// a read-only file every sandbox created from it maps copy-on-write and the
// memory stream holds device state only; without, the RAM is in the stream.
//
// The snapshot is taken right after the agent first answers on its console
// (guest_seed.h), before any TCP and any /init: it holds no token, no env
// vars, no sandbox id, and no TCP secrets (Linux draws them at the first TCP
// use; each clone draws its own after its reseed). Each sandbox
// restored from it gets a copy-on-write overlay on its disk.qcow2 and, in
// /init, its own token, env, hostname, the time and fresh entropy.
// Keyed by image id (a hash of the template's inputs) and by the rootfs
// file's stamp (SnapshotStore::ImageStamp, hashed): the image id names what the
// template was built from, the stamp which build of it this is. A template
// rebuilt under the same id (its rootfs was collected and built again: new
// ext4 layout) gets a new directory, so a snapshot whose memory describes
// the old filesystem is never restored over the new one.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "core/template_snapshots.h"

#include "common/agent_port.h"
#include "common/log.h"
#include "core/envd_client.h"
#include "core/guest_seed.h"
#include "core/manager.h"
#include "core/runtime_set.h"
#include "image/hash.h"
#include "image/image.h"
#include "net/address_pool.h"
#include "net/sandbox_network.h"
#include "runtime/registry.h"

namespace airlock {
namespace fs = std::filesystem;

namespace {

// How long a template's services may take to say they are ready after the
// agent (a python kernel importing pandas and matplotlib under TCG: ~1 min).
constexpr std::chrono::seconds kTemplateServiceReadyTimeout{600};

// Template snapshots whose RAM is a shared file (ManagerConfig::template_shared_memory).
constexpr char kSharedMemorySuffix[] = "-shm";

// "<image id>-[<runtime>-]<8 hex of the SHA-256 of the rootfs stamp>-": what
// every template snapshot directory of this build of the image on `runtime`
// starts with (no runtime name for the default runtime, qemu). Unimplemented
// from a runtime without snapshots.
StatusOr<std::string> TemplateSnapshotPrefix(const Runtime& runtime, const image::GuestImage& img) {
  ASSIGN_OR_RETURN(std::string stamp, runtime.snapshots().ImageStamp(img.rootfs));
  const std::string name(runtime.name());
  return img.id + "-" + (name == kDefaultRuntime ? "" : name + "-") + image::Sha256Hex(stamp).substr(0, 8) + "-";
}

}  // namespace

TemplateSnapshots::TemplateSnapshots(TemplateSnapshotsConfig config, const RuntimeSet& runtimes,
                                     net::AddressPool& pool)
    : config_(std::move(config)), runtimes_(runtimes), pool_(pool) {}

StatusOr<std::string> TemplateSnapshots::DirFor(const image::GuestImage& img, int vcpus, int memory_mib,
                                                const std::string& runtime) const {
  ASSIGN_OR_RETURN(Runtime * rt, runtimes_.Named(runtime));
  ASSIGN_OR_RETURN(std::string prefix, TemplateSnapshotPrefix(*rt, img));
  return config_.state_dir + "/snapshots/templates/" + prefix + std::to_string(vcpus) + "c-" +
         std::to_string(memory_mib) + "m" + (config_.shared_memory ? kSharedMemorySuffix : "");
}

void TemplateSnapshots::Sweep(const std::set<std::string>& in_use) const {
  std::error_code ec;
  const std::string root = config_.state_dir + "/snapshots/templates";
  const std::vector<image::GuestImage> images = image::CurrentImages(config_.state_dir);
  // The prefixes of the current images, per runtime: computed for the
  // runtimes whose snapshots are here (a runtime is not opened for nothing).
  std::map<std::string, std::vector<std::string>> current;
  auto current_of = [&](Runtime& runtime) -> const std::vector<std::string>& {
    auto [it, added] = current.try_emplace(std::string(runtime.name()));
    if (added) {
      for (const auto& img : images) {
        if (auto p = TemplateSnapshotPrefix(runtime, img); p.ok()) it->second.push_back(*p);
      }
    }
    return it->second;
  };
  for (auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp-") != std::string::npos || in_use.count(e.path().string())) continue;
    // Judged, and deleted, by the runtime that wrote it; kept when that
    // runtime cannot be opened here.
    auto runtime = runtimes_.ForSnapshot(e.path().string());
    if (!runtime.ok()) {
      LOG_WARN("template snapshot {} kept: {}", e.path().string(), runtime.status().message());
      continue;
    }
    // Of a current image: kept, in either RAM layout. Managers of both
    // layouts may share a state dir (a stream-layout bench or test beside
    // the daemon), and one must not throw away what the other restores
    // from: the code interpreter's takes the better part of a minute to
    // make again under TCG. At most one more snapshot per image and shape.
    bool is_current = false;
    for (const auto& p : current_of(**runtime)) is_current = is_current || name.compare(0, p.size(), p) == 0;
    if (is_current) continue;
    LOG_INFO("removing template snapshot {} (not of the current build of an image, and nothing is layered on it)",
             e.path().string());
    if (Status st = (*runtime)->snapshots().Delete(e.path().string()); !st.ok()) LOG_WARN("{}", st.message());
  }
}

bool TemplateSnapshots::Usable(const std::string& dir) const {
  auto rt = runtimes_.ForSnapshot(dir);
  return rt.ok() && (*rt)->snapshots().Read(dir).ok();
}

StatusOr<std::string> TemplateSnapshots::Find(const image::GuestImage& img, int vcpus, int memory_mib,
                                              const std::string& runtime) const {
  ASSIGN_OR_RETURN(std::string dir, DirFor(img, vcpus, memory_mib, runtime));
  if (!Usable(dir)) return NotFound("no usable template snapshot " + dir);
  return dir;
}

bool TemplateSnapshots::Pays(const Runtime& runtime, const std::string& template_name) const {
  if (runtime.plain_template_restores_sooner()) return true;
  return !image::ReadinessOf(template_name, config_.state_dir).console_marker.empty();
}

namespace {
// The console line holding `needle` (the last one), without its newline.
std::string ConsoleLineWith(const std::string& tail, const std::string& needle) {
  size_t at = tail.rfind(needle);
  if (at == std::string::npos) return needle;
  size_t end = tail.find('\n', at);
  std::string line = tail.substr(at, end == std::string::npos ? std::string::npos : end - at);
  while (!line.empty() && (line.back() == '\r')) line.pop_back();
  return line;
}
}  // namespace

Status TemplateSnapshots::Ensure(const std::string& template_name, int vcpus, int memory_mib,
                                 const std::string& runtime_name) {
  ASSIGN_OR_RETURN(Runtime * runtime, runtimes_.Named(runtime_name));
  // Sandboxes of this template start sooner without one here: none is made.
  if (!Pays(*runtime, template_name)) return OkStatus();
  ASSIGN_OR_RETURN(auto img, image::FindImage(config_.state_dir, template_name));
  auto snapshot_dir = DirFor(img, vcpus, memory_mib, std::string(runtime->name()));
  if (!snapshot_dir.ok()) {
    return RuntimeOpStatus(snapshot_dir.status(), runtime->name(), "taking a template snapshot",
                           "template snapshot of " + template_name);
  }
  const std::string dir = *snapshot_dir;
  std::lock_guard<std::mutex> once(mu_);
  if (Usable(dir)) return OkStatus();
  if (failed_.count(dir))
    return FailedPrecondition("template snapshot " + dir + " failed before; not retried");
  auto t0 = std::chrono::steady_clock::now();
  // A throw-away sandbox id for the builder VM (its netns, run dir, cgroup).
  const std::string id = "tmpl" + NewSandboxId().substr(4);
  const std::string run_dir = config_.state_dir + "/run/" + id;
  const std::string tmp = dir + ".tmp-" + id;  // unique: another daemon may build the same one
  std::error_code ec;
  fs::create_directories(config_.state_dir + "/snapshots/templates", ec);
  if (ec) return Internal("mkdir snapshots/templates: " + ec.message());
  if (::mkdir(run_dir.c_str(), 0700) != 0) return ErrnoError("mkdir " + run_dir);
  WriteRunDirOwner(run_dir, config_.owner);
  auto cleanup = [&](std::unique_ptr<VmInstance>& vm, std::unique_ptr<net::SandboxNetwork>& network) {
    if (vm) (void)vm->Destroy();
    if (network) (void)network->Destroy();
    fs::remove_all(run_dir, ec);
    fs::remove_all(tmp, ec);
  };
  std::unique_ptr<VmInstance> vm;
  std::unique_ptr<net::SandboxNetwork> network;
  auto build = [&]() -> Status {
    net::NetworkOptions options;
    options.guest_link = runtime->guest_link();
    ASSIGN_OR_RETURN(network, net::SandboxNetwork::Create(id, pool_, options));
    VmStartRequest req = VmStartRequestFor(id, run_dir, vcpus, memory_mib, *network, /*detach=*/false);
    req.kernel = img.kernel;
    req.initrd = img.initrd;
    req.rootfs = img.rootfs;
    req.shared_memory_template = config_.shared_memory;
    ASSIGN_OR_RETURN(vm, runtime->Start(req));
    RETURN_IF_ERROR(pool_.Adopt(network->lease(), vm->pid()));
    // Ready through the console, never TCP: the guest's first TCP handshake
    // draws its TCP secrets (net_secret, ts_secret) for the rest of its boot,
    // and every clone must draw its own after its own reseed (guest_seed.h).
    // The seed round-trip also shows the agent reads its console.
    GuestSeedOptions seed;
    seed.booted = true;
    seed.ready_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    Status ready = SeedGuestBeforeNetwork(*vm, seed);
    if (ready.code() == StatusCode::kUnimplemented) {
      // A runtime without console input: ready by TCP (the clones share its TCP secrets).
      EnvdClient agent(AgentEndpoint{network->netns_ip(), kAgentPort});
      VmInstance* raw = vm.get();
      ready = agent.WaitReady(std::chrono::steady_clock::now() + std::chrono::seconds(120), [raw]() -> Status {
        return raw->alive() ? OkStatus() : Unavailable("the VMM exited during boot: " + raw->ConsoleTail());
      });
    }
    RETURN_IF_ERROR(ready.WithContext("agent ready"));
    // The template's own services (the code interpreter's warm kernel):
    // ready by a console line, still before any TCP (image::ReadinessOf).
    const image::TemplateReadiness readiness = image::ReadinessOf(template_name, config_.state_dir);
    if (const std::string& marker = readiness.console_marker; !marker.empty()) {
      auto deadline = std::chrono::steady_clock::now() + kTemplateServiceReadyTimeout;
      while (!vm->ConsoleContains(marker)) {
        if (!vm->alive()) return Unavailable("the VMM exited before \"" + marker + "\": " + vm->ConsoleTail());
        if (!readiness.console_failure.empty() && vm->ConsoleContains(readiness.console_failure)) {
          return FailedPrecondition("start command failed before it was ready: " +
                                    ConsoleLineWith(vm->ConsoleTail(), readiness.console_failure));
        }
        if (cancel_.load()) return Unavailable("the daemon is stopping");
        if (std::chrono::steady_clock::now() > deadline) {
          return DeadlineExceeded("no \"" + marker + "\" on the console within " +
                                  std::to_string(kTemplateServiceReadyTimeout.count()) + " s: " + vm->ConsoleTail());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    auto info = vm->SaveSnapshot(tmp, /*keep_running=*/false);
    if (!info.ok()) return RuntimeOpStatus(info.status(), runtime->name(), "taking a template snapshot");
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      if (errno == ENOTEMPTY || errno == EEXIST) return OkStatus();  // another daemon committed it first
      return ErrnoError("rename " + tmp);
    }
    return OkStatus();
  };
  Status st = build();
  cleanup(vm, network);
  if (!st.ok()) {
    failed_.insert(dir);
    LOG_WARN("template snapshot {} failed: {}", dir, st.message());
    return st.WithContext("template snapshot of " + template_name);
  }
  LOG_INFO("template snapshot ready template={} runtime={} dir={} ms={:.0f}", template_name, runtime->name(), dir,
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return OkStatus();
}

}  // namespace airlock
