#include "cluster/pg.h"

#include <libpq-fe.h>

#include <cstring>

namespace airlock::cluster {
namespace {

std::string ConnError(PGconn* c) {
  std::string m = c ? PQerrorMessage(c) : "out of memory";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

Status ResultError(PGresult* r, PGconn* c) {
  const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  std::string msg = PQresultErrorMessage(r);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (msg.empty()) msg = ConnError(c);
  std::string code = state ? state : "";
  if (PQstatus(c) != CONNECTION_OK) return Unavailable("postgres: " + msg);
  // 40001 serialization_failure, 40P01 deadlock_detected.
  if (code == "40001" || code == "40P01") return Status(StatusCode::kAborted, "postgres: " + msg);
  // Class 42: syntax error or access rule violation; 22: data exception.
  if (code.rfind("42", 0) == 0 || code.rfind("22", 0) == 0) return InvalidArgument("postgres: " + msg);
  return Internal("postgres (" + code + "): " + msg);
}

}  // namespace

StatusOr<std::unique_ptr<PgConn>> PgConn::Connect(const std::string& url) {
  std::unique_ptr<PgConn> c(new PgConn(url));
  RETURN_IF_ERROR(c->EnsureConnected());
  return c;
}

PgConn::~PgConn() {
  if (conn_) PQfinish(conn_);
}

bool PgConn::healthy() const { return conn_ && PQstatus(conn_) == CONNECTION_OK; }

Status PgConn::EnsureConnected() {
  if (healthy()) return OkStatus();
  if (conn_) {
    PQfinish(conn_);
    conn_ = nullptr;
  }
  // A bounded connect, so a node or front whose database is gone learns it
  // in seconds rather than at the kernel's TCP timeout.
  const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
  const char* vals[] = {url_.c_str(), "5", "airlock", nullptr};
  conn_ = PQconnectdbParams(keys, vals, /*expand_dbname=*/1);
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
    std::string m = ConnError(conn_);
    if (conn_) PQfinish(conn_);
    conn_ = nullptr;
    return Unavailable("postgres: cannot connect: " + m);
  }
  // NOTICEs ("relation ... already exists, skipping") are not errors: not on stderr.
  PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
  return OkStatus();
}

StatusOr<PgRows> PgConn::Exec(const std::string& sql, const std::vector<PgParam>& params) {
  RETURN_IF_ERROR(EnsureConnected());
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  PGresult* r = PQexecParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr, values.data(), nullptr,
                             nullptr, 0);
  if (!r) return Unavailable("postgres: " + ConnError(conn_));
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    Status e = ResultError(r, conn_);
    PQclear(r);
    return e;
  }
  PgRows out;
  int n = PQntuples(r), cols = PQnfields(r);
  out.rows.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& row = out.rows[static_cast<size_t>(i)];
    row.reserve(static_cast<size_t>(cols));
    for (int j = 0; j < cols; ++j) {
      if (PQgetisnull(r, i, j)) row.emplace_back(std::nullopt);
      else row.emplace_back(std::string(PQgetvalue(r, i, j), static_cast<size_t>(PQgetlength(r, i, j))));
    }
  }
  const char* tuples = PQcmdTuples(r);
  out.affected = tuples && *tuples ? std::strtoll(tuples, nullptr, 10) : 0;
  PQclear(r);
  return out;
}

Status PgConn::ExecScript(const std::string& sql) {
  RETURN_IF_ERROR(EnsureConnected());
  PGresult* r = PQexec(conn_, sql.c_str());
  if (!r) return Unavailable("postgres: " + ConnError(conn_));
  ExecStatusType st = PQresultStatus(r);
  Status out = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? OkStatus() : ResultError(r, conn_);
  PQclear(r);
  return out;
}

int PgConn::socket() const { return conn_ ? PQsocket(conn_) : -1; }

StatusOr<std::vector<PgNotification>> PgConn::TakeNotifications() {
  if (!healthy()) return Unavailable("postgres: connection lost");
  if (!PQconsumeInput(conn_)) return Unavailable("postgres: " + ConnError(conn_));
  std::vector<PgNotification> out;
  while (PGnotify* n = PQnotifies(conn_)) {
    out.push_back({n->relname ? n->relname : "", n->extra ? n->extra : ""});
    PQfreemem(n);
  }
  return out;
}

StatusOr<PgPool::Lease> PgPool::Acquire() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return !idle_.empty() || open_ < size_; });
  if (!idle_.empty()) {
    auto c = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(c));
  }
  ++open_;
  l.unlock();
  auto c = PgConn::Connect(url_);
  if (!c.ok()) {
    std::lock_guard<std::mutex> g(mu_);
    --open_;
    cv_.notify_one();
    return c.status();
  }
  return Lease(this, std::move(*c));
}

void PgPool::Return(std::unique_ptr<PgConn> c) {
  std::lock_guard<std::mutex> l(mu_);
  idle_.push_back(std::move(c));
  cv_.notify_one();
}

StatusOr<PgRows> PgPool::Exec(const std::string& sql, const std::vector<PgParam>& params) {
  ASSIGN_OR_RETURN(auto lease, Acquire());
  return lease->Exec(sql, params);
}

}  // namespace airlock::cluster
