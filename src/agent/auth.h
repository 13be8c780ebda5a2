// Sandbox-level settings the host pushes with POST /init, and the access-token
// check every request goes through (spec §2.3, §4, §4.2).
//
// POST /init JSON (all optional): {"accessToken": str, "envVars": {str: str},
// "defaultUser": str, "timestamp": RFC 3339}. The token can be set only while
// none is set, or by a request carrying the current one in X-Access-Token
// (else 401). envVars are merged into the sandbox-wide env; timestamp resets
// the clock when it is off by more than 2 s, and only when the agent is PID 1
// (in a guest), never on a host. Answers 204 with
// X-Envd-Version.
//
// Once a token is set, every request needs `X-Access-Token: <token>` except
// GET /health and POST /init (checked itself); /files also accepts a valid
// URL signature ("v1_" + unpadded base64 of SHA-256 of
// "<path>:<read|write>:<user>:<token>[:<expiration>]", not expired).
// Failures answer 401 {"code":401,"message":...}.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "http/conn_fwd.h"

namespace airlock::agent {

class Agent;

// The signature string of spec §4.2 for the given inputs.
std::string FileSignature(const std::string& path, const std::string& operation, const std::string& user,
                          const std::string& token, std::optional<int64_t> expiration);
// Constant-time string comparison.
bool SecureEqual(const std::string& a, const std::string& b);

// OK when the request may proceed; Unauthenticated otherwise.
Status CheckAccess(const Agent& agent, const http::Conn& s);
void HandleInit(Agent& agent, std::shared_ptr<http::Conn> s);

}  // namespace airlock::agent
