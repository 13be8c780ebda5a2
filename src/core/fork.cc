// Fork (Manager::Fork, docs/snapshots.md): one checkpoint of a running
// sandbox, N restores of it.
//
//   parent (keeps running) ──checkpoint──▶ snapshots/forks/<parent>-<rand>/
//                                             ram, memory, disk.qcow2 (read-only)
//   child k: own netns al-<child>, overlay.qcow2 ─backing─▶ forks/.../disk.qcow2
//                                  RAM mapped copy-on-write ─▶ forks/.../ram
//
// Disk: shared copy-on-write (qcow2 backing chain). Memory: the parent's RAM
// is saved once into the fork's `ram` file, which every child maps
// copy-on-write (SnapshotMemory::kSharedByRestores; docs/snapshots.md "RAM
// deltas and fork files"). The guest address is 169.254.0.21 in every netns, so a
// child needs no network rewrite, only a new tap in its own netns.
// Each child gets in /init: a new token (rotated with the parent's), its id
// as hostname, the time and fresh entropy.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/disk_records.h"
#include "common/log.h"
#include "core/manager.h"
#include "core/registry.h"
#include "core/sandbox_egress.h"

namespace airlock {
namespace fs = std::filesystem;
namespace {

constexpr int kMaxForks = 16;
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

StatusOr<std::vector<StatusOr<std::shared_ptr<Sandbox>>>> Manager::Fork(const std::string& id, int count,
                                                                        const ForkOptions& options) {
  if (count < 1 || count > kMaxForks) return InvalidArgument("count must be 1.." + std::to_string(kMaxForks));
  std::shared_ptr<Sandbox> parent = Get(id);
  if (!parent) return NotFound("sandbox " + id + " not found");
  const std::string dir = forks_dir() + "/" + id + "-" + RandomHex(4);
  {
    std::lock_guard<std::mutex> op(parent->op_mu_);
    if (parent->state() != SandboxState::kRunning) {
      return FailedPrecondition("sandbox " + id + " is " + std::string(SandboxStateName(parent->state())) +
                                "; only a running sandbox can be forked");
    }
    VmInstance* vm = nullptr;
    {
      std::lock_guard<std::mutex> l(parent->mu_);
      vm = parent->vm_.get();
    }
    if (!vm) return FailedPrecondition("sandbox " + id + " has no VMM");
    std::error_code ec;
    fs::create_directories(forks_dir(), ec);
    if (ec) return Internal("mkdir " + forks_dir() + ": " + ec.message());
    // Whose fork this is (<dir>.owner: pid, registry), written first, so that
    // a daemon killed at any moment of the fork is followed by one that
    // removes what it left at once instead of after the 10 minutes a fork of
    // a live daemon may take (SweepForkSnapshots).
    if (!config_.owner.empty()) WriteOwnerFile(dir + kForkOwnerSuffix, config_.owner);
    // The checkpoint: the parent is stopped for the save only and continues.
    // Its RAM becomes a file of the fork's own that every child maps
    // copy-on-write: the children share each page none of them writes.
    auto info = vm->SaveSnapshot(dir + ".tmp", /*keep_running=*/true, SnapshotMemory::kSharedByRestores);
    if (!info.ok()) {
      fs::remove(dir + kForkOwnerSuffix, ec);
      return RuntimeOpStatus(info.status(), parent->runtime_, "fork", "fork " + id);
    }
    if (::rename((dir + ".tmp").c_str(), dir.c_str()) != 0) {
      Status s = ErrnoError("rename " + dir + ".tmp");
      fs::remove_all(dir + ".tmp", ec);
      fs::remove(dir + kForkOwnerSuffix, ec);
      return s;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    forks_in_progress_.insert(dir);  // a child failing early must not delete it under its siblings
  }
  std::vector<StatusOr<std::shared_ptr<Sandbox>>> out(static_cast<size_t>(count), Internal("not started"));
  std::vector<std::thread> threads;
  for (int k = 0; k < count; ++k) {
    auto start_child = [this, k, &out, &parent, &dir, &options] {
      // Its own id, token, network; the parent's shape, env and policy (at
      // fork time); its disk layered on the checkpoint, shared with siblings.
      BringUpPlan plan = PlanOf(*parent);
      plan.id.clear();  // a new id and token (StartSandbox)
      plan.access_token.clear();
      plan.source = MachineSource::kForkSnapshot;
      plan.snapshot_dir = dir;
      plan.shared_snapshot = dir;
      plan.source_token = parent->access_token_;
      plan.ready_timeout = std::chrono::seconds(60);
      plan.what = "fork child " + std::to_string(k) + " of " + parent->id_;
      // The parent's attributes, with a traffic token of its own.
      plan.attributes = parent->attributes();
      {
        std::lock_guard<std::mutex> l(parent->mu_);
        plan.attributes.recorded_env_vars = parent->recorded_env_;
      }
      if (!plan.attributes.traffic_token.empty()) plan.attributes.traffic_token = RandomHex(32);
      plan.timeout = options.timeout;
      plan.handover = options.handover;
      out[k] = StartSandbox(std::move(plan));
      if (out[k].ok()) (*out[k])->AddLog("info", "forked from " + parent->id_);
    };
    // A VMM that is not detached dies with the thread that started it
    // (PR_SET_PDEATHSIG): such children start one after the other here.
    if (parent->detach_)
      threads.emplace_back(start_child);
    else
      start_child();
  }
  for (auto& t : threads) t.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    forks_in_progress_.erase(dir);
  }
  ReleaseSharedSnapshot(dir, nullptr);  // deleted here when no child started
  return out;
}

void Manager::ReleaseSharedSnapshot(const std::string& dir, const Sandbox* except) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (forks_in_progress_.count(dir)) return;
    for (auto& [_, sb] : sandboxes_) {
      if (sb.get() != except && sb->shared_snapshot_ == dir) return;  // still in use
    }
  }
  if (dir.rfind(forks_dir() + "/", 0) != 0) return;  // only fork checkpoints are reference-counted
  // A snapshot of a child (paused, named) or a sandbox of another daemon is
  // layered on it: kept, and removed by a later daemon start's sweep once
  // nothing is.
  if (SnapshotDirsLayeredOn().count(dir)) {
    LOG_INFO("fork snapshot {} kept: a snapshot or sandbox is layered on it", dir);
    return;
  }
  if (Status s = DeleteSnapshot(dir); !s.ok()) LOG_WARN("delete fork snapshot {}: {}", dir, s.message());
  std::error_code ec;
  fs::remove(dir + kForkOwnerSuffix, ec);
}

