// The upload TTL's collector (upload_ttl.h).
#include "templates/upload_ttl.h"

#include <unistd.h>

#include "common/log.h"
#include "templates/build_spec.h"

namespace airlock::templates {

std::set<std::pair<std::string, std::string>> UploadsInUse(TemplateStore& store) {
  std::set<std::pair<std::string, std::string>> out;
  for (const char* status : {kBuilding, kWaiting}) {
    auto builds = store.BuildsWithStatus(status);
    if (!builds.ok()) continue;
    for (const BuildRow& b : *builds) {
      if (!b.started && b.status == kWaiting) continue;  // no spec yet: its trigger checks again
      auto tmpl = store.GetTemplate(b.template_id);
      auto spec = ParseBuildStart(b.spec);
      if (!tmpl.ok() || !spec.ok()) continue;
      for (const Step& s : spec->steps) {
        if (!s.files_hash.empty()) out.insert({tmpl->team, s.files_hash});
      }
    }
  }
  return out;
}

UploadSweep CollectExpiredUploads(TemplateStore& store, int64_t now_ms, int64_t ttl_ms) {
  UploadSweep sweep;
  if (ttl_ms <= 0) return sweep;
  auto rows = store.AllFileRows();
  if (!rows.ok()) {
    LOG_WARN("template uploads: {}", rows.status().message());
    return sweep;
  }
  std::set<std::pair<std::string, std::string>> in_use;
  bool in_use_read = false;
  for (const FileRow& f : *rows) {
    if (now_ms - f.created_at_ms < ttl_ms) continue;
    if (!in_use_read) {  // read once, and only when something expired
      in_use = UploadsInUse(store);
      in_use_read = true;
    }
    if (in_use.count({f.team, f.hash})) continue;
    if (Status st = store.DeleteFile(f.team, f.hash, f.created_at_ms); !st.ok()) {
      LOG_WARN("template uploads: {}", st.message());
      continue;
    }
    // Another row (a new upload of the hash since) keeps its file: the same path.
    if (store.FindFile(f.team, f.hash).ok()) continue;
    ::unlink(f.path.c_str());
    LOG_INFO("template uploads: removed {} of team {} ({} bytes, past the upload TTL)", f.hash, f.team, f.size);
    sweep.removed++;
    sweep.bytes += f.size;
  }
  return sweep;
}

}  // namespace airlock::templates
