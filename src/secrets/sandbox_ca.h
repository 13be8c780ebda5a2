// SandboxCa: the per-sandbox certificate authority for brokered secrets over
// HTTPS (docs/secrets.md). The egress proxy intercepts TLS only for hosts a
// brokered secret may go to and presents a leaf minted here; the guest
// trusts the CA because its certificate (never its key) is installed in the
// guest's trust store at create.
//
// Shape: ECDSA P-256 keys; CA: CN "airlock sandbox <id>", basicConstraints
// CA:TRUE pathlen:0 (critical), keyUsage keyCertSign|cRLSign (critical), and
// a critical nameConstraints extension permitting only the secret's hosts
// ("*.x.com" → "x.com"), so even a leaked CA key cannot impersonate any other
// site to a client that honours name constraints. Leaves: SAN DNS:<host>,
// serverAuth, valid as long as the CA, cached per host (the newest
// kMaxCachedLeaves hosts: a wildcard host lets a guest ask for ever new
// names for as long as it lives; a host dropped is minted again).
// Thread-safe. Errors: internal (OpenSSL, with its message), permission_denied
// for a leaf outside the permitted hosts.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

typedef struct evp_pkey_st EVP_PKEY;
typedef struct x509_st X509;

namespace airlock::secrets {

struct CertAndKey {
  std::string cert_pem;
  std::string key_pem;
};

class SandboxCa {
 public:
  static StatusOr<std::shared_ptr<SandboxCa>> Generate(const std::string& sandbox_id,
                                                       const std::vector<std::string>& hosts,
                                                       std::chrono::seconds validity);
  ~SandboxCa();
  const std::string& cert_pem() const { return cert_pem_; }
  const std::vector<std::string>& hosts() const { return hosts_; }
  // A leaf certificate for `host` (port ignored), minted once and cached.
  StatusOr<CertAndKey> LeafFor(const std::string& host);
  // Leaves kept at most (about 1 KiB each): more than the distinct hosts
  // a sandbox's clients talk to through its brokered secrets at once.
  static constexpr size_t kMaxCachedLeaves = 1024;
  size_t cached_leaves() const;

 private:
  SandboxCa() = default;
  std::vector<std::string> hosts_;
  EVP_PKEY* key_ = nullptr;
  X509* cert_ = nullptr;
  std::string cert_pem_;
  std::chrono::seconds validity_{0};
  mutable std::mutex mu_;
  std::map<std::string, CertAndKey> leaves_;  // guarded by mu_
  std::deque<std::string> leaf_order_;        // leaves_'s hosts, oldest first; guarded by mu_
};

}  // namespace airlock::secrets
