// Kernel module dependency resolution from depmod's modules.dep.
//
// modules.dep lines read "kernel/drivers/net/virtio_net.ko: kernel/a.ko
// kernel/b.ko"; paths are relative to /lib/modules/<release>/. Module names
// are file basenames without ".ko" (or ".ko.xz"/".ko.zst"/".ko.gz") with '-'
// read as '_' (as the kernel does: "virtio-rng.ko" is module virtio_rng).
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::image {

struct ModuleDeps {
  // module name -> relative path of its file
  std::map<std::string, std::string> path_of;
  // relative path -> relative paths it depends on (direct or transitive, as
  // depmod lists them)
  std::map<std::string, std::vector<std::string>> deps_of;
};

// "kernel/drivers/char/hw_random/virtio-rng.ko" -> "virtio_rng".
std::string ModuleNameFromPath(std::string_view path);

// Parses modules.dep text; InvalidArgument names the bad line.
StatusOr<ModuleDeps> ParseModulesDep(std::string_view text);
// Module names from modules.builtin text (one path per line).
std::set<std::string> ParseModulesBuiltin(std::string_view text);

// The relative paths of `wanted` modules and all their dependencies, in an
// order where every module comes after everything it depends on (the order
// to insmod them). Names in `builtin` are skipped. NotFound names a module
// that is neither in modules.dep nor built in; FailedPrecondition reports a
// dependency cycle.
StatusOr<std::vector<std::string>> ResolveLoadOrder(const ModuleDeps& deps,
                                                    const std::vector<std::string>& wanted,
                                                    const std::set<std::string>& builtin);

}  // namespace airlock::image
