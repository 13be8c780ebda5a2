#include "egress/policy.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace airlock::egress {
namespace {

bool NameMatches(const Rule& r, std::string_view name) {
  if (r.kind == Rule::Kind::kName) return name == r.name;
  if (r.kind == Rule::Kind::kWildcard) {
    return name.size() > r.name.size() + 1 && name.ends_with(r.name) && name[name.size() - r.name.size() - 1] == '.';
  }
  return false;
}

bool CidrMatches(const Rule& r, uint32_t ip) {
  if (r.kind != Rule::Kind::kCidr) return false;
  uint32_t mask = r.prefix == 0 ? 0 : ~uint32_t{0} << (32 - r.prefix);
  return (ip & mask) == (r.net & mask);
}

bool PortMatches(const Rule& r, uint16_t port) { return !r.port || *r.port == port; }

struct Range {
  const char* text;
  uint32_t net;
  int prefix;
};
// Never reachable from a guest (RFC 6890 special-purpose + the host's pool).
const Range kForbidden[] = {
    {"0.0.0.0/8", 0x00000000, 8},     {"10.0.0.0/8", 0x0A000000, 8},      {"100.64.0.0/10", 0x64400000, 10},
    {"127.0.0.0/8", 0x7F000000, 8},   {"169.254.0.0/16", 0xA9FE0000, 16}, {"172.16.0.0/12", 0xAC100000, 12},
    {"192.0.0.0/24", 0xC0000000, 24}, {"192.168.0.0/16", 0xC0A80000, 16}, {"198.18.0.0/15", 0xC6120000, 15},
    {"224.0.0.0/4", 0xE0000000, 4},   {"240.0.0.0/4", 0xF0000000, 4},
};

}  // namespace

std::optional<uint32_t> ParseIpv4(std::string_view s) {
  uint32_t v = 0;
  int parts = 0;
  size_t i = 0;
  while (parts < 4) {
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return std::nullopt;
    uint32_t part = 0;
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      part = part * 10 + (s[i] - '0');
      if (i - start >= 3 || part > 255) return std::nullopt;
      ++i;
    }
    if (i - start > 1 && s[start] == '0') return std::nullopt;  // no octal-looking forms
    v = (v << 8) | part;
    ++parts;
    if (parts < 4) {
      if (i >= s.size() || s[i] != '.') return std::nullopt;
      ++i;
    }
  }
  if (i != s.size()) return std::nullopt;
  return v;
}

std::string Ipv4ToString(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." + std::to_string((ip >> 8) & 255) +
         "." + std::to_string(ip & 255);
}

std::string NormalizeName(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty() || name.size() > 253) return "";
  std::string out;
  out.reserve(name.size());
  size_t label = 0;
  for (char c : name) {
    if (c == '.') {
      if (label == 0) return "";
      label = 0;
      out.push_back('.');
      continue;
    }
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok || ++label > 63) return "";
    out.push_back(c);
  }
  if (label == 0) return "";
  // A numeric last label is an address-looking string, never a DNS name
  // (no TLD is numeric): "01.2.3.4", "1.2.3.4" as a name, "0x7f.1".
  size_t last = out.rfind('.');
  std::string_view tld = std::string_view(out).substr(last == std::string::npos ? 0 : last + 1);
  bool numeric = true;
  for (char c : tld) numeric = numeric && c >= '0' && c <= '9';
  if (numeric) return "";
  return out;
}

bool IsForbiddenAddress(uint32_t ip) {
  for (const auto& r : kForbidden) {
    uint32_t mask = ~uint32_t{0} << (32 - r.prefix);
    if ((ip & mask) == r.net) return true;
  }
  return false;
}

const std::vector<std::string>& ForbiddenCidrs() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (const auto& r : kForbidden) out.emplace_back(r.text);
    return out;
  }();
  return v;
}

namespace {

// A port's digits (1 to 5 of them) as a number, unchecked against 65535;
// -1 when it is not that. The callers say which range is theirs.
int PortDigits(std::string_view p) {
  if (p.empty() || p.size() > 5) return -1;
  int port = 0;
  for (char ch : p) {
    if (ch < '0' || ch > '9') return -1;
    port = port * 10 + (ch - '0');
  }
  return port;
}

}  // namespace

