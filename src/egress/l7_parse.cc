#include "egress/l7_parse.h"

#include <string_view>
#include <vector>

#include "egress/policy.h"

namespace airlock::egress {
namespace {

L7Result Invalid(std::string why) {
  L7Result r;
  r.kind = L7Result::Kind::kInvalid;
  r.error = std::move(why);
  return r;
}
L7Result NeedMore() { return L7Result{}; }

uint32_t Be(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

constexpr uint16_t kExtServerName = 0;
constexpr uint16_t kExtEch = 0xfe0d;

}  // namespace

L7Result ParseClientHello(const uint8_t* data, size_t size) {
  // 1. Reassemble the handshake message from consecutive handshake records.
  std::vector<uint8_t> hs;
  size_t pos = 0;
  size_t need = 0;  // handshake length incl. its 4-byte header, once known
  while (true) {
    if (need && hs.size() >= need) break;
    if (pos + 5 > size) return size > kMaxL7Head ? Invalid("tls: ClientHello larger than 16 KiB") : NeedMore();
    if (data[pos] != 22) return Invalid("tls: first record is not a handshake");
    if (data[pos + 1] != 3) return Invalid("tls: bad record version");
    size_t len = Be(data + pos + 3, 2);
    if (len == 0 || len > 16384) return Invalid("tls: bad record length");
    if (pos + 5 + len > size)
      return pos + 5 + len > kMaxL7Head + 5 ? Invalid("tls: ClientHello larger than 16 KiB") : NeedMore();
    hs.insert(hs.end(), data + pos + 5, data + pos + 5 + len);
    pos += 5 + len;
    if (!need && hs.size() >= 4) {
      if (hs[0] != 1) return Invalid("tls: first handshake message is not a ClientHello");
      need = 4 + Be(hs.data() + 1, 3);
      if (need > kMaxL7Head) return Invalid("tls: ClientHello larger than 16 KiB");
    }
  }
  // 2. ClientHello body.
  const uint8_t* p = hs.data() + 4;
  size_t n = need - 4, i = 0;
  auto take = [&](size_t k) { return i + k <= n; };
  if (!take(2 + 32 + 1)) return Invalid("tls: short ClientHello");
  i += 2 + 32;
  size_t sid = p[i];
  i += 1;
  if (sid > 32 || !take(sid + 2)) return Invalid("tls: bad session id");
  i += sid;
  size_t cs = Be(p + i, 2);
  i += 2;
  if (cs < 2 || cs % 2 || !take(cs + 1)) return Invalid("tls: bad cipher suites");
  i += cs;
  size_t cm = p[i];
  i += 1;
  if (cm < 1 || !take(cm)) return Invalid("tls: bad compression methods");
  i += cm;
  if (i == n) return Invalid("tls: no extensions (no SNI)");
  if (!take(2)) return Invalid("tls: bad extensions length");
  size_t ext_len = Be(p + i, 2);
  i += 2;
  if (i + ext_len != n) return Invalid("tls: extensions length mismatch");
  std::string sni;
  int sni_count = 0;
  std::vector<uint16_t> seen;
  while (i < n) {
    if (!take(4)) return Invalid("tls: truncated extension");
    uint16_t type = static_cast<uint16_t>(Be(p + i, 2));
    size_t len = Be(p + i + 2, 2);
    i += 4;
    if (!take(len)) return Invalid("tls: extension runs past the ClientHello");
    for (uint16_t s : seen)
      if (s == type) return Invalid("tls: duplicate extension");
    seen.push_back(type);
    if (type == kExtEch) return Invalid("tls: Encrypted Client Hello is not allowed (hides the name)");
    if (type == kExtServerName) {
      const uint8_t* e = p + i;
      if (len < 2 || Be(e, 2) != len - 2) return Invalid("tls: bad server_name list");
      size_t j = 2;
      while (j < len) {
        if (j + 3 > len) return Invalid("tls: truncated server_name entry");
        uint8_t nt = e[j];
        size_t nl = Be(e + j + 1, 2);
        j += 3;
        if (j + nl > len) return Invalid("tls: server_name runs past the extension");
        if (nt == 0) {
          ++sni_count;
          sni.assign(reinterpret_cast<const char*>(e + j), nl);
        }
        j += nl;
      }
    }
    i += len;
  }
  if (sni_count == 0) return Invalid("tls: no SNI");
  if (sni_count > 1) return Invalid("tls: several SNI host names");
  std::string name = NormalizeName(sni);
  if (name.empty() || ParseIpv4(name)) return Invalid("tls: SNI is not a DNS name");
  L7Result r;
  r.kind = L7Result::Kind::kOk;
  r.host = name;
  r.consumed = pos;
  return r;
}

L7Result ParseHttpRequestHead(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size < kMaxL7Head ? size : kMaxL7Head);
  size_t end = s.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    // Reject early what can never become a request line.
    for (char c : s.substr(0, s.find(' ')))
      if (c < 'A' || c > 'Z') return Invalid("http: bad method");
    return size >= kMaxL7Head ? Invalid("http: request head larger than 16 KiB") : NeedMore();
  }
  std::string_view head = s.substr(0, end + 2);
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp1 == sp2) return Invalid("http: bad request line");
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = line.substr(sp2 + 1);
  if (method.empty() || method.size() > 16) return Invalid("http: bad method");
  for (char c : method)
    if (c < 'A' || c > 'Z') return Invalid("http: bad method");
  if (method == "CONNECT") return Invalid("http: CONNECT is not allowed");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return Invalid("http: not HTTP/1.x");
  if (target.empty()) return Invalid("http: empty target");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return Invalid("http: bad byte in target");
  std::string host;
  int hosts = 0;
  size_t p = eol + 2;
  while (p < head.size()) {
    size_t e = head.find("\r\n", p);
    std::string_view h = head.substr(p, e - p);
    p = e + 2;
    if (h.empty()) break;
    if (h[0] == ' ' || h[0] == '\t') return Invalid("http: obsolete line folding");
    size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return Invalid("http: bad header line");
    std::string_view name = h.substr(0, colon);
    for (char c : name)
      if (c <= 0x20 || c >= 0x7f) return Invalid("http: bad header name");
    for (char c : h.substr(colon + 1))
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) return Invalid("http: bad header value");
    if (name.size() == 4 && (name[0] | 0x20) == 'h' && (name[1] | 0x20) == 'o' && (name[2] | 0x20) == 's' &&
        (name[3] | 0x20) == 't') {
      ++hosts;
      std::string_view v = h.substr(colon + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      host = std::string(v);
    }
  }
  if (hosts != 1) return Invalid("http: exactly one Host header is required");
  auto strip_port = [](std::string h) -> std::string {
    size_t c = h.rfind(':');
    if (c != std::string::npos) {
      std::string_view port(h.data() + c + 1, h.size() - c - 1);
      if (port.empty() || port.size() > 5) return "";
      for (char ch : port)
        if (ch < '0' || ch > '9') return "";
      h.resize(c);
    }
    return h;
  };
  std::string name = NormalizeName(strip_port(host));
  if (name.empty()) return Invalid("http: Host is not a DNS name (address literals are refused: connect by name)");
  if (target[0] != '/' && target != "*") {
    // absolute-form: http://host[:port]/...
    std::string_view t = target;
    if (!t.starts_with("http://")) return Invalid("http: target is neither origin-form nor http:// absolute-form");
    t.remove_prefix(7);
    std::string_view auth = t.substr(0, t.find_first_of("/?#"));
    if (auth.find('@') != std::string_view::npos) return Invalid("http: userinfo in target");
    if (NormalizeName(strip_port(std::string(auth))) != name) return Invalid("http: target host differs from Host");
  }
  L7Result r;
  r.kind = L7Result::Kind::kOk;
  r.host = name;
  r.consumed = end + 4;
  return r;
}

}  // namespace airlock::egress
