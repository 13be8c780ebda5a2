// Unit tests of src/egress: policy parsing and decisions, DNS messages, the
// TLS ClientHello SNI and HTTP Host parsers, the response scrubber (no root,
// no network).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "egress/dns_message.h"
#include "egress/egress_internal.h"
#include "egress/host_addresses.h"
#include "egress/l7_parse.h"
#include "egress/policy.h"
#include "egress/policy_json.h"
#include "egress/stream_scrubber.h"
#include "tests/unit/egress_test_util.h"

using namespace airlock::egress;
using airlock::StatusCode;

TEST(EgressPolicy, ParsesRules) {
  auto r = ParseRule("Example.COM.");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, Rule::Kind::kName);
  EXPECT_EQ(r->text, "example.com");
  r = ParseRule("*.example.com:443");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, Rule::Kind::kWildcard);
  EXPECT_EQ(*r->port, 443);
  r = ParseRule("203.0.113.9/24:5432");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, "203.0.113.0/24:5432");
  EXPECT_EQ(r->prefix, 24);
  for (const char* bad : {"", "*.com", "exa mple.com", "example.com:22", "1.2.3.4/33", "::1", "2001:db8::1",
                          "1.2.3.4:0", "1.2.3.4:70000", "example.com/8", "a..b", "01.2.3.4", "*.", "x:"}) {
    EXPECT_FALSE(ParseRule(bad).ok()) << bad;
  }
}

TEST(EgressPolicy, Decisions) {
  auto p = EgressPolicy::Create(false, {"allowed.test", "*.wild.test", "203.0.113.0/24:8080", "api.test:443"},
                                {"bad.wild.test", "203.0.113.66"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->CheckName("allowed.test").allowed);
  EXPECT_TRUE(p->CheckName("ALLOWED.test.").allowed);
  EXPECT_FALSE(p->CheckName("sub.allowed.test").allowed);
  EXPECT_TRUE(p->CheckName("a.wild.test").allowed);
  EXPECT_FALSE(p->CheckName("wild.test").allowed);
  EXPECT_FALSE(p->CheckName("bad.wild.test").allowed);
  EXPECT_EQ(p->CheckName("bad.wild.test").reason, "denyOut");
  EXPECT_FALSE(p->CheckName("evilwild.test").allowed);
  EXPECT_FALSE(p->CheckName("203.0.113.5").allowed);
  EXPECT_TRUE(p->CheckNamePort("api.test", 443).allowed);
  EXPECT_FALSE(p->CheckNamePort("api.test", 80).allowed);
  EXPECT_TRUE(p->CheckAddress(0xCB007105, 8080).allowed);
  EXPECT_FALSE(p->CheckAddress(0xCB007105, 8081).allowed);
  EXPECT_FALSE(p->CheckAddress(0xCB007142, 8080).allowed);  // denyOut 203.0.113.66
  EXPECT_FALSE(EgressPolicy().CheckName("allowed.test").allowed);
  auto inet = EgressPolicy::Create(true, {}, {"blocked.test"});
  ASSERT_TRUE(inet.ok());
  EXPECT_TRUE(inet->CheckName("anything.test").allowed);
  EXPECT_FALSE(inet->CheckName("blocked.test").allowed);
  // Forbidden whatever the rules say.
  auto all = EgressPolicy::Create(true, {"0.0.0.0/0", "169.254.169.254"}, {});
  ASSERT_TRUE(all.ok());
  for (const char* ip : {"169.254.169.254", "10.1.2.3", "127.0.0.1", "192.168.1.1", "172.16.0.1", "198.18.0.4",
                         "198.19.1.1", "100.64.0.1", "224.0.0.1", "0.0.0.0", "255.255.255.255"}) {
    EXPECT_FALSE(all->CheckAddress(*ParseIpv4(ip), 80).allowed) << ip;
    EXPECT_TRUE(IsForbiddenAddress(*ParseIpv4(ip))) << ip;
  }
  EXPECT_TRUE(all->CheckAddress(*ParseIpv4("203.0.113.1"), 22).allowed);
}

TEST(EgressDns, QueryRoundTrip) {
  auto q = dns::BuildQuery(0x1234, "allowed.test", dns::kTypeA);
  auto parsed = dns::ParseQuery(q.data(), q.size());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->id, 0x1234);
  EXPECT_EQ(parsed->name, "allowed.test");
  EXPECT_EQ(parsed->qtype, dns::kTypeA);
  auto resp = dns::BuildResponse(*parsed, dns::kRcodeNoError, {{0xCB00710A, 60}});
  auto ans = dns::ParseResponse(resp.data(), resp.size(), 0x1234, "allowed.test", dns::kTypeA);
  ASSERT_TRUE(ans.ok()) << ans.status().ToString();
  ASSERT_EQ(ans->a.size(), 1u);
  EXPECT_EQ(ans->a[0].ip, 0xCB00710Au);
  EXPECT_FALSE(dns::ParseResponse(resp.data(), resp.size(), 0x1235, "allowed.test", dns::kTypeA).ok());
  EXPECT_FALSE(dns::ParseResponse(resp.data(), resp.size(), 0x1234, "other.test", dns::kTypeA).ok());
}

