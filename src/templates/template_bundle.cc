// TemplateStore::ExportTemplate and ImportTemplate (template_store.h): a
// template as another node of a cluster needs it (docs/multinode.md). The
// bundle is read back from the cluster registry, written by another node:
// ImportTemplate checks every field's shape before it writes anything.
#include <sqlite3.h>

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <set>

#include "core/registry.h"  // IsTeamName
#include "core/sqlite_stmt.h"
#include "templates/build_spec.h"
#include "templates/template_store.h"
#include "templates/builder.h"

namespace airlock::templates {

using nlohmann::json;

namespace {

constexpr int kBundleVersion = 1;

bool CharsIn(const std::string& s, size_t max, std::string_view extra) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || extra.find(c) != std::string_view::npos;
  });
}

bool LowerUuid(const std::string& s) {
  return IsUuid(s) && std::none_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'F'; });
}

// A bundle's template, parsed and checked.
struct BundleBuild {
  std::string id, image;
  int64_t cpu = 0, memory_mb = 0, disk_mb = 0, created_at = 0, updated_at = 0, finished_at = 0;
  json final_context;
};
struct BundleTag {
  std::string tag, build_id;
  int64_t created_at = 0;
};
struct Bundle {
  std::string id, team;
  bool is_public = false;
  int64_t created_at = 0, updated_at = 0;
  std::vector<std::string> aliases;
  std::vector<BundleBuild> builds;
  std::vector<BundleTag> tags;
};

Status Malformed(const std::string& what) { return InvalidArgument("malformed template bundle: " + what); }

// obj[key] as a string; "" when missing or not one.
std::string Str(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// obj[key] as an integer in [0, max]; nullopt otherwise.
std::optional<int64_t> Count(const json& obj, const char* key, int64_t max = INT64_MAX) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned()) {
    uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  int64_t v = it->get<int64_t>();
  if (v < 0 || v > max) return std::nullopt;
  return v;
}

StatusOr<Bundle> ParseBundle(const json& j) {
  if (!j.is_object()) return Malformed("not a JSON object");
  if (auto v = Count(j, "version"); !v || *v != kBundleVersion)
    return Malformed("version is not " + std::to_string(kBundleVersion));
  Bundle b;
  auto t = j.find("template");
  if (t == j.end() || !t->is_object()) return Malformed("no template object");
  b.id = Str(*t, "id");
  if (!CharsIn(b.id, 64, "")) return Malformed("template id is not [a-z0-9]{1,64}");
  b.team = Str(*t, "team");
  if (!IsTeamName(b.team)) return Malformed("template team is not 1..64 characters of [A-Za-z0-9_.-]");
  auto pub = t->find("public");
  if (pub == t->end() || !pub->is_boolean()) return Malformed("template public is not a boolean");
  b.is_public = pub->get<bool>();
  auto created = Count(*t, "createdAt"), updated = Count(*t, "updatedAt");
  if (!created || !updated) return Malformed("template createdAt/updatedAt are not non-negative integers");
  b.created_at = *created;
  b.updated_at = *updated;
  auto aliases = t->find("aliases");
  if (aliases == t->end() || !aliases->is_array()) return Malformed("template aliases is not an array");
  for (const auto& a : *aliases) {
    std::string alias = a.is_string() ? a.get<std::string>() : "";
    if (!CharsIn(alias, 128, "-_")) return Malformed("an alias is not [a-z0-9_-]{1,128}");
    if (std::find(b.aliases.begin(), b.aliases.end(), alias) == b.aliases.end()) b.aliases.push_back(alias);
  }

  auto builds = j.find("builds");
  if (builds == j.end() || !builds->is_array()) return Malformed("builds is not an array");
  std::set<std::string> build_ids;
  for (const auto& x : *builds) {
    if (!x.is_object()) return Malformed("a build is not an object");
    BundleBuild bb;
    bb.id = Str(x, "id");
    if (!LowerUuid(bb.id)) return Malformed("a build id is not a lower-case UUID");
    if (!build_ids.insert(bb.id).second) return Malformed("build " + bb.id + " is listed twice");
    bb.image = Str(x, "image");
    if (!CharsIn(bb.image, 64, "-_")) return Malformed("the image of build " + bb.id + " is not [a-z0-9_-]{1,64}");
    // A build's image is named by its id, never another template's (a
    // built-in's, another build's): what an import or a delete touches.
    if (bb.image != ImageNameOf(bb.id)) return Malformed("the image of build " + bb.id + " is not its own");
    auto cpu = Count(x, "cpuCount", INT_MAX), mem = Count(x, "memoryMB", INT_MAX), disk = Count(x, "diskMB", INT_MAX);
    auto c = Count(x, "createdAt"), u = Count(x, "updatedAt"), f = Count(x, "finishedAt");
    if (!cpu || !mem || !disk || !c || !u || !f)
      return Malformed("build " + bb.id + ": counts and times are not non-negative integers");
    bb.cpu = *cpu;
    bb.memory_mb = *mem;
    bb.disk_mb = *disk;
    bb.created_at = *c;
    bb.updated_at = *u;
    bb.finished_at = *f;
    auto ctx = x.find("finalContext");
    if (ctx != x.end() && !ctx->is_null() && !ctx->is_object())
      return Malformed("the finalContext of build " + bb.id + " is not an object");
    bb.final_context = ctx == x.end() ? json() : *ctx;
    b.builds.push_back(std::move(bb));
  }

  auto tags = j.find("tags");
  if (tags == j.end() || !tags->is_array()) return Malformed("tags is not an array");
  std::set<std::string> seen;
  for (const auto& x : *tags) {
    if (!x.is_object()) return Malformed("a tag is not an object");
    BundleTag bt{Str(x, "tag"), Str(x, "buildID"), 0};
    if (!ValidateTag(bt.tag).ok()) return Malformed("tag '" + bt.tag + "' is not one a build request may name");
    if (!seen.insert(bt.tag).second) return Malformed("tag '" + bt.tag + "' is listed twice");
    if (!build_ids.count(bt.build_id)) return Malformed("tag '" + bt.tag + "' points at no build of the bundle");
    auto c = Count(x, "createdAt");
    if (!c) return Malformed("tag '" + bt.tag + "': createdAt is not a non-negative integer");
    bt.created_at = *c;
    b.tags.push_back(std::move(bt));
  }
  // Assigned in time order (ResolveTag walks them newest first).
  std::stable_sort(b.tags.begin(), b.tags.end(),
                   [](const BundleTag& x, const BundleTag& y) { return x.created_at < y.created_at; });
  return b;
}

}  // namespace

