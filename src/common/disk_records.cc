#include "common/disk_records.h"

#include <filesystem>

namespace airlock {
namespace fs = std::filesystem;

std::vector<std::string> DiskRecordFiles(const std::string& state_dir, bool with_template_snapshots) {
  std::vector<std::string> records;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(state_dir + "/run", ec)) records.push_back(e.path().string() + "/vm/vm.json");
  for (const char* kind : {"paused", "forks", "named", "checkpoints", "templates", "layers"}) {
    if (std::string(kind) == "templates" && !with_template_snapshots) continue;
    for (auto& e : fs::directory_iterator(state_dir + "/snapshots/" + kind, ec)) {
      // layers/<owner>/<layer>/ (one directory per daemon registry).
      if (std::string(kind) == "layers") {
        std::error_code ec2;
        for (auto& l : fs::directory_iterator(e.path(), ec2)) records.push_back(l.path().string() + "/manifest.json");
        continue;
      }
      records.push_back(e.path().string() + "/manifest.json");
    }
  }
  return records;
}

}  // namespace airlock
