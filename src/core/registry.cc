#include "core/registry.h"

#include <boost/algorithm/string/classification.hpp>
#include <boost/algorithm/string/split.hpp>

#include <sqlite3.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "core/sqlite_stmt.h"
#include "image/hash.h"

namespace airlock {
namespace {

std::string MapToJson(const std::map<std::string, std::string>& m) { return nlohmann::json(m).dump(); }

std::map<std::string, std::string> JsonToMap(const std::string& s) {
  std::map<std::string, std::string> out;
  auto j = nlohmann::json::parse(s, nullptr, false);
  if (!j.is_object()) return out;
  for (auto& [k, v] : j.items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

}  // namespace

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return out;
}

std::string RandomHex(size_t bytes) { return HexEncode(RandomBytes(bytes)); }

StatusOr<std::unique_ptr<Registry>> Registry::Open(const std::string& path) {
  std::unique_ptr<Registry> r(new Registry());
  RETURN_IF_ERROR(OpenSharedDb(path, &r->db_));
  RETURN_IF_ERROR(
      r->Exec("CREATE TABLE IF NOT EXISTS sandboxes ("
              " id TEXT PRIMARY KEY, template TEXT NOT NULL, state TEXT NOT NULL,"
              " created_at INTEGER NOT NULL, ends_at INTEGER NOT NULL, metadata TEXT NOT NULL,"
              " env_vars TEXT NOT NULL, token TEXT NOT NULL, vcpus INTEGER NOT NULL, memory_mib INTEGER NOT NULL,"
              " netns_ip TEXT NOT NULL, vmm_pid INTEGER NOT NULL, run_dir TEXT NOT NULL);"
              "CREATE TABLE IF NOT EXISTS api_keys ("
              " id TEXT PRIMARY KEY, name TEXT NOT NULL, prefix TEXT NOT NULL, hash TEXT NOT NULL UNIQUE,"
              " created_at INTEGER NOT NULL);",
              "create tables"));
  // v2: lifecycle (JSON) of each sandbox; added to databases of older daemons.
  if (!r->Exec("SELECT lifecycle FROM sandboxes LIMIT 0", "probe lifecycle").ok()) {
    RETURN_IF_ERROR(r->Exec("ALTER TABLE sandboxes ADD COLUMN lifecycle TEXT NOT NULL DEFAULT '{}'", "add lifecycle"));
  }
  // v3: tenancy. Keys get a team (their own id for keys made before) and an
  // admin flag (the CLI key); sandboxes an owner; ownership outlives sandboxes.
  if (!r->Exec("SELECT team FROM api_keys LIMIT 0", "probe team").ok()) {
    RETURN_IF_ERROR(
        r->Exec("ALTER TABLE api_keys ADD COLUMN team TEXT NOT NULL DEFAULT '';"
                "ALTER TABLE api_keys ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;"
                "UPDATE api_keys SET team = id WHERE team = '';"
                "UPDATE api_keys SET admin = 1 WHERE name = 'cli';",
                "add key team"));
  }
  if (!r->Exec("SELECT owner FROM sandboxes LIMIT 0", "probe owner").ok()) {
    RETURN_IF_ERROR(r->Exec("ALTER TABLE sandboxes ADD COLUMN owner TEXT NOT NULL DEFAULT ''", "add owner"));
  }
  RETURN_IF_ERROR(
      r->Exec("CREATE TABLE IF NOT EXISTS owners (kind TEXT NOT NULL, id TEXT NOT NULL,"
              " team TEXT NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (kind, id))",
              "create owners"));
  // v4: the traffic access token (empty: none).
  if (!r->Exec("SELECT traffic_token FROM sandboxes LIMIT 0", "probe traffic_token").ok()) {
    RETURN_IF_ERROR(
        r->Exec("ALTER TABLE sandboxes ADD COLUMN traffic_token TEXT NOT NULL DEFAULT ''", "add traffic_token"));
  }
  // v5: network.maskRequestHost (empty: none).
  if (!r->Exec("SELECT mask_request_host FROM sandboxes LIMIT 0", "probe mask_request_host").ok()) {
    RETURN_IF_ERROR(r->Exec("ALTER TABLE sandboxes ADD COLUMN mask_request_host TEXT NOT NULL DEFAULT ''",
                            "add mask_request_host"));
  }
  // v6: the runtime each sandbox runs on; every sandbox before ran on qemu.
  if (!r->Exec("SELECT runtime FROM sandboxes LIMIT 0", "probe runtime").ok()) {
    RETURN_IF_ERROR(r->Exec("ALTER TABLE sandboxes ADD COLUMN runtime TEXT NOT NULL DEFAULT 'qemu'", "add runtime"));
  }
  // v7: rollbacks in flight (a daemon killed mid-rollback completes it at start).
  RETURN_IF_ERROR(
      r->Exec("CREATE TABLE IF NOT EXISTS rollback_intents (sandbox_id TEXT PRIMARY KEY,"
              " checkpoint_id TEXT NOT NULL, phase TEXT NOT NULL, vmm_pid INTEGER NOT NULL,"
              " started_at INTEGER NOT NULL)",
              "create rollback_intents"));
  // v8: idempotency keys (server/idempotency.h), per team.
  RETURN_IF_ERROR(
      r->Exec("CREATE TABLE IF NOT EXISTS idempotency_keys (team TEXT NOT NULL, key TEXT NOT NULL,"
              " fingerprint TEXT NOT NULL, answered INTEGER NOT NULL, status INTEGER NOT NULL,"
              " content_type TEXT NOT NULL, body BLOB NOT NULL, created_at INTEGER NOT NULL,"
              " PRIMARY KEY (team, key))",
              "create idempotency_keys"));
  // v9: lifecycle events and webhooks (control/lifecycle_events.h), per team.
  RETURN_IF_ERROR(
      r->Exec("CREATE TABLE IF NOT EXISTS lifecycle_events (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
              " team TEXT NOT NULL, sandbox TEXT NOT NULL, type TEXT NOT NULL, event TEXT NOT NULL,"
              " at INTEGER NOT NULL);"
              "CREATE INDEX IF NOT EXISTS lifecycle_events_team ON lifecycle_events (team, seq);"
              "CREATE TABLE IF NOT EXISTS webhooks (id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT NOT NULL,"
              " url TEXT NOT NULL, enabled INTEGER NOT NULL, events TEXT NOT NULL, secret TEXT NOT NULL,"
              " created_at INTEGER NOT NULL)",
              "create lifecycle_events, webhooks"));
  // v10: volumes (core/volumes.h), per team.
  RETURN_IF_ERROR(
      r->Exec("CREATE TABLE IF NOT EXISTS volumes (id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT NOT NULL,"
              " token TEXT NOT NULL, size_mib INTEGER NOT NULL, created_at INTEGER NOT NULL, UNIQUE (team, name))",
              "create volumes"));
  return r;
}

Registry::~Registry() { sqlite3_close_v2(db_); }

Status Registry::Exec(const std::string& sql, const char* what) { return ExecSql(db_, sql, what); }

#define AIRLOCK_SQL_CHECK(cond, what) \
  if (!(cond)) return Internal(std::string("sqlite ") + (what) + ": " + sqlite3_errmsg(db_))

Status Registry::PutSandbox(const SandboxRecord& r) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_,
         "INSERT OR REPLACE INTO sandboxes (id, template, state, created_at, ends_at, metadata, env_vars, token,"
         " vcpus, memory_mib, netns_ip, vmm_pid, run_dir, lifecycle, owner, traffic_token, mask_request_host, runtime)"
         " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare put sandbox");
  s.Bind(1, r.id).Bind(2, r.template_id).Bind(3, r.state).Bind(4, r.created_at_ms).Bind(5, r.ends_at_ms);
  s.Bind(6, MapToJson(r.metadata)).Bind(7, MapToJson(r.env_vars)).Bind(8, r.access_token);
  s.Bind(9, int64_t{r.vcpus}).Bind(10, int64_t{r.memory_mib}).Bind(11, r.netns_ip).Bind(12, int64_t{r.vmm_pid});
  s.Bind(13, r.run_dir);
  nlohmann::json lifecycle{
      {"autoPause", r.auto_pause}, {"autoPauseMemory", r.auto_pause_memory}, {"autoResume", r.auto_resume}};
  if (!r.https_ports.empty()) lifecycle["httpsPorts"] = r.https_ports;
  if (r.idle_timeout_s > 0) {
    lifecycle["idleTimeout"] = r.idle_timeout_s;
    lifecycle["idleKeepsProcesses"] = r.idle_keeps_processes;
  }
  if (!r.volume_mounts.empty()) {
    nlohmann::json mounts = nlohmann::json::array();
    for (const auto& m : r.volume_mounts) {
      mounts.push_back({{"name", m.name}, {"path", m.path}, {"id", m.volume_id}, {"dir", m.host_dir}});
    }
    lifecycle["volumeMounts"] = mounts;
  }
  s.Bind(14, lifecycle.dump());
  s.Bind(15, r.owner);
  s.Bind(16, r.traffic_token);
  s.Bind(17, r.mask_request_host);
  s.Bind(18, r.runtime.empty() ? std::string("qemu") : r.runtime);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "put sandbox " + r.id);
  return OkStatus();
}

