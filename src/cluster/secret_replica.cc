#include "cluster/secret_replica.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/clock.h"
#include "common/log.h"
#include "secrets/sealed.h"
#include "secrets/secret_store.h"

namespace airlock::cluster {

using nlohmann::json;

namespace {

// Rows whose transaction committed up to this long after its timestamp are
// still found by the periodic import.
constexpr int64_t kOverlapMs = 2000;
constexpr std::chrono::seconds kRetryEvery{2};

// What a row's `info` says about a secret (SecretStore::Info's fields).
json InfoJson(const secrets::SecretInfo& info) {
  json j = {{"policy", json::parse(info.policy.ToJson(), nullptr, false)},
            {"size", info.size},
            {"createdAtMs", info.created_at_ms},
            {"updatedAtMs", info.updated_at_ms}};
  if (const std::string api = info.api.ToJson(); !api.empty()) j["api"] = json::parse(api, nullptr, false);
  return j;
}

// The publisher's update time in a row's info (a tombstone's: when it was deleted); 0 when absent.
// A row's info says the secret was deleted (the row is a tombstone).
bool IsTombstone(const std::string& info) {
  const json j = json::parse(info, nullptr, false);
  return j.is_object() && j.contains("deleted") && j["deleted"] == true;
}

int64_t UpdatedMsOf(const std::string& info) {
  json j = json::parse(info, nullptr, false);
  if (!j.is_object() || !j.contains("updatedAtMs") || !j["updatedAtMs"].is_number_integer()) return 0;
  return j["updatedAtMs"].get<int64_t>();
}

}  // namespace

SecretReplica::SecretReplica(ClusterRegistry& registry, StoreFn store, SecretReplicaConfig config,
                             OnImported on_imported)
    : registry_(registry),
      store_(std::move(store)),
      config_(std::move(config)),
      on_imported_(std::move(on_imported)),
      key_ok_(config_.key.size() == secrets::kSealKeyBytes) {
  if (!key_ok_) {
    LOG_ERROR("cluster secrets: the cluster key is {} bytes, not 32: secrets are neither published nor imported",
              config_.key.size());
    return;
  }
  next_import_ = std::chrono::steady_clock::now() + config_.import_every;
  thread_ = std::thread([this] { Loop(); });
}

SecretReplica::~SecretReplica() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  secrets::Wipe(config_.key);
}

void SecretReplica::QueueLocked(const std::string& item) {
  if (std::find(queue_.begin(), queue_.end(), item) == queue_.end()) queue_.push_back(item);
}

void SecretReplica::Changed(const std::string& name) {
  if (!key_ok_) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    QueueLocked(name);  // already queued: one publish reads the latest
  }
  cv_.notify_all();
}

void SecretReplica::Flush() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return stop_ || !key_ok_ || (queue_.empty() && !busy_); });
}

bool SecretReplica::PendingLocked(const std::string& name) const {
  auto is = [&](const std::string& item) { return item.empty() || item == name || item == "?" + name; };
  if (busy_ && is(in_flight_)) return true;
  return std::any_of(queue_.begin(), queue_.end(), is);
}

void SecretReplica::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      // Idle: what other nodes published since the last look.
      if (std::chrono::steady_clock::now() >= next_import_) {
        l.unlock();
        if (Status st = ImportChanged(); !st.ok()) LOG_WARN("cluster secrets: import: {}", st.message());
        l.lock();
        next_import_ = std::chrono::steady_clock::now() + config_.import_every;
      }
      cv_.wait_until(l, next_import_, [this] { return stop_ || !queue_.empty(); });
      continue;
    }
    const std::string item = queue_.front();
    queue_.pop_front();
    busy_ = true;
    in_flight_ = item;
    l.unlock();
    Status st = item.empty()     ? QueueAll()
                : item[0] == '?' ? Publish(item.substr(1), /*only_own=*/true)
                                 : Publish(item, /*only_own=*/false);
    l.lock();
    busy_ = false;
    in_flight_.clear();
    if (!st.ok()) {
      LOG_WARN("cluster secrets: publishing {}: {} (retried in 2 s)", item.empty() ? "every secret" : item,
               st.message());
      QueueLocked(item);
      cv_.wait_for(l, kRetryEvery, [this] { return stop_; });
    }
    cv_.notify_all();
  }
}