TEST(EgressDns, RejectsHostileQueries) {
  auto q = dns::BuildQuery(1, "a.test", dns::kTypeA);
  // Forward / self pointer in the question name.
  std::vector<uint8_t> loop(q.begin(), q.begin() + 12);
  loop.insert(loop.end(), {0xC0, 12, 0, 1, 0, 1});
  EXPECT_FALSE(dns::ParseQuery(loop.data(), loop.size()).ok());
  // Label running past the end.
  std::vector<uint8_t> trunc(q.begin(), q.begin() + 12);
  trunc.insert(trunc.end(), {30, 'a', 'b'});
  EXPECT_FALSE(dns::ParseQuery(trunc.data(), trunc.size()).ok());
  // Name > 255 bytes.
  std::string long_name;
  for (int i = 0; i < 5; ++i) long_name += std::string(60, 'x') + ".";
  long_name += "denied.test";
  auto lq = dns::BuildQuery(2, long_name, dns::kTypeA);
  EXPECT_FALSE(dns::ParseQuery(lq.data(), lq.size()).ok());
  // Binary label bytes.
  std::vector<uint8_t> bin(q.begin(), q.begin() + 12);
  bin.insert(bin.end(), {2, 0xff, 0x00, 0, 0, 1, 0, 1});
  EXPECT_FALSE(dns::ParseQuery(bin.data(), bin.size()).ok());
  // A response is not a query; two questions are refused.
  auto resp = dns::BuildResponse(*dns::ParseQuery(q.data(), q.size()), 0, {});
  EXPECT_FALSE(dns::ParseQuery(resp.data(), resp.size()).ok());
  std::vector<uint8_t> two = q;
  two[5] = 2;
  EXPECT_FALSE(dns::ParseQuery(two.data(), two.size()).ok());
  EXPECT_FALSE(dns::ParseQuery(q.data(), 5).ok());
}

TEST(EgressDns, FollowsCnameAndIgnoresOtherOwners) {
  // Hand-built response: allowed.test CNAME cdn.test; cdn.test A 203.0.113.10; other.test A 6.6.6.6.
  std::vector<uint8_t> m = {0, 7, 0x81, 0x80, 0, 1, 0, 3, 0, 0, 0, 0};
  auto name = [&](const std::string& n) {
    size_t i = 0;
    while (i < n.size()) {
      size_t j = n.find('.', i);
      if (j == std::string::npos) j = n.size();
      m.push_back(static_cast<uint8_t>(j - i));
      m.insert(m.end(), n.begin() + i, n.begin() + j);
      i = j + 1;
    }
    m.push_back(0);
  };
  name("allowed.test");
  m.insert(m.end(), {0, 1, 0, 1});
  m.insert(m.end(), {0xC0, 12, 0, 5, 0, 1, 0, 0, 0, 60});
  size_t len_at = m.size();
  m.insert(m.end(), {0, 0});
  size_t start = m.size();
  name("cdn.test");
  m[len_at + 1] = static_cast<uint8_t>(m.size() - start);
  name("cdn.test");
  m.insert(m.end(), {0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 203, 0, 113, 10});
  name("other.test");
  m.insert(m.end(), {0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 6, 6, 6, 6});
  auto ans = dns::ParseResponse(m.data(), m.size(), 7, "allowed.test", dns::kTypeA);
  ASSERT_TRUE(ans.ok()) << ans.status().ToString();
  ASSERT_EQ(ans->a.size(), 1u);
  EXPECT_EQ(ans->a[0].ip, 0xCB00710Au);
}

