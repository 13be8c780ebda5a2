// Named snapshots (spec §1.4 rows 11-13, docs/snapshots.md): a checkpoint of
// a running sandbox kept until deleted, usable as the template of new
// sandboxes (Sandbox.create(snapshotID or name)).
//
//   snapshots/named/<snapshotID>/  memory, disk.qcow2, manifest.json,
//                                  info.json (0600: id, names, team, source
//                                  sandbox, template, env vars, the source's
//                                  token, which the copied agent holds until
//                                  /init rotates it)
// Names live in their team's namespace (docs/security.md): unique within the
// team, never a built-in template's (IsBuiltInTemplateName), and found only
// for that team. Nothing resolves a snapshot implicitly: a create starts
// from one only when its caller found it (SnapshotDirs::FindNamed, for its team)
// and said so (CreateOptions::named_snapshot_dir).
// Written as <snapshotID>.tmp and renamed: a crash leaves no half snapshot.
// A snapshot that sandboxes or other snapshots are layered on cannot be
// deleted (FailedPrecondition; SnapshotDirs::LayeredOn).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/log.h"
#include "core/manager.h"
#include "core/registry.h"
#include "core/sandbox_egress.h"
#include "core/template_runtime.h"
#include "runtime/registry.h"

namespace airlock {
namespace fs = std::filesystem;
StatusOr<NamedSnapshotInfo> Manager::CreateNamedSnapshot(const std::string& id, const std::string& name,
                                                         const std::string& team) {
  if (!name.empty() && !ValidSnapshotName(name)) return InvalidArgument("snapshot name must be 1..128 of [A-Za-z0-9._:-]");
  if (!name.empty() && IsBuiltInTemplateName(name))
    return InvalidArgument("snapshot name '" + name + "' is a built-in template's name");
  if (name.rfind("snap-", 0) == 0) return InvalidArgument("snapshot name '" + name + "' looks like a snapshot id");
  // AlreadyExists when one of the team's snapshots has the name.
  auto name_free = [&]() -> Status {
    if (name.empty()) return OkStatus();
    ASSIGN_OR_RETURN(auto all, snapshot_dirs_->ListNamed());
    for (const auto& s : all) {
      if (s.team == team && std::find(s.names.begin(), s.names.end(), name) != s.names.end())
        return AlreadyExists("a snapshot named '" + name + "' exists");
    }
    return OkStatus();
  };
  RETURN_IF_ERROR(name_free());
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  NamedSnapshotInfo info;
  info.snapshot_id = "snap-" + RandomHex(8);
  if (!name.empty()) info.names.push_back(name);
  info.team = team;
  info.sandbox_id = id;
  info.created_at_ms = NowUnixMs();
  info.dir = snapshot_dirs_->named() + "/" + info.snapshot_id;
  const std::string tmp = info.dir + ".tmp";
  std::lock_guard<std::mutex> op(sb->op_mu_);
  if (sb->state() != SandboxState::kRunning) {
    return FailedPrecondition("sandbox " + id + " is " + std::string(SandboxStateName(sb->state())) +
                              "; only a running sandbox can be snapshotted");
  }
  VmInstance* vm = nullptr;
  {
    std::lock_guard<std::mutex> l(sb->mu_);
    vm = sb->vm_.get();
  }
  if (!vm) return FailedPrecondition("sandbox " + id + " has no VMM");
  std::error_code ec;
  fs::create_directories(snapshot_dirs_->named(), ec);
  if (ec) return Internal("mkdir " + snapshot_dirs_->named() + ": " + ec.message());
  auto saved = vm->SaveSnapshot(tmp, /*keep_running=*/true);  // the sandbox keeps running
  if (!saved.ok()) return RuntimeOpStatus(saved.status(), sb->runtime_, "snapshot", "snapshot " + id);
  nlohmann::json j = {{"snapshotID", info.snapshot_id},    {"names", info.names}, {"team", team}, {"sandboxID", id},
                      {"createdAtMs", info.created_at_ms}, {"template", sb->template_}, {"envVars", sb->env_vars_},
                      {"sourceToken", sb->access_token_}};
  std::string text = j.dump(2);
  Status st;
  {
    int fd = ::open((tmp + "/" + kNamedSnapshotInfoFile).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      st = ErrnoError("create " + tmp + "/" + kNamedSnapshotInfoFile);
    else {
      if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) || ::fsync(fd) != 0)
        st = ErrnoError("write " + tmp + "/" + kNamedSnapshotInfoFile);
      ::close(fd);
    }
  }
  if (st.ok()) {
    // The name is taken at the rename: checked again under one lock, so two
    // snapshots racing for one name of a team cannot both have it.
    static std::mutex names_mu;
    std::lock_guard<std::mutex> names(names_mu);
    st = name_free();
    if (st.ok() && ::rename(tmp.c_str(), info.dir.c_str()) != 0) st = ErrnoError("rename " + tmp);
  }
  if (!st.ok()) {
    fs::remove_all(tmp, ec);
    return st;
  }
  LOG_INFO("sandbox={} snapshot {} created (memory {} B, disk {} B)", id, info.snapshot_id, saved->memory_bytes,
           saved->disk_bytes);
  return info;
}

