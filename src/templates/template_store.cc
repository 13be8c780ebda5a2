#include "templates/template_store.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "common/clock.h"
#include "core/registry.h"
#include "core/sqlite_stmt.h"
#include "templates/build_spec.h"

namespace airlock::templates {

using nlohmann::json;

namespace {

// A UUID v4 from the kernel's random bytes.
std::string NewUuid() {
  std::string h = RandomHex(16);
  h[12] = '4';
  const char variant[] = "89ab";
  h[16] = variant[(h[16] >= 'a' ? h[16] - 'a' + 10 : h[16] - '0') & 3];
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" + h.substr(20);
}

json ParseOr(const std::string& text, json fallback) {
  if (text.empty()) return fallback;
  auto j = json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

constexpr char kBuildColumns[] =
    "id, template_id, status, cpu, memory_mb, disk_mb, created_at, updated_at, finished_at, started, spec, reason, "
    "image, final_layer, final_context, tags";

BuildRow ReadBuild(const Stmt& s) {
  BuildRow b;
  b.id = s.Text(0);
  b.template_id = s.Text(1);
  b.status = s.Text(2);
  b.cpu_count = static_cast<int>(s.Int(3));
  b.memory_mb = static_cast<int>(s.Int(4));
  b.disk_mb = static_cast<int>(s.Int(5));
  b.created_at_ms = s.Int(6);
  b.updated_at_ms = s.Int(7);
  b.finished_at_ms = s.Int(8);
  b.started = s.Int(9) != 0;
  b.spec = ParseOr(s.Text(10), nullptr);
  b.reason = ParseOr(s.Text(11), nullptr);
  b.image = s.Text(12);
  b.final_layer = s.Text(13);
  b.final_context = ParseOr(s.Text(14), nullptr);
  json tags = ParseOr(s.Text(15), json::array());
  if (tags.is_array()) {
    for (auto& t : tags) {
      if (t.is_string()) b.requested_tags.push_back(t.get<std::string>());
    }
  }
  return b;
}

}  // namespace

StatusOr<std::unique_ptr<TemplateStore>> TemplateStore::Open(const std::string& path) {
  std::unique_ptr<TemplateStore> t(new TemplateStore());
  RETURN_IF_ERROR(OpenSharedDb(path, &t->db_));
  RETURN_IF_ERROR(t->Exec(
      "CREATE TABLE IF NOT EXISTS templates (id TEXT PRIMARY KEY, team TEXT NOT NULL, public INTEGER NOT NULL,"
      " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, spawn_count INTEGER NOT NULL DEFAULT 0,"
      " last_spawned_at INTEGER NOT NULL DEFAULT 0);"
      // Aliases live in their team's namespace (docs/security.md): two teams
      // may both have "app". template_aliases is the old, global table:
      // its rows move to team_template_aliases below.
      "CREATE TABLE IF NOT EXISTS template_aliases (alias TEXT PRIMARY KEY, template_id TEXT NOT NULL);"
      "CREATE TABLE IF NOT EXISTS team_template_aliases (team TEXT NOT NULL, alias TEXT NOT NULL,"
      " template_id TEXT NOT NULL, PRIMARY KEY (team, alias));"
      "CREATE TABLE IF NOT EXISTS template_builds (id TEXT PRIMARY KEY, template_id TEXT NOT NULL,"
      " status TEXT NOT NULL, cpu INTEGER NOT NULL, memory_mb INTEGER NOT NULL, disk_mb INTEGER NOT NULL,"
      " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, finished_at INTEGER NOT NULL DEFAULT 0,"
      " started INTEGER NOT NULL DEFAULT 0, spec TEXT NOT NULL DEFAULT '', reason TEXT NOT NULL DEFAULT '',"
      " image TEXT NOT NULL DEFAULT '', final_layer TEXT NOT NULL DEFAULT '', final_context TEXT NOT NULL DEFAULT '',"
      " tags TEXT NOT NULL DEFAULT '[]');"
      "CREATE INDEX IF NOT EXISTS template_builds_by_template ON template_builds (template_id);"
      "CREATE TABLE IF NOT EXISTS template_build_logs (build_id TEXT NOT NULL, seq INTEGER NOT NULL,"
      " ts INTEGER NOT NULL, level TEXT NOT NULL, message TEXT NOT NULL, step TEXT NOT NULL,"
      " PRIMARY KEY (build_id, seq));"
      "CREATE TABLE IF NOT EXISTS template_tags (seq INTEGER PRIMARY KEY AUTOINCREMENT, template_id TEXT NOT NULL,"
      " tag TEXT NOT NULL, build_id TEXT NOT NULL, created_at INTEGER NOT NULL);"
      "CREATE TABLE IF NOT EXISTS template_files (team TEXT NOT NULL, hash TEXT NOT NULL, path TEXT NOT NULL,"
      " size INTEGER NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (team, hash));"
      "CREATE TABLE IF NOT EXISTS template_layers (team TEXT NOT NULL, hash TEXT NOT NULL, dir TEXT NOT NULL,"
      " parent TEXT NOT NULL, context TEXT NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (team, hash));",
      "create template tables"));
  RETURN_IF_ERROR(t->Exec("BEGIN IMMEDIATE;"
                          "INSERT OR IGNORE INTO team_template_aliases (team, alias, template_id)"
                          " SELECT t.team, a.alias, a.template_id FROM template_aliases a"
                          " JOIN templates t ON t.id = a.template_id;"
                          "DELETE FROM template_aliases;"
                          "COMMIT;",
                          "move aliases into their teams' namespaces"));
  return t;
}

TemplateStore::~TemplateStore() { sqlite3_close_v2(db_); }

Status TemplateStore::Exec(const std::string& sql, const char* what) { return ExecSql(db_, sql, what); }

Status TemplateStore::Err(const char* what) { return Internal(std::string(what) + ": " + sqlite3_errmsg(db_)); }

StatusOr<RequestedBuild> TemplateStore::RequestBuild(const std::string& team, const std::string& alias,
                                                     const std::vector<std::string>& tags, int cpu_count,
                                                     int memory_mb, int disk_mb,
                                                     const std::string& new_template_id) {
  std::unique_lock<std::mutex> l(mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE", "begin"));
  auto body = [&]() -> StatusOr<RequestedBuild> {
    RequestedBuild out;
    out.alias = alias;
    const int64_t now = NowUnixMs();
    {
      Stmt s(db_, "SELECT t.id, t.public FROM team_template_aliases a JOIN templates t ON t.id = a.template_id"
                  " WHERE a.team = ? AND a.alias = ?");
      s.Bind(1, team).Bind(2, alias);
      if (s.Step() == SQLITE_ROW) {
        out.template_id = s.Text(0);
        out.is_public = s.Int(1) != 0;
      }
    }
    if (out.template_id.empty()) {
      Stmt taken(db_, "SELECT 1 FROM templates WHERE id = ?");
      taken.Bind(1, alias);
      if (taken.Step() == SQLITE_ROW) return AlreadyExists("Alias '" + alias + "' is already used");
      out.template_id = new_template_id;
      Stmt t(db_, "INSERT INTO templates (id, team, public, created_at, updated_at) VALUES (?, ?, 0, ?, ?)");
      t.Bind(1, out.template_id).Bind(2, team).Bind(3, now).Bind(4, now);
      if (t.Step() != SQLITE_DONE) return Err("insert template");
      Stmt a(db_, "INSERT INTO team_template_aliases (team, alias, template_id) VALUES (?, ?, ?)");
      a.Bind(1, team).Bind(2, alias).Bind(3, out.template_id);
      if (a.Step() != SQLITE_DONE) return Err("insert alias");
    }
    std::vector<std::string> set;
    for (const auto& t : tags) {
      if (std::find(set.begin(), set.end(), t) == set.end()) set.push_back(t);
    }
    if (set.empty()) set.push_back("default");
    out.tags = set;
    // Never-started builds of this template are superseded (§A.1).
    {
      json reason = {{"message", "The build was canceled because it was superseded by a newer one."}};
      Stmt s(db_, "UPDATE template_builds SET status = 'error', reason = ?, updated_at = ?, finished_at = ?"
                  " WHERE template_id = ? AND status = 'waiting' AND started = 0");
      s.Bind(1, reason.dump()).Bind(2, now).Bind(3, now).Bind(4, out.template_id);
      if (s.Step() != SQLITE_DONE) return Err("supersede builds");
    }
    out.build_id = NewUuid();
    Stmt b(db_, "INSERT INTO template_builds (id, template_id, status, cpu, memory_mb, disk_mb, created_at, updated_at,"
                " tags) VALUES (?, ?, 'waiting', ?, ?, ?, ?, ?, ?)");
    b.Bind(1, out.build_id).Bind(2, out.template_id).Bind(3, int64_t{cpu_count}).Bind(4, int64_t{memory_mb});
    b.Bind(5, int64_t{disk_mb}).Bind(6, now).Bind(7, now).Bind(8, json(set).dump());
    if (b.Step() != SQLITE_DONE) return Err("insert build");
    for (const auto& tag : set) {
      Stmt t(db_, "INSERT INTO template_tags (template_id, tag, build_id, created_at) VALUES (?, ?, ?, ?)");
      t.Bind(1, out.template_id).Bind(2, tag).Bind(3, out.build_id).Bind(4, now);
      if (t.Step() != SQLITE_DONE) return Err("insert tag");
    }
    Stmt u(db_, "UPDATE templates SET updated_at = ? WHERE id = ?");
    u.Bind(1, now).Bind(2, out.template_id);
    if (u.Step() != SQLITE_DONE) return Err("touch template");
    return out;
  };
  auto r = body();
  if (!r.ok()) {
    (void)Exec("ROLLBACK", "rollback");
    return r.status();
  }
  RETURN_IF_ERROR(Exec("COMMIT", "commit"));
  l.unlock();
  Changed(r->template_id);
  return r;
}

StatusOr<TemplateRow> TemplateStore::GetTemplate(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT id, team, public, created_at, updated_at, spawn_count, last_spawned_at FROM templates WHERE id = ?");
  s.Bind(1, id);
  if (s.Step() != SQLITE_ROW) return NotFound("template '" + id + "' not found");
  TemplateRow t;
  t.id = s.Text(0);
  t.team = s.Text(1);
  t.is_public = s.Int(2) != 0;
  t.created_at_ms = s.Int(3);
  t.updated_at_ms = s.Int(4);
  t.spawn_count = s.Int(5);
  t.last_spawned_at_ms = s.Int(6);
  Stmt a(db_, "SELECT alias FROM team_template_aliases WHERE template_id = ? ORDER BY alias");
  a.Bind(1, id);
  while (a.Step() == SQLITE_ROW) t.aliases.push_back(a.Text(0));
  return t;
}

StatusOr<std::string> TemplateStore::FindAlias(const std::string& team, const std::string& alias) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT template_id FROM team_template_aliases WHERE team = ? AND alias = ?");
  s.Bind(1, team).Bind(2, alias);
  if (s.Step() != SQLITE_ROW) return NotFound("template '" + alias + "' not found");
  return s.Text(0);
}

StatusOr<std::vector<TemplateRow>> TemplateStore::ListTemplates(const std::string& team, bool all_teams) {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> l(mu_);
    Stmt s(db_, all_teams ? "SELECT id FROM templates ORDER BY created_at, id"
                          : "SELECT id FROM templates WHERE team = ? ORDER BY created_at, id");
    if (!all_teams) s.Bind(1, team);
    while (s.Step() == SQLITE_ROW) ids.push_back(s.Text(0));
  }
  std::vector<TemplateRow> out;
  for (const auto& id : ids) {
    auto t = GetTemplate(id);
    if (t.ok()) out.push_back(*std::move(t));
  }
  return out;
}

Status TemplateStore::SetPublic(const std::string& id, bool is_public) {
  {
    std::lock_guard<std::mutex> l(mu_);
    Stmt s(db_, "UPDATE templates SET public = ?, updated_at = ? WHERE id = ?");
    s.Bind(1, int64_t{is_public ? 1 : 0}).Bind(2, NowUnixMs()).Bind(3, id);
    if (s.Step() != SQLITE_DONE) return Err("set public");
    if (sqlite3_changes(db_) == 0) return OkStatus();
  }
  Changed(id);
  return OkStatus();
}

Status TemplateStore::CountSpawn(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "UPDATE templates SET spawn_count = spawn_count + 1, last_spawned_at = ? WHERE id = ?");
  s.Bind(1, NowUnixMs()).Bind(2, id);
  if (s.Step() != SQLITE_DONE) return Err("count spawn");
  return OkStatus();
}

