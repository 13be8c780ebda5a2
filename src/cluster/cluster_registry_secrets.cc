// ClusterRegistry's secrets (table cluster_secrets, cluster_registry.h):
// what a node's secret replica publishes and imports (secret_replica.h).
// The registry never sees a value in clear: `sealed` is sealed by the node
// with the cluster key before it gets here.
#include <nlohmann/json.hpp>

#include "cluster/cluster_registry.h"
#include "secrets/secret_store.h"

namespace airlock::cluster {

Status ClusterRegistry::PublishSecret(const std::string& name, const std::string& sealed, const std::string& info,
                                      const std::string& publisher) {
  RETURN_IF_ERROR(secrets::ValidateSecretName(name));
  if (publisher.empty()) return InvalidArgument("a published secret needs its publisher");
  return pool_
      .Exec(
          "INSERT INTO cluster_secrets (name, sealed, info, publisher, updated_at) VALUES ($1, $2, $3, $4, now()) "
          "ON CONFLICT (name) DO UPDATE SET sealed = EXCLUDED.sealed, info = EXCLUDED.info, "
          "publisher = EXCLUDED.publisher, updated_at = now()",
          {name, sealed.empty() ? PgParam() : PgParam(sealed), info.empty() ? std::string("{}") : info, publisher})
      .status();
}

StatusOr<std::vector<ClusterSecretRow>> ClusterRegistry::SecretsSince(int64_t since_ms) {
  return SecretsWhere("updated_at >= to_timestamp($1::float8 / 1000)", std::to_string(since_ms));
}

StatusOr<std::vector<ClusterSecretRow>> ClusterRegistry::SecretsNamed(const std::vector<std::string>& names) {
  // Only secret names can have rows (and they are plain ASCII).
  nlohmann::json valid = nlohmann::json::array();
  for (const auto& n : names) {
    if (secrets::ValidateSecretName(n).ok()) valid.push_back(n);
  }
  if (valid.empty()) return std::vector<ClusterSecretRow>();
  // A JSON array: no text[] quoting rules.
  return SecretsWhere("name IN (SELECT json_array_elements_text($1::json))", valid.dump());
}

StatusOr<std::vector<ClusterSecretRow>> ClusterRegistry::SecretsWhere(const std::string& where,
                                                                      const std::string& arg) {
  // floor: a row's ms never rounds up past itself (SecretsSince of its own ms finds it).
  ASSIGN_OR_RETURN(auto r, pool_.Exec("SELECT name, sealed, info, publisher, "
                                      "floor(extract(epoch FROM updated_at) * 1000)::bigint FROM cluster_secrets "
                                      "WHERE " +
                                          where + " ORDER BY updated_at, name",
                                      {arg}));
  std::vector<ClusterSecretRow> out;
  out.reserve(r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    ClusterSecretRow row;
    row.name = r.Text(i, 0);
    row.sealed = r.Text(i, 1);  // NULL: ""
    row.info = r.Text(i, 2);
    row.publisher = r.Text(i, 3);
    row.updated_ms = std::stoll(r.Text(i, 4));
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace airlock::cluster
