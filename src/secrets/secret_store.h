// SecretStore: named secrets encrypted at rest in SQLite (table `secrets`
// of the daemon's database), with AES-256-GCM (secrets/sealed.h) under a key
// kept in a separate file (<state dir>/secrets.key: 32 random bytes, mode
// 0600, created on first use with O_EXCL; refused when its mode lets
// group/others read it, another user owns it or its size is wrong). Each row
// holds a fresh 12-byte nonce, the ciphertext and the 16-byte tag; the
// additional data is "airlock-secret-v1:<name>", so a ciphertext moved to
// another name fails to decrypt.
//
// In a cluster (docs/multinode.md) every node's store holds every secret:
// the store's observer (SetOnChange) hears each committed Set, Create and
// Remove, which the node's secret replica (cluster/secret_replica.h)
// publishes; what other nodes published comes in through ImportSecret and
// RemoveImported, which the observer does not hear.
//
// It also remembers which sandbox references which secret (bindings), so a
// restarted daemon can rebuild the broker table for adopted sandboxes.
//
// Each secret carries its use policy, set by whoever stores it (the local
// operator): the scope it may be given in, the hosts a brokered value may go
// to, and the teams whose keys may name it at create (docs/secrets.md
// "Who may use a secret"). A secret with no teams is usable by admin keys only.
//
// Names: [A-Za-z0-9_][A-Za-z0-9_-]{0,127} (E2B's names, which the secrets
// API lower-cases, and the CLI's environment-variable-like ones). Values:
// kMinSecretBytes..64 KiB.
// Errors: invalid_argument (name/value), not_found, data_loss (decryption
// failed: wrong key file or tampered row), internal (SQLite), errno errors
// for the key file. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

struct sqlite3;

namespace airlock::secrets {

inline constexpr size_t kMaxSecretBytes = 64 * 1024;

enum class Scope { kBrokered, kEnv };
std::string_view ScopeName(Scope s);

// How a stored secret may be used. scope nullopt: as the (admin) caller says.
// hosts: exact names or "*.domain" (brokered only; a request's hosts must be
// covered by them). teams: who besides admin keys may name it.
struct SecretPolicy {
  std::optional<Scope> scope;
  std::vector<std::string> hosts;
  std::vector<std::string> teams;
  std::string ToJson() const;
  static SecretPolicy FromJson(const std::string& text);  // "" or malformed: no policy (admin only)
};
// Does stored pattern `allowed` ("api.x.com" or "*.x.com") cover requested
// host or pattern `wanted`? "*.x.com" covers "a.x.com" and "*.a.x.com", not "x.com".
bool HostCovered(const std::string& allowed, const std::string& wanted);

// What the E2B secrets API (/secrets) keeps about a secret it made, beside
// its policy: its public id ("sec_<26 base32>"), the team that owns it (the
// API shows and changes it only for that team's keys), its version (1 at
// create, +1 per update) and the caller's metadata (string map). Secrets set
// with `airlock secret set` have none (id empty): the API shows them to
// admin keys only.
struct ApiAttributes {
  std::string id;
  std::string owner;
  int64_t version = 0;
  std::map<std::string, std::string> metadata;
  std::string ToJson() const;
  static ApiAttributes FromJson(const std::string& text);  // "" or malformed: none
};

struct SecretInfo {
  std::string name;
  size_t size = 0;
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
  SecretPolicy policy;
  ApiAttributes api;
};

// One secret attached to one sandbox (no value).
struct Binding {
  std::string sandbox;
  std::string name;
  Scope scope = Scope::kBrokered;
  std::string env;                 // variable name in the guest
  std::string placeholder;         // brokered: what the guest sees
  std::vector<std::string> hosts;  // brokered: where the value may go
  // Parsing only (not stored): the request named a scope / hosts.
  bool scope_given = true;
};

// May a key of `team` (admin: any team) name this secret as *b asks? Fills
// b's scope and hosts from the policy where the request left them out.
// PermissionDenied naming the secret and the rule it breaks; InvalidArgument
// when a brokered use ends up with no hosts.
Status CheckUse(const SecretPolicy& policy, const std::string& team, bool admin, Binding* b);

class SecretStore {
 public:
  static StatusOr<std::unique_ptr<SecretStore>> Open(const std::string& db_path, const std::string& key_path);
  ~SecretStore();

  // Stores the value and its policy (both replaced when the name exists;
  // the API attributes too when `api` is given, else kept).
  Status Set(const std::string& name, const std::string& value, const SecretPolicy& policy = {},
             const ApiAttributes* api = nullptr);
  // Like Set, but AlreadyExists when the name is taken.
  Status Create(const std::string& name, const std::string& value, const SecretPolicy& policy,
                const ApiAttributes& api);
  StatusOr<SecretInfo> Info(const std::string& name);  // NotFound
  StatusOr<SecretPolicy> PolicyOf(const std::string& name);  // NotFound
  StatusOr<std::string> Get(const std::string& name);
  StatusOr<std::vector<SecretInfo>> List();
  Status Remove(const std::string& name);  // NotFound

  // Called with the secret's name after each Set, Create and Remove that
  // committed (not after one that failed), on the caller's thread, outside
  // the store's lock (it may call the store). Replaces the previous one;
  // null: none.
  void SetOnChange(std::function<void(const std::string& name)> fn);
  // A secret another node published (the observer is not called): stored
  // under `name` with its value, policy and API attributes (all replaced
  // when the name exists) and the given creation and update times (Unix ms,
  // the publisher's). The name and value rules of Set apply.
  Status ImportSecret(const std::string& name, const std::string& value, const SecretPolicy& policy,
                      const ApiAttributes& api, int64_t created_ms, int64_t updated_ms);
  // A secret another node deleted (the observer is not called): OK when absent.
  Status RemoveImported(const std::string& name);

  Status PutBindings(const std::vector<Binding>& bindings);
  StatusOr<std::vector<Binding>> BindingsOf(const std::string& sandbox);
  Status DeleteBindings(const std::string& sandbox);
  // The sandboxes that have bindings (a restarted daemon drops the rows of
  // sandboxes it did not adopt).
  StatusOr<std::vector<std::string>> BoundSandboxes();

 private:
  enum class Mode { kSet, kCreate, kImport };
  SecretStore() = default;
  Status Write(const std::string& name, const std::string& value, const SecretPolicy& policy, const ApiAttributes* api,
               Mode mode, int64_t created_ms, int64_t updated_ms);
  Status RemoveRow(const std::string& name);
  void Notify(const std::string& name);
  sqlite3* db_ = nullptr;
  std::string key_;  // 32 bytes
  std::mutex mu_;
  std::mutex on_change_mu_;
  std::function<void(const std::string&)> on_change_;
};

Status ValidateSecretName(const std::string& name);
// A guest environment variable's name: [A-Za-z_][A-Za-z0-9_]{0,127}.
Status ValidateEnvName(const std::string& name);

}  // namespace airlock::secrets
