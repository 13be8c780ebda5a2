#include "common/proc_fields.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace airlock {

std::map<std::string, uint64_t, std::less<>> ParseProcKib(std::string_view text) {
  std::map<std::string, uint64_t, std::less<>> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view rest = line.substr(colon + 1);
    size_t start = rest.find_first_not_of(" \t");
    if (start == std::string_view::npos) continue;
    rest = rest.substr(start);
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (ec != std::errc() || p == rest.data()) continue;
    out[std::string(line.substr(0, colon))] = v;
  }
  return out;
}

std::map<std::string, uint64_t, std::less<>> ReadSmapsRollupKib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ParseProcKib(ss.str());
}

std::string KernelBootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

}  // namespace airlock
