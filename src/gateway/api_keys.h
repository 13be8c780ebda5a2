// The control plane's API keys in memory (docs/security.md "Tenancy"): the
// X-API-Key of a request is checked against a table of key hashes (the
// SHA-256 hex the registry stores, never a clear key), so the event-loop
// thread never waits on SQLite to authenticate a request.
//
// Freshness: keys are made and removed by `airlock apikey` (another process
// on the same registry) and by the daemon itself (cli.key at start). The
// table is reloaded
//   - by Reload() after the daemon's own changes,
//   - by RefreshIfStale() when SQLite's data_version says another connection
//     committed: the daemon calls it once per reaper tick (a removed key stops
//     working within about a second) and before answering 401 to a key the
//     table does not hold (a key created a moment ago works at once).
// Reload and RefreshIfStale block on SQLite: call them off the event loop.
// Find is memory only and thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>

#include "common/status.h"
#include "gateway/http_conn.h"
#include "control/ticker.h"
#include "core/registry.h"

namespace airlock::gateway {

// Where the keys are read from: the daemon's registry (SQLite), or the
// cluster registry (PostgreSQL, cluster/cluster_registry.h) on a cluster's
// nodes and fronts. `version` changes whenever a key is added or removed.
struct ApiKeySource {
  std::function<StatusOr<int64_t>()> version;
  std::function<StatusOr<std::vector<std::pair<std::string, ApiKeyRecord>>>()> rows;  // (hash, record)
};
ApiKeySource RegistryKeySource(Registry* registry);

// The API key a request presents: X-API-Key, else (allow_bearer: /mcp,
// where MCP clients send one) "Authorization: Bearer <key>"; "" for none.
std::string PresentedApiKey(const HttpConn& c, bool allow_bearer);

class ApiKeyTable {
 public:
  explicit ApiKeyTable(Registry* registry) : source_(RegistryKeySource(registry)) {}
  explicit ApiKeyTable(ApiKeySource source) : source_(std::move(source)) {}
  // Reads every key from the registry.
  Status Reload();
  // Reload() when the database changed since the last load (a cheap
  // PRAGMA data_version otherwise).
  Status RefreshIfStale();
  // The record of `key`, nullopt when it is no stored key (or empty).
  std::optional<ApiKeyRecord> Find(std::string_view key) const;
  size_t size() const;
  // Keys removed (or added) by `airlock apikey` reach the table within
  // `period`: a RefreshIfStale on `lookups` per tick (never two at once; a
  // cheap data_version check when nothing changed). StopRefresh on the io
  // thread; the table outlives both.
  void RefreshEvery(boost::asio::io_context& io, boost::asio::thread_pool& lookups, std::chrono::milliseconds period);
  void StopRefresh();

 private:
  using Table = std::unordered_map<std::string, ApiKeyRecord>;  // by hash
  ApiKeySource source_;
  std::mutex reload_mu_;  // one reload at a time
  std::unique_ptr<control::Ticker> refresh_;
  std::atomic<bool> refresh_in_flight_{false};
  mutable std::mutex mu_;
  std::shared_ptr<const Table> keys_ = std::make_shared<Table>();  // guarded by mu_
  int64_t version_ = -1;                                           // guarded by reload_mu_
};

}  // namespace airlock::gateway