StatusOr<std::vector<BuildRow>> TemplateStore::DeleteTemplate(const std::string& id) {
  auto builds = BuildsOf(id);
  if (!builds.ok()) return builds.status();
  std::unique_lock<std::mutex> l(mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE", "begin"));
  Status st;
  bool was_there = false;
  for (const char* sql :
       {"DELETE FROM template_build_logs WHERE build_id IN (SELECT id FROM template_builds WHERE template_id = ?)",
        "DELETE FROM template_builds WHERE template_id = ?", "DELETE FROM template_tags WHERE template_id = ?",
        "DELETE FROM team_template_aliases WHERE template_id = ?", "DELETE FROM templates WHERE id = ?"}) {
    Stmt s(db_, sql);
    s.Bind(1, id);
    if (s.Step() != SQLITE_DONE) {
      st = Err("delete template");
      break;
    }
    was_there = sqlite3_changes(db_) > 0;  // the last: the template's own row
  }
  if (!st.ok()) {
    (void)Exec("ROLLBACK", "rollback");
    return st;
  }
  RETURN_IF_ERROR(Exec("COMMIT", "commit"));
  l.unlock();
  if (was_there) Changed(id);
  return builds;
}

StatusOr<BuildRow> TemplateStore::GetBuildLocked(const std::string& build_id) {
  Stmt s(db_, (std::string("SELECT ") + kBuildColumns + " FROM template_builds WHERE id = ?").c_str());
  s.Bind(1, build_id);
  if (s.Step() != SQLITE_ROW) return NotFound("Build '" + build_id + "' not found");
  return ReadBuild(s);
}

StatusOr<BuildRow> TemplateStore::GetBuild(const std::string& build_id) {
  std::lock_guard<std::mutex> l(mu_);
  return GetBuildLocked(build_id);
}

StatusOr<std::vector<BuildRow>> TemplateStore::BuildsOf(const std::string& template_id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, (std::string("SELECT ") + kBuildColumns + " FROM template_builds WHERE template_id = ? ORDER BY created_at")
                  .c_str());
  s.Bind(1, template_id);
  std::vector<BuildRow> out;
  while (s.Step() == SQLITE_ROW) out.push_back(ReadBuild(s));
  return out;
}