StatusOr<Rule> ParseRule(std::string_view text) {
  if (text.empty() || text.size() > 300) return InvalidArgument("egress rule: empty or longer than 300 chars");
  Rule r;
  std::string_view host = text;
  // Port: after the last ':' (IPv6 literals have several colons: refused).
  if (auto c = text.rfind(':'); c != std::string_view::npos) {
    if (text.find(':') != c) return InvalidArgument("egress rule '" + std::string(text) + "': IPv6 is not supported");
    const int port = PortDigits(text.substr(c + 1));
    if (port < 0) return InvalidArgument("egress rule '" + std::string(text) + "': bad port");
    if (port == 0 || port > 65535) return InvalidArgument("egress rule '" + std::string(text) + "': port out of range");
    r.port = static_cast<uint16_t>(port);
    host = text.substr(0, c);
  }
  std::string_view addr = host;
  int prefix = 32;
  bool has_prefix = false;
  if (auto s = host.find('/'); s != std::string_view::npos) {
    addr = host.substr(0, s);
    std::string_view p = host.substr(s + 1);
    if (p.empty() || p.size() > 2) return InvalidArgument("egress rule '" + std::string(text) + "': bad prefix");
    prefix = 0;
    for (char ch : p) {
      if (ch < '0' || ch > '9') return InvalidArgument("egress rule '" + std::string(text) + "': bad prefix");
      prefix = prefix * 10 + (ch - '0');
    }
    if (prefix > 32) return InvalidArgument("egress rule '" + std::string(text) + "': prefix > 32");
    has_prefix = true;
  }
  if (auto ip = ParseIpv4(addr)) {
    r.kind = Rule::Kind::kCidr;
    r.prefix = prefix;
    r.net = prefix == 0 ? 0 : (*ip & (~uint32_t{0} << (32 - prefix)));
    r.text = Ipv4ToString(r.net) + (has_prefix ? "/" + std::to_string(prefix) : "");
  } else {
    if (has_prefix) return InvalidArgument("egress rule '" + std::string(text) + "': a prefix needs an IPv4 address");
    std::string_view n = host;
    if (n.starts_with("*.")) {
      r.kind = Rule::Kind::kWildcard;
      n.remove_prefix(2);
    }
    r.name = NormalizeName(n);
    if (r.name.empty()) return InvalidArgument("egress rule '" + std::string(text) + "': not a domain, IPv4 or CIDR");
    if (r.name.find('.') == std::string::npos && r.kind == Rule::Kind::kWildcard)
      return InvalidArgument("egress rule '" + std::string(text) + "': wildcard over a top-level domain");
    if (r.port && *r.port != 80 && *r.port != 443)
      return InvalidArgument("egress rule '" + std::string(text) +
                             "': domain rules apply to ports 80 and 443 only (use an IP/CIDR rule for other ports)");
    r.text = (r.kind == Rule::Kind::kWildcard ? "*." : "") + r.name;
  }
  if (r.port) r.text += ":" + std::to_string(*r.port);
  return r;
}

StatusOr<EgressPolicy> EgressPolicy::Create(bool internet, const std::vector<std::string>& allow,
                                            const std::vector<std::string>& deny) {
  if (allow.size() + deny.size() > 1000) return InvalidArgument("egress policy: more than 1000 rules");
  EgressPolicy p;
  p.internet_ = internet;
  for (const auto& a : allow) {
    ASSIGN_OR_RETURN(Rule r, ParseRule(a));
    p.allow_.push_back(std::move(r));
  }
  for (const auto& d : deny) {
    ASSIGN_OR_RETURN(Rule r, ParseRule(d));
    p.deny_.push_back(std::move(r));
  }
  return p;
}

Decision EgressPolicy::CheckName(std::string_view raw) const {
  std::string name = NormalizeName(raw);
  if (name.empty()) return {false, "default-deny", "invalid name"};
  if (auto ip = ParseIpv4(name)) return {false, "default-deny", "address literal"};
  for (const auto& r : deny_)
    if (NameMatches(r, name)) return {false, r.text, "denyOut"};
  for (const auto& r : allow_)
    if (NameMatches(r, name)) return {true, r.text, ""};
  if (internet_) return {true, "internet", ""};
  return {false, "default-deny", "not in allowOut"};
}

