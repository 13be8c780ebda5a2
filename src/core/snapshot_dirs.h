// The snapshot directories of one state dir and what is on them
// (docs/snapshots.md): where each kind lives, reading and deleting one
// through the store of the runtime that wrote it, which of them a disk or a
// RAM file is layered on (so never deleted), and the start-up sweeps of what
// a killed daemon left half written.
//
//   <state_dir>/snapshots/paused/<sandbox id>           a paused sandbox
//   <state_dir>/snapshots/forks/<parent>-<hex>[.owner]  a fork's checkpoint
//   <state_dir>/snapshots/named/snap-<hex>/info.json    a named snapshot
//   <state_dir>/snapshots/checkpoints/<id>-ckpt-<hex>   a checkpoint
//   <state_dir>/snapshots/layers/<name>                 a template build's disk layer
//   <state_dir>/snapshots/templates/...                 TemplateSnapshots' own
//
// A save is written as <dir>.tmp (or with ".tmp-" in its name) and renamed
// into place when complete; a sweep removes what never was.
//
// No state of its own beyond the paths: thread-safe. Every path it returns
// or takes is canonical (the Manager canonicalises the state dir), because
// VMM records and manifests name their backing files by absolute path.
// Errors are Status values; sweeps log and go on.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "runtime/runtime.h"

namespace airlock {

class Registry;
class RuntimeSet;

// A named snapshot (named_snapshots.cc).
struct NamedSnapshotInfo {
  std::string snapshot_id;         // "snap-<16 hex>"
  std::vector<std::string> names;  // unique within `team`
  std::string team;                // the owner: its names live in this team's namespace
  std::string sandbox_id;          // the source
  int64_t created_at_ms = 0;
  std::string dir;
};

// <dir>.owner of fork snapshot `dir`: who makes the fork (WriteOwnerFile:
// pid, registry), written before its checkpoint so a start after a kill -9
// removes what it left at once (SnapshotDirs::SweepForks).
std::string ForkOwnerFile(const std::string& dir);

// A snapshot name or id as a caller may spell it: 1..128 of [A-Za-z0-9._:-],
// not "." or "..".
bool ValidSnapshotName(const std::string& name);

inline constexpr char kNamedSnapshotInfoFile[] = "info.json";
// A named snapshot's info.json (0600: snapshotID, names, team, sandboxID,
// createdAtMs, template, envVars, sourceToken): NotFound without one,
// InvalidArgument when it is not a JSON object.
StatusOr<nlohmann::json> ReadNamedSnapshotInfo(const std::string& dir);

// The sandbox and checkpoint ids of a checkpoints/ entry name
// ("<sandbox id>-ckpt-<16 hex>", perhaps + ".tmp"); false for anything else.
bool ParseCheckpointEntry(std::string name, std::string* sandbox_id, std::string* checkpoint_id, bool* tmp);
inline constexpr char kCheckpointPrefix[] = "ckpt-";
inline constexpr char kCheckpointTmp[] = ".tmp";
// "ckpt-" and 16 lowercase hex digits.
bool ValidCheckpointId(const std::string& s);

class SnapshotDirs {
 public:
  // `registry`: whose owners rows give the team of a named snapshot written
  // before snapshots recorded theirs (nullptr: none). Both outlive this.
  SnapshotDirs(std::string state_dir, std::string owner, const RuntimeSet& runtimes, Registry* registry);

  std::string paused() const { return root_ + "paused"; }
  std::string forks() const { return root_ + "forks"; }
  std::string named() const { return root_ + "named"; }
  std::string checkpoints() const { return root_ + "checkpoints"; }
  std::string layers() const { return root_ + "layers"; }

  // The snapshot in `dir` read or deleted through the store of the runtime
  // that wrote it (RuntimeSet::ForSnapshot; `runtime` for a dir not yet
  // there); the runtime's open error when it cannot be opened here.
  StatusOr<SnapshotShape> Read(const std::string& dir, std::string_view runtime = {}) const;
  Status Delete(const std::string& dir, std::string_view runtime = {}) const;

  // Snapshot directories (<state_dir>/snapshots/<kind>/<name>) that a disk
  // is layered on, or whose RAM file a VMM maps: the parents of the
  // `disk_backing` and `ram_source` of every VMM record (run/*/vm/vm.json)
  // and snapshot manifest (templates, paused, forks, named), whichever
  // daemon wrote it. Such a directory must not be deleted.
  std::set<std::string> LayeredOn() const;
  bool InUse(const std::string& dir) const { return LayeredOn().count(dir) > 0; }
  // The fork or named snapshot that sandbox `id`'s disk (run dir, else its
  // pause snapshot) is layered on, or "".
  std::string SharedSnapshotOf(const std::string& id) const;

  // ---- forks ----
  // Deletes fork snapshot `dir` (and its owner file) unless a disk or VMM is
  // layered on it; anything not under forks() is left alone. The caller
  // knows no sandbox of its own uses it.
  void DeleteForkIfUnused(const std::string& dir) const;

  // ---- checkpoints ----
  bool IsCheckpoint(const std::string& dir) const;
  // Every checkpoint of sandbox `id` and its uncommitted .tmp (its kill).
  Status DeleteCheckpointsOf(const std::string& id) const;

  // ---- named snapshots ----
  // Every committed named snapshot, oldest first.
  StatusOr<std::vector<NamedSnapshotInfo>> ListNamed() const;
  // The directory of the named snapshot that `ref` names for `team`, or "":
  // a snapshot id of the team's (of any team's when `any_team`, for admin
  // keys), or a name of the team's own snapshots. Another team's name never
  // matches, whoever asks. A snapshot written before teams were recorded
  // belongs to the registry's owner of its id.
  std::string FindNamed(const std::string& ref, const std::string& team, bool any_team = false) const;

  // ---- disk layers of template builds (disk_layers.cc) ----
  // The layer's shape and disk-backing chain; FailedPrecondition when it is
  // not a complete disk-only snapshot.
  StatusOr<SnapshotShape> ReadDiskLayer(const std::string& dir) const;
  Status DeleteDiskLayer(const std::string& dir) const { return Delete(dir); }
  // The layer's whole disk as one raw image at `out` (SnapshotStore::ExportDisk).
  Status ExportDiskLayer(const std::string& dir, const std::string& out) const;

  // ---- start-up sweeps (core/recovery.h runs them) ----
  // Uncommitted saves: template snapshot builds and named snapshots older
  // than 10 minutes; pauses of `own_ids` (this daemon's registry's
  // sandboxes) at once, others' after 10 minutes.
  void SweepUncommitted(const std::set<std::string>& own_ids) const;
  // Fork snapshots nothing is layered on, once their maker is dead (this
  // registry's, pid gone) or 10 minutes old; until a pass removes nothing.
  void SweepForks() const;
  // Checkpoints of sandboxes whose run dir is gone, and uncommitted ones
  // of `ours_ids`, of gone sandboxes, or older than 10 minutes.
  void SweepCheckpoints(const std::set<std::string>& ours_ids) const;

 private:
  std::string state_dir_;
  std::string root_;  // <state_dir>/snapshots/
  std::string owner_;
  const RuntimeSet& runtimes_;
  Registry* registry_;
};

}  // namespace airlock