Status Registry::DeleteSandbox(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM sandboxes WHERE id = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare delete sandbox");
  s.Bind(1, id);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "delete sandbox " + id);
  Stmt i(db_, "DELETE FROM rollback_intents WHERE sandbox_id = ?");
  AIRLOCK_SQL_CHECK(i.ok(), "prepare delete rollback intent");
  i.Bind(1, id);
  AIRLOCK_SQL_CHECK(i.Step() == SQLITE_DONE, "delete rollback intent of " + id);
  return OkStatus();
}

Status Registry::PutRollbackIntent(const RollbackIntent& intent) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_,
         "INSERT OR REPLACE INTO rollback_intents (sandbox_id, checkpoint_id, phase, vmm_pid, started_at)"
         " VALUES (?,?,?,?,?)");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare put rollback intent");
  s.Bind(1, intent.sandbox_id).Bind(2, intent.checkpoint_id).Bind(3, intent.phase);
  s.Bind(4, int64_t{intent.vmm_pid}).Bind(5, intent.started_at_ms);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "put rollback intent of " + intent.sandbox_id);
  return OkStatus();
}

Status Registry::ClearRollbackIntent(const std::string& sandbox_id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM rollback_intents WHERE sandbox_id = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare clear rollback intent");
  s.Bind(1, sandbox_id);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "clear rollback intent of " + sandbox_id);
  return OkStatus();
}