void TemplateStore::SetOnChange(std::function<void(const std::string& template_id)> fn) { on_change_ = std::move(fn); }

StatusOr<json> TemplateStore::ExportTemplate(const std::string& template_id) {
  std::lock_guard<std::mutex> l(mu_);
  json tmpl;
  {
    Stmt s(db_, "SELECT id, team, public, created_at, updated_at FROM templates WHERE id = ?");
    s.Bind(1, template_id);
    if (s.Step() != SQLITE_ROW) return NotFound("template '" + template_id + "' not found");
    tmpl = {{"id", s.Text(0)},
            {"team", s.Text(1)},
            {"public", s.Int(2) != 0},
            {"createdAt", s.Int(3)},
            {"updatedAt", s.Int(4)},
            {"aliases", json::array()}};
  }
  {
    Stmt a(db_, "SELECT alias FROM team_template_aliases WHERE template_id = ? ORDER BY alias");
    a.Bind(1, template_id);
    while (a.Step() == SQLITE_ROW) tmpl["aliases"].push_back(a.Text(0));
  }
  json builds = json::array();
  std::set<std::string> ready;
  {
    Stmt s(db_, "SELECT id, cpu, memory_mb, disk_mb, created_at, updated_at, finished_at, image, final_context"
                " FROM template_builds WHERE template_id = ? AND status = ? AND image != '' ORDER BY created_at, id");
    s.Bind(1, template_id).Bind(2, std::string(kReady));
    while (s.Step() == SQLITE_ROW) {
      json ctx = s.Text(8).empty() ? json() : json::parse(s.Text(8), nullptr, false);
      if (ctx.is_discarded() || !ctx.is_object()) ctx = nullptr;
      builds.push_back({{"id", s.Text(0)},
                        {"cpuCount", s.Int(1)},
                        {"memoryMB", s.Int(2)},
                        {"diskMB", s.Int(3)},
                        {"createdAt", s.Int(4)},
                        {"updatedAt", s.Int(5)},
                        {"finishedAt", s.Int(6)},
                        {"image", s.Text(7)},
                        {"finalContext", ctx}});
      ready.insert(s.Text(0));
    }
  }
  // Per tag, what ResolveTag answers: the newest assignment whose build is
  // ready; a removal (build "") ends the walk.
  std::map<std::string, json> tags;
  std::set<std::string> decided;
  {
    Stmt s(db_, "SELECT tag, build_id, created_at FROM template_tags WHERE template_id = ? ORDER BY seq DESC");
    s.Bind(1, template_id);
    while (s.Step() == SQLITE_ROW) {
      const std::string tag = s.Text(0), build = s.Text(1);
      if (decided.count(tag)) continue;
      if (build.empty()) {
        decided.insert(tag);
      } else if (ready.count(build)) {
        decided.insert(tag);
        tags[tag] = {{"tag", tag}, {"buildID", build}, {"createdAt", s.Int(2)}};
      }
    }
  }
  json tag_list = json::array();
  for (auto& [tag, row] : tags) tag_list.push_back(std::move(row));
  return json{{"version", kBundleVersion}, {"template", tmpl}, {"builds", builds}, {"tags", tag_list}};
}

