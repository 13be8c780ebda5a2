// The runtimes of one Manager (core/manager.h): each sandbox runs under the
// runtime it was created on (SandboxRecord::runtime), not one runtime for
// the whole daemon.
//
// The default runtime (ManagerConfig::runtime, `serve --default-runtime`)
// is opened by Open, and its failure fails the daemon's start. Any other of
// AvailableRuntimes() is opened on first use with the same RuntimeOptions
// and kept for the life of the set; a runtime that cannot be opened on this
// host (gVisor without runsc) is an error to whoever asked for it, never a
// fallback to another runtime, and is tried again at the next ask.
// Thread-safe; a Runtime* it hands out lives as long as the set.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/status.h"
#include "runtime/options.h"
#include "runtime/runtime.h"

namespace airlock {

class RuntimeSet {
 public:
  // How a runtime is opened: runtime/registry.h OpenRuntime, or a fake (tests).
  using Opener = std::function<StatusOr<std::unique_ptr<Runtime>>(std::string_view name, const RuntimeOptions&)>;

  // Opens `default_name` at once; its error (with "runtime <name>: ") else.
  static StatusOr<std::unique_ptr<RuntimeSet>> Open(std::string default_name, RuntimeOptions options,
                                                    Opener opener = {});

  const std::string& default_name() const { return default_name_; }
  Runtime& default_runtime() const { return *default_; }

  // Runtime `name` ("" = the default): the one already open, or opened now.
  // Errors: CheckRuntimeName's for an unknown name; the backend's (which
  // names the fix) with "runtime <name>: " in front when it cannot be
  // opened here.
  StatusOr<Runtime*> Named(std::string_view name) const;

  // The runtime whose store reads the snapshot directory `dir`: the one that
  // wrote it (runtime/registry.h RuntimeOfSnapshot) when `dir` exists, else
  // `runtime` (a new save by a sandbox of that runtime; "" = the default).
  // Named's errors.
  StatusOr<Runtime*> ForSnapshot(const std::string& dir, std::string_view runtime = {}) const;

 private:
  RuntimeSet() = default;
  std::string default_name_;
  RuntimeOptions options_;
  Opener opener_;
  Runtime* default_ = nullptr;
  mutable std::mutex open_mu_;  // one open at a time (a backend's probe may take a while)
  mutable std::mutex mu_;       // guards runtimes_
  mutable std::map<std::string, std::unique_ptr<Runtime>, std::less<>> runtimes_;
};

// The error `st` of runtime `runtime` doing `what` ("pause", "fork",
// "snapshot") as the API shows it: Unimplemented (the runtime cannot)
// becomes "<what> is not supported by the <runtime> runtime: <its message>"
// (HTTP 501, server/http_status.h); any other error gets `context` in front
// ("pause <id>"; none when empty). OK stays OK.
Status RuntimeOpStatus(const Status& st, std::string_view runtime, std::string_view what,
                       std::string_view context = {});

// Unimplemented (the store's own) when `runtime`'s snapshots can never drop
// their memory (pause without memory, disk layers), else OK: asked before a
// save that would be thrown away. `absent_dir` must hold no snapshot (the
// save's future directory): DropMemory of it fails, touching nothing, with
// Unimplemented exactly when the store cannot drop memory at all.
Status CheckDropsMemory(const Runtime& runtime, const std::string& absent_dir);

}  // namespace airlock