Status SecretReplica::QueueAll() {
  ASSIGN_OR_RETURN(secrets::SecretStore * store, store_());
  ASSIGN_OR_RETURN(auto local, store->List());
  ASSIGN_OR_RETURN(auto rows, registry_.SecretsSince(0));
  std::set<std::string> here;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& s : local) {
    here.insert(s.name);
    if (std::find(queue_.begin(), queue_.end(), s.name) == queue_.end()) QueueLocked("?" + s.name);
  }
  // This node's rows of secrets deleted here while the registry was not told.
  for (const auto& row : rows) {
    if (row.publisher == config_.node && !IsTombstone(row.info) && !here.count(row.name) &&
        std::find(queue_.begin(), queue_.end(), row.name) == queue_.end())
      QueueLocked("?" + row.name);
  }
  return OkStatus();
}

Status SecretReplica::Publish(const std::string& name, bool only_own) {
  ASSIGN_OR_RETURN(secrets::SecretStore * store, store_());
  ASSIGN_OR_RETURN(auto rows, registry_.SecretsNamed({name}));
  const ClusterSecretRow* row = rows.empty() ? nullptr : &rows.front();
  auto info = store->Info(name);
  if (!info.ok() && info.status().code() == StatusCode::kNotFound) {
    // Deleted here: a tombstone, so every node drops its copy.
    if (!row || IsTombstone(row->info)) return OkStatus();
    if (only_own && row->publisher != config_.node) return OkStatus();
    // Sealed too (an empty value under its info): only a node with the key deletes.
    const std::string text = json{{"deleted", true}, {"updatedAtMs", NowUnixMs()}}.dump();
    ASSIGN_OR_RETURN(std::string tomb, secrets::Seal(config_.key, secrets::ClusterSecretAad(name, text), ""));
    RETURN_IF_ERROR(registry_.PublishSecret(name, secrets::EncodeBase64(tomb), text, config_.node));
    LOG_INFO("cluster secrets: published the delete of secret {}", name);
    return OkStatus();
  }
  if (!info.ok()) return info.status();
  if (only_own && row) {
    const int64_t row_ms = UpdatedMsOf(row->info);
    if (row->publisher == config_.node) {
      if (!IsTombstone(row->info) && row_ms == info->updated_at_ms) return OkStatus();  // unchanged
    } else if (info->updated_at_ms <= row_ms) {
      return OkStatus();  // another node's row is as new: the import brings it here
    }
  }
  ASSIGN_OR_RETURN(std::string value, store->Get(name));
  // The value and its info (policy, owner, times) sealed together.
  const std::string info_text = InfoJson(*info).dump();
  auto sealed = secrets::Seal(config_.key, secrets::ClusterSecretAad(name, info_text), value);
  secrets::Wipe(value);
  if (!sealed.ok()) return sealed.status();
  const std::string text = secrets::EncodeBase64(*sealed);
  RETURN_IF_ERROR(registry_.PublishSecret(name, text, info_text, config_.node));
  LOG_INFO("cluster secrets: published secret {} ({} bytes)", name, info->size);
  return OkStatus();
}

