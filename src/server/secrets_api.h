// The E2B secrets API (docs/secrets.md): /secrets and /secrets/{selector}
// (selector empty: the collection); the store work is SecretsService's
// (control/secrets_service.h), on a worker.
#pragma once

#include <memory>
#include <string>

#include "server/api_base.h"

namespace airlock::server {

class SecretsApi : public ApiHandlers {
 public:
  explicit SecretsApi(const Services& s) : ApiHandlers(s) {}
  void HandleSecrets(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& selector);

 private:
  void ListSecrets(std::shared_ptr<HttpConn> c, const Caller& caller);
};

}  // namespace airlock::server
