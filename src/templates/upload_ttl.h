// The upload TTL (serve --upload-ttl; docs/templates.md "Uploads"): a COPY
// archive uploaded through PUT /upload/{hash} lives `ttl` after its last
// upload, or after the last files link that found it present; then the
// collector removes its file and its row, unless a build that may use it
// is in flight (status "building", or "waiting" once started: every COPY
// filesHash of its spec, under its template's team). A build that starts
// after its archive went fails at its COPY step, saying so.
//
// Times are Unix ms, passed in (no clock of its own). Thread-safe as the
// store is; a removal racing a new upload of the same hash keeps the new
// one (TemplateStore::DeleteFile matches created_at).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "templates/template_store.h"

namespace airlock::templates {

struct UploadSweep {
  int removed = 0;
  int64_t bytes = 0;  // the rows' sizes
};

// (team, files hash) of every COPY step of the builds in flight.
std::set<std::pair<std::string, std::string>> UploadsInUse(TemplateStore& store);

// Removes every upload older than `ttl_ms` at `now_ms` that UploadsInUse
// does not name.
UploadSweep CollectExpiredUploads(TemplateStore& store, int64_t now_ms, int64_t ttl_ms);

}  // namespace airlock::templates