TEST(EgressL7, ClientHelloSni) {
  auto ch = BuildClientHello("Allowed.Test");
  auto r = ParseClientHello(ch.data(), ch.size());
  ASSERT_EQ(r.kind, L7Result::Kind::kOk) << r.error;
  EXPECT_EQ(r.host, "allowed.test");
  // Every strict prefix needs more bytes (never a wrong answer).
  for (size_t n = 0; n < ch.size(); n += 7) {
    auto p = ParseClientHello(ch.data(), n);
    EXPECT_EQ(p.kind, L7Result::Kind::kNeedMore) << n;
  }
  // Split across two records.
  auto split = SplitIntoRecords(ch, 40);
  r = ParseClientHello(split.data(), split.size());
  ASSERT_EQ(r.kind, L7Result::Kind::kOk) << r.error;
  EXPECT_EQ(r.host, "allowed.test");
  EXPECT_EQ(ParseClientHello(BuildClientHello("").data(), BuildClientHello("").size()).kind, L7Result::Kind::kInvalid);
  auto ech = BuildClientHello("allowed.test", /*ech=*/true);
  EXPECT_EQ(ParseClientHello(ech.data(), ech.size()).kind, L7Result::Kind::kInvalid);
  auto two = BuildClientHello("allowed.test", false, "denied.test");
  EXPECT_EQ(ParseClientHello(two.data(), two.size()).kind, L7Result::Kind::kInvalid);
  auto ip = BuildClientHello("203.0.113.10");
  EXPECT_EQ(ParseClientHello(ip.data(), ip.size()).kind, L7Result::Kind::kInvalid);
  std::string http = "GET / HTTP/1.1\r\n";
  EXPECT_EQ(ParseClientHello(reinterpret_cast<const uint8_t*>(http.data()), http.size()).kind,
            L7Result::Kind::kInvalid);
}

TEST(EgressL7, HttpHost) {
  auto parse = [](const std::string& s) {
    return ParseHttpRequestHead(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  auto r = parse("GET /x HTTP/1.1\r\nHost: Allowed.test:80\r\nAccept: */*\r\n\r\nbody");
  ASSERT_EQ(r.kind, L7Result::Kind::kOk) << r.error;
  EXPECT_EQ(r.host, "allowed.test");
  EXPECT_EQ(r.consumed, r.consumed);
  EXPECT_EQ(parse("GET /x HTTP/1.1\r\nHost: a.test\r\n").kind, L7Result::Kind::kNeedMore);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\n\r\n").kind, L7Result::Kind::kInvalid);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n").kind, L7Result::Kind::kInvalid);
  EXPECT_EQ(parse("GET http://denied.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n").kind, L7Result::Kind::kInvalid);
  EXPECT_EQ(parse("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n").kind, L7Result::Kind::kOk);
  EXPECT_EQ(parse("CONNECT denied.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n").kind, L7Result::Kind::kInvalid);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a.test\r\n folded\r\n\r\n").kind, L7Result::Kind::kInvalid);
  EXPECT_EQ(parse("\x16\x03\x01").kind, L7Result::Kind::kInvalid);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: bad host\r\n\r\n").kind, L7Result::Kind::kInvalid);
  EXPECT_EQ(parse(std::string(20000, 'A')).kind, L7Result::Kind::kInvalid);
}