StatusOr<std::vector<BuildRow>> TemplateStore::BuildsWithStatus(const std::string& status) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_,
         (std::string("SELECT ") + kBuildColumns + " FROM template_builds WHERE status = ? ORDER BY created_at").c_str());
  s.Bind(1, status);
  std::vector<BuildRow> out;
  while (s.Step() == SQLITE_ROW) out.push_back(ReadBuild(s));
  return out;
}

std::string TemplateStore::TemplateOfLocked(const std::string& build_id) {
  Stmt s(db_, "SELECT template_id FROM template_builds WHERE id = ?");
  s.Bind(1, build_id);
  return s.Step() == SQLITE_ROW ? s.Text(0) : std::string();
}

Status TemplateStore::StartBuild(const std::string& build_id, const json& spec) {
  std::string template_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    ASSIGN_OR_RETURN(BuildRow b, GetBuildLocked(build_id));
    if (b.started || b.status != kWaiting) return FailedPrecondition("build is not in waiting state");
    Stmt s(db_, "UPDATE template_builds SET started = 1, spec = ?, updated_at = ? WHERE id = ? AND started = 0");
    s.Bind(1, spec.dump()).Bind(2, NowUnixMs()).Bind(3, build_id);
    if (s.Step() != SQLITE_DONE) return Err("start build");
    template_id = b.template_id;
  }
  Changed(template_id);
  return OkStatus();
}