StatusOr<std::vector<RollbackIntent>> Registry::ListRollbackIntents() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT sandbox_id, checkpoint_id, phase, vmm_pid, started_at FROM rollback_intents ORDER BY started_at");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare list rollback intents");
  std::vector<RollbackIntent> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    out.push_back({s.Text(0), s.Text(1), s.Text(2), static_cast<int>(s.Int(3)), s.Int(4)});
  }
  AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "list rollback intents");
  return out;
}

StatusOr<std::optional<IdempotentCall>> Registry::ClaimIdempotencyKey(const std::string& team, const std::string& key,
                                                                      const std::string& fingerprint, int64_t now_ms,
                                                                      int64_t window_ms, int64_t stale_ms) {
  std::lock_guard<std::mutex> l(mu_);
  AIRLOCK_SQL_CHECK(sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK, "begin claim");
  auto result = [&]() -> StatusOr<std::optional<IdempotentCall>> {
    Stmt purge(db_,
               "DELETE FROM idempotency_keys WHERE team = ? AND (created_at < ? OR (answered = 0 AND created_at < ?))");
    AIRLOCK_SQL_CHECK(purge.ok(), "prepare purge idempotency keys");
    purge.Bind(1, team).Bind(2, now_ms - window_ms).Bind(3, now_ms - stale_ms);
    AIRLOCK_SQL_CHECK(purge.Step() == SQLITE_DONE, "purge idempotency keys");
    Stmt get(db_,
             "SELECT fingerprint, answered, status, content_type, body, created_at FROM idempotency_keys"
             " WHERE team = ? AND key = ?");
    AIRLOCK_SQL_CHECK(get.ok(), "prepare get idempotency key");
    get.Bind(1, team).Bind(2, key);
    int rc = get.Step();
    if (rc == SQLITE_ROW) {
      return std::optional<IdempotentCall>(
          IdempotentCall{get.Text(0), get.Int(1) != 0, static_cast<int>(get.Int(2)), get.Text(3), get.Text(4),
                         get.Int(5)});
    }
    AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "get idempotency key");
    Stmt put(db_,
             "INSERT INTO idempotency_keys (team, key, fingerprint, answered, status, content_type, body, created_at)"
             " VALUES (?,?,?,0,0,'','',?)");
    AIRLOCK_SQL_CHECK(put.ok(), "prepare claim idempotency key");
    put.Bind(1, team).Bind(2, key).Bind(3, fingerprint).Bind(4, now_ms);
    AIRLOCK_SQL_CHECK(put.Step() == SQLITE_DONE, "claim idempotency key");
    return std::optional<IdempotentCall>();
  }();
  const char* end = result.ok() ? "COMMIT" : "ROLLBACK";
  if (sqlite3_exec(db_, end, nullptr, nullptr, nullptr) != SQLITE_OK && result.ok()) {
    return Internal(std::string("sqlite commit claim: ") + sqlite3_errmsg(db_));
  }
  return result;
}

