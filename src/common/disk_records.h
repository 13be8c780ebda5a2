// Where a state directory records which disk files are in use: what the
// image GC (image/image.cc) and the snapshot sweeps (core/fork.cc) read
// before deleting a file something may be layered on.
#pragma once

#include <string>
#include <vector>

namespace airlock {

// The paths of every such record under `state_dir`:
//   <state_dir>/run/<id>/vm/vm.json                 a launched VMM (runtime/qemu/reattach.cc)
//   <state_dir>/snapshots/<kind>/<name>/manifest.json  a snapshot (runtime/qemu/snapshot.h),
//     kind = paused, forks, named, checkpoints, and templates when `with_template_snapshots`.
// One per entry of those directories; a listed file may not exist (a run
// dir without a VMM yet, a snapshot mid-write). Unreadable directories give
// no entries.
std::vector<std::string> DiskRecordFiles(const std::string& state_dir, bool with_template_snapshots);

}  // namespace airlock