Status TemplateStore::SetStatus(const std::string& build_id, const std::string& status) {
  std::string template_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    Stmt s(db_, "UPDATE template_builds SET status = ?, updated_at = ? WHERE id = ?");
    s.Bind(1, status).Bind(2, NowUnixMs()).Bind(3, build_id);
    if (s.Step() != SQLITE_DONE) return Err("set build status");
    if (sqlite3_changes(db_) == 0) return OkStatus();
    template_id = TemplateOfLocked(build_id);
  }
  if (!template_id.empty()) Changed(template_id);
  return OkStatus();
}

Status TemplateStore::FinishBuild(const BuildRow& b) {
  std::string template_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    const int64_t now = NowUnixMs();
    Stmt s(db_, "UPDATE template_builds SET status = ?, reason = ?, image = ?, final_layer = ?, final_context = ?,"
                " updated_at = ?, finished_at = ? WHERE id = ?");
    s.Bind(1, b.status).Bind(2, b.reason.is_null() ? std::string() : b.reason.dump()).Bind(3, b.image);
    s.Bind(4, b.final_layer).Bind(5, b.final_context.is_null() ? std::string() : b.final_context.dump());
    s.Bind(6, now).Bind(7, now).Bind(8, b.id);
    if (s.Step() != SQLITE_DONE) return Err("finish build");
    if (sqlite3_changes(db_) == 0) return OkStatus();
    template_id = TemplateOfLocked(b.id);
  }
  if (!template_id.empty()) Changed(template_id);
  return OkStatus();
}

