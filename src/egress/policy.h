// Egress policy of one sandbox: what it may reach (docs/network.md "Egress").
//
// Rules come from the API (`allow_internet_access`, `network.allowOut` /
// `denyOut`, `PUT /sandboxes/{id}/network`) and the CLI (`--allow`,
// `--internet`), parsed at the edge into an immutable EgressPolicy.
//
// Rule syntax (one string each):
//   example.com          the name itself (ports 80 and 443)
//   *.example.com        every name below example.com (not the apex)
//   example.com:443      only that port (80 or 443: names are enforced at L7
//                        by the resolver + proxy, which only see 80/443)
//   203.0.113.7          an IPv4 address, every port
//   203.0.113.0/24:5432  an IPv4 CIDR, one TCP port
// IPv6 literals are refused (IPv6 is never routed for a guest).
//
// Decision: deny rules win over allow rules; `internet` allows every public
// name and address; destinations in a forbidden range (private, loopback,
// link-local incl. 169.254.169.254, CGNAT, benchmarking 198.18/15 = the host
// and other sandboxes, multicast, reserved) are denied whatever the rules say.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace airlock::egress {

struct Rule {
  enum class Kind { kName, kWildcard, kCidr };
  Kind kind = Kind::kName;
  std::string name;              // kName: "example.com"; kWildcard: "example.com" (suffix)
  uint32_t net = 0;              // kCidr, host byte order
  int prefix = 32;               // kCidr
  std::optional<uint16_t> port;  // nullopt: any port
  std::string text;              // the rule as given (normalised), for audit records
};

// Parses one rule; InvalidArgument names what is wrong.
StatusOr<Rule> ParseRule(std::string_view text);
// Lower-cases, strips one trailing dot; empty when not a valid DNS name
// (labels 1..63 chars of [a-z0-9-_], total ≤ 253).
std::string NormalizeName(std::string_view name);
// Parses dotted-quad IPv4; nullopt otherwise. Host byte order.
std::optional<uint32_t> ParseIpv4(std::string_view s);
std::string Ipv4ToString(uint32_t ip);

// True for addresses a guest may never reach (see header comment).
bool IsForbiddenAddress(uint32_t ip);
// The forbidden ranges as CIDR strings, for nftables.
const std::vector<std::string>& ForbiddenCidrs();

// E2B `network.rules` (SandboxNetworkConfig.rules, spec §1.5.1): per host
// pattern, an ordered list of transforms whose headers are set (replacing a
// header of the same name) on every HTTP request the sandbox sends to a
// matching host: plain HTTP (port 80), and HTTPS through TLS interception
// with the sandbox's CA (docs/secrets.md). Rules never grant access: the
// host must also be allowed.
//   pattern: "api.example.com" (exact) or "*.example.com" (subdomains at any
//   depth, not the apex); lower-cased. The exact pattern wins, else the
//   longest matching wildcard; rule sets are never merged.
struct HeaderTransform {
  std::vector<std::pair<std::string, std::string>> headers;  // name as given, value
};
struct HostHeaderRules {
  std::string pattern;  // "api.example.com" or "*.example.com"
  std::vector<HeaderTransform> transforms;
};
inline constexpr size_t kMaxHeaderRuleHosts = 100;
inline constexpr size_t kMaxTransformsPerHost = 16;
inline constexpr size_t kMaxHeadersPerTransform = 64;
inline constexpr size_t kMaxHeaderValueBytes = 8192;
// Checks a header a rule may set: an RFC 9110 token name that is not a
// framing or hop-by-hop header (Host, Content-Length, Transfer-Encoding,
// Connection, Upgrade, TE, Trailer, Keep-Alive, Proxy-Connection), and a
// value without CR, LF or NUL of at most kMaxHeaderValueBytes.
Status ValidateRuleHeader(std::string_view name, std::string_view value);

