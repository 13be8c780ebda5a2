#include "gateway/api_keys.h"

#include <boost/asio/post.hpp>

#include "common/log.h"

#include "image/hash.h"

namespace airlock::gateway {

ApiKeySource RegistryKeySource(Registry* registry) {
  return {[registry] { return registry->DataVersion(); }, [registry] { return registry->ApiKeysByHash(); }};
}

Status ApiKeyTable::Reload() {
  std::lock_guard<std::mutex> r(reload_mu_);
  // The version first: a commit between the two reads makes the next
  // RefreshIfStale load again instead of missing it.
  ASSIGN_OR_RETURN(int64_t version, source_.version());
  ASSIGN_OR_RETURN(auto rows, source_.rows());
  auto table = std::make_shared<Table>();
  for (auto& [hash, rec] : rows) table->emplace(std::move(hash), std::move(rec));
  {
    std::lock_guard<std::mutex> l(mu_);
    keys_ = std::move(table);
  }
  version_ = version;
  return OkStatus();
}

Status ApiKeyTable::RefreshIfStale() {
  {
    std::lock_guard<std::mutex> r(reload_mu_);
    ASSIGN_OR_RETURN(int64_t version, source_.version());
    if (version == version_) return OkStatus();
  }
  return Reload();
}

std::optional<ApiKeyRecord> ApiKeyTable::Find(std::string_view key) const {
  if (key.empty()) return std::nullopt;
  std::string hash = image::Sha256Hex(key);
  std::shared_ptr<const Table> keys;
  {
    std::lock_guard<std::mutex> l(mu_);
    keys = keys_;
  }
  auto it = keys->find(hash);
  if (it == keys->end()) return std::nullopt;
  return it->second;
}

size_t ApiKeyTable::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return keys_->size();
}

void ApiKeyTable::RefreshEvery(boost::asio::io_context& io, boost::asio::thread_pool& lookups,
                               std::chrono::milliseconds period) {
  refresh_ = std::make_unique<control::Ticker>(io, period, [this, &lookups] {
    if (refresh_in_flight_.exchange(true)) return;
    boost::asio::post(lookups, [this] {
      if (Status st = RefreshIfStale(); !st.ok()) LOG_WARN("api keys: {}", st.message());
      refresh_in_flight_ = false;
    });
  });
  refresh_->Start();
}

void ApiKeyTable::StopRefresh() {
  if (refresh_) refresh_->Stop();
}

std::string PresentedApiKey(const HttpConn& c, bool allow_bearer) {
  std::string key = c.Header("X-API-Key");
  if (key.empty() && allow_bearer) {
    std::string auth = c.Header("Authorization");
    if (auth.size() > 7 && (auth.rfind("Bearer ", 0) == 0 || auth.rfind("bearer ", 0) == 0)) key = auth.substr(7);
  }
  return key;
}

}  // namespace airlock::gateway