Status TemplateStore::AppendLog(const std::string& build_id, const LogEntry& e) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "INSERT INTO template_build_logs (build_id, seq, ts, level, message, step) VALUES (?,"
              " (SELECT COALESCE(MAX(seq), -1) + 1 FROM template_build_logs WHERE build_id = ?), ?, ?, ?, ?)");
  s.Bind(1, build_id).Bind(2, build_id).Bind(3, e.ts_ms).Bind(4, e.level).Bind(5, e.message).Bind(6, e.step);
  if (s.Step() != SQLITE_DONE) return Err("append build log");
  return OkStatus();
}

StatusOr<std::vector<LogEntry>> TemplateStore::Logs(const std::string& build_id, int64_t offset, int64_t limit) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT ts, level, message, step FROM template_build_logs WHERE build_id = ? AND seq >= ?"
              " ORDER BY seq LIMIT ?");
  s.Bind(1, build_id).Bind(2, offset).Bind(3, limit);
  std::vector<LogEntry> out;
  while (s.Step() == SQLITE_ROW) out.push_back(LogEntry{s.Int(0), s.Text(1), s.Text(2), s.Text(3)});
  return out;
}

Status TemplateStore::AssignTags(const std::string& template_id, const std::string& build_id,
                                 const std::vector<std::string>& tags) {
  if (tags.empty()) return OkStatus();
  {
    std::lock_guard<std::mutex> l(mu_);
    const int64_t now = NowUnixMs();
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE", "begin"));
    for (const auto& tag : tags) {
      Stmt t(db_, "INSERT INTO template_tags (template_id, tag, build_id, created_at) VALUES (?, ?, ?, ?)");
      t.Bind(1, template_id).Bind(2, tag).Bind(3, build_id).Bind(4, now);
      if (t.Step() != SQLITE_DONE) {
        Status st = Err("assign tag");
        (void)Exec("ROLLBACK", "rollback");
        return st;
      }
    }
    RETURN_IF_ERROR(Exec("COMMIT", "commit"));
  }
  Changed(template_id);
  return OkStatus();
}

