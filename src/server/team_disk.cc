// TeamDisk (team_disk.h): allocated blocks per team, cached briefly.
#include "server/team_disk.h"

#include <sys/stat.h>

#include <filesystem>
#include <limits>
#include <set>

#include "common/log.h"

namespace airlock::server {

namespace fs = std::filesystem;

int64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return 0;
  if (!S_ISDIR(st.st_mode)) return S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_blocks) * 512 : 0;
  int64_t sum = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) sum += static_cast<int64_t>(st.st_blocks) * 512;
  }
  return sum;
}

void TeamDisk::RefreshLocked() {
  const auto now = o_.now();
  if (valid_ && now - measured_at_ < o_.cache_for) return;
  std::map<std::string, int64_t> usage;
  std::set<std::pair<std::string, std::string>> seen;
  if (o_.list) {
    for (const Holding& h : o_.list()) {
      if (h.path.empty() || !seen.insert({h.team, h.path}).second) continue;
      usage[h.team] += AllocatedBytes(h.path);
    }
  }
  usage_ = std::move(usage);
  measured_at_ = now;
  valid_ = true;
}

int64_t TeamDisk::UsageBytes(const std::string& team) {
  std::lock_guard<std::mutex> l(mu_);
  RefreshLocked();
  auto it = usage_.find(team);
  return it == usage_.end() ? 0 : it->second;
}

Status TeamDisk::Check(const std::string& team) {
  if (!enabled()) return OkStatus();
  const int64_t used = UsageBytes(team);
  if (used < (o_.budget_mib << 20)) return OkStatus();
  return ResourceExhausted("team " + team + " uses " + std::to_string(used >> 20) + " MiB of its " +
                           std::to_string(o_.budget_mib) +
                           " MiB disk budget (uploads, layers, images, checkpoints, paused and named snapshots; "
                           "serve --team-disk-budget): delete some to write more");
}

int64_t TeamDisk::RemainingBytes(const std::string& team) {
  if (!enabled()) return std::numeric_limits<int64_t>::max();
  const int64_t left = (o_.budget_mib << 20) - UsageBytes(team);
  return left > 0 ? left : 0;
}

void TeamDisk::Invalidate() {
  std::lock_guard<std::mutex> l(mu_);
  valid_ = false;
}

Status CheckTeamDisk(TeamDisk* disk, const std::string& team) {
  if (!disk) return OkStatus();
  Status st = disk->Check(team);
  if (!st.ok()) LOG_WARN("team {}: write refused (507): {}", team, st.message());
  return st;
}

}  // namespace airlock::server
