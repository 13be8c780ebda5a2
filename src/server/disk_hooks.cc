// Disk per team (docs/limits.md "Disk per team"): the holdings TeamDisk
// measures and the check the writing routes call (uploads, build starts,
// checkpoints, pauses, named snapshots). The sweep of expired uploads
// (docs/templates.md "Uploads") is TemplateApi's.
#include <filesystem>

#include "common/log.h"
#include "server/server.h"
#include "server/template_api.h"

namespace airlock::server {

namespace fs = std::filesystem;

std::vector<TeamDisk::Holding> DiskHoldingsOf(Manager& manager, TemplateApi* templates) {
  std::vector<TeamDisk::Holding> out;
  // Uploads, layers and images (none before TemplateApi::Open).
  if (templates) out = templates->DiskHoldings();
  // Checkpoints (<sandbox>-<checkpoint id>) and pause snapshots (<sandbox>)
  // are their sandbox's team's.
  std::map<std::string, std::string> team_of;
  for (const auto& sb : manager.List()) {
    const std::string& team = sb->attributes().owner_team;
    if (team.empty()) continue;
    team_of[sb->id()] = team;
    out.push_back({team, manager.snapshot_dirs().paused() + "/" + sb->id()});
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(manager.snapshot_dirs().checkpoints(), ec)) {
    const std::string name = e.path().filename().string();
    const size_t dash = name.find("-ckpt-");
    if (dash == std::string::npos) continue;
    if (auto it = team_of.find(name.substr(0, dash)); it != team_of.end())
      out.push_back({it->second, e.path().string()});
  }
  if (auto named = manager.snapshot_dirs().ListNamed(); named.ok()) {
    for (const auto& s : *named)
      if (!s.team.empty()) out.push_back({s.team, s.dir});
  }
  return out;
}

}  // namespace airlock::server