Status TemplateStore::RemoveTags(const std::string& template_id, const std::vector<std::string>& tags) {
  return AssignTags(template_id, "", tags);
}

StatusOr<std::vector<TagRow>> TemplateStore::TagsOf(const std::string& template_id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT tag, build_id, created_at FROM template_tags WHERE template_id = ? ORDER BY seq DESC");
  s.Bind(1, template_id);
  std::set<std::string> seen;
  std::vector<TagRow> out;
  while (s.Step() == SQLITE_ROW) {
    std::string tag = s.Text(0);
    if (!seen.insert(tag).second) continue;
    if (s.Text(1).empty()) continue;  // removed
    out.push_back(TagRow{tag, s.Text(1), s.Int(2)});
  }
  std::sort(out.begin(), out.end(), [](const TagRow& a, const TagRow& b) { return a.tag < b.tag; });
  return out;
}

StatusOr<BuildRow> TemplateStore::ResolveTag(const std::string& template_id, const std::string& tag) {
  std::lock_guard<std::mutex> l(mu_);
  const std::string t = tag.empty() ? "default" : tag;
  if (IsUuid(t)) {
    auto b = GetBuildLocked(t);
    if (!b.ok() || b->template_id != template_id || b->status != kReady)
      return NotFound("tag '" + tag + "' does not exist for template '" + template_id + "'");
    return b;
  }
  Stmt s(db_, "SELECT build_id FROM template_tags WHERE template_id = ? AND tag = ? ORDER BY seq DESC");
  s.Bind(1, template_id).Bind(2, t);
  while (s.Step() == SQLITE_ROW) {
    std::string bid = s.Text(0);
    if (bid.empty()) break;  // removed
    auto b = GetBuildLocked(bid);
    if (b.ok() && b->status == kReady) return b;
  }
  return NotFound("tag '" + t + "' does not exist for template '" + template_id + "'");
}

Status TemplateStore::PutFile(const std::string& team, const std::string& hash, const std::string& path, int64_t size) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "INSERT OR REPLACE INTO template_files (team, hash, path, size, created_at) VALUES (?, ?, ?, ?, ?)");
  s.Bind(1, team).Bind(2, hash).Bind(3, path).Bind(4, size).Bind(5, NowUnixMs());
  if (s.Step() != SQLITE_DONE) return Err("put file");
  return OkStatus();
}

StatusOr<std::string> TemplateStore::FindFile(const std::string& team, const std::string& hash) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT path FROM template_files WHERE team = ? AND hash = ?");
  s.Bind(1, team).Bind(2, hash);
  if (s.Step() != SQLITE_ROW) return NotFound("no files for hash " + hash);
  std::string path = s.Text(0);
  if (::access(path.c_str(), F_OK) != 0) return NotFound("the files of hash " + hash + " are gone");
  return path;
}

StatusOr<std::vector<FileRow>> TemplateStore::AllFileRows() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT team, hash, path, size, created_at FROM template_files");
  std::vector<FileRow> out;
  while (s.Step() == SQLITE_ROW) out.push_back({s.Text(0), s.Text(1), s.Text(2), s.Int(3), s.Int(4)});
  return out;
}

Status TemplateStore::TouchFile(const std::string& team, const std::string& hash, int64_t now_ms) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "UPDATE template_files SET created_at = ? WHERE team = ? AND hash = ?");
  s.Bind(1, now_ms).Bind(2, team).Bind(3, hash);
  if (s.Step() != SQLITE_DONE) return Err("touch file");
  return OkStatus();
}

Status TemplateStore::DeleteFile(const std::string& team, const std::string& hash, int64_t created_at_ms) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM template_files WHERE team = ? AND hash = ? AND created_at = ?");
  s.Bind(1, team).Bind(2, hash).Bind(3, created_at_ms);
  if (s.Step() != SQLITE_DONE) return Err("delete file");
  return OkStatus();
}

StatusOr<std::vector<std::pair<std::string, std::string>>> TemplateStore::TeamImages() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_,
         "SELECT t.team, b.image FROM template_builds b JOIN templates t ON t.id = b.template_id"
         " WHERE b.image != ''");
  std::vector<std::pair<std::string, std::string>> out;
  while (s.Step() == SQLITE_ROW) out.emplace_back(s.Text(0), s.Text(1));
  return out;
}