Status Registry::AnswerIdempotencyKey(const std::string& team, const std::string& key, int status,
                                      const std::string& content_type, const std::string& body) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_,
         "UPDATE idempotency_keys SET answered = 1, status = ?, content_type = ?, body = ? WHERE team = ? AND key = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare answer idempotency key");
  s.Bind(1, int64_t{status}).Bind(2, content_type).Bind(3, body).Bind(4, team).Bind(5, key);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "answer idempotency key");
  return OkStatus();
}

Status Registry::ReleaseIdempotencyKey(const std::string& team, const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM idempotency_keys WHERE team = ? AND key = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare release idempotency key");
  s.Bind(1, team).Bind(2, key);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "release idempotency key");
  return OkStatus();
}

Status Registry::ReleaseUnansweredIdempotencyKeys() {
  std::lock_guard<std::mutex> l(mu_);
  return Exec("DELETE FROM idempotency_keys WHERE answered = 0", "release unanswered idempotency keys");
}

Status Registry::AppendLifecycleEvent(const std::string& team, const std::string& sandbox, const std::string& type,
                                      const std::string& event_json, int64_t at_ms, int keep) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "INSERT INTO lifecycle_events (team, sandbox, type, event, at) VALUES (?,?,?,?,?)");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare append lifecycle event");
  s.Bind(1, team).Bind(2, sandbox).Bind(3, type).Bind(4, event_json).Bind(5, at_ms);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "append lifecycle event");
  Stmt trim(db_,
            "DELETE FROM lifecycle_events WHERE team = ? AND seq <= (SELECT seq FROM lifecycle_events WHERE team = ?"
            " ORDER BY seq DESC LIMIT 1 OFFSET ?)");
  AIRLOCK_SQL_CHECK(trim.ok(), "prepare trim lifecycle events");
  trim.Bind(1, team).Bind(2, team).Bind(3, int64_t{keep});
  AIRLOCK_SQL_CHECK(trim.Step() == SQLITE_DONE, "trim lifecycle events");
  return OkStatus();
}

StatusOr<std::vector<std::string>> Registry::ListLifecycleEvents(const std::string& team, const std::string& sandbox,
                                                                 const std::vector<std::string>& types, bool ascending,
                                                                 int offset, int limit) {
  std::lock_guard<std::mutex> l(mu_);
  std::string sql = "SELECT event FROM lifecycle_events WHERE team = ?";
  if (!sandbox.empty()) sql += " AND sandbox = ?";
  if (!types.empty()) {
    sql += " AND type IN (";
    for (size_t i = 0; i < types.size(); ++i) sql += i ? ",?" : "?";
    sql += ")";
  }
  sql += ascending ? " ORDER BY seq ASC" : " ORDER BY seq DESC";
  sql += " LIMIT ? OFFSET ?";
  Stmt s(db_, sql.c_str());
  AIRLOCK_SQL_CHECK(s.ok(), "prepare list lifecycle events");
  int i = 1;
  s.Bind(i++, team);
  if (!sandbox.empty()) s.Bind(i++, sandbox);
  for (const auto& t : types) s.Bind(i++, t);
  s.Bind(i++, int64_t{limit}).Bind(i++, int64_t{offset});
  std::vector<std::string> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back(s.Text(0));
  AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "list lifecycle events");
  return out;
}

namespace {
std::string JoinEvents(const std::vector<std::string>& events) {
  std::string out;
  for (const auto& e : events) out += (out.empty() ? "" : ",") + e;
  return out;
}
std::vector<std::string> SplitEvents(const std::string& s) {
  std::vector<std::string> out;
  if (!s.empty()) boost::split(out, s, boost::is_any_of(","));
  return out;
}
}  // namespace

