// One prepared SQLite statement, finalized on scope exit: the registry's
// (core/registry.cc) and the template store's (templates/template_store.cc)
// way of binding and reading. Not thread-safe; the caller holds its
// connection's lock.
#pragma once

#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace airlock {

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& BindNull(int i) {
    sqlite3_bind_null(s_, i);
    return *this;
  }
  int Step() { return sqlite3_step(s_); }
  std::string Text(int col) const {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, col))) : std::string();
  }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

// Runs `sql` (one or more statements, no results). Internal naming `what`
// with SQLite's message on failure.
inline Status ExecSql(sqlite3* db, const std::string& sql, const char* what) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Internal(std::string("sqlite ") + what + ": " + msg);
  }
  return OkStatus();
}

// Opens (creating it 0600) the database at `path` as every store of the
// daemon's database does: serialized connection, 5 s busy timeout, WAL
// journal. `*db` is set even on failure (the caller closes it). Internal
// with SQLite's message on failure.
inline Status OpenSharedDb(const std::string& path, sqlite3** db) {
  mode_t old = ::umask(077);
  int rc = sqlite3_open_v2(path.c_str(), db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  ::umask(old);
  if (rc != SQLITE_OK) {
    std::string msg = *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc);
    return Internal("open database " + path + ": " + msg);
  }
  sqlite3_busy_timeout(*db, 5000);
  return ExecSql(*db, "PRAGMA journal_mode=WAL", "set WAL");
}

}  // namespace airlock