StatusOr<std::vector<std::string>> TemplateStore::AllFiles() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT path FROM template_files");
  std::vector<std::string> out;
  while (s.Step() == SQLITE_ROW) out.push_back(s.Text(0));
  return out;
}

StatusOr<LayerRow> TemplateStore::FindLayer(const std::string& team, const std::string& hash) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT team, hash, dir, parent, context, created_at FROM template_layers WHERE team = ? AND hash = ?");
  s.Bind(1, team).Bind(2, hash);
  if (s.Step() != SQLITE_ROW) return NotFound("no layer " + hash);
  return LayerRow{s.Text(0), s.Text(1), s.Text(2), s.Text(3), ParseOr(s.Text(4), json::object()), s.Int(5)};
}

Status TemplateStore::PutLayer(const LayerRow& r) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "INSERT OR REPLACE INTO template_layers (team, hash, dir, parent, context, created_at)"
              " VALUES (?, ?, ?, ?, ?, ?)");
  s.Bind(1, r.team).Bind(2, r.hash).Bind(3, r.dir).Bind(4, r.parent_dir).Bind(5, r.context.dump());
  s.Bind(6, r.created_at_ms ? r.created_at_ms : NowUnixMs());
  if (s.Step() != SQLITE_DONE) return Err("put layer");
  return OkStatus();
}

StatusOr<std::vector<LayerRow>> TemplateStore::AllLayers() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT team, hash, dir, parent, context, created_at FROM template_layers");
  std::vector<LayerRow> out;
  while (s.Step() == SQLITE_ROW)
    out.push_back(LayerRow{s.Text(0), s.Text(1), s.Text(2), s.Text(3), ParseOr(s.Text(4), json::object()), s.Int(5)});
  return out;
}

Status TemplateStore::DeleteLayer(const std::string& team, const std::string& hash) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM template_layers WHERE team = ? AND hash = ?");
  s.Bind(1, team).Bind(2, hash);
  if (s.Step() != SQLITE_DONE) return Err("delete layer");
  return OkStatus();
}

}  // namespace airlock::templates

namespace airlock::templates {

StatusOr<Resolved> ResolveTemplate(TemplateStore& store, const std::string& ref, const std::string& team, bool admin) {
  ASSIGN_OR_RETURN(TemplateName name, ParseName(ref));
  // A bare alias is the caller's team's; "team/alias" another team's (seen
  // when public); an id is global.
  std::string id;
  if (auto a = store.FindAlias(name.ns.empty() ? team : name.ns, name.alias); a.ok()) {
    id = *a;
  } else if (auto t = store.GetTemplate(name.alias); t.ok()) {
    id = t->id;
  } else {
    return NotFound("template '" + ref + "' not found");
  }
  ASSIGN_OR_RETURN(TemplateRow t, store.GetTemplate(id));
  if (!name.ns.empty() && name.ns != t.team) return NotFound("template '" + ref + "' not found");
  if (!admin && t.team != team && !t.is_public) return NotFound("template '" + ref + "' not found");
  Resolved r;
  r.alias = t.aliases.empty() ? "" : t.aliases.front();
  r.tmpl = std::move(t);
  return r;
}

StatusOr<Resolved> ResolveBuild(TemplateStore& store, const std::string& ref, const std::string& team, bool admin) {
  ASSIGN_OR_RETURN(Resolved r, ResolveTemplate(store, ref, team, admin));
  ASSIGN_OR_RETURN(TemplateName name, ParseName(ref));
  auto b = store.ResolveTag(r.tmpl.id, name.tag);
  if (!b.ok()) {
    if (b.status().code() == StatusCode::kNotFound && name.tag.empty())
      return NotFound("template '" + ref + "' has no ready build");
    return b.status();
  }
  r.build = *std::move(b);
  return r;
}

}  // namespace airlock::templates