Status Registry::PutWebhook(const WebhookRecord& w) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_,
         "INSERT OR REPLACE INTO webhooks (id, team, name, url, enabled, events, secret, created_at)"
         " VALUES (?,?,?,?,?,?,?,?)");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare put webhook");
  s.Bind(1, w.id).Bind(2, w.team).Bind(3, w.name).Bind(4, w.url).Bind(5, int64_t{w.enabled ? 1 : 0});
  s.Bind(6, JoinEvents(w.events)).Bind(7, w.secret).Bind(8, w.created_at_ms);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "put webhook " + w.id);
  return OkStatus();
}

StatusOr<std::vector<WebhookRecord>> Registry::ListWebhooks(const std::string& team) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_,
         "SELECT id, team, name, url, enabled, events, secret, created_at FROM webhooks WHERE team = ?"
         " ORDER BY created_at, id");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare list webhooks");
  s.Bind(1, team);
  std::vector<WebhookRecord> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    out.push_back({s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4) != 0, SplitEvents(s.Text(5)), s.Text(6),
                   s.Int(7)});
  }
  AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "list webhooks");
  return out;
}

StatusOr<WebhookRecord> Registry::GetWebhook(const std::string& team, const std::string& id) {
  ASSIGN_OR_RETURN(auto all, ListWebhooks(team));
  for (auto& w : all) {
    if (w.id == id) return w;
  }
  return NotFound("webhook " + id + " not found");
}

Status Registry::DeleteWebhook(const std::string& team, const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM webhooks WHERE team = ? AND id = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare delete webhook");
  s.Bind(1, team).Bind(2, id);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "delete webhook " + id);
  if (sqlite3_changes(db_) == 0) return NotFound("webhook " + id + " not found");
  return OkStatus();
}

Status Registry::InsertVolume(const VolumeRecord& v) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "INSERT INTO volumes (id, team, name, token, size_mib, created_at) VALUES (?,?,?,?,?,?)");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare insert volume");
  s.Bind(1, v.id).Bind(2, v.team).Bind(3, v.name).Bind(4, v.token).Bind(5, v.size_mib).Bind(6, v.created_at_ms);
  int rc = s.Step();
  if (rc == SQLITE_CONSTRAINT) return AlreadyExists("a volume named '" + v.name + "' exists");
  AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "insert volume " + v.id);
  return OkStatus();
}

StatusOr<std::vector<VolumeRecord>> Registry::ListVolumes(const std::string& team) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, team.empty() ? "SELECT id, team, name, token, size_mib, created_at FROM volumes ORDER BY created_at, id"
                           : "SELECT id, team, name, token, size_mib, created_at FROM volumes WHERE team = ?"
                             " ORDER BY created_at, id");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare list volumes");
  if (!team.empty()) s.Bind(1, team);
  std::vector<VolumeRecord> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back({s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4), s.Int(5)});
  AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "list volumes");
  return out;
}

StatusOr<VolumeRecord> Registry::GetVolume(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT id, team, name, token, size_mib, created_at FROM volumes WHERE id = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare get volume");
  s.Bind(1, id);
  int rc = s.Step();
  if (rc == SQLITE_ROW) return VolumeRecord{s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4), s.Int(5)};
  AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "get volume " + id);
  return NotFound("volume " + id + " not found");
}

Status Registry::DeleteVolume(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM volumes WHERE id = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare delete volume");
  s.Bind(1, id);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "delete volume " + id);
  if (sqlite3_changes(db_) == 0) return NotFound("volume " + id + " not found");
  return OkStatus();
}

Status Registry::SetEndsAt(const std::string& id, int64_t ends_at_ms) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "UPDATE sandboxes SET ends_at = ? WHERE id = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare set ends_at");
  s.Bind(1, ends_at_ms).Bind(2, id);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "set ends_at of " + id);
  if (sqlite3_changes(db_) == 0) return NotFound("sandbox " + id + " not in registry");
  return OkStatus();
}

