// The audit trail over HTTP (docs/audit.md): each control-plane call is
// recorded when its response begins (AuditControlCall), a refused key at
// most 10 times a second (AuditAuthFailure), and the trail is read through
// GET /sandboxes/{id}/audit, GET /audit and GET /audit/verify (audit_hooks.cc).
#pragma once

#include <memory>
#include <string>

#include "server/api_base.h"

namespace airlock::server {

class AuditApi : public ApiHandlers {
 public:
  explicit AuditApi(const Services& s) : ApiHandlers(s) {}
  // Records the call when its response begins: key id, action, sandbox, status.
  void AuditControlCall(const std::shared_ptr<HttpConn>& c, const std::string& key_id, const std::string& action,
                        const std::string& sandbox);
  void AuditAuthFailure(const std::shared_ptr<HttpConn>& c);  // rate-limited (10/s)
  void SandboxAudit(std::shared_ptr<HttpConn> c, const std::string& id);
  void AuditTrail(std::shared_ptr<HttpConn> c, const Caller& caller);
  void AuditVerify(std::shared_ptr<HttpConn> c, const Caller& caller);
};

}  // namespace airlock::server
