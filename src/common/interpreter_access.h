// Who may call the code interpreter (port 49999, docs/code-interpreter.md).
// One rule, checked twice: by the daemon's data plane (src/server/proxy.cc)
// and by the interpreter in the guest (src/interpreter), so a request that
// reaches port 49999 another way (a relay inside the guest's network) is
// held to it too. Header-only.
//
// A request presents the sandbox's access token in X-Access-Token (the
// token of envd, spec §2.3; the official @e2b/code-interpreter sends it on
// /execute). Against the sandbox's token:
//
//   GET/HEAD /health                      open (liveness, as the agent's)
//   GET/POST /contexts,                   the token if one is presented; none
//   POST /contexts/<id>/restart,          is accepted too: the official SDK
//   DELETE /contexts/<id>                 (2.8.0) sends no token there
//                                         (shared/spec/e2b-code-interpreter.md
//                                         B.5 #11). These start, list,
//                                         restart and delete kernels; they
//                                         never run code or return output.
//   anything else (POST /execute)         the token, always
//
// InterpreterAccessError returns "" when the request may pass, else the 401
// message: "missing X-Access-Token" or "invalid X-Access-Token" (the agent
// port's words). An empty `token` matches no presented one (the daemon's
// side, where every sandbox has one); the interpreter does not call it
// while it has none (a guest before /init, as the agent).
//
// kGuestAccessTokenFile is how the interpreter learns the token: the agent
// (PID 1, which receives and rotates it at POST /init) writes it there
// (root, 0600, in a 0700 directory; removed when cleared), and the
// interpreter (root) reads it on every request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/secure_equal.h"

namespace airlock {

inline constexpr uint16_t kInterpreterPort = 49999;
inline constexpr char kGuestAccessTokenFile[] = "/run/airlock/access-token";

// True for the routes the official SDK calls without X-Access-Token.
inline bool InterpreterRouteTakesNoToken(std::string_view method, std::string_view path) {
  if (path == "/health") return method == "GET" || method == "HEAD";
  if (path == "/contexts") return method == "GET" || method == "POST";
  constexpr std::string_view kPrefix = "/contexts/";
  if (path.size() <= kPrefix.size() || path.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view rest = path.substr(kPrefix.size());
  constexpr std::string_view kRestart = "/restart";
  if (method == "POST" && rest.size() > kRestart.size() && rest.substr(rest.size() - kRestart.size()) == kRestart) {
    rest.remove_suffix(kRestart.size());
    return rest.find('/') == std::string_view::npos;
  }
  return method == "DELETE" && rest.find('/') == std::string_view::npos;
}

inline std::string InterpreterAccessError(std::string_view method, std::string_view path, std::string_view presented,
                                          std::string_view token) {
  if (presented.empty()) return InterpreterRouteTakesNoToken(method, path) ? "" : "missing X-Access-Token";
  if (path == "/health" && (method == "GET" || method == "HEAD")) return "";
  if (token.empty() || !SecureEqual(presented, token)) return "invalid X-Access-Token";
  return "";
}

}  // namespace airlock
