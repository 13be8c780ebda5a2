// RequestBroker: what the egress proxy asks about brokered credentials
// (issue 6, docs/secrets.md). The egress module knows nothing of the secret
// store; the server implements this over secrets::Broker and SandboxCa.
//
// For a request from `sandbox` to `host` (a normalised DNS name, port
// stripped), the proxy:
//   - intercepts TLS when Intercepts() is true or the sandbox's network.rules
//     have a rule for the host, presenting LeafFor()'s certificate (signed by
//     the sandbox's CA, which the guest trusts; the CA key never leaves the
//     daemon);
//   - on every intercepted HTTPS request, calls Substitute() on the header
//     list (the placeholder → value swap happens only here, in the daemon);
//   - masks every form of ResponseForms() in the responses relayed back to
//     the guest on an intercepted connection (an upstream that echoes the
//     request would otherwise hand the guest the value).
// Brokered values are substituted over HTTPS only, never into plain HTTP:
// a credential never crosses a network in clear text.
// Called on the egress loop thread; implementations must not block on I/O.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace airlock::egress {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct LeafCertificate {
  std::string cert_pem;  // leaf, then nothing else (the guest holds the CA)
  std::string key_pem;   // PKCS#8 private key of the leaf
};

class RequestBroker {
 public:
  virtual ~RequestBroker() = default;
  // Does a secret of `sandbox` go to `host`?
  virtual bool Intercepts(const std::string& sandbox, const std::string& host) = 0;
  // A leaf for `host` under the sandbox's CA. NotFound: the sandbox has no CA;
  // PermissionDenied: `host` is outside the CA's name constraints.
  virtual StatusOr<LeafCertificate> LeafFor(const std::string& sandbox, const std::string& host) = 0;
  // Swaps the sandbox's placeholders allowed for `host` in `headers`' values;
  // returns the names of the secrets used (never values).
  virtual std::vector<std::string> Substitute(const std::string& sandbox, const std::string& host,
                                              HeaderList* headers) = 0;
  // Every byte string a response to `sandbox` must not carry to the guest:
  // each brokered value of the sandbox in its plain, URL-encoded, base64
  // and JSON-escaped forms. Empty: nothing to mask.
  virtual std::vector<std::string> ResponseForms(const std::string& sandbox) = 0;
};

}  // namespace airlock::egress
