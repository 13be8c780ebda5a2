// Disk per team and the upload TTL (docs/limits.md "Disk per team",
// docs/templates.md "Uploads"): the holdings TeamDisk measures, the check
// the writing routes call (uploads, build starts, checkpoints, pauses,
// named snapshots), and the sweep of expired uploads (at start, then on the
// key timer).
#include <sys/statvfs.h>

#include <boost/asio/post.hpp>
#include <filesystem>

#include "common/clock.h"
#include "common/log.h"
#include "image/image.h"
#include "server/server.h"
#include "templates/upload_ttl.h"

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
  SweepUploads();
}

std::vector<TeamDisk::Holding> Server::DiskHoldings() {
  std::vector<TeamDisk::Holding> out;
  if (template_store_) {
    if (auto files = template_store_->AllFileRows(); files.ok())
      for (const auto& f : *files) out.push_back({f.team, f.path});
    if (auto layers = template_store_->AllLayers(); layers.ok())
      for (const auto& l : *layers) out.push_back({l.team, l.dir});
    if (auto images = template_store_->TeamImages(); images.ok()) {
      for (const auto& [team, name] : *images) {
        if (auto img = image::FindImage(config_.manager.state_dir, name); img.ok()) out.push_back({team, img->rootfs});
      }
    }
  }
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

Status Server::CheckTeamDisk(const std::string& team) {
  if (!team_disk_) return OkStatus();
  Status st = team_disk_->Check(team);
  if (!st.ok()) LOG_WARN("team {}: write refused (507): {}", team, st.message());
  return st;
}

void Server::MaybeSweepUploads() {
  if (config_.upload_ttl_s <= 0 || !template_store_) return;
  const int64_t now = NowUnixMs();
  if (now < next_upload_sweep_ms_) return;
  // A quarter of the TTL, between 1 s and 10 min: an upload goes at most that late.
  next_upload_sweep_ms_ = now + std::clamp<int64_t>(config_.upload_ttl_s * 250, 1000, 600000);
  if (upload_sweep_in_flight_.exchange(true)) return;
  asio::post(*workers_, [this] {
    SweepUploads();
    upload_sweep_in_flight_ = false;
  });
}

void Server::SweepUploads() {
  if (config_.upload_ttl_s <= 0 || !template_store_) return;
  std::lock_guard<std::mutex> l(upload_mu_);
  auto sweep = templates::CollectExpiredUploads(*template_store_, NowUnixMs(), config_.upload_ttl_s * 1000);
  if (sweep.removed == 0) return;
  if (team_disk_) team_disk_->Invalidate();
  Audit({{"action", "template.uploads_expired"}, {"count", sweep.removed}, {"bytes", sweep.bytes}});
}

}  // namespace airlock::server
