// SnapshotDirs (snapshot_dirs.h): the snapshot directories of a state dir.
#include "core/snapshot_dirs.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/disk_records.h"
#include "common/log.h"
#include "core/manager.h"
#include "core/registry.h"
#include "core/runtime_set.h"
#include "core/template_runtime.h"

namespace airlock {
namespace fs = std::filesystem;
namespace {

constexpr char kForkOwnerSuffix[] = ".owner";

std::string JsonField(const std::string& path, const char* field) {
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object() || !j.contains(field) || !j[field].is_string()) return "";
  return j[field].get<std::string>();
}

}  // namespace

bool ValidSnapshotName(const std::string& n) {
  if (n.empty() || n.size() > 128) return false;
  for (char c : n) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':')) return false;
  }
  return n != "." && n != "..";
}

StatusOr<nlohmann::json> ReadNamedSnapshotInfo(const std::string& dir) {
  std::ifstream f(dir + "/" + kNamedSnapshotInfoFile);
  if (!f) return NotFound("no " + std::string(kNamedSnapshotInfoFile) + " in " + dir);
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object()) return InvalidArgument(dir + "/" + kNamedSnapshotInfoFile + ": not a JSON object");
  return j;
}

bool ValidCheckpointId(const std::string& s) {
  if (s.size() != 5 + 16 || s.rfind(kCheckpointPrefix, 0) != 0) return false;
  return std::all_of(s.begin() + 5, s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool ParseCheckpointEntry(std::string name, std::string* sandbox_id, std::string* checkpoint_id, bool* tmp) {
  *tmp = name.size() > 4 && name.compare(name.size() - 4, 4, kCheckpointTmp) == 0;
  if (*tmp) name.resize(name.size() - 4);
  size_t at = name.rfind(std::string("-") + kCheckpointPrefix);
  if (at == std::string::npos || at == 0) return false;
  *sandbox_id = name.substr(0, at);
  *checkpoint_id = name.substr(at + 1);
  return ValidCheckpointId(*checkpoint_id);
}

SnapshotDirs::SnapshotDirs(std::string state_dir, std::string owner, const RuntimeSet& runtimes, Registry* registry)
    : state_dir_(std::move(state_dir)),
      root_(state_dir_ + "/snapshots/"),
      owner_(std::move(owner)),
      runtimes_(runtimes),
      registry_(registry) {}

StatusOr<SnapshotShape> SnapshotDirs::Read(const std::string& dir, std::string_view runtime) const {
  ASSIGN_OR_RETURN(Runtime * rt, runtimes_.ForSnapshot(dir, runtime));
  return rt->snapshots().Read(dir);
}

Status SnapshotDirs::Delete(const std::string& dir, std::string_view runtime) const {
  ASSIGN_OR_RETURN(Runtime * rt, runtimes_.ForSnapshot(dir, runtime));
  return rt->snapshots().Delete(dir);
}

std::set<std::string> SnapshotDirs::LayeredOn() const {
  std::set<std::string> dirs;
  const std::string root = state_dir_ + "/snapshots/";
  auto note_path = [&](std::string backing) {
    if (backing.empty()) return;
    // Written under another spelling of the state dir (a symlink): compare canonical paths.
    std::error_code ec;
    if (auto c = fs::weakly_canonical(backing, ec); !ec) backing = c.string();
    if (backing.compare(0, root.size(), root) != 0) return;
    size_t kind_end = backing.find('/', root.size());
    size_t name_end = kind_end == std::string::npos ? kind_end : backing.find('/', kind_end + 1);
    if (name_end != std::string::npos) dirs.insert(backing.substr(0, name_end));
  };
  for (const auto& record : DiskRecordFiles(state_dir_, /*with_template_snapshots=*/true)) {
    note_path(JsonField(record, "disk_backing"));
    // A VMM restored from a shared-RAM template maps its RAM file (vm.json).
    note_path(JsonField(record, "ram_source"));
  }
  return dirs;
}

std::string SnapshotDirs::SharedSnapshotOf(const std::string& id) const {
  std::string backing = JsonField(state_dir_ + "/run/" + id + "/vm/vm.json", "disk_backing");
  if (backing.empty()) {
    if (auto m = Read(paused() + "/" + id); m.ok()) backing = m->disk_backing;
  }
  for (const std::string& prefix : {forks() + "/", named() + "/"}) {
    if (backing.rfind(prefix, 0) == 0) return fs::path(backing).parent_path().string();
  }
  return "";
}

std::string ForkOwnerFile(const std::string& dir) { return dir + kForkOwnerSuffix; }

void SnapshotDirs::DeleteForkIfUnused(const std::string& dir) const {
  if (dir.rfind(forks() + "/", 0) != 0) return;  // only fork checkpoints are reference-counted
  // A snapshot of a child (paused, named) or a sandbox of another daemon is
  // layered on it: kept, and removed by a later daemon start's sweep once
  // nothing is.
  if (InUse(dir)) {
    LOG_INFO("fork snapshot {} kept: a snapshot or sandbox is layered on it", dir);
    return;
  }
  if (Status s = Delete(dir); !s.ok()) LOG_WARN("delete fork snapshot {}: {}", dir, s.message());
  std::error_code ec;
  fs::remove(dir + kForkOwnerSuffix, ec);
}

void SnapshotDirs::SweepForks() const {
  // One pass; true when it removed a fork snapshot.
  auto sweep_once = [this]() -> bool {
    std::error_code ec;
    bool removed = false;
    // Every disk and RAM file on this state dir (any daemon's): running,
    // paused, snapshots. Run after the orphan clean-up, so that children a
    // dead daemon was still bringing up no longer count.
    const std::set<std::string> used = LayeredOn();
    std::vector<fs::path> entries;
    for (auto& e : fs::directory_iterator(forks(), ec)) entries.push_back(e.path());
    for (const auto& path : entries) {
      std::string p = path.string();
      if (p.size() > std::strlen(kForkOwnerSuffix) &&
          p.compare(p.size() - std::strlen(kForkOwnerSuffix), std::string::npos, kForkOwnerSuffix) == 0) {
        // An owner file whose fork (committed or not) is gone.
        std::string base = p.substr(0, p.size() - std::strlen(kForkOwnerSuffix));
        if (!fs::exists(base, ec) && !fs::exists(base + ".tmp", ec)) fs::remove(path, ec);
        continue;
      }
      if (used.count(p)) continue;
      std::string base = p.size() > 4 && p.compare(p.size() - 4, 4, ".tmp") == 0 ? p.substr(0, p.size() - 4) : p;
      // A fork of this daemon's registry whose process is gone (this start's
      // predecessor, killed mid-fork): nobody will finish it. Anything else
      // may be a live daemon's fork between its checkpoint and its children.
      RunDirOwner o = ReadOwnerFile(base + kForkOwnerSuffix);
      const bool ours_and_dead = !owner_.empty() && o.registry == owner_ && o.pid > 0 &&
                                 o.pid != ::getpid() && ::kill(o.pid, 0) != 0;
      if (!ours_and_dead) {
        auto age = fs::file_time_type::clock::now() - fs::last_write_time(path, ec);
        if (ec || age < std::chrono::minutes(10)) continue;
      }
      LOG_INFO("removing unused fork snapshot {}", p);
      if (Status st = Delete(p); !st.ok()) LOG_WARN("{}", st.message());
      fs::remove_all(path, ec);
      if (!fs::exists(base, ec) && !fs::exists(base + ".tmp", ec)) fs::remove(base + kForkOwnerSuffix, ec);
      removed = removed || !fs::exists(path, ec);
    }
    return removed;
  };
  // Until a pass removes nothing: a leftover fork whose only user was
  // another leftover (a fork of a fork child, both left by a daemon killed
  // -9) goes at this start, not the next one (issue 32 item 12).
  while (sweep_once()) {
  }
}

bool SnapshotDirs::IsCheckpoint(const std::string& dir) const {
  return !dir.empty() && dir.rfind(checkpoints() + "/", 0) == 0;
}

Status SnapshotDirs::DeleteCheckpointsOf(const std::string& id) const {
  Status first;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(checkpoints(), ec)) {
    std::string sandbox_id, checkpoint_id;
    bool tmp = false;
    if (!ParseCheckpointEntry(e.path().filename().string(), &sandbox_id, &checkpoint_id, &tmp)) continue;
    if (sandbox_id != id) continue;
    Status st = Delete(e.path().string());
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

void SnapshotDirs::SweepCheckpoints(const std::set<std::string>& ours_ids) const {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(checkpoints(), ec)) {
    std::string sandbox_id, checkpoint_id;
    bool tmp = false;
    if (!ParseCheckpointEntry(e.path().filename().string(), &sandbox_id, &checkpoint_id, &tmp)) continue;
    std::error_code run_ec;
    const bool gone = !fs::exists(state_dir_ + "/run/" + sandbox_id, run_ec);
    const bool ours = ours_ids.count(sandbox_id) > 0;
    if (tmp) {
      // A save a daemon died in: ours (nothing of ours is saving while we
      // start), of a sandbox that is gone, or older than any save.
      std::error_code age_ec;
      auto age = fs::file_time_type::clock::now() - fs::last_write_time(e.path(), age_ec);
      if (!(ours || gone || (!age_ec && age > std::chrono::minutes(10)))) continue;
      LOG_WARN("removing uncommitted checkpoint {}", e.path().string());
      fs::remove_all(e.path(), ec);
    } else if (gone) {
      LOG_INFO("removing checkpoint {} of sandbox {}, which is gone", checkpoint_id, sandbox_id);
      if (Status st = Delete(e.path().string()); !st.ok()) LOG_WARN("{}", st.message());
    }
  }
}

StatusOr<std::vector<NamedSnapshotInfo>> SnapshotDirs::ListNamed() const {
  std::vector<NamedSnapshotInfo> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(named(), ec)) {
    std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) continue;
    auto j = ReadNamedSnapshotInfo(e.path().string());
    if (!j.ok() || !Read(e.path().string()).ok()) continue;
    NamedSnapshotInfo i;
    i.snapshot_id = j->value("snapshotID", "");
    if (j->contains("names") && (*j)["names"].is_array()) {
      for (auto& n : (*j)["names"]) {
        if (n.is_string()) i.names.push_back(n.get<std::string>());
      }
    }
    i.team = j->value("team", "");
    if (!j->contains("team") && registry_) {
      // Written before snapshots recorded their team: the owners row's.
      if (auto owner = registry_->OwnerOf(OwnedKind::kSnapshot, i.snapshot_id); owner.ok() && *owner)
        i.team = **owner;
    }
    i.sandbox_id = j->value("sandboxID", "");
    i.created_at_ms = j->value("createdAtMs", int64_t{0});
    i.dir = e.path().string();
    out.push_back(std::move(i));
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) {
    return std::tie(a.created_at_ms, a.snapshot_id) < std::tie(b.created_at_ms, b.snapshot_id);
  });
  return out;
}