Decision EgressPolicy::CheckNamePort(std::string_view raw, uint16_t port) const {
  std::string name = NormalizeName(raw);
  if (name.empty()) return {false, "default-deny", "invalid name"};
  for (const auto& r : deny_)
    if (NameMatches(r, name) && PortMatches(r, port)) return {false, r.text, "denyOut"};
  for (const auto& r : allow_)
    if (NameMatches(r, name) && PortMatches(r, port)) return {true, r.text, ""};
  if (internet_) return {true, "internet", ""};
  return {false, "default-deny", "not in allowOut"};
}

Decision EgressPolicy::CheckAddress(uint32_t ip, uint16_t port) const {
  if (IsForbiddenAddress(ip)) return {false, "forbidden-range", "private, link-local or reserved address"};
  for (const auto& r : deny_)
    if (CidrMatches(r, ip) && PortMatches(r, port)) return {false, r.text, "denyOut"};
  for (const auto& r : allow_)
    if (CidrMatches(r, ip) && PortMatches(r, port)) return {true, r.text, ""};
  if (internet_) return {true, "internet", ""};
  return {false, "default-deny", "not in allowOut"};
}

std::vector<Rule> EgressPolicy::CidrAllowRules() const {
  std::vector<Rule> out;
  for (const auto& r : allow_)
    if (r.kind == Rule::Kind::kCidr) out.push_back(r);
  return out;
}

Status ValidateRuleHeader(std::string_view name, std::string_view value) {
  static constexpr std::string_view kTchar = "!#$%&'*+-.^_`|~";
  if (name.empty() || name.size() > 256) return InvalidArgument("network.rules: header name empty or too long");
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              kTchar.find(c) != std::string_view::npos;
    if (!ok) return InvalidArgument("network.rules: '" + std::string(name.substr(0, 64)) + "' is not a header name");
  }
  std::string lower(name);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* h : {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
                        "keep-alive", "proxy-connection"}) {
    if (lower == h)
      return InvalidArgument("network.rules: header '" + std::string(name) +
                             "' frames or routes the request and cannot be set by a rule");
  }
  if (value.size() > kMaxHeaderValueBytes)
    return InvalidArgument("network.rules: value of header '" + std::string(name) + "' is longer than 8192 bytes");
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0')
      return InvalidArgument("network.rules: value of header '" + std::string(name) + "' contains CR, LF or NUL");
  }
  return OkStatus();
}

Status EgressPolicy::SetHeaderRules(std::vector<HostHeaderRules> rules) {
  if (rules.size() > kMaxHeaderRuleHosts) return InvalidArgument("network.rules: more than 100 hosts");
  std::vector<std::string> seen;
  for (auto& h : rules) {
    std::string_view p = h.pattern;
    bool wildcard = p.starts_with("*.");
    if (wildcard) p.remove_prefix(2);
    std::string name = NormalizeName(p);
    if (name.empty() || ParseIpv4(name))
      return InvalidArgument("network.rules: '" + h.pattern.substr(0, 64) +
                             "' is not a host name or *.domain pattern (rules match names, not addresses)");
    // "*.com" is allowed, as in E2B: the caller chose to send these headers
    // to every such host it also allows.
    h.pattern = (wildcard ? "*." : "") + name;
    if (std::find(seen.begin(), seen.end(), h.pattern) != seen.end())
      return InvalidArgument("network.rules: '" + h.pattern + "' is given twice");
    seen.push_back(h.pattern);
    if (h.transforms.size() > kMaxTransformsPerHost)
      return InvalidArgument("network.rules: more than 16 rules for '" + h.pattern + "'");
    for (const auto& t : h.transforms) {
      if (t.headers.size() > kMaxHeadersPerTransform)
        return InvalidArgument("network.rules: more than 64 headers in one rule for '" + h.pattern + "'");
      for (const auto& [n, v] : t.headers) RETURN_IF_ERROR(ValidateRuleHeader(n, v));
    }
  }
  header_rules_ = std::move(rules);
  return OkStatus();
}

std::vector<std::string> EgressPolicy::HeaderRulePatterns() const {
  std::vector<std::string> out;
  for (const auto& h : header_rules_) out.push_back(h.pattern);
  return out;
}