std::string Manager::ForkSnapshotOf(const std::string& id) const {
  std::string backing = JsonField(config_.state_dir + "/run/" + id + "/vm/vm.json", "disk_backing");
  if (backing.empty()) {
    if (auto m = ReadSnapshot(paused_dir() + "/" + id); m.ok()) backing = m->disk_backing;
  }
  for (const std::string& prefix : {forks_dir() + "/", named_dir() + "/"}) {
    if (backing.rfind(prefix, 0) == 0) return fs::path(backing).parent_path().string();
  }
  return "";
}

std::set<std::string> Manager::SnapshotDirsLayeredOn() const {
  std::set<std::string> dirs;
  const std::string root = config_.state_dir + "/snapshots/";
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
  for (const auto& record : DiskRecordFiles(config_.state_dir, /*with_template_snapshots=*/true)) {
    note_path(JsonField(record, "disk_backing"));
    // A VMM restored from a shared-RAM template maps its RAM file (vm.json).
    note_path(JsonField(record, "ram_source"));
  }
  return dirs;
}

void Manager::SweepForkSnapshots() {
  // One pass; true when it removed a fork snapshot.
  auto sweep_once = [this]() -> bool {
    std::error_code ec;
    bool removed = false;
    // Every disk and RAM file on this state dir (any daemon's): running,
    // paused, snapshots. Run after the orphan clean-up, so that children a
    // dead daemon was still bringing up no longer count.
    const std::set<std::string> used = SnapshotDirsLayeredOn();
    std::vector<fs::path> entries;
    for (auto& e : fs::directory_iterator(forks_dir(), ec)) entries.push_back(e.path());
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
      const bool ours_and_dead = !config_.owner.empty() && o.registry == config_.owner && o.pid > 0 &&
                                 o.pid != ::getpid() && ::kill(o.pid, 0) != 0;
      if (!ours_and_dead) {
        auto age = fs::file_time_type::clock::now() - fs::last_write_time(path, ec);
        if (ec || age < std::chrono::minutes(10)) continue;
      }
      LOG_INFO("removing unused fork snapshot {}", p);
      if (Status st = DeleteSnapshot(p); !st.ok()) LOG_WARN("{}", st.message());
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

}  // namespace airlock