// Real ClientHellos (captured from curl and openssl s_client on loopback,
// kept as fuzz seeds) carry allowed.test.
TEST(EgressL7, RealClientHellos) {
  for (const char* f : {"tls_curl_clienthello", "tls_openssl_clienthello", "tls_fragmented"}) {
    std::ifstream in(std::string(AIRLOCK_SOURCE_DIR) + "/tests/fuzz/corpus/egress_l7/" + f, std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(b.size(), 100u) << f;
    auto r = ParseClientHello(b.data(), b.size());
    ASSERT_EQ(r.kind, L7Result::Kind::kOk) << f << ": " << r.error;
    EXPECT_EQ(r.host, "allowed.test") << f;
  }
}

// network.rules (E2B SandboxNetworkConfig.rules → header transforms).
TEST(EgressPolicy, HeaderRulesParseMatchAndHideValues) {
  auto body = nlohmann::json::parse(R"({
    "allowOut": ["api.example.com"],
    "rules": {
      "API.example.com": [{"transform": {"headers": {"Authorization": "Bearer tok-1234567"}}},
                          {"transform": {"headers": {"X-Team": "a", "authorization": "Bearer tok-override"}}}],
      "*.example.com": [{"transform": {"headers": {"X-Wild": "1"}}}],
      "*.deep.example.com": [{}]
    }})");
  auto p = PolicyFromApi(&body, false);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // Exact beats wildcard; the pattern is lower-cased.
  auto* exact = p->HeaderRulesFor("api.example.com:443");
  ASSERT_NE(exact, nullptr);
  EXPECT_EQ(exact->pattern, "api.example.com");
  ASSERT_EQ(exact->transforms.size(), 2u);
  // Wildcards: any depth below, not the apex; the longest suffix wins.
  ASSERT_NE(p->HeaderRulesFor("a.b.example.com"), nullptr);
  EXPECT_EQ(p->HeaderRulesFor("a.b.example.com")->pattern, "*.example.com");
  EXPECT_EQ(p->HeaderRulesFor("x.deep.example.com")->pattern, "*.deep.example.com");
  EXPECT_EQ(p->HeaderRulesFor("example.com"), nullptr);
  EXPECT_EQ(p->HeaderRulesFor("notexample.com"), nullptr);
  EXPECT_EQ(p->HeaderRulesFor("evil.com"), nullptr);
  // Rules grant nothing.
  EXPECT_FALSE(p->CheckNamePort("x.example.com", 443).allowed);
  // Values are hidden unless asked for (the policy file), and round-trip.
  std::string shown = p->ToJson();
  EXPECT_EQ(shown.find("tok-1234567"), std::string::npos) << shown;
  EXPECT_NE(shown.find("[hidden]"), std::string::npos) << shown;
  auto back = PolicyFromStoredJson(p->ToJson(true));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(true), p->ToJson(true));
  // An update without "rules" keeps them; "rules": {} clears them.
  auto keep = nlohmann::json::parse(R"({"allowOut": ["other.example.com"]})");
  auto kept = PolicyFromApi(&keep, std::nullopt, *p);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->header_rules().size(), 3u);
  auto clear = nlohmann::json::parse(R"({"rules": {}})");
  auto cleared = PolicyFromApi(&clear, std::nullopt, *p);
  ASSERT_TRUE(cleared.ok());
  EXPECT_TRUE(cleared->header_rules().empty());
}

// network.egressProxy (E2B SandboxEgressProxyConfig): SOCKS5 by default,
// HTTP CONNECT with http://; credentials hidden and kept in the policy file;
// nothing that would be forwarded around the proxy.
TEST(EgressPolicy, UpstreamProxyParsesHidesAndRefuses) {
  auto body = nlohmann::json::parse(R"({"allowOut": ["example.com"],
    "egressProxy": {"address": "Proxy.Example.net:1080", "username": "u-secret", "password": "p-secret"}})");
  auto p = PolicyFromApi(&body, false);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(p->upstream_proxy());
  EXPECT_EQ(p->upstream_proxy()->kind, UpstreamProxy::Kind::kSocks5);
  EXPECT_EQ(p->upstream_proxy()->host, "proxy.example.net");
  EXPECT_EQ(p->upstream_proxy()->port, 1080);
  std::string shown = p->ToJson();
  EXPECT_EQ(shown.find("u-secret"), std::string::npos) << shown;
  EXPECT_EQ(shown.find("p-secret"), std::string::npos) << shown;
  auto back = PolicyFromStoredJson(p->ToJson(true));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->upstream_proxy()->password, "p-secret");
  EXPECT_EQ(back->ToJson(true), p->ToJson(true));
  auto http = ParseUpstreamProxy("http://203.0.113.9:3128", "", "");
  ASSERT_TRUE(http.ok());
  EXPECT_EQ(http->kind, UpstreamProxy::Kind::kHttpConnect);
  EXPECT_EQ(http->host, "203.0.113.9");
  EXPECT_EQ(ParseUpstreamProxy("socks5://203.0.113.9:1080", "", "")->kind, UpstreamProxy::Kind::kSocks5);
  for (const char* bad : {"proxy", "proxy:0", "proxy:65536", "proxy:x", ":1080", "[::1]:1080", "ftp://p:21",
                          "bad_name!:1080"}) {
    EXPECT_FALSE(ParseUpstreamProxy(bad, "", "").ok()) << bad;
  }
  EXPECT_FALSE(ParseUpstreamProxy("p:1", "", "pw").ok());                        // a password needs a user
  EXPECT_FALSE(ParseUpstreamProxy("p:1", std::string(256, 'u'), "").ok());       // RFC 1929: 255 bytes
  EXPECT_FALSE(ParseUpstreamProxy("p:1", "u", "a\r\nX-Injected: 1").ok());    // no header injection
  EXPECT_FALSE(ParseUpstreamProxy("http://p:1", "a:b", "c").ok());               // Basic's user has no ':'
  for (const char* text : {R"({"egressProxy": {"address": "p:1", "tls": {}}})", R"({"egressProxy": "p:1"})",
                           R"({"egressProxy": {}})", R"({"egressProxy": {"address": 1080}})",
                           R"({"allowOut": ["203.0.113.0/24"], "egressProxy": {"address": "p:1"}})"}) {
    auto j = nlohmann::json::parse(text);
    auto r = PolicyFromApi(&j, false);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find("egressProxy"), std::string::npos) << r.status().message();
  }
}