const HostHeaderRules* EgressPolicy::HeaderRulesFor(std::string_view raw) const {
  if (auto c = raw.rfind(':'); c != std::string_view::npos) raw = raw.substr(0, c);
  std::string host = NormalizeName(raw);
  if (host.empty()) return nullptr;
  const HostHeaderRules* best = nullptr;
  size_t best_len = 0;
  for (const auto& h : header_rules_) {
    if (h.pattern == host) return &h;  // exact wins
    if (h.pattern.starts_with("*.")) {
      std::string_view suffix = std::string_view(h.pattern).substr(1);  // ".example.com"
      if (host.size() > suffix.size() && std::string_view(host).ends_with(suffix) && suffix.size() > best_len) {
        best = &h;
        best_len = suffix.size();
      }
    }
  }
  return best;
}

StatusOr<UpstreamProxy> ParseUpstreamProxy(std::string_view address, std::string username, std::string password) {
  UpstreamProxy p;
  p.address = std::string(address);
  std::string_view rest = address;
  if (rest.rfind("socks5://", 0) == 0) {
    rest.remove_prefix(9);
  } else if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
    p.kind = UpstreamProxy::Kind::kHttpConnect;
  } else if (rest.find("://") != std::string_view::npos) {
    return InvalidArgument("network.egressProxy.address: the scheme is socks5:// (or none) or http://");
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || rest.front() == '[') {
    return InvalidArgument("network.egressProxy.address must be host:port (an IPv4 address or a DNS name)");
  }
  const int port = PortDigits(rest.substr(colon + 1));
  if (port < 1 || port > 65535) return InvalidArgument("network.egressProxy.address: the port must be 1..65535");
  p.port = static_cast<uint16_t>(port);
  std::string_view host = rest.substr(0, colon);
  if (ParseIpv4(host)) {
    p.host = std::string(host);
  } else {
    p.host = NormalizeName(host);
    if (p.host.empty()) return InvalidArgument("network.egressProxy.address: '" + std::string(host) + "' is not a DNS name or IPv4 address");
  }
  if (username.size() > kMaxProxyCredentialBytes || password.size() > kMaxProxyCredentialBytes) {
    return InvalidArgument("network.egressProxy: username and password are at most 255 bytes each");
  }
  if (username.empty() && !password.empty()) {
    return InvalidArgument("network.egressProxy: a password needs a username");
  }
  for (const std::string* c : {&username, &password}) {
    if (c->find_first_of(std::string_view("\0\r\n", 3)) != std::string::npos) {
      return InvalidArgument("network.egressProxy: credentials may not contain NUL, CR or LF");
    }
  }
  if (p.kind == UpstreamProxy::Kind::kHttpConnect && username.find(':') != std::string::npos) {
    return InvalidArgument("network.egressProxy.username: no ':' in a Basic credential's user");
  }
  p.username = std::move(username);
  p.password = std::move(password);
  return p;
}

Status EgressPolicy::SetUpstreamProxy(std::optional<UpstreamProxy> proxy) {
  if (proxy) {
    for (const auto& r : allow_) {
      if (r.kind == Rule::Kind::kCidr) {
        return InvalidArgument("network.egressProxy with the allowOut address rule '" + r.text +
                               "': address rules are forwarded around a proxy; allow names with an egressProxy");
      }
    }
  }
  upstream_proxy_ = std::move(proxy);
  return OkStatus();
}

std::string EgressPolicy::ToJson(bool with_header_values) const {
  nlohmann::json j;
  j["allowInternetAccess"] = internet_;
  j["allowOut"] = nlohmann::json::array();
  j["denyOut"] = nlohmann::json::array();
  for (const auto& r : allow_) j["allowOut"].push_back(r.text);
  for (const auto& r : deny_) j["denyOut"].push_back(r.text);
  if (!header_rules_.empty()) {
    nlohmann::json rules = nlohmann::json::object();
    for (const auto& h : header_rules_) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& t : h.transforms) {
        nlohmann::json headers = nlohmann::json::object();
        for (const auto& [n, v] : t.headers) headers[n] = with_header_values ? v : std::string("[hidden]");
        list.push_back({{"transform", {{"headers", headers}}}});
      }
      rules[h.pattern] = list;
    }
    j["rules"] = rules;
  }
  if (upstream_proxy_) {
    nlohmann::json p{{"address", upstream_proxy_->address}};
    const std::string hidden = "[hidden]";
    if (!upstream_proxy_->username.empty()) p["username"] = with_header_values ? upstream_proxy_->username : hidden;
    if (!upstream_proxy_->password.empty()) p["password"] = with_header_values ? upstream_proxy_->password : hidden;
    j["egressProxy"] = p;
  }
  return j.dump();
}

}  // namespace airlock::egress