StatusOr<std::vector<SandboxRecord>> Registry::ListSandboxes() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_,
         "SELECT id, template, state, created_at, ends_at, metadata, env_vars, token, vcpus, memory_mib, netns_ip,"
         " vmm_pid, run_dir, lifecycle, owner, traffic_token, mask_request_host, runtime FROM sandboxes"
         " ORDER BY created_at");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare list sandboxes");
  std::vector<SandboxRecord> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    SandboxRecord r;
    r.id = s.Text(0);
    r.template_id = s.Text(1);
    r.state = s.Text(2);
    r.created_at_ms = s.Int(3);
    r.ends_at_ms = s.Int(4);
    r.metadata = JsonToMap(s.Text(5));
    r.env_vars = JsonToMap(s.Text(6));
    r.access_token = s.Text(7);
    r.vcpus = static_cast<int>(s.Int(8));
    r.memory_mib = static_cast<int>(s.Int(9));
    r.netns_ip = s.Text(10);
    r.vmm_pid = static_cast<int>(s.Int(11));
    r.run_dir = s.Text(12);
    auto lc = nlohmann::json::parse(s.Text(13), nullptr, false);
    if (lc.is_object()) {
      r.auto_pause = lc.value("autoPause", false);
      r.auto_pause_memory = lc.value("autoPauseMemory", true);
      r.auto_resume = lc.value("autoResume", false);
      if (auto p = lc.find("httpsPorts"); p != lc.end() && p->is_array()) {
        for (const auto& v : *p)
          if (v.is_number_unsigned() && v.get<uint64_t>() > 0 && v.get<uint64_t>() <= 65535)
            r.https_ports.push_back(static_cast<uint16_t>(v.get<uint64_t>()));
      }
      if (auto p = lc.find("idleTimeout"); p != lc.end() && p->is_number_integer()) r.idle_timeout_s = p->get<int>();
      r.idle_keeps_processes = lc.value("idleKeepsProcesses", false);
      if (auto p = lc.find("volumeMounts"); p != lc.end() && p->is_array()) {
        for (const auto& v : *p) {
          if (v.is_object()) {
            r.volume_mounts.push_back({v.value("name", ""), v.value("path", ""), v.value("id", ""), v.value("dir", "")});
          }
        }
      }
    }
    r.owner = s.Text(14);
    r.traffic_token = s.Text(15);
    r.mask_request_host = s.Text(16);
    r.runtime = s.Text(17);
    out.push_back(std::move(r));
  }
  AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "list sandboxes");
  return out;
}

bool IsTeamName(std::string_view team) {
  return !team.empty() && team.size() <= 64 &&
         team.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
             std::string_view::npos;
}

StatusOr<std::pair<ApiKeyRecord, std::string>> NewApiKey(const std::string& name, const std::string& team,
                                                         bool admin) {
  if (name.empty() || name.size() > 128) return InvalidArgument("API key name must be 1..128 characters");
  if (!team.empty() && !IsTeamName(team)) return InvalidArgument("team must be 1..64 characters of [A-Za-z0-9_.-]");
  std::string key = kApiKeyPrefix + RandomHex(kApiKeyRandomBytes);
  ApiKeyRecord rec{RandomHex(4), name, key.substr(0, 9), NowUnixMs(), team, admin};
  if (rec.team.empty()) rec.team = rec.id;
  return std::make_pair(std::move(rec), std::move(key));
}

StatusOr<std::pair<ApiKeyRecord, std::string>> Registry::CreateApiKey(const std::string& name, const std::string& team,
                                                                      bool admin) {
  ASSIGN_OR_RETURN(auto made, NewApiKey(name, team, admin));
  const ApiKeyRecord& rec = made.first;
  const std::string& key = made.second;
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "INSERT INTO api_keys (id, name, prefix, hash, created_at, team, admin) VALUES (?,?,?,?,?,?,?)");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare create api key");
  s.Bind(1, rec.id).Bind(2, rec.name).Bind(3, rec.prefix).Bind(4, image::Sha256Hex(key)).Bind(5, rec.created_at_ms);
  s.Bind(6, rec.team).Bind(7, int64_t{admin ? 1 : 0});
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "create api key");
  return made;
}

StatusOr<std::vector<ApiKeyRecord>> Registry::ListApiKeys() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT id, name, prefix, created_at, team, admin FROM api_keys ORDER BY created_at");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare list api keys");
  std::vector<ApiKeyRecord> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW)
    out.push_back({s.Text(0), s.Text(1), s.Text(2), s.Int(3), s.Text(4), s.Int(5) != 0});
  AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "list api keys");
  return out;
}

