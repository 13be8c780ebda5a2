#include "agent/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <boost/asio/post.hpp>

#include "agent/agent.h"
#include "agent/entropy.h"
#include "agent/init.h"
#include "agent/log.h"
#include "agent/volume_mounts.h"
#include "common/file_util.h"
#include "envd/proto_json.h"
#include "http/conn.h"

namespace airlock::agent {

std::string FileSignature(const std::string& path, const std::string& operation, const std::string& user,
                          const std::string& token, std::optional<int64_t> expiration) {
  std::string s = path + ":" + operation + ":" + user + ":" + token;
  if (expiration) s += ":" + std::to_string(*expiration);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), digest);
  std::string b64 = envd::Base64Encode(std::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "v1_" + b64;
}

bool SecureEqual(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

Status CheckFileSignature(const Agent& agent, const http::Conn& s) {
  auto sig = s.Query("signature");
  if (!sig) return Status(StatusCode::kUnauthenticated, "missing X-Access-Token or signature");
  std::optional<int64_t> exp;
  if (auto e = s.Query("signature_expiration"); e && !e->empty()) {
    char* end = nullptr;
    long long v = std::strtoll(e->c_str(), &end, 10);
    if (*end != '\0') return Status(StatusCode::kUnauthenticated, "malformed signature_expiration");
    // CLOCK_REALTIME itself, not time(2) (the vDSO's last tick, which lags).
    struct timespec now {};
    ::clock_gettime(CLOCK_REALTIME, &now);
    if (v < static_cast<long long>(now.tv_sec)) {
      return Status(StatusCode::kUnauthenticated, "signature is already expired");  // envd's words
    }
    exp = v;
  }
  std::string op = s.method() == http::Method::kGet ? "read" : "write";
  std::string want =
      FileSignature(s.Query("path").value_or(""), op, s.Query("username").value_or(""), agent.access_token(), exp);
  if (!SecureEqual(*sig, want)) return Status(StatusCode::kUnauthenticated, "invalid signature");
  return OkStatus();
}

}  // namespace

Status Agent::SetAccessToken(std::string token) {
  const std::string& path = options_.access_token_file;
  if (!path.empty()) {
    if (token.empty()) {
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + path);
    } else {
      // Its own directory, root's alone: nobody else can plant a file or a
      // link where the token is written.
      if (size_t slash = path.find_last_of('/'); slash != std::string::npos && slash > 0) {
        std::string dir = path.substr(0, slash);
        if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir);
      }
      RETURN_IF_ERROR(WriteFileAtomic(path, token, 0600));
    }
  }
  access_token_ = std::move(token);
  return OkStatus();
}

Status CheckAccess(const Agent& agent, const http::Conn& s) {
  const std::string& token = agent.access_token();
  if (token.empty()) return OkStatus();
  const std::string& path = s.path();
  if (path == "/health" && (s.method() == http::Method::kGet || s.method() == http::Method::kHead)) return OkStatus();
  if (path == "/init") return OkStatus();  // HandleInit checks the token itself
  std::string got = s.Header("X-Access-Token");
  if (!got.empty() && SecureEqual(got, token)) return OkStatus();
  if (path == "/files") return CheckFileSignature(agent, s);
  return Status(StatusCode::kUnauthenticated, got.empty() ? "missing X-Access-Token" : "invalid X-Access-Token");
}

