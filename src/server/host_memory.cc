#include "server/host_memory.h"

#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace airlock::server {

namespace {

// "Key:   1234 kB" lines: calls fn(key, value in kB) for each.
template <typename Fn>
void ForEachKib(std::string_view text, Fn fn) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = line.substr(0, colon);
    std::string_view rest = line.substr(colon + 1);
    size_t start = rest.find_first_not_of(' ');
    if (start == std::string_view::npos) continue;
    rest = rest.substr(start);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (ec != std::errc() || p == rest.data()) continue;
    fn(key, v);
  }
}

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
  ForEachKib(text, [&](std::string_view key, int64_t kib) {
    if (key == "MemTotal") m.total_mib = kib / 1024;
    if (key == "MemAvailable") m.available_mib = kib / 1024;
  });
  return m;
}

StatusOr<VmmMemory> ParseSmapsRollup(std::string_view text) {
  VmmMemory v;
  bool rss = false, priv = false;
  ForEachKib(text, [&](std::string_view key, int64_t kib) {
    if (key == "Rss") v.rss_kib = kib, rss = true;
    if (key == "Pss") v.pss_kib = kib;
    if (key == "Private_Clean") v.private_clean_kib = kib, priv = true;
    if (key == "Private_Dirty") v.private_dirty_kib = kib, priv = true;
  });
  if (!rss || !priv) return InvalidArgument("not a smaps_rollup: no Rss or Private_* line");
  return v;
}

std::unique_ptr<MemoryProbe> ProcMemoryProbe() { return std::make_unique<ProcProbe>(); }

}  // namespace airlock::server
