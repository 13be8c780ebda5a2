#include "control/host_memory.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

#include "common/proc_fields.h"

namespace airlock::control {

namespace {

StatusOr<std::string> ReadProcFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    int e = errno;
    if (e == ENOENT || e == ESRCH) return NotFound(path + ": no such process");
    return ErrnoError("open " + path);
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return ErrnoError("read " + path);
  return ss.str();
}

class ProcProbe : public MemoryProbe {
 public:
  HostMemInfo ReadMemInfo() override {
    auto t = ReadProcFile("/proc/meminfo");
    return t.ok() ? ParseMemInfo(*t) : HostMemInfo{};
  }
  StatusOr<VmmMemory> ReadVmm(pid_t pid) override {
    ASSIGN_OR_RETURN(std::string t, ReadProcFile("/proc/" + std::to_string(pid) + "/smaps_rollup"));
    if (t.empty()) return NotFound("/proc/" + std::to_string(pid) + "/smaps_rollup: empty (process exiting)");
    return ParseSmapsRollup(t);
  }
  Status SetOomScoreAdj(pid_t pid, int adj) override {
    std::string path = "/proc/" + std::to_string(pid) + "/oom_score_adj";
    std::ofstream f(path);
    if (!f) return ErrnoError("open " + path);
    f << adj << std::flush;
    if (!f) return ErrnoError("write " + path);
    return OkStatus();
  }
};

}  // namespace

HostMemInfo ParseMemInfo(std::string_view text) {
  HostMemInfo m;
  auto kib = ParseProcKib(text);
  if (auto it = kib.find("MemTotal"); it != kib.end()) m.total_mib = static_cast<int64_t>(it->second / 1024);
  if (auto it = kib.find("MemAvailable"); it != kib.end()) m.available_mib = static_cast<int64_t>(it->second / 1024);
  return m;
}

StatusOr<VmmMemory> ParseSmapsRollup(std::string_view text) {
  VmmMemory v;
  auto kib = ParseProcKib(text);
  auto field = [&](std::string_view key, int64_t& out) {
    auto it = kib.find(key);
    if (it == kib.end()) return false;
    out = static_cast<int64_t>(it->second);
    return true;
  };
  const bool rss = field("Rss", v.rss_kib);
  field("Pss", v.pss_kib);
  const bool clean = field("Private_Clean", v.private_clean_kib);
  const bool dirty = field("Private_Dirty", v.private_dirty_kib);
  if (!rss || !(clean || dirty)) return InvalidArgument("not a smaps_rollup: no Rss or Private_* line");
  return v;
}

std::unique_ptr<MemoryProbe> ProcMemoryProbe() { return std::make_unique<ProcProbe>(); }

}  // namespace airlock::control