Status Registry::RemoveApiKey(const std::string& id_or_name) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM api_keys WHERE id = ? OR name = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare remove api key");
  s.Bind(1, id_or_name).Bind(2, id_or_name);
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, "remove api key");
  if (sqlite3_changes(db_) == 0) return NotFound("no API key with id or name '" + id_or_name + "'");
  return OkStatus();
}

bool HasE2bKeyFormat(std::string_view key) {
  std::string_view prefix = kApiKeyPrefix;
  if (key.size() <= prefix.size() || key.substr(0, prefix.size()) != prefix) return false;
  return key.find_first_not_of("0123456789abcdef", prefix.size()) == std::string_view::npos;
}

StatusOr<bool> Registry::CheckApiKey(const std::string& key) {
  if (key.empty()) return false;
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT 1 FROM api_keys WHERE hash = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare check api key");
  s.Bind(1, image::Sha256Hex(key));
  int rc = s.Step();
  AIRLOCK_SQL_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, "check api key");
  return rc == SQLITE_ROW;
}

}  // namespace airlock

namespace airlock {

StatusOr<std::string> Registry::ApiKeyId(const std::string& key) {
  if (key.empty()) return std::string();
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT id FROM api_keys WHERE hash = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare api key id");
  s.Bind(1, image::Sha256Hex(key));
  int rc = s.Step();
  AIRLOCK_SQL_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, "api key id");
  if (rc != SQLITE_ROW) return std::string();
  return s.Text(0);
}

}  // namespace airlock

namespace airlock {

namespace {
const char* KindName(OwnedKind k) { return k == OwnedKind::kSandbox ? "sandbox" : "snapshot"; }
}  // namespace

StatusOr<std::optional<ApiKeyRecord>> Registry::LookupApiKey(const std::string& key) {
  if (key.empty()) return std::optional<ApiKeyRecord>();
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT id, name, prefix, created_at, team, admin FROM api_keys WHERE hash = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare lookup api key");
  s.Bind(1, image::Sha256Hex(key));
  int rc = s.Step();
  AIRLOCK_SQL_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, "lookup api key");
  if (rc != SQLITE_ROW) return std::optional<ApiKeyRecord>();
  return std::optional<ApiKeyRecord>(ApiKeyRecord{s.Text(0), s.Text(1), s.Text(2), s.Int(3), s.Text(4), s.Int(5) != 0});
}

StatusOr<std::vector<std::pair<std::string, ApiKeyRecord>>> Registry::ApiKeysByHash() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT hash, id, name, prefix, created_at, team, admin FROM api_keys");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare api key hashes");
  std::vector<std::pair<std::string, ApiKeyRecord>> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    out.emplace_back(s.Text(0), ApiKeyRecord{s.Text(1), s.Text(2), s.Text(3), s.Int(4), s.Text(5), s.Int(6) != 0});
  }
  AIRLOCK_SQL_CHECK(rc == SQLITE_DONE, "api key hashes");
  return out;
}

StatusOr<int64_t> Registry::DataVersion() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "PRAGMA data_version");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare data_version");
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_ROW, "data_version");
  return s.Int(0);
}

Status Registry::SetOwner(OwnedKind kind, const std::string& id, const std::string& team) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "INSERT OR REPLACE INTO owners (kind, id, team, created_at) VALUES (?,?,?,?)");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare set owner");
  s.Bind(1, std::string(KindName(kind))).Bind(2, id).Bind(3, team).Bind(4, NowUnixMs());
  AIRLOCK_SQL_CHECK(s.Step() == SQLITE_DONE, std::string("set owner of ") + KindName(kind) + " " + id);
  return OkStatus();
}

StatusOr<std::optional<std::string>> Registry::OwnerOf(OwnedKind kind, const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT team FROM owners WHERE kind = ? AND id = ?");
  AIRLOCK_SQL_CHECK(s.ok(), "prepare owner of");
  s.Bind(1, std::string(KindName(kind))).Bind(2, id);
  int rc = s.Step();
  AIRLOCK_SQL_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, "owner of " + id);
  if (rc != SQLITE_ROW) return std::optional<std::string>();
  return std::optional<std::string>(s.Text(0));
}

}  // namespace airlock