// E2B `network.egressProxy` (SandboxEgressProxyConfig): the customer's own
// proxy, through which the sandbox's allowed egress leaves (docs/network.md
// "Upstream proxy"). airlock's policy, brokering and audit apply first; the
// proxy is given the destination's name (SOCKS5 ATYP=domain, the proxy
// resolves it, as E2B) and port.
//   address: "host:port" or "socks5://host:port" (SOCKS5, RFC 1928; E2B's
//            only form), "http://host:port" (HTTP CONNECT, RFC 9110 §9.3.6;
//            an airlock extension). host: a DNS name or an IPv4 literal.
//   username, password: RFC 1929 (SOCKS5) or Basic Proxy-Authorization
//            (HTTP), each at most 255 bytes; credentials: never logged nor
//            returned ("[hidden]"), kept only in the run dir's policy file.
// With a proxy, nothing is forwarded around it: CIDR allowOut rules are
// refused, and allow_internet_access allows every public name (80/443,
// through the proxy) but no address forwarding.
struct UpstreamProxy {
  enum class Kind { kSocks5, kHttpConnect };
  Kind kind = Kind::kSocks5;
  std::string address;  // as given
  std::string host;     // lower-cased name or IPv4 literal
  uint16_t port = 0;
  std::string username, password;
};
inline constexpr size_t kMaxProxyCredentialBytes = 255;
StatusOr<UpstreamProxy> ParseUpstreamProxy(std::string_view address, std::string username, std::string password);

struct Decision {
  bool allowed = false;
  std::string rule;    // the matching rule's text, "internet", or "default-deny"
  std::string reason;  // e.g. "forbidden range", "denyOut"
};

class EgressPolicy {
 public:
  EgressPolicy() = default;  // denies everything
  // Parses every rule; the first bad one fails the whole policy.
  static StatusOr<EgressPolicy> Create(bool internet, const std::vector<std::string>& allow,
                                       const std::vector<std::string>& deny);

  // A DNS name (any port): may the resolver answer it?
  Decision CheckName(std::string_view name) const;
  // A name at a TCP port (proxy, after Host/SNI).
  Decision CheckNamePort(std::string_view name, uint16_t port) const;
  // An address at a TCP port (L3 rules).
  Decision CheckAddress(uint32_t ip, uint16_t port) const;

  bool internet() const { return internet_; }
  const std::vector<Rule>& allow() const { return allow_; }
  const std::vector<Rule>& deny() const { return deny_; }
  // CIDR allow rules (for nftables); forbidden ranges are dropped before them.
  std::vector<Rule> CidrAllowRules() const;
  // network.rules; InvalidArgument for a bad pattern, header or size.
  Status SetHeaderRules(std::vector<HostHeaderRules> rules);
  const std::vector<HostHeaderRules>& header_rules() const { return header_rules_; }
  // network.egressProxy; InvalidArgument with CIDR allow rules (they would
  // be forwarded around it).
  Status SetUpstreamProxy(std::optional<UpstreamProxy> proxy);
  const std::optional<UpstreamProxy>& upstream_proxy() const { return upstream_proxy_; }
  // The rules' host patterns (the names a sandbox CA must cover).
  std::vector<std::string> HeaderRulePatterns() const;
  // The rule set for `host` (port ignored); null when none matches.
  const HostHeaderRules* HeaderRulesFor(std::string_view host) const;
  // {"allowInternetAccess":bool,"allowOut":[...],"denyOut":[...],
  //  "rules":{pattern:[{"transform":{"headers":{name:value}}}]},
  //  "egressProxy":{"address":...,"username":...,"password":...}}
  // Header values and proxy credentials are credentials: without
  // `with_header_values` each is written as "[hidden]" (logs, audit, API
  // responses); the policy file in the run dir keeps them.
  std::string ToJson(bool with_header_values = false) const;

 private:
  bool internet_ = false;
  std::vector<Rule> allow_, deny_;
  std::vector<HostHeaderRules> header_rules_;
  std::optional<UpstreamProxy> upstream_proxy_;
};

}  // namespace airlock::egress