Status SecretReplica::Apply(const ClusterSecretRow& row, bool* deferred) {
  if (deferred) *deferred = false;
  if (row.publisher == config_.node) return OkStatus();  // this store is its truth
  // A local change of the name waits to be published: it is newer and wins.
  auto pending = [&] {
    std::lock_guard<std::mutex> l(mu_);
    if (!PendingLocked(row.name)) return false;
    if (deferred) *deferred = true;
    return true;
  };
  if (pending()) return OkStatus();
  std::lock_guard<std::mutex> one(apply_mu_);
  if (auto it = applied_.find(row.name); it != applied_.end() && row.updated_ms <= it->second) return OkStatus();
  ASSIGN_OR_RETURN(secrets::SecretStore * store, store_());
  if (pending()) return OkStatus();  // opening the store may have queued Changed("")
  // Skipped for good (until the row changes): a row this node cannot read.
  auto skip = [&](const std::string& why) {
    LOG_WARN("cluster secrets: secret {} published by node {} {}: not imported", row.name, row.publisher, why);
    applied_[row.name] = row.updated_ms;
    return OkStatus();
  };
  // Every row is sealed under its name and info (a tombstone too): one that
  // is not, or does not open, was not written by a node with the key.
  if (row.sealed.empty()) return skip("is not sealed");
  auto sealed = secrets::DecodeBase64(row.sealed);
  if (!sealed.ok()) return skip("is not base64 in the registry");
  auto value = secrets::Unseal(config_.key, secrets::ClusterSecretAad(row.name, row.info), *sealed);
  if (!value.ok()) {
    if (value.status().code() == StatusCode::kDataLoss)
      return skip(
          "does not unseal with this node's cluster key (a node given another --cluster-secrets-key, or a "
          "changed row)");
    return value.status();
  }
  const json info = json::parse(row.info, nullptr, false);
  if (!info.is_object()) {
    secrets::Wipe(*value);
    return skip("has no readable info (not a JSON object)");
  }
  // Never older than this node's copy (a row replayed from before an update).
  const int64_t row_updated = UpdatedMsOf(row.info);
  if (auto local = store->Info(row.name); local.ok() && row_updated <= local->updated_at_ms && !IsTombstone(row.info)) {
    secrets::Wipe(*value);
    applied_[row.name] = row.updated_ms;
    return OkStatus();
  }
  if (IsTombstone(row.info)) {
    secrets::Wipe(*value);
    auto local = store->Info(row.name);
    if (local.ok() && local->updated_at_ms > row_updated) return skip("was deleted before this node's copy was made");
    RETURN_IF_ERROR(store->RemoveImported(row.name).WithContext("removing secret " + row.name));
    if (local.ok()) LOG_INFO("cluster secrets: secret {} was deleted on node {}: removed here", row.name, row.publisher);
    applied_[row.name] = row.updated_ms;
    return OkStatus();
  }
  const auto policy = secrets::SecretPolicy::FromJson(info.contains("policy") ? info["policy"].dump() : "");
  const auto api = secrets::ApiAttributes::FromJson(info.contains("api") ? info["api"].dump() : "");
  const int64_t now = NowUnixMs();
  auto ms = [&](const char* k) {
    return info.contains(k) && info[k].is_number_integer() ? info[k].get<int64_t>() : now;
  };
  Status st = store->ImportSecret(row.name, *value, policy, api, ms("createdAtMs"), ms("updatedAtMs"));
  if (st.ok() && on_imported_) on_imported_(row.name, *value);
  secrets::Wipe(*value);
  if (!st.ok()) {
    if (st.code() == StatusCode::kInvalidArgument) return skip("was refused by this node's store: " + st.message());
    return st.WithContext("importing secret " + row.name + " from node " + row.publisher);
  }
  applied_[row.name] = row.updated_ms;
  LOG_INFO("cluster secrets: imported secret {} from node {}", row.name, row.publisher);
  return OkStatus();
}

Status SecretReplica::Refresh(const std::vector<std::string>& names) {
  if (!key_ok_) return FailedPrecondition("cluster secrets: no valid cluster key (32 bytes)");
  if (names.empty()) return OkStatus();
  // Opening the store (a node's first use) queues the publish of what it
  // holds, and a name waiting to be published is not imported: let the
  // queue drain first (a bounded wait: a registry that is down holds it).
  ASSIGN_OR_RETURN(secrets::SecretStore * store, store_());
  (void)store;
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::seconds(5), [this] { return stop_ || (queue_.empty() && !busy_); });
  }
  ASSIGN_OR_RETURN(auto rows, registry_.SecretsNamed(names));
  for (const auto& row : rows) RETURN_IF_ERROR(Apply(row));
  return OkStatus();
}

Status SecretReplica::ImportChanged() {
  ASSIGN_OR_RETURN(auto rows, registry_.SecretsSince(since_ms_ > kOverlapMs ? since_ms_ - kOverlapMs : 0));
  for (const auto& row : rows) {
    // A failure, or a row deferred behind a local change, stops here: it is
    // read again next time (the rows before it are skipped then: applied_).
    bool deferred = false;
    RETURN_IF_ERROR(Apply(row, &deferred));
    if (deferred) return OkStatus();
    since_ms_ = std::max(since_ms_, row.updated_ms);
  }
  return OkStatus();
}

}  // namespace airlock::cluster
