// Disk per team (docs/limits.md "Disk per team"): the holdings TeamDisk
// measures and the check the writing routes call (uploads, build starts,
// checkpoints, pauses, named snapshots). The sweep of expired uploads
// (docs/templates.md "Uploads") is TemplateApi's.
#include <sys/statvfs.h>

#include <filesystem>

#include "common/log.h"
#include "server/server.h"

namespace airlock::server {

namespace fs = std::filesystem;

namespace {

// serve --team-disk-budget -1: a quarter of the state dir's filesystem, at least 4 GiB.
int64_t DefaultTeamDiskBudgetMib(const std::string& state_dir) {
  struct statvfs vfs;
  if (::statvfs(state_dir.c_str(), &vfs) != 0) return 4096;
  const int64_t total_mib = static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize) >> 20;
  return std::max<int64_t>(4096, total_mib / 4);
}

}  // namespace

void Server::InitTeamDisk() {
  TeamDisk::Options o;
  o.budget_mib = config_.team_disk_budget_mib < 0 ? DefaultTeamDiskBudgetMib(config_.manager.state_dir)
                                                  : config_.team_disk_budget_mib;
  o.list = [this] { return DiskHoldings(); };
  team_disk_ = std::make_unique<TeamDisk>(std::move(o));
  if (team_disk_->enabled()) LOG_INFO("disk budget per team: {} MiB", team_disk_->budget_mib());
}

std::vector<TeamDisk::Holding> Server::DiskHoldings() {
  std::vector<TeamDisk::Holding> out;
  // Uploads, layers and images (none before TemplateApi::Open).
  if (templates_) out = templates_->DiskHoldings();
  // Checkpoints (<sandbox>-<checkpoint id>) and pause snapshots (<sandbox>)
  // are their sandbox's team's.
  std::map<std::string, std::string> team_of;
  for (const auto& sb : manager_->List()) {
    const std::string& team = sb->attributes().owner_team;
    if (team.empty()) continue;
    team_of[sb->id()] = team;
    out.push_back({team, manager_->paused_dir() + "/" + sb->id()});
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(manager_->checkpoints_dir(), ec)) {
    const std::string name = e.path().filename().string();
    const size_t dash = name.find("-ckpt-");
    if (dash == std::string::npos) continue;
    if (auto it = team_of.find(name.substr(0, dash)); it != team_of.end())
      out.push_back({it->second, e.path().string()});
  }
  if (auto named = manager_->ListNamedSnapshots(); named.ok()) {
    for (const auto& s : *named)
      if (!s.team.empty()) out.push_back({s.team, s.dir});
  }
  return out;
}

}  // namespace airlock::server
