#include "secrets/secret_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "secrets/redactor.h"
#include "secrets/sealed.h"

namespace airlock::secrets {
namespace {

// Reads the key file (sealed.h's rules), creating it first when absent.
StatusOr<std::string> LoadKey(const std::string& path) {
  RETURN_IF_ERROR(CreateKeyFile(path).status());
  return LoadKeyFile(path);
}

std::string Aad(const std::string& name) { return "airlock-secret-v1:" + name; }

struct Stmt {
  Stmt(sqlite3* db, const char* sql) { ok = sqlite3_prepare_v2(db, sql, -1, &s, nullptr) == SQLITE_OK; }
  ~Stmt() { sqlite3_finalize(s); }
  void Text(int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Blob(int i, const std::string& v) {
    sqlite3_bind_blob(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Int(int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
  std::string Col(int c) const {
    const void* p = sqlite3_column_blob(s, c);
    int n = sqlite3_column_bytes(s, c);
    return p ? std::string(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
  }
  sqlite3_stmt* s = nullptr;
  bool ok = false;
};

Status SqlError(sqlite3* db, const std::string& what) {
  return Internal("secrets db: " + what + ": " + sqlite3_errmsg(db));
}

}  // namespace

std::string_view ScopeName(Scope s) { return s == Scope::kEnv ? "env" : "brokered"; }

Status ValidateSecretName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128 && name[0] != '-';
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  if (!ok) {
    return InvalidArgument("secret name '" + name.substr(0, 64) + "' must match [A-Za-z0-9_][A-Za-z0-9_-]{0,127}");
  }
  return OkStatus();
}

Status ValidateEnvName(const std::string& name) {
  bool ok =
      !name.empty() && name.size() <= 128 && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok) {
    return InvalidArgument("environment variable name '" + name.substr(0, 64) + "' must match [A-Za-z_][A-Za-z0-9_]{0,127}");
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<SecretStore>> SecretStore::Open(const std::string& db_path, const std::string& key_path) {
  std::unique_ptr<SecretStore> s(new SecretStore());
  ASSIGN_OR_RETURN(s->key_, LoadKey(key_path));
  int rc = sqlite3_open_v2(db_path.c_str(), &s->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) return Internal("open " + db_path + ": " + (s->db_ ? sqlite3_errmsg(s->db_) : "out of memory"));
  ::chmod(db_path.c_str(), 0600);
  sqlite3_busy_timeout(s->db_, 5000);
  char* err = nullptr;
  rc = sqlite3_exec(s->db_,
                    "PRAGMA journal_mode=WAL;"
                    "CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, nonce BLOB NOT NULL,"
                    " ciphertext BLOB NOT NULL, tag BLOB NOT NULL, size INTEGER NOT NULL,"
                    " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);"
                    "CREATE TABLE IF NOT EXISTS sandbox_secrets (sandbox TEXT NOT NULL, name TEXT NOT NULL,"
                    " scope TEXT NOT NULL, env TEXT NOT NULL, placeholder TEXT NOT NULL, hosts TEXT NOT NULL,"
                    " PRIMARY KEY (sandbox, name));",
                    nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string m = err ? err : "?";
    sqlite3_free(err);
    return Internal("secrets db: create tables: " + m);
  }
  // v2: each secret's use policy (rows stored before it: admin only).
  if (sqlite3_exec(s->db_, "SELECT policy FROM secrets LIMIT 0", nullptr, nullptr, nullptr) != SQLITE_OK &&
      sqlite3_exec(s->db_, "ALTER TABLE secrets ADD COLUMN policy TEXT NOT NULL DEFAULT ''", nullptr, nullptr,
                   nullptr) != SQLITE_OK) {
    return SqlError(s->db_, "add policy column");
  }
  // v3: the E2B secrets API's attributes (id, owner, version, metadata).
  if (sqlite3_exec(s->db_, "SELECT api FROM secrets LIMIT 0", nullptr, nullptr, nullptr) != SQLITE_OK &&
      sqlite3_exec(s->db_, "ALTER TABLE secrets ADD COLUMN api TEXT NOT NULL DEFAULT ''", nullptr, nullptr,
                   nullptr) != SQLITE_OK) {
    return SqlError(s->db_, "add api column");
  }
  return s;
}

SecretStore::~SecretStore() {
  sqlite3_close_v2(db_);
  Wipe(key_);
}

Status SecretStore::Set(const std::string& name, const std::string& value, const SecretPolicy& policy,
                        const ApiAttributes* api) {
  RETURN_IF_ERROR(Write(name, value, policy, api, Mode::kSet, 0, 0));
  Notify(name);
  return OkStatus();
}

Status SecretStore::Create(const std::string& name, const std::string& value, const SecretPolicy& policy,
                           const ApiAttributes& api) {
  RETURN_IF_ERROR(Write(name, value, policy, &api, Mode::kCreate, 0, 0));
  Notify(name);
  return OkStatus();
}

Status SecretStore::ImportSecret(const std::string& name, const std::string& value, const SecretPolicy& policy,
                                 const ApiAttributes& api, int64_t created_ms, int64_t updated_ms) {
  return Write(name, value, policy, &api, Mode::kImport, created_ms, updated_ms);
}

void SecretStore::SetOnChange(std::function<void(const std::string& name)> fn) {
  std::lock_guard<std::mutex> l(on_change_mu_);
  on_change_ = std::move(fn);
}

void SecretStore::Notify(const std::string& name) {
  std::function<void(const std::string&)> fn;
  {
    std::lock_guard<std::mutex> l(on_change_mu_);
    fn = on_change_;
  }
  if (fn) fn(name);
}

Status SecretStore::Write(const std::string& name, const std::string& value, const SecretPolicy& policy,
                          const ApiAttributes* api, Mode mode, int64_t created_ms, int64_t updated_ms) {
  RETURN_IF_ERROR(ValidateSecretName(name));
  if (value.size() < kMinSecretBytes || value.size() > kMaxSecretBytes) {
    return InvalidArgument("secret value must be " + std::to_string(kMinSecretBytes) + " bytes to 64 KiB (got " +
                           std::to_string(value.size()) + ")");
  }
  // nonce | ciphertext | tag, kept in three columns.
  ASSIGN_OR_RETURN(std::string sealed, Seal(key_, Aad(name), value));
  const std::string nonce = sealed.substr(0, kSealNonceBytes);
  const std::string ct = sealed.substr(kSealNonceBytes, value.size());
  const std::string tag = sealed.substr(kSealNonceBytes + value.size());
  const int64_t now = NowUnixMs();
  if (mode != Mode::kImport) created_ms = updated_ms = now;
  std::lock_guard<std::mutex> l(mu_);
  std::string sql =
      "INSERT INTO secrets (name, nonce, ciphertext, tag, size, created_at, updated_at, policy, api)"
      " VALUES (?,?,?,?,?,?,?,?,?)";
  if (mode != Mode::kCreate) {
    sql += " ON CONFLICT(name) DO UPDATE SET nonce=excluded.nonce, ciphertext=excluded.ciphertext, tag=excluded.tag,"
           " size=excluded.size, updated_at=excluded.updated_at, policy=excluded.policy";
    if (api) sql += ", api=excluded.api";
    if (mode == Mode::kImport) sql += ", created_at=excluded.created_at";
  }
  Stmt s(db_, sql.c_str());
  if (!s.ok) return SqlError(db_, "prepare set");
  s.Text(1, name);
  s.Blob(2, nonce);
  s.Blob(3, ct);
  s.Blob(4, tag);
  s.Int(5, static_cast<int64_t>(value.size()));
  s.Int(6, created_ms);
  s.Int(7, updated_ms);
  s.Text(8, policy.ToJson());
  s.Text(9, api ? api->ToJson() : std::string());
  int rc = sqlite3_step(s.s);
  if (mode == Mode::kCreate &&
      (rc == SQLITE_CONSTRAINT || sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_PRIMARYKEY)) {
    return Status(StatusCode::kAlreadyExists, "secret " + name + " already exists");
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "set " + name);
  return OkStatus();
}

StatusOr<std::string> SecretStore::Get(const std::string& name) {
  RETURN_IF_ERROR(ValidateSecretName(name));
  std::string sealed;
  {
    std::lock_guard<std::mutex> l(mu_);
    Stmt s(db_, "SELECT nonce, ciphertext, tag FROM secrets WHERE name = ?");
    if (!s.ok) return SqlError(db_, "prepare get");
    s.Text(1, name);
    int rc = sqlite3_step(s.s);
    if (rc == SQLITE_DONE) return NotFound("secret " + name + " does not exist (airlock secret set " + name + ")");
    if (rc != SQLITE_ROW) return SqlError(db_, "get " + name);
    const std::string nonce = s.Col(0), tag = s.Col(2);
    if (nonce.size() != kSealNonceBytes || tag.size() != kSealTagBytes)
      return Status(StatusCode::kDataLoss, "secret " + name + ": malformed row");
    sealed = nonce + s.Col(1) + tag;
  }
  auto pt = Unseal(key_, Aad(name), sealed);
  if (!pt.ok() && pt.status().code() == StatusCode::kDataLoss)
    return Status(StatusCode::kDataLoss, "secret " + name + ": decryption failed (wrong key file or tampered row)");
  return pt;
}

StatusOr<SecretPolicy> SecretStore::PolicyOf(const std::string& name) {
  RETURN_IF_ERROR(ValidateSecretName(name));
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT policy FROM secrets WHERE name = ?");
  if (!s.ok) return SqlError(db_, "prepare policy");
  s.Text(1, name);
  int rc = sqlite3_step(s.s);
  if (rc == SQLITE_DONE) return NotFound("secret " + name + " does not exist (airlock secret set " + name + ")");
  if (rc != SQLITE_ROW) return SqlError(db_, "policy of " + name);
  return SecretPolicy::FromJson(s.Col(0));
}

StatusOr<SecretInfo> SecretStore::Info(const std::string& name) {
  RETURN_IF_ERROR(ValidateSecretName(name));
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT name, size, created_at, updated_at, policy, api FROM secrets WHERE name = ?");
  if (!s.ok) return SqlError(db_, "prepare info");
  s.Text(1, name);
  int rc = sqlite3_step(s.s);
  if (rc == SQLITE_DONE) return NotFound("secret " + name + " does not exist");
  if (rc != SQLITE_ROW) return SqlError(db_, "info of " + name);
  return SecretInfo{s.Col(0), static_cast<size_t>(sqlite3_column_int64(s.s, 1)), sqlite3_column_int64(s.s, 2),
                    sqlite3_column_int64(s.s, 3), SecretPolicy::FromJson(s.Col(4)), ApiAttributes::FromJson(s.Col(5))};
}

StatusOr<std::vector<SecretInfo>> SecretStore::List() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT name, size, created_at, updated_at, policy, api FROM secrets ORDER BY name");
  if (!s.ok) return SqlError(db_, "prepare list");
  std::vector<SecretInfo> out;
  int rc;
  while ((rc = sqlite3_step(s.s)) == SQLITE_ROW) {
    out.push_back({s.Col(0), static_cast<size_t>(sqlite3_column_int64(s.s, 1)), sqlite3_column_int64(s.s, 2),
                   sqlite3_column_int64(s.s, 3), SecretPolicy::FromJson(s.Col(4)), ApiAttributes::FromJson(s.Col(5))});
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "list");
  return out;
}

Status SecretStore::Remove(const std::string& name) {
  RETURN_IF_ERROR(RemoveRow(name));
  Notify(name);
  return OkStatus();
}

Status SecretStore::RemoveRow(const std::string& name) {
  RETURN_IF_ERROR(ValidateSecretName(name));
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM secrets WHERE name = ?");
  if (!s.ok) return SqlError(db_, "prepare remove");
  s.Text(1, name);
  if (sqlite3_step(s.s) != SQLITE_DONE) return SqlError(db_, "remove " + name);
  if (sqlite3_changes(db_) == 0) return NotFound("secret " + name + " does not exist");
  return OkStatus();
}

Status SecretStore::RemoveImported(const std::string& name) {
  Status st = RemoveRow(name);
  return st.code() == StatusCode::kNotFound ? OkStatus() : st;
}

Status SecretStore::PutBindings(const std::vector<Binding>& bindings) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& b : bindings) {
    Stmt s(
        db_,
        "INSERT OR REPLACE INTO sandbox_secrets (sandbox, name, scope, env, placeholder, hosts) VALUES (?,?,?,?,?,?)");
    if (!s.ok) return SqlError(db_, "prepare binding");
    s.Text(1, b.sandbox);
    s.Text(2, b.name);
    s.Text(3, std::string(ScopeName(b.scope)));
    s.Text(4, b.env);
    s.Text(5, b.placeholder);
    s.Text(6, nlohmann::json(b.hosts).dump());
    if (sqlite3_step(s.s) != SQLITE_DONE) return SqlError(db_, "put binding");
  }
  return OkStatus();
}

StatusOr<std::vector<Binding>> SecretStore::BindingsOf(const std::string& sandbox) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT name, scope, env, placeholder, hosts FROM sandbox_secrets WHERE sandbox = ? ORDER BY name");
  if (!s.ok) return SqlError(db_, "prepare bindings");
  s.Text(1, sandbox);
  std::vector<Binding> out;
  while (sqlite3_step(s.s) == SQLITE_ROW) {
    Binding b;
    b.sandbox = sandbox;
    b.name = s.Col(0);
    b.scope = s.Col(1) == "env" ? Scope::kEnv : Scope::kBrokered;
    b.env = s.Col(2);
    b.placeholder = s.Col(3);
    auto hosts = nlohmann::json::parse(s.Col(4), nullptr, false);
    if (hosts.is_array()) {
      for (auto& h : hosts) {
        if (h.is_string()) b.hosts.push_back(h.get<std::string>());
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

Status SecretStore::DeleteBindings(const std::string& sandbox) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "DELETE FROM sandbox_secrets WHERE sandbox = ?");
  if (!s.ok) return SqlError(db_, "prepare delete bindings");
  s.Text(1, sandbox);
  if (sqlite3_step(s.s) != SQLITE_DONE) return SqlError(db_, "delete bindings");
  return OkStatus();
}

StatusOr<std::vector<std::string>> SecretStore::BoundSandboxes() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT DISTINCT sandbox FROM sandbox_secrets ORDER BY sandbox");
  if (!s.ok) return SqlError(db_, "prepare bound sandboxes");
  std::vector<std::string> out;
  int rc;
  while ((rc = sqlite3_step(s.s)) == SQLITE_ROW) out.push_back(s.Col(0));
  if (rc != SQLITE_DONE) return SqlError(db_, "bound sandboxes");
  return out;
}

}  // namespace airlock::secrets

namespace airlock::secrets {

std::string SecretPolicy::ToJson() const {
  nlohmann::json j = {{"hosts", hosts}, {"teams", teams}};
  if (scope) j["scope"] = std::string(ScopeName(*scope));
  return j.dump();
}

SecretPolicy SecretPolicy::FromJson(const std::string& text) {
  SecretPolicy p;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return p;
  auto strings = [&](const char* k) {
    std::vector<std::string> out;
    if (j.contains(k) && j[k].is_array())
      for (auto& v : j[k])
        if (v.is_string()) out.push_back(v.get<std::string>());
    return out;
  };
  std::string scope = j.contains("scope") && j["scope"].is_string() ? j["scope"].get<std::string>() : "";
  if (scope == "env") p.scope = Scope::kEnv;
  if (scope == "brokered") p.scope = Scope::kBrokered;
  p.hosts = strings("hosts");
  p.teams = strings("teams");
  return p;
}

std::string ApiAttributes::ToJson() const {
  if (id.empty()) return "";
  return nlohmann::json{{"id", id}, {"owner", owner}, {"version", version}, {"metadata", metadata}}.dump();
}

ApiAttributes ApiAttributes::FromJson(const std::string& text) {
  ApiAttributes a;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) return a;
  a.id = j["id"].get<std::string>();
  if (j.contains("owner") && j["owner"].is_string()) a.owner = j["owner"].get<std::string>();
  if (j.contains("version") && j["version"].is_number_integer()) a.version = j["version"].get<int64_t>();
  if (j.contains("metadata") && j["metadata"].is_object()) {
    for (auto& [k, v] : j["metadata"].items())
      if (v.is_string()) a.metadata[k] = v.get<std::string>();
  }
  return a;
}

bool HostCovered(const std::string& allowed, const std::string& wanted) {
  if (allowed == wanted) return true;
  if (allowed.rfind("*.", 0) != 0) return false;
  std::string suffix = allowed.substr(1);  // ".x.com"
  std::string w = wanted.rfind("*.", 0) == 0 ? wanted.substr(1) : wanted;
  return w.size() > suffix.size() && w.compare(w.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status CheckUse(const SecretPolicy& policy, const std::string& team, bool admin, Binding* b) {
  const std::string who = "secret " + b->name + ": ";
  if (!admin && std::find(policy.teams.begin(), policy.teams.end(), team) == policy.teams.end()) {
    return PermissionDenied(who + "this key's team may not use it (its owner grants teams with airlock secret set --team)");
  }
  if (policy.scope) {
    if (!b->scope_given) b->scope = *policy.scope;
    if (b->scope != *policy.scope) {
      return PermissionDenied(who + "stored for scope \"" + std::string(ScopeName(*policy.scope)) +
                              "\", requested as \"" + std::string(ScopeName(b->scope)) + "\"");
    }
  }
  if (b->scope == Scope::kEnv && !b->hosts.empty()) return InvalidArgument(who + "hosts only apply to scope \"brokered\"");
  if (b->scope == Scope::kBrokered) {
    if (b->hosts.empty()) b->hosts = policy.hosts;
    if (b->hosts.empty()) return InvalidArgument(who + "scope \"brokered\" needs hosts");
    if (policy.scope) {
      for (const auto& h : b->hosts) {
        bool ok = std::any_of(policy.hosts.begin(), policy.hosts.end(),
                              [&](const std::string& a) { return HostCovered(a, h); });
        if (!ok) return PermissionDenied(who + "may not be brokered to '" + h + "' (stored hosts: " +
                                         nlohmann::json(policy.hosts).dump() + ")");
      }
    }
  }
  return OkStatus();
}

}  // namespace airlock::secrets
