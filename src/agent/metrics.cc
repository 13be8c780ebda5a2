// GET /metrics (spec §4): {ts, cpu_count, cpu_used_pct, mem_total, mem_used,
// mem_cache, mem_total_mib, mem_used_mib, disk_used, disk_total}; memory and
// disk in bytes, cpu_used_pct since the previous call (since boot at first).
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "agent/agent.h"
#include "envd/messages.h"

namespace airlock::agent {
namespace {

struct CpuSample {
  unsigned long long busy = 0, total = 0;
};

CpuSample ReadCpu() {
  CpuSample s;
  std::ifstream f("/proc/stat");
  std::string cpu;
  unsigned long long v[10] = {};
  if (!(f >> cpu) || cpu != "cpu") return s;
  for (auto& x : v) {
    if (!(f >> x)) break;
  }
  // user nice system idle iowait irq softirq steal (guest is inside user)
  unsigned long long idle = v[3] + v[4];
  for (int i = 0; i < 8; ++i) s.total += v[i];
  s.busy = s.total - idle;
  return s;
}

unsigned long long MeminfoKb(const std::string& text, const char* key) {
  std::string k = std::string(key) + ":";
  size_t p = 0;
  while (p < text.size()) {
    if (text.compare(p, k.size(), k) == 0) return std::strtoull(text.c_str() + p + k.size(), nullptr, 10);
    p = text.find('\n', p);
    if (p == std::string::npos) break;
    ++p;
  }
  return 0;
}

CpuSample g_last;

}  // namespace

std::string MetricsJson() {
  CpuSample now = ReadCpu();
  double pct = 0;
  if (now.total > g_last.total) {
    pct = 100.0 * static_cast<double>(now.busy - g_last.busy) / static_cast<double>(now.total - g_last.total);
  }
  g_last = now;
  std::ifstream mf("/proc/meminfo");
  std::stringstream ss;
  ss << mf.rdbuf();
  std::string mem = ss.str();
  unsigned long long total = MeminfoKb(mem, "MemTotal") * 1024;
  unsigned long long avail = MeminfoKb(mem, "MemAvailable") * 1024;
  unsigned long long cached = MeminfoKb(mem, "Cached") * 1024;
  unsigned long long used = total > avail ? total - avail : 0;
  struct statfs fs {};
  unsigned long long disk_total = 0, disk_used = 0;
  if (statfs("/", &fs) == 0) {
    disk_total = static_cast<unsigned long long>(fs.f_blocks) * fs.f_frsize;
    disk_used = static_cast<unsigned long long>(fs.f_blocks - fs.f_bfree) * fs.f_frsize;
  }
  envd::OJson j = envd::OJson::object();
  j["ts"] = static_cast<long long>(time(nullptr));
  j["cpu_count"] = sysconf(_SC_NPROCESSORS_ONLN);
  j["cpu_used_pct"] = static_cast<double>(static_cast<long long>(pct * 100)) / 100.0;
  j["mem_total"] = total;
  j["mem_used"] = used;
  j["mem_cache"] = cached;
  j["mem_total_mib"] = total >> 20;
  j["mem_used_mib"] = used >> 20;
  j["disk_used"] = disk_used;
  j["disk_total"] = disk_total;
  return envd::Dump(j);
}

}  // namespace airlock::agent