Status TemplateStore::ImportTemplate(const json& bundle) {
  ASSIGN_OR_RETURN(Bundle b, ParseBundle(bundle));
  std::lock_guard<std::mutex> l(mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE", "begin"));
  auto body = [&]() -> Status {
    for (const auto& build : b.builds) {
      Stmt s(db_, "SELECT template_id FROM template_builds WHERE id = ?");
      s.Bind(1, build.id);
      if (s.Step() == SQLITE_ROW && s.Text(0) != b.id)
        return FailedPrecondition("build " + build.id + " of template " + b.id + " is template " + s.Text(0) +
                                  "'s here");
    }
    {
      Stmt s(db_, "INSERT INTO templates (id, team, public, created_at, updated_at) VALUES (?, ?, ?, ?, ?)"
                  " ON CONFLICT (id) DO UPDATE SET team = excluded.team, public = excluded.public,"
                  " created_at = excluded.created_at, updated_at = excluded.updated_at");
      s.Bind(1, b.id).Bind(2, b.team).Bind(3, int64_t{b.is_public ? 1 : 0}).Bind(4, b.created_at);
      s.Bind(5, b.updated_at);
      if (s.Step() != SQLITE_DONE) return Err("import template");
    }
    {
      Stmt s(db_, "DELETE FROM team_template_aliases WHERE template_id = ?");
      s.Bind(1, b.id);
      if (s.Step() != SQLITE_DONE) return Err("import aliases");
    }
    for (const auto& alias : b.aliases) {
      // The team's alias moves here from whichever local template held it.
      Stmt s(db_, "INSERT OR REPLACE INTO team_template_aliases (team, alias, template_id) VALUES (?, ?, ?)");
      s.Bind(1, b.team).Bind(2, alias).Bind(3, b.id);
      if (s.Step() != SQLITE_DONE) return Err("import alias");
    }
    for (const auto& build : b.builds) {
      Stmt s(db_, "INSERT INTO template_builds (id, template_id, status, cpu, memory_mb, disk_mb, created_at,"
                  " updated_at, finished_at, started, image, final_context) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)"
                  " ON CONFLICT (id) DO UPDATE SET status = excluded.status, cpu = excluded.cpu,"
                  " memory_mb = excluded.memory_mb, disk_mb = excluded.disk_mb, created_at = excluded.created_at,"
                  " updated_at = excluded.updated_at, finished_at = excluded.finished_at, started = 1,"
                  " reason = '', image = excluded.image, final_context = excluded.final_context");
      s.Bind(1, build.id).Bind(2, b.id).Bind(3, std::string(kReady)).Bind(4, build.cpu).Bind(5, build.memory_mb);
      s.Bind(6, build.disk_mb).Bind(7, build.created_at).Bind(8, build.updated_at).Bind(9, build.finished_at);
      s.Bind(10, build.image).Bind(11, build.final_context.is_null() ? std::string() : build.final_context.dump());
      if (s.Step() != SQLITE_DONE) return Err("import build");
    }
    // A local build in progress keeps its assignments, after the bundle's.
    std::vector<BundleTag> kept;
    {
      Stmt s(db_, "SELECT tag, build_id, created_at FROM template_tags WHERE template_id = ? AND build_id IN"
                  " (SELECT id FROM template_builds WHERE template_id = ? AND status IN (?, ?)) ORDER BY seq");
      s.Bind(1, b.id).Bind(2, b.id).Bind(3, std::string(kWaiting)).Bind(4, std::string(kBuilding));
      while (s.Step() == SQLITE_ROW) kept.push_back({s.Text(0), s.Text(1), s.Int(2)});
    }
    {
      Stmt s(db_, "DELETE FROM template_tags WHERE template_id = ?");
      s.Bind(1, b.id);
      if (s.Step() != SQLITE_DONE) return Err("import tags");
    }
    for (const auto* list : {&b.tags, &kept}) {
      for (const auto& t : *list) {
        Stmt s(db_, "INSERT INTO template_tags (template_id, tag, build_id, created_at) VALUES (?, ?, ?, ?)");
        s.Bind(1, b.id).Bind(2, t.tag).Bind(3, t.build_id).Bind(4, t.created_at);
        if (s.Step() != SQLITE_DONE) return Err("import tag");
      }
    }
    return OkStatus();
  };
  if (Status st = body(); !st.ok()) {
    (void)Exec("ROLLBACK", "rollback");
    return st;
  }
  return Exec("COMMIT", "commit");
}

}  // namespace airlock::templates