std::string SnapshotDirs::FindNamed(const std::string& ref, const std::string& team, bool any_team) const {
  if (!ValidSnapshotName(ref)) return "";
  auto all = ListNamed();
  if (!all.ok()) return "";
  for (auto& s : *all) {
    if (s.snapshot_id == ref && (any_team || s.team == team)) return s.dir;
  }
  if (IsBuiltInTemplateName(ref)) return "";  // a name squatted before names were checked
  for (auto& s : *all) {
    if (s.team != team) continue;  // another team's names are not in this namespace
    for (auto& n : s.names) {
      if (n == ref) return s.dir;
    }
  }
  return "";
}

StatusOr<SnapshotShape> SnapshotDirs::ReadDiskLayer(const std::string& dir) const {
  ASSIGN_OR_RETURN(SnapshotShape shape, Read(dir));
  if (shape.memory_bytes != 0) return FailedPrecondition(dir + " is not a disk-only snapshot");
  return shape;
}

Status SnapshotDirs::ExportDiskLayer(const std::string& dir, const std::string& out) const {
  RETURN_IF_ERROR(ReadDiskLayer(dir).status());
  ASSIGN_OR_RETURN(Runtime * runtime, runtimes_.ForSnapshot(dir));
  return RuntimeOpStatus(runtime->snapshots().ExportDisk(dir, out), runtime->name(), "exporting a disk layer");
}

