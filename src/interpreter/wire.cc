#include "interpreter/wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <sys/random.h>


#include "common/hex.h"
#include "interpreter/output.h"

namespace airlock::interpreter {

using json = nlohmann::json;

namespace {

std::string StringField(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// Replaces every ill-formed UTF-8 sequence by U+FFFD (EF BF BD).
std::string SanitizeUtf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    auto c = static_cast<unsigned char>(in[i]);
    size_t len = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= in.size();
    uint32_t cp = len ? (c & (0xFF >> (len + 1))) : 0;
    for (size_t k = 1; ok && k < len; ++k) {
      auto cc = static_cast<unsigned char>(in[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (ok) {
      out.append(in.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

StatusOr<json> ParseObject(std::string_view frame, const char* what) {
  json j = json::parse(frame, nullptr, false);
  if (j.is_discarded()) j = json::parse(SanitizeUtf8(frame), nullptr, false);
  if (j.is_discarded()) return InvalidArgument(std::string("kernel message: ") + what + " is not JSON");
  if (!j.is_object()) return InvalidArgument(std::string("kernel message: ") + what + " is not a JSON object");
  return j;
}

}  // namespace

std::string KernelMessage::msg_type() const { return StringField(header, "msg_type"); }
std::string KernelMessage::msg_id() const { return StringField(header, "msg_id"); }
std::string KernelMessage::parent_id() const { return StringField(parent_header, "msg_id"); }

std::string Sign(std::string_view key, const std::vector<std::string_view>& parts) {
  if (key.empty()) return "";
  // One fetched HMAC per thread (the hub thread and the io thread sign).
  thread_local EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!mac) return "";
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  if (!ctx) return "";
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t len = 0;
  bool ok = EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) == 1;
  for (auto p : parts) ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  ok = ok && EVP_MAC_final(ctx, out, &len, sizeof out) == 1;
  EVP_MAC_CTX_free(ctx);
  return ok ? HexEncode(out, len) : "";
}

json MakeHeader(std::string_view msg_type, std::string_view session) {
  return json{{"msg_id", NewUuid()},       {"session", session}, {"username", "airlock"},
              {"date", TimestampNow()},          {"msg_type", msg_type}, {"version", kProtocolVersion}};
}

std::vector<std::string> SerializeMessage(std::string_view key, const json& header, const json& content) {
  std::vector<std::string> f;
  f.reserve(6);
  f.emplace_back(kDelimiter);
  f.emplace_back();  // hmac, below
  f.push_back(header.dump(-1, ' ', false, json::error_handler_t::replace));
  f.emplace_back("{}");
  f.emplace_back("{}");
  f.push_back(content.dump(-1, ' ', false, json::error_handler_t::replace));
  f[1] = Sign(key, {f[2], f[3], f[4], f[5]});
  return f;
}

StatusOr<KernelMessage> ParseMessage(std::string_view key, const std::vector<std::string_view>& frames,
                                     size_t max_content) {
  return ParseMessage(key, frames, [max_content](const KernelMessage&, size_t n) { return n <= max_content; });
}

StatusOr<KernelMessage> ParseMessage(std::string_view key, const std::vector<std::string_view>& frames,
                                     const std::function<bool(const KernelMessage&, size_t)>& want_content) {
  size_t d = 0;
  while (d < frames.size() && frames[d] != kDelimiter) ++d;
  if (d == frames.size()) return InvalidArgument("kernel message: no <IDS|MSG> delimiter");
  if (frames.size() - d < 6) return InvalidArgument("kernel message: fewer than 5 frames after the delimiter");
  std::string_view sig = frames[d + 1];
  std::string want = Sign(key, {frames[d + 2], frames[d + 3], frames[d + 4], frames[d + 5]});
  if (!key.empty() && (sig.size() != want.size() || CRYPTO_memcmp(sig.data(), want.data(), want.size()) != 0))
    return PermissionDenied("kernel message: bad signature");
  KernelMessage m;
  ASSIGN_OR_RETURN(m.header, ParseObject(frames[d + 2], "header"));
  ASSIGN_OR_RETURN(m.parent_header, ParseObject(frames[d + 3], "parent_header"));
  ASSIGN_OR_RETURN(m.metadata, ParseObject(frames[d + 4], "metadata"));
  m.content_bytes = frames[d + 5].size();
  if (!want_content(m, m.content_bytes)) {
    m.content_too_large = true;
  } else {
    ASSIGN_OR_RETURN(m.content, ParseObject(frames[d + 5], "content"));
  }
  return m;
}

std::string NewUuid() {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    else if (RAND_bytes(b, sizeof b) == 1) break;
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0F) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3F) | 0x80);
  std::string h = HexEncode(b, sizeof b);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" + h.substr(20);
}

}  // namespace airlock::interpreter