TEST(EgressPolicy, HeaderRulesRefuseWhatCouldSmuggleOrReroute) {
  for (const char* bad : {
           R"({"rules": {"*": [{"transform": {"headers": {"A": "b"}}}]}})",
           R"({"rules": {"203.0.113.7": [{"transform": {"headers": {"A": "b"}}}]}})",
           R"({"rules": {"a.test": [{"transform": {"headers": {"Host": "evil.test"}}}]}})",
           R"({"rules": {"a.test": [{"transform": {"headers": {"Transfer-Encoding": "chunked"}}}]}})",
           R"({"rules": {"a.test": [{"transform": {"headers": {"content-length": "0"}}}]}})",
           R"({"rules": {"a.test": [{"transform": {"headers": {"X-A": "v\r\nHost: evil.test"}}}]}})",
           R"({"rules": {"a.test": [{"transform": {"headers": {"Bad Name": "v"}}}]}})",
           R"({"rules": {"a.test": [{"transform": {"headers": {"X-A": 5}}}]}})",
           R"({"rules": {"a.test": [{"transform": {"body": "x"}}]}})",
           R"({"rules": {"a.test": {"transform": {}}}})",
           R"({"rules": ["a.test"]})",
       }) {
    auto body = nlohmann::json::parse(bad);
    auto p = PolicyFromApi(&body, false);
    EXPECT_FALSE(p.ok()) << bad;
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

// The host's own addresses, as this process's namespace sees them (netlink
// lookups only: nothing is sent anywhere).
TEST(EgressHostAddresses, InterfacesExtraAndLocalRoutes) {
  auto h = HostAddresses::Open({Cidr{*ParseIpv4("198.18.0.0"), 15}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto list = (*h)->Addresses();
  EXPECT_TRUE(std::is_sorted(list.begin(), list.end()));
  EXPECT_NE(std::find(list.begin(), list.end(), *ParseIpv4("127.0.0.1")), list.end());
  EXPECT_TRUE((*h)->IsHostAddress(*ParseIpv4("127.0.0.1")));
  EXPECT_TRUE((*h)->IsHostAddress(*ParseIpv4("127.9.9.9")));       // not an interface's: the local route of 127/8
  EXPECT_TRUE((*h)->IsHostAddress(*ParseIpv4("198.19.200.1")));    // the extra CIDR (other sandboxes)
  EXPECT_FALSE((*h)->IsHostAddress(*ParseIpv4("203.0.113.201")));  // TEST-NET-3: no interface has it here
  for (uint32_t ip : list) EXPECT_TRUE((*h)->IsHostAddress(ip)) << Ipv4ToString(ip);
  EXPECT_GE((*h)->fd(), 0);
}

// Issue 32 item 11: brokered values are masked in what is relayed to the
// guest, at any split of the stream into reads, keeping the length.
TEST(EgressStreamScrubber, MasksAtEverySplitAndKeepsTheLength) {
  const std::string secret = "sk-live-0123456789abcdef";
  const std::string text =
      "{\"Authorization\": \"Bearer " + secret + "\", \"again\": \"" + secret + secret + "\", \"short\": \"sk-\"}\n";
  std::string expected = text;
  for (size_t at = 0; (at = expected.find(secret, at)) != std::string::npos;) {
    // Two values back to back are one run: one marker, then '*'.
    size_t end = at;
    while (expected.compare(end, secret.size(), secret) == 0) end += secret.size();
    std::string run = "[REDACTED]" + std::string(end - at - 10, '*');
    expected.replace(at, end - at, run);
    at = end;
  }
  ASSERT_EQ(expected.size(), text.size());
  EXPECT_EQ(expected.find(secret), std::string::npos);
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); b += 3) {
      StreamScrubber s({secret});
      std::string out = s.Feed(text.substr(0, a));
      out += s.Feed(text.substr(a, b - a));
      out += s.Feed(text.substr(b));
      out += s.Flush();
      ASSERT_EQ(out, expected) << a << " " << b;
    }
  }
  // Byte by byte, too.
  StreamScrubber s({secret});
  std::string out;
  for (char c : text) out += s.Feed(std::string_view(&c, 1));
  EXPECT_EQ(out + s.Flush(), expected);
  // A value shorter than the marker is all '*'; a pattern under 4 bytes is ignored.
  StreamScrubber small({"abcdefgh", "xy"});
  EXPECT_EQ(small.ScrubAll("1abcdefgh2xy"), "1********2xy");
  EXPECT_TRUE(StreamScrubber({"abc"}).empty());
}

TEST(EgressStreamScrubber, HoldsBackOnlyWhatCouldStartAValue) {
  StreamScrubber s({"SECRETVALUE1"});
  // Nothing here can begin the value: released at once (a streamed answer
  // such as server-sent events is not delayed).
  EXPECT_EQ(s.Feed("data: hello\n\n"), "data: hello\n\n");
  // "SECR" may be the value's start: held until the next bytes decide.
  EXPECT_EQ(s.Feed("x SECR"), "x ");
  EXPECT_EQ(s.Feed("ET"), "");
  EXPECT_EQ(s.Feed("!"), "SECRET!");
  EXPECT_EQ(s.Feed("SECRETVAL"), "");
  EXPECT_EQ(s.Feed("UE1 tail"), "[REDACTED]** tail");
  EXPECT_EQ(s.Feed("SEC"), "");
  EXPECT_EQ(s.Flush(), "SEC");  // the end of the body releases the rest
}

// A guest resolving ever new names keeps at most kMaxResolvedNames pinned
// answers (egress_internal.h): expired ones go first, then those nearest
// their expiry, leaving a quarter free.
TEST(EgressResolvedNames, APrunedMapKeepsTheFreshestAnswers) {
  using airlock::egress::Clock;
  using airlock::egress::PruneResolved;
  using airlock::egress::Resolved;
  const auto now = Clock::now();
  std::map<std::string, Resolved> m;
  auto put = [&](int i, Clock::duration left) { m["n" + std::to_string(i) + ".example.com"] = {{1u}, now + left}; };
  for (int i = 0; i < 100; ++i) put(i, std::chrono::seconds(i < 10 ? -1 : 60 + i));  // 10 expired
  // Not full: nothing goes.
  PruneResolved(m, now, 200);
  EXPECT_EQ(m.size(), 100u);
  PruneResolved(m, now, 100);  // full: the 10 expired, then down to 75, nearest expiry first
  EXPECT_EQ(m.size(), 75u);
  for (int i = 0; i < 25; ++i) EXPECT_EQ(m.count("n" + std::to_string(i) + ".example.com"), 0u) << i;
  for (int i = 25; i < 100; ++i) EXPECT_EQ(m.count("n" + std::to_string(i) + ".example.com"), 1u) << i;
  // Only expired entries over a full map: they are enough.
  m.clear();
  for (int i = 0; i < 100; ++i) put(i, std::chrono::seconds(i < 50 ? -1 : 600));
  PruneResolved(m, now, 100);
  EXPECT_EQ(m.size(), 50u);
  // Many inserts stay bounded.
  m.clear();
  for (int i = 0; i < 100000; ++i) {
    if (m.size() >= 1000) PruneResolved(m, now, 1000);
    put(i, std::chrono::seconds(600));
    ASSERT_LE(m.size(), 1000u);
  }
  EXPECT_GE(airlock::egress::kMaxResolvedNames, 1024u);
}
