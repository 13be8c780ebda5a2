// A PostgreSQL connection through libpq (Debian's libpq5), the cluster
// registry's only door to the database (docs/multinode.md).
//
// Shapes: parameters are text ($1..$n; nullopt is SQL NULL); results are
// rows of text cells (nullopt for NULL) in the order of the query's columns.
// Errors: Unavailable when the server cannot be reached or the connection
// broke (the next Exec reconnects), Aborted for a serialization failure or a
// deadlock (retry), InvalidArgument for a bad statement, Internal otherwise;
// each message carries PostgreSQL's own text.
// Thread-safety: a PgConn is one connection: one caller at a time. PgPool
// hands out connections to many threads.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

typedef struct pg_conn PGconn;

namespace airlock::cluster {

using PgParam = std::optional<std::string>;

struct PgRows {
  std::vector<std::vector<std::optional<std::string>>> rows;
  int64_t affected = 0;  // rows an INSERT/UPDATE/DELETE touched
  // Cell (r, c) as text, "" for NULL.
  std::string Text(size_t r, size_t c) const { return rows.at(r).at(c).value_or(""); }
  bool empty() const { return rows.empty(); }
};

struct PgNotification {
  std::string channel, payload;
};

class PgConn {
 public:
  // `url`: a libpq connection URI ("postgres://user@host:port/db?...") or
  // key=value string.
  static StatusOr<std::unique_ptr<PgConn>> Connect(const std::string& url);
  ~PgConn();
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;

  // One statement with parameters (the extended protocol: no SQL injection
  // through a parameter). Reconnects first when the connection is broken.
  StatusOr<PgRows> Exec(const std::string& sql, const std::vector<PgParam>& params = {});
  // Several statements without parameters (migrations), in one round trip.
  Status ExecScript(const std::string& sql);
  // LISTEN support: the socket to wait on, then the notifications it holds.
  int socket() const;
  StatusOr<std::vector<PgNotification>> TakeNotifications();
  bool healthy() const;

 private:
  explicit PgConn(std::string url) : url_(std::move(url)) {}
  Status EnsureConnected();
  std::string url_;
  PGconn* conn_ = nullptr;
};

// A fixed number of connections, opened lazily; Acquire() blocks while all
// are in use.
class PgPool {
 public:
  PgPool(std::string url, size_t size) : url_(std::move(url)), size_(size) {}
  class Lease {
   public:
    Lease(PgPool* pool, std::unique_ptr<PgConn> c) : pool_(pool), c_(std::move(c)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (pool_ && c_) pool_->Return(std::move(c_));
    }
    PgConn* operator->() { return c_.get(); }

   private:
    PgPool* pool_;
    std::unique_ptr<PgConn> c_;
  };
  StatusOr<Lease> Acquire();
  // Exec on a pooled connection.
  StatusOr<PgRows> Exec(const std::string& sql, const std::vector<PgParam>& params = {});
  const std::string& url() const { return url_; }

 private:
  void Return(std::unique_ptr<PgConn> c);
  std::string url_;
  size_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<PgConn>> idle_;
  size_t open_ = 0;
};

}  // namespace airlock::cluster