Status Manager::DeleteNamedSnapshot(const std::string& id_or_name, const std::string& team, bool any_team) {
  std::string dir = snapshot_dirs_->FindNamed(id_or_name, team, any_team);
  if (dir.empty()) return NotFound("snapshot " + id_or_name + " not found");
  int users = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [_, sb] : sandboxes_) users += sb->shared_snapshot_ == dir;
  }
  if (users > 0) {
    return FailedPrecondition("snapshot " + id_or_name + " is the base of " + std::to_string(users) +
                              " sandbox(es); kill them first");
  }
  // Disks layered on it that are not (or no longer) this daemon's sandboxes:
  // a snapshot taken of a sandbox started from it, a fork checkpoint of
  // one, a paused one, another daemon's sandbox.
  if (snapshot_dirs_->InUse(dir)) {
    return FailedPrecondition("snapshot " + id_or_name +
                              " is the base of another snapshot or sandbox (its disk is layered on this one's); "
                              "delete or kill that first");
  }
  auto m = snapshot_dirs_->Read(dir);
  RETURN_IF_ERROR(snapshot_dirs_->Delete(dir));
  // A named snapshot of a fork child was the last thing on its fork
  // checkpoint, perhaps: released (deleted when nothing else is on it).
  if (m.ok()) ReleaseSharedSnapshot(fs::path(m->disk_backing).parent_path().string(), nullptr);
  return OkStatus();
}

StatusOr<std::shared_ptr<Sandbox>> Manager::CreateFromNamedSnapshot(const std::string& dir,
                                                                    const CreateOptions& options) {
  ASSIGN_OR_RETURN(auto j, ReadNamedSnapshotInfo(dir));
  // A snapshot restores on the runtime that wrote it, and no other.
  const std::string runtime = RuntimeOfSnapshot(dir);
  if (!options.runtime.empty() && options.runtime != runtime) {
    return InvalidArgument("snapshot " + options.template_name + " was taken on the " + runtime +
                           " runtime; it cannot start on " + options.runtime);
  }
  ASSIGN_OR_RETURN(auto m, snapshot_dirs_->Read(dir, runtime));
  BringUpPlan plan;
  plan.runtime = runtime;
  plan.source = MachineSource::kNamedSnapshot;
  plan.snapshot_dir = dir;
  plan.shared_snapshot = dir;
  plan.source_token = j.value("sourceToken", "");
  plan.template_name = j.value("snapshotID", options.template_name);
  plan.vcpus = m.vcpus;  // the snapshot's machine shape, whatever the defaults
  plan.memory_mib = m.memory_mib;
  plan.detach = options.detach;
  if (j.contains("envVars") && j["envVars"].is_object()) {
    for (auto& [k, v] : j["envVars"].items()) {
      if (v.is_string()) plan.env_vars[k] = v.get<std::string>();
    }
  }
  plan.attributes = options.attributes;
  std::map<std::string, std::string> recorded = plan.env_vars;  // the snapshot's, then the create's
  for (auto& [k, v] : options.attributes.recorded_env_vars.value_or(options.env_vars)) recorded[k] = v;
  plan.attributes.recorded_env_vars = std::move(recorded);
  for (auto& [k, v] : options.env_vars) plan.env_vars[k] = v;
  plan.egress_policy = options.egress_policy;
  plan.timeout = options.timeout;
  plan.handover = options.handover;
  plan.ready_timeout = std::chrono::seconds(60);
  plan.what = "create from snapshot " + plan.template_name;
  return StartSandbox(std::move(plan));
}

}  // namespace airlock
