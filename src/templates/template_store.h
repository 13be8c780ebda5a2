// TemplateStore: the durable state of custom templates, in the daemon's
// SQLite database (the registry's file, its own connection, WAL):
// templates and their aliases, builds with their ordered logs, the history
// of tag assignments, uploaded COPY archives per team, and the layer index
// per team (step hash -> layer directory). Layout and semantics follow
// shared/spec/e2b-templates.md §A.3, §A.7, §A.8; docs/templates.md. In a
// cluster, ExportTemplate/ImportTemplate (template_bundle.cc) carry a
// template to the other nodes and an observer hears of every change
// (docs/multinode.md).
//
// Thread-safe (one connection behind a mutex). Times are Unix ms. Errors:
// NotFound for missing rows, AlreadyExists/PermissionDenied where the E2B
// API answers 409/403, Internal with the SQLite message otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

struct sqlite3;

namespace airlock::templates {

// Build statuses as the API shows them (§A.3.5).
inline constexpr char kWaiting[] = "waiting";
inline constexpr char kBuilding[] = "building";
inline constexpr char kReady[] = "ready";
inline constexpr char kError[] = "error";

struct TemplateRow {
  std::string id;
  std::string team;
  bool is_public = false;
  int64_t created_at_ms = 0, updated_at_ms = 0;
  int64_t spawn_count = 0, last_spawned_at_ms = 0;  // 0: never
  std::vector<std::string> aliases;                 // sorted
};

struct BuildRow {
  std::string id;  // UUID v4
  std::string template_id;
  std::string status;  // kWaiting | kBuilding | kReady | kError
  int cpu_count = 2, memory_mb = 1024, disk_mb = 0;
  int64_t created_at_ms = 0, updated_at_ms = 0, finished_at_ms = 0;
  bool started = false;         // the trigger came (POST /v2/templates/{id}/builds/{bid})
  nlohmann::json spec;          // the trigger's body (TemplateBuildStartV2), null before
  nlohmann::json reason;        // {"message","step"} on error, null otherwise
  std::string image;            // the guest image (image::FindImage name) of a ready build
  std::string final_layer;      // directory of the build's last layer (fromTemplate starts there)
  nlohmann::json final_context; // BuildContext + {"startCmd","readyCmd"} a child inherits
  std::vector<std::string> requested_tags;
};

struct LogEntry {
  int64_t ts_ms = 0;
  std::string level;  // debug | info | warn | error
  std::string message;
  std::string step;   // "" | "base" | "1".."N" | "finalize"
};

struct LayerRow {
  std::string team, hash, dir, parent_dir;  // parent "" = on the base image
  nlohmann::json context;                   // BuildContext after the step
  int64_t created_at_ms = 0;
};

// An uploaded COPY archive (template_files). created_at: its last upload,
// or the last files link that found it present (the upload TTL counts from
// there, upload_ttl.h).
struct FileRow {
  std::string team, hash, path;
  int64_t size = 0, created_at_ms = 0;
};

struct TagRow {
  std::string tag, build_id;
  int64_t created_at_ms = 0;
};

struct RequestedBuild {
  std::string template_id, build_id;
  std::vector<std::string> tags;  // the set assigned (["default"] when none)
  std::string alias;
  bool is_public = false;
};

class TemplateStore {
 public:
  static StatusOr<std::unique_ptr<TemplateStore>> Open(const std::string& path);
  ~TemplateStore();

  // POST /v3/templates: the template of `alias` in `team`'s namespace
  // (reused when the team has it; another team's "app" is another
  // template and is never revealed; AlreadyExists when the alias is a
  // template's id), a new waiting build, and its tag assignments.
  // Older never-started builds of the template are failed as superseded.
  StatusOr<RequestedBuild> RequestBuild(const std::string& team, const std::string& alias,
                                        const std::vector<std::string>& tags, int cpu_count, int memory_mb,
                                        int disk_mb, const std::string& new_template_id);
  StatusOr<TemplateRow> GetTemplate(const std::string& id);
  // The template `alias` names in `team`'s namespace; NotFound when none.
  StatusOr<std::string> FindAlias(const std::string& team, const std::string& alias);
  StatusOr<std::vector<TemplateRow>> ListTemplates(const std::string& team, bool all_teams);
  Status SetPublic(const std::string& id, bool is_public);
  Status CountSpawn(const std::string& id);
  // Removes the template, its aliases, tags, builds and logs; returns its
  // builds (their images go next).
  StatusOr<std::vector<BuildRow>> DeleteTemplate(const std::string& id);

  StatusOr<BuildRow> GetBuild(const std::string& build_id);
  StatusOr<std::vector<BuildRow>> BuildsOf(const std::string& template_id);
  StatusOr<std::vector<BuildRow>> BuildsWithStatus(const std::string& status);
  // The trigger: records the spec, started=1. FailedPrecondition when the
  // build was started before or is no longer waiting.
  Status StartBuild(const std::string& build_id, const nlohmann::json& spec);
  Status SetStatus(const std::string& build_id, const std::string& status);
  Status FinishBuild(const BuildRow& row);  // status, reason, image, final_layer, final_context
  Status AppendLog(const std::string& build_id, const LogEntry& e);
  // Entries [offset, offset + limit) of the build's log, in order.
  StatusOr<std::vector<LogEntry>> Logs(const std::string& build_id, int64_t offset, int64_t limit);

  // Tags: history of assignments (a removal is an assignment to "").
  Status AssignTags(const std::string& template_id, const std::string& build_id, const std::vector<std::string>& tags);
  Status RemoveTags(const std::string& template_id, const std::vector<std::string>& tags);
  // The latest assignment of each tag that still points at a build.
  StatusOr<std::vector<TagRow>> TagsOf(const std::string& template_id);
  // The ready build `tag` ("" = default; a UUID = that build) serves:
  // the newest assignment whose build is ready (a removal ends the search).
  StatusOr<BuildRow> ResolveTag(const std::string& template_id, const std::string& tag);