void HandleInit(Agent& agent, std::shared_ptr<http::Conn> s) {
  if (s->method() != http::Method::kPost) return RespondHttpError(*s, 405, "method not allowed");
  if (!agent.access_token().empty() && !SecureEqual(s->Header("X-Access-Token"), agent.access_token())) {
    return RespondHttpError(*s, 401, "an access token is already set; /init needs it in X-Access-Token");
  }
  s->ReadBodyToString(kMaxRequestBody, [&agent, s](StatusOr<std::string> body) {
    if (!body.ok()) return RespondHttpError(*s, 400, body.status().message());
    envd::Json j = body->empty() ? envd::Json::object() : envd::Json::parse(*body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return RespondHttpError(*s, 400, "/init body must be a JSON object");
    std::map<std::string, std::string> envs;
    if (auto it = j.find("envVars"); it != j.end() && !it->is_null()) {
      if (!it->is_object()) return RespondHttpError(*s, 400, "envVars must be an object of strings");
      for (auto& [k, v] : it->items()) {
        if (!v.is_string() || k.empty() || k.find('=') != std::string::npos) {
          return RespondHttpError(*s, 400, "invalid env var '" + k + "'");
        }
        envs[k] = v.get<std::string>();
      }
    }
    std::optional<std::string> user;
    if (auto it = j.find("defaultUser"); it != j.end() && it->is_string() && !it->get<std::string>().empty()) {
      user = it->get<std::string>();
      if (!agent.UserByName(*user).ok()) return RespondHttpError(*s, 400, "unknown defaultUser '" + *user + "'");
    }
    // Only the guest's PID 1 owns the clock: an agent run on a host (tests,
    // --listen on a dev box) must never set the host's time.
    if (auto it = j.find("timestamp"); ::getpid() == 1 && it != j.end() && it->is_string()) {
      if (auto t = envd::ParseTimestamp(it->get<std::string>()); t.ok()) {
        timespec now{};
        clock_gettime(CLOCK_REALTIME, &now);
        // Step when off by more than 100 ms: a restored guest's clock is the
        // snapshot's (seconds to days behind); the host sends milliseconds.
        long long diff_ms = (static_cast<long long>(now.tv_sec) - t->seconds) * 1000 +
                            (static_cast<long long>(now.tv_nsec) - t->nanos) / 1000000;
        if (std::llabs(diff_ms) > 100) {
          timespec set{static_cast<time_t>(t->seconds), t->nanos};
          if (clock_settime(CLOCK_REALTIME, &set) != 0) LogDebug("clock_settime: %s", std::strerror(errno));
        }
      }
    }
    // Fresh entropy after a snapshot restore (airlock extension): base64 of
    // kMinEntropyBytes..kMaxEntropyBytes random bytes. Only PID 1 touches the
    // kernel pool (an agent on a host must not credit the host's).
    if (auto it = j.find("entropy"); it != j.end() && !it->is_null()) {
      if (!it->is_string()) return RespondHttpError(*s, 400, "entropy must be a base64 string");
      auto raw = envd::Base64Decode(it->get<std::string>());
      if (!raw.ok()) return RespondHttpError(*s, 400, "entropy: " + raw.status().message());
      if (raw->size() < kMinEntropyBytes || raw->size() > kMaxEntropyBytes) {
        return RespondHttpError(
            *s, 400,
            "entropy must be " + std::to_string(kMinEntropyBytes) + ".." + std::to_string(kMaxEntropyBytes) + " bytes");
      }
      if (::getpid() == 1) {
        if (Status st = ReseedEntropy(*raw); !st.ok()) return RespondHttpError(*s, 500, st.message());
      }
    }
    // The sandbox id as hostname (airlock extension): a guest restored from a
    // template snapshot or forked carries the source's.
    if (auto it = j.find("hostname"); it != j.end() && !it->is_null()) {
      std::string h = it->is_string() ? it->get<std::string>() : "";
      bool valid = !h.empty() && h.size() <= 63;
      for (char c : h) valid = valid && (isalnum(static_cast<unsigned char>(c)) || c == '-');
      if (!valid) return RespondHttpError(*s, 400, "hostname must be 1..63 of [A-Za-z0-9-]");
      if (::getpid() == 1) {
        if (Status st = SetHostname(h); !st.ok()) return RespondHttpError(*s, 500, st.message());
      }
    }
    // Volumes (airlock extension, agent/volume_mounts.h): mounted before
    // the answer, off the io thread (the kernel's MOUNT call can wait on
    // its server).
    const bool has_mounts = j.contains("volumeMounts");
    auto mounts = ParseNfsMounts(has_mounts ? j["volumeMounts"] : envd::Json());
    if (!mounts.ok()) return RespondHttpError(*s, 400, mounts.status().message());
    agent.MergeEnvVars(envs);
    if (user) agent.SetDefaultUser(*user);
    // The token last: the code interpreter takes a new one as the sandbox's
    // new identity and fetches its env vars at once (interpreter.h).
    if (auto it = j.find("accessToken"); it != j.end() && it->is_string()) {
      if (Status st = agent.SetAccessToken(it->get<std::string>()); !st.ok()) {
        LogError("access token: %s", st.ToString().c_str());
        return RespondHttpError(*s, 500, "could not hand the access token to the code interpreter: " + st.message());
      }
    }
    if (!has_mounts || ::getpid() != 1) return s->Respond(204, "", "", {{"X-Envd-Version", "0.6.13"}});
    std::thread([s, mounts = std::move(mounts).value()] {
      Status st = MountNfs(mounts);
      boost::asio::post(s->executor(), [s, st] {
        if (!st.ok()) return RespondHttpError(*s, 500, st.message());
        s->Respond(204, "", "", {{"X-Envd-Version", "0.6.13"}});
      });
    }).detach();
  });
}

}  // namespace airlock::agent
