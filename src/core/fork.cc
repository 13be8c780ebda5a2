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


}  // namespace

StatusOr<std::vector<StatusOr<std::shared_ptr<Sandbox>>>> Manager::Fork(const std::string& id, int count,
                                                                        const ForkOptions& options) {
  if (count < 1 || count > kMaxForks) return InvalidArgument("count must be 1.." + std::to_string(kMaxForks));
  std::shared_ptr<Sandbox> parent = Get(id);
  if (!parent) return NotFound("sandbox " + id + " not found");
  const std::string dir = snapshot_dirs_->forks() + "/" + id + "-" + RandomHex(4);
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
    fs::create_directories(snapshot_dirs_->forks(), ec);
    if (ec) return Internal("mkdir " + snapshot_dirs_->forks() + ": " + ec.message());
    // Whose fork this is (<dir>.owner: pid, registry), written first, so that
    // a daemon killed at any moment of the fork is followed by one that
    // removes what it left at once instead of after the 10 minutes a fork of
    // a live daemon may take (SnapshotDirs::SweepForks).
    if (!config_.owner.empty()) WriteOwnerFile(ForkOwnerFile(dir), config_.owner);
    const char* what = options.keep_memory ? "fork" : "fork without memory";
    // The filesystem only, as a pause without memory (snapshots.cc).
    bool exported = false;
    if (!options.keep_memory) {
      auto prepared = PrepareSaveWithoutMemory(*parent, dir + ".tmp");
      if (!prepared.ok()) {
        fs::remove_all(dir + ".tmp", ec);
        fs::remove(ForkOwnerFile(dir), ec);
        return RuntimeOpStatus(prepared.status(), parent->runtime_, what, "fork " + id);
      }
      exported = *prepared;
    }
    // The checkpoint: the parent is stopped for the save only and continues.
    // Its RAM becomes a file of the fork's own that every child maps
    // copy-on-write: the children share each page none of them writes.
    auto info = vm->SaveSnapshot(dir + ".tmp", /*keep_running=*/true,
                                 exported ? SnapshotMemory::kNone : SnapshotMemory::kSharedByRestores);
    if (info.ok() && !options.keep_memory && !exported) {
      auto runtime = RuntimeNamed(parent->runtime_);
      Status dropped = runtime.ok() ? (*runtime)->snapshots().DropMemory(dir + ".tmp") : runtime.status();
      if (!dropped.ok()) info = dropped;
    }
    if (!info.ok()) {
      fs::remove_all(dir + ".tmp", ec);
      fs::remove(ForkOwnerFile(dir), ec);
      return RuntimeOpStatus(info.status(), parent->runtime_, what, "fork " + id);
    }
    if (::rename((dir + ".tmp").c_str(), dir.c_str()) != 0) {
      Status s = ErrnoError("rename " + dir + ".tmp");
      fs::remove_all(dir + ".tmp", ec);
      fs::remove(ForkOwnerFile(dir), ec);
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
      plan.snapshot_memory = options.keep_memory;  // false: the child boots on the parent's disk
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
  snapshot_dirs_->DeleteForkIfUnused(dir);
}

}  // namespace airlock
