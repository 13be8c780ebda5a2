// Template snapshots (docs/snapshots.md "Template snapshots"): a template
// booted once per machine shape and runtime, saved right after its agent
// (and its own services) first answer, so that a sandbox is created by
// restoring it instead of booting a kernel.
//
//   <state_dir>/snapshots/templates/<image id>-[<runtime>-]<rootfs stamp>-<vcpus>c-<memory>m[-shm]/
//
// This class owns them: where each lives, whether one is usable or pays,
// making one (one build at a time per process; several processes may build
// the same one, the first rename wins), and sweeping those of no current
// image. It holds its own lock; the Manager restores from what it makes.
// Thread-safe.
#pragma once

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "common/status.h"
#include "image/image.h"

namespace airlock {

class Runtime;
class RuntimeSet;
namespace net {
class AddressPool;
}  // namespace net

struct TemplateSnapshotsConfig {
  std::string state_dir;
  std::string owner;           // ManagerConfig::owner: written into the builder VM's run dir
  bool shared_memory = true;   // ManagerConfig::template_shared_memory ("-shm" directories)
};

class TemplateSnapshots {
 public:
  // `runtimes` and `pool` must outlive it.
  TemplateSnapshots(TemplateSnapshotsConfig config, const RuntimeSet& runtimes, net::AddressPool& pool);

  // The directory of `img`'s snapshot for the shape on `runtime` ("" = the
  // default); an error when the image's rootfs cannot be stat'ed,
  // Unimplemented when the runtime has no snapshots.
  StatusOr<std::string> DirFor(const image::GuestImage& img, int vcpus, int memory_mib,
                               const std::string& runtime = "") const;
  // A complete snapshot is at `dir` (read through the runtime that wrote it).
  bool Usable(const std::string& dir) const;
  // DirFor's directory when a usable snapshot is there (what a create or
  // the warm pool restores from); NotFound when none is, else DirFor's error.
  StatusOr<std::string> Find(const image::GuestImage& img, int vcpus, int memory_mib,
                             const std::string& runtime = "") const;
  // Whether sandboxes of `template_name` on `runtime` start from the
  // template's snapshot: always where a restore is sooner
  // (Runtime::plain_template_restores_sooner), else only for templates with
  // services of their own, whose cold start waits for them.
  bool Pays(const Runtime& runtime, const std::string& template_name) const;
  // Boots the template once in a throw-away network, waits for the agent
  // (no /init: no token, no env) and its services, saves memory + device
  // state + disk under DirFor, committed by rename. OK at once when it
  // exists, or when it does not pay. A build that failed is not retried by
  // this process (FailedPrecondition).
  Status Ensure(const std::string& template_name, int vcpus, int memory_mib, const std::string& runtime = "");
  // A build in progress gives up (Unavailable) at its next wait instead of
  // running to its deadline: a daemon shutting down.
  void Cancel() { cancel_.store(true); }
  // Removes the snapshots that are not of the current build of an image,
  // except those in `in_use` (a disk or a RAM file layered on them) and
  // those being written (".tmp-").
  void Sweep(const std::set<std::string>& in_use) const;

 private:
  const TemplateSnapshotsConfig config_;
  const RuntimeSet& runtimes_;
  net::AddressPool& pool_;
  std::mutex mu_;                  // one build at a time
  std::atomic<bool> cancel_{false};
  std::set<std::string> failed_;   // dirs whose build failed: not retried (guarded by mu_)
};

}  // namespace airlock