  // COPY archives, per team and files hash.
  Status PutFile(const std::string& team, const std::string& hash, const std::string& path, int64_t size);
  // The archive's path; NotFound when no row names it or its file is gone
  // (collected after the upload TTL, removed by hand).
  StatusOr<std::string> FindFile(const std::string& team, const std::string& hash);
  StatusOr<std::vector<std::string>> AllFiles();
  StatusOr<std::vector<FileRow>> AllFileRows();
  // The upload TTL starts again (a files link found it present).
  Status TouchFile(const std::string& team, const std::string& hash, int64_t now_ms);
  // Removes the row only when its created_at is still `created_at_ms` (an
  // upload of the same hash since then keeps it). OK when absent.
  Status DeleteFile(const std::string& team, const std::string& hash, int64_t created_at_ms);
  // (team, image) of every build with an image: what the team's templates
  // hold on disk besides their layers (team_disk.h).
  StatusOr<std::vector<std::pair<std::string, std::string>>> TeamImages();

  // The layer index (per team).
  StatusOr<LayerRow> FindLayer(const std::string& team, const std::string& hash);
  Status PutLayer(const LayerRow& row);
  StatusOr<std::vector<LayerRow>> AllLayers();
  Status DeleteLayer(const std::string& team, const std::string& hash);

  // ---- a template across a cluster's nodes (template_bundle.cc;
  // docs/multinode.md) ----
  // A template as another node needs it to start it:
  //   {"version":1,
  //    "template":{"id","team","public","createdAt","updatedAt","aliases":[..]},
  //    "builds":[every ready build with an image, oldest first: {"id",
  //      "cpuCount","memoryMB","diskMB","createdAt","updatedAt","finishedAt",
  //      "image","finalContext"}],
  //    "tags":[{"tag","buildID","createdAt"}, by tag: for each tag, the
  //      assignment ResolveTag answers with (the newest whose build is
  //      ready; none after a removal)]}
  // Times are Unix ms; finalContext is BuildRow::final_context (null when
  // none). NotFound when the template is gone.
  StatusOr<nlohmann::json> ExportTemplate(const std::string& template_id);
  // Makes this store hold the bundle's template as exported, so ResolveBuild
  // and ResolveTag answer as on the node that exported it:
  // - the template row (team, public, created/updated times; its spawn
  //   counts stay this node's);
  // - its aliases become the bundle's, in its team's namespace (an alias
  //   held by ANOTHER local template of that team is taken from it);
  // - its builds are upserted by id as ready and started (counts, times,
  //   image, finalContext); builds of the template not in the bundle are
  //   left alone (a local build in progress);
  // - its tag assignments are replaced by the bundle's (in createdAt order),
  //   except those of a local build still waiting or building, kept after
  //   them (it takes its tags when it is ready, as it would have).
  // Validates every shape first: version 1; ids as the store makes them
  // (a template id [a-z0-9]{1,64}, build ids lower-case UUIDs, unique);
  // the team as API keys have it; aliases [a-z0-9_-]{1,128} and tags as
  // RequestBuild allows them (not UUIDs); every tag's build in "builds";
  // images [a-z0-9_-]{1,64}; non-negative integer counts and times;
  // finalContext an object or null; unknown fields are ignored.
  // InvalidArgument for a malformed bundle, FailedPrecondition when one of
  // its build ids is another local template's: nothing written then. One
  // transaction. Does not call the observer (SetOnChange).
  Status ImportTemplate(const nlohmann::json& bundle);
  // The observer: called after each committed change to a template
  // (RequestBuild, SetPublic, DeleteTemplate of a template that was there,
  // StartBuild, SetStatus, FinishBuild, AssignTags, RemoveTags) with its
  // template id, on the caller's thread, outside the store's lock (it may
  // call the store). One observer; set it before the store is used.
  void SetOnChange(std::function<void(const std::string& template_id)> fn);

 private:
  TemplateStore() = default;
  void Changed(const std::string& template_id) {
    if (on_change_) on_change_(template_id);
  }
  // The template of a build ("" when none), under mu_.
  std::string TemplateOfLocked(const std::string& build_id);
  Status Exec(const std::string& sql, const char* what);
  Status Err(const char* what);
  StatusOr<BuildRow> GetBuildLocked(const std::string& build_id);
  sqlite3* db_ = nullptr;
  std::mutex mu_;
  std::function<void(const std::string&)> on_change_;
};

}  // namespace airlock::templates

namespace airlock::templates {

// A reference as Sandbox.create, fromTemplate and the template routes take
// it (§A.8): "alias", "alias:tag", "ns/alias[:tag]", or a template id, with
// an optional ":tag" (a UUID tag pins that build). A bare alias is looked up
// in `team`'s namespace only; "ns/alias" in team ns's (another team's
// template is seen only when public, or by admin).
struct Resolved {
  TemplateRow tmpl;
  BuildRow build;     // the ready build the tag points at (empty for ResolveTemplate)
  std::string alias;  // the template's first alias ("" when none)
};
// The template only (no build): 400 for a bad name, 404 when unknown or
// another team's private one (never 403: its existence is not revealed).
StatusOr<Resolved> ResolveTemplate(TemplateStore& store, const std::string& ref, const std::string& team, bool admin);
// The template and the ready build its tag serves; 404 "tag 'x' does not
// exist for template 'y'" when none is ready.
StatusOr<Resolved> ResolveBuild(TemplateStore& store, const std::string& ref, const std::string& team, bool admin);

}  // namespace airlock::templates