void SnapshotDirs::SweepUncommitted(const std::set<std::string>& own_ids) const {
  // Removes the entries of `dir` whose name contains `marker` (a save that
  // never committed) and, when `min_age` is non-zero, that are older than it
  // (another daemon may be writing a younger one now) unless `mine` says
  // the entry is this daemon's own (then it is dead: this daemon is starting).
  auto remove_uncommitted = [](const std::string& dir, const char* marker, std::chrono::minutes min_age,
                               const std::function<bool(const std::string&)>& mine = {}) {
    std::error_code ec;
    for (auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.find(marker) == std::string::npos) continue;
      if (min_age.count() > 0 && !(mine && mine(name))) {
        std::error_code age_ec;
        auto age = fs::file_time_type::clock::now() - fs::last_write_time(e.path(), age_ec);
        if (age_ec || age < min_age) continue;
      }
      LOG_WARN("removing uncommitted snapshot {}", e.path().string());
      fs::remove_all(e.path(), ec);
    }
  };
  // Template snapshot builds (a build takes seconds; one older than 10
  // minutes is dead, whichever daemon started it).
  remove_uncommitted(state_dir_ + "/snapshots/templates", ".tmp-", std::chrono::minutes(10));
  // Pauses (<id>.tmp): a sandbox is paused by one daemon only. One of this
  // daemon's sandboxes (its registry's) is dead: it is starting. Another's
  // may be saving now (daemons, and in-process managers, share a state dir).
  remove_uncommitted(paused(), ".tmp", std::chrono::minutes(10), [&own_ids](const std::string& name) {
    return own_ids.count(name.substr(0, name.find(".tmp"))) > 0;
  });
  // Named snapshots a daemon died writing (saved, never renamed into place).
  remove_uncommitted(named(), ".tmp", std::chrono::minutes(10));
}

}  // namespace airlock
