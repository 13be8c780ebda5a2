#include "gateway/relay_guard.h"

#include <openssl/evp.h>
#include <strings.h>

#include <array>
#include <cctype>

#include "common/agent_port.h"
#include "common/secure_equal.h"
#include "envd/proto_json.h"
#include "http/url.h"

namespace airlock::gateway {
namespace {

bool NameIs(std::string_view name, std::string_view want) {
  return name.size() == want.size() && strncasecmp(name.data(), want.data(), want.size()) == 0;
}

// What the E2B SDK puts in a signed URL (uploadUrl/downloadUrl): the three
// signed parameters and the signature itself.
constexpr std::array<std::string_view, 4> kSignedUrlParameters = {"path", "username", "signature_expiration",
                                                                   "signature"};

}  // namespace

StatusOr<std::optional<int64_t>> CheckSignedFileQuery(std::string_view raw_query, int64_t now_s) {
  std::array<bool, kSignedUrlParameters.size()> seen{};
  std::optional<std::string> expiration;
  while (!raw_query.empty()) {
    size_t amp = raw_query.find('&');
    std::string_view pair = raw_query.substr(0, amp);
    raw_query = amp == std::string_view::npos ? std::string_view() : raw_query.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    std::string name = http::UrlDecode(pair.substr(0, eq), /*plus_is_space=*/true);
    size_t i = 0;
    while (i < kSignedUrlParameters.size() && kSignedUrlParameters[i] != name) ++i;
    if (i == kSignedUrlParameters.size()) {
      return Status(StatusCode::kUnauthenticated,
                    "the signed URL carries '" + name.substr(0, 64) +
                        "', which its signature does not cover (only path, username, signature_expiration and "
                        "signature may be given)");
    }
    if (seen[i]) return Status(StatusCode::kUnauthenticated, "the signed URL gives '" + name + "' twice");
    seen[i] = true;
    if (name == "signature_expiration") {
      expiration = http::UrlDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), true);
    }
  }
  if (!seen[3]) return Status(StatusCode::kUnauthenticated, "the URL carries no signature");
  if (!expiration) return std::optional<int64_t>();
  const std::string& e = *expiration;
  bool digits = !e.empty() && e.size() <= 18;
  for (char ch : e) digits = digits && std::isdigit(static_cast<unsigned char>(ch));
  if (!digits) return Status(StatusCode::kUnauthenticated, "signature_expiration is not Unix seconds");
  const int64_t v = std::stoll(e);
  // envd's words, which E2B's SDK tests compare the answer's body with.
  if (v < now_s) return Status(StatusCode::kUnauthenticated, "signature is already expired");
  if (v > now_s + kMaxSignedUrlLifetime.count() + kSignedUrlClockSkew.count()) {
    return Status(StatusCode::kUnauthenticated, "signature_expiration is more than " +
                                                    std::to_string(kMaxSignedUrlLifetime.count() / 3600) +
                                                    " h ahead (the longest a signed URL may live)");
  }
  return std::optional<int64_t>(v);
}

std::string FileUrlSignature(const std::string& path, const std::string& operation, const std::string& user,
                             const std::string& token, std::optional<int64_t> expiration) {
  std::string s = path + ":" + operation + ":" + user + ":" + token;
  if (expiration) s += ":" + std::to_string(*expiration);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
  std::string b64 = envd::Base64Encode(std::string_view(reinterpret_cast<const char*>(md), n));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "v1_" + b64;
}

Status CheckFileSignature(const http::Conn& c, const std::string& token, int64_t now_s) {
  ASSIGN_OR_RETURN(std::optional<int64_t> expiration, CheckSignedFileQuery(http::SplitTarget(c.target()).second, now_s));
  const std::string want = FileUrlSignature(c.Query("path").value_or(""), c.method() == http::Method::kGet ? "read" : "write",
                                            c.Query("username").value_or(""), token, expiration);
  if (!SecureEqual(c.Query("signature").value_or(""), want)) {
    return Status(StatusCode::kUnauthenticated, "the URL's signature does not match");
  }
  return OkStatus();
}

bool IsServiceWorkerScript(const http::Conn& c) {
  return !c.Header("Service-Worker").empty() || NameIs(c.Header("Sec-Fetch-Dest"), "serviceworker");
}

RelayGuard GuardForGuest(uint16_t port, std::string_view path) {
  return port == kAgentPort && path == "/files" ? RelayGuard::kGuestFile : RelayGuard::kGuest;
}

bool DropsRelayedHeader(RelayGuard guard, std::string_view name) {
  if (guard == RelayGuard::kNone) return false;
  if (NameIs(name, "service-worker-allowed") || NameIs(name, "x-content-type-options")) return true;
  if (guard != RelayGuard::kGuestFile) return false;
  return NameIs(name, "content-type") || NameIs(name, "content-disposition") || NameIs(name, "cache-control") ||
         NameIs(name, "content-security-policy") || NameIs(name, "content-security-policy-report-only");
}

http::HeaderList GuardHeaders(RelayGuard guard, http::Method method, std::string_view guest_content_type) {
  if (guard == RelayGuard::kNone) return {};
  http::HeaderList out = {{"X-Content-Type-Options", "nosniff"},
                          {"Vary", "E2b-Sandbox-Id, E2b-Sandbox-Port, X-Access-Token"}};
  if (guard != RelayGuard::kGuestFile) return out;
  out.push_back({"Cache-Control", "no-store"});
  std::string_view type = guest_content_type.substr(0, guest_content_type.find(';'));
  while (!type.empty() && type.back() == ' ') type.remove_suffix(1);
  const bool json = method != http::Method::kGet && method != http::Method::kHead && NameIs(type, "application/json");
  out.push_back({"Content-Type", json ? "application/json" : "application/octet-stream"});
  out.push_back({"Content-Disposition", "attachment"});
  out.push_back({"Content-Security-Policy", "sandbox; default-src 'none'"});
  return out;
}

}  // namespace airlock::gateway
