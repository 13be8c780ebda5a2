// The L3 audit parser (src/egress/nflog_packet): NFLOG prefix + packet
// bytes → record. The packets are built here byte by byte.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "egress/flow_end_reader.h"
#include "egress/nflog_packet.h"

using namespace airlock::egress;

namespace {

using Bytes = std::vector<uint8_t>;

void Put16(Bytes& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v);
}

Bytes Ipv4(uint8_t proto, std::vector<uint8_t> dst, const Bytes& payload, uint16_t frag = 0) {
  Bytes b(20, 0);
  b[0] = 0x45;
  Put16(b, 2, static_cast<uint16_t>(20 + payload.size()));
  Put16(b, 6, frag);
  b[8] = 64;
  b[9] = proto;
  b[12] = 169, b[13] = 254, b[14] = 0, b[15] = 21;
  for (int i = 0; i < 4; ++i) b[16 + i] = dst[i];
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes Ipv6(uint8_t next, const Bytes& payload) {
  Bytes b(40, 0);
  b[0] = 0x60;
  Put16(b, 4, static_cast<uint16_t>(payload.size()));
  b[6] = next;
  b[7] = 64;
  b[24] = 0x20, b[25] = 0x01, b[26] = 0x0d, b[27] = 0xb8, b[39] = 0x10;  // 2001:db8::10
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes Tcp(uint16_t dport, uint8_t flags = 0x02) {
  Bytes t(20, 0);
  Put16(t, 0, 40000);
  Put16(t, 2, dport);
  t[12] = 0x50;
  t[13] = flags;
  return t;
}

Bytes Udp(uint16_t dport, size_t data = 1) {
  Bytes u(8 + data, 'x');
  Put16(u, 0, 40001);
  Put16(u, 2, dport);
  Put16(u, 4, static_cast<uint16_t>(8 + data));
  return u;
}

nlohmann::json Rec(std::string_view prefix, const Bytes& b) {
  auto r = NflogToRecord(prefix, b.data(), b.size());
  EXPECT_TRUE(r.has_value()) << prefix;
  return r.value_or(nlohmann::json::object());
}

}  // namespace

TEST(EgressNflog, Prefix) {
  auto p = ParseNflogPrefix("deny:default-deny");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->decision, "deny");
  EXPECT_EQ(p->rule, "default-deny");
  p = ParseNflogPrefix("allow:203.0.113.0/24:8080");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->decision, "allow");
  EXPECT_EQ(p->rule, "203.0.113.0/24:8080");
  for (const char* bad : {"", "deny", "deny:", "drop:x", "DENY:x", "deny:a b", "deny:\"x", "deny:\x01"})
    EXPECT_FALSE(ParseNflogPrefix(bad)) << bad;
  EXPECT_FALSE(ParseNflogPrefix("deny:" + std::string(64, 'a')));
  EXPECT_TRUE(ParseNflogPrefix("deny:" + std::string(63, 'a')));
}

TEST(EgressNflog, UdpTcpIcmpRecords) {
  auto r = Rec("deny:default-deny", Ipv4(17, {203, 0, 113, 10}, Udp(9999, 5)));
  EXPECT_EQ(r["protocol"], "udp");
  EXPECT_EQ(r["decision"], "deny");
  EXPECT_EQ(r["rule"], "default-deny");
  EXPECT_EQ(r["source"], "nftables");
  EXPECT_EQ(r["destination"]["ip"], "203.0.113.10");
  EXPECT_EQ(r["destination"]["port"], 9999);
  EXPECT_EQ(r["bytesOut"], 20 + 8 + 5);
  EXPECT_EQ(r["bytesIn"], 0);

  r = Rec("deny:forbidden-range", Ipv4(6, {169, 254, 169, 254}, Tcp(22)));
  EXPECT_EQ(r["protocol"], "tcp");
  EXPECT_EQ(r["rule"], "forbidden-range");
  EXPECT_EQ(r["destination"]["ip"], "169.254.169.254");
  EXPECT_EQ(r["destination"]["port"], 22);
  EXPECT_EQ(r["tcpFlags"], 2);

  Bytes echo = {8, 0, 0, 0, 0x12, 0x34, 0, 1};
  r = Rec("deny:gateway", Ipv4(1, {169, 254, 0, 22}, echo));
  EXPECT_EQ(r["protocol"], "icmp");
  EXPECT_EQ(r["icmpType"], 8);
  EXPECT_EQ(r["icmpCode"], 0);
  EXPECT_FALSE(r["destination"].contains("port"));

  r = Rec("allow:203.0.113.30:8080", Ipv4(6, {203, 0, 113, 30}, Tcp(8080)));
  EXPECT_EQ(r["decision"], "allow");
  EXPECT_EQ(r["rule"], "203.0.113.30:8080");

  r = Rec("deny:rate-limit", Ipv4(17, {203, 0, 113, 10}, Udp(7777)));
  EXPECT_EQ(r["rule"], "rate-limit");
  EXPECT_NE(r["reason"].get<std::string>().find("log budget"), std::string::npos) << r;

  r = Rec("deny:default-deny", Ipv4(47, {203, 0, 113, 10}, Bytes(4, 0)));  // GRE
  EXPECT_EQ(r["protocol"], "ip");
  EXPECT_EQ(r["transport"], "ipproto-47");
  EXPECT_EQ(r["ipProto"], 47);
}

TEST(EgressNflog, CapturedPrefixAndFragments) {
  // Only 22 bytes captured: IPv4 header fine, TCP ports (4 bytes) cut off.
  Bytes b = Ipv4(6, {203, 0, 113, 10}, Tcp(8080));
  auto p = ParseL3Packet(b.data(), 22);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->dport);
  EXPECT_EQ(p->length, 40u);  // from the header, not the capture
  p = ParseL3Packet(b.data(), 24);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->dport, 8080);
  // A non-first fragment has no transport header: bytes that look like ports are not ports.
  Bytes f = Ipv4(17, {203, 0, 113, 10}, Udp(53), 0x0010);
  p = ParseL3Packet(f.data(), f.size());
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->fragment);
  EXPECT_FALSE(p->dport);
  // Total length smaller than the capture: the transport is read within the packet only.
  Bytes t = Ipv4(6, {203, 0, 113, 10}, Tcp(8080));
  Put16(t, 2, 22);
  p = ParseL3Packet(t.data(), t.size());
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->dport);
}

TEST(EgressNflog, MalformedPacketsAreRecordedNotTrusted) {
  Bytes b = Ipv4(6, {203, 0, 113, 10}, Tcp(8080));
  for (size_t n : {0, 1, 19}) EXPECT_FALSE(ParseL3Packet(b.data(), n).ok()) << n;
  Bytes bad = b;
  bad[0] = 0x44;  // IHL 16 bytes
  EXPECT_FALSE(ParseL3Packet(bad.data(), bad.size()).ok());
  bad = b;
  bad[0] = 0x4f;  // IHL 60 > captured 40: no transport, header fields still read
  Put16(bad, 2, 60);
  auto p = ParseL3Packet(bad.data(), bad.size());
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->dport);
  bad = b;
  Put16(bad, 2, 10);  // total < header
  EXPECT_FALSE(ParseL3Packet(bad.data(), bad.size()).ok());
  bad = b;
  bad[0] = 0x55;
  EXPECT_FALSE(ParseL3Packet(bad.data(), bad.size()).ok());
  EXPECT_FALSE(ParseL3Packet(nullptr, 10).ok());
  // Still a record: a drop is never silent.
  auto r = NflogToRecord("deny:default-deny", bad.data(), bad.size());
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["protocol"], "unknown");
  EXPECT_EQ((*r)["decision"], "deny");
  EXPECT_EQ((*r)["bytesOut"], bad.size());
  // Not our prefix: no record.
  EXPECT_FALSE(NflogToRecord("something else", b.data(), b.size()));
}

TEST(EgressNflog, Ipv6WithExtensionHeaders) {
  auto r = Rec("deny:ipv6", Ipv6(6, Tcp(443)));
  EXPECT_EQ(r["protocol"], "ipv6");
  EXPECT_EQ(r["transport"], "tcp");
  EXPECT_EQ(r["destination"]["ip"], "2001:db8::10");
  EXPECT_EQ(r["destination"]["port"], 443);
  EXPECT_EQ(r["bytesOut"], 60);
  // Hop-by-hop (8 bytes) then UDP.
  Bytes hop = {17, 0, 0, 0, 0, 0, 0, 0};
  Bytes u = Udp(5353);
  hop.insert(hop.end(), u.begin(), u.end());
  r = Rec("deny:ipv6", Ipv6(0, hop));
  EXPECT_EQ(r["transport"], "udp");
  EXPECT_EQ(r["destination"]["port"], 5353);
  // A non-first fragment: no ports.
  Bytes frag = {17, 0, 0, 0x10, 0, 0, 0, 1};
  frag.insert(frag.end(), u.begin(), u.end());
  auto p = ParseL3Packet(Ipv6(44, frag).data(), Ipv6(44, frag).size());
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->fragment);
  EXPECT_FALSE(p->dport);
  // An extension header claiming more than was captured: no transport, no overread.
  Bytes big = {6, 255, 0, 0, 0, 0, 0, 0};
  Bytes pkt = Ipv6(60, big);
  p = ParseL3Packet(pkt.data(), pkt.size());
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->dport);
  // A chain of extension headers longer than the walk: stops, no transport.
  Bytes chain;
  for (int i = 0; i < 12; ++i) chain.insert(chain.end(), {60, 0, 0, 0, 0, 0, 0, 0});
  pkt = Ipv6(60, chain);
  p = ParseL3Packet(pkt.data(), pkt.size());
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->dport);
  EXPECT_EQ(p->proto, 60);
  // Cut inside the fixed header.
  EXPECT_FALSE(ParseL3Packet(pkt.data(), 39).ok());
}

TEST(EgressNflog, SynRetriesOfOneFlowAreOneRecord) {
  SynRetryFilter f(std::chrono::seconds(120));
  auto t0 = SynRetryFilter::Clock::now();
  Bytes syn = Ipv4(6, {203, 0, 113, 30}, Tcp(8081, 0x02));
  auto p = ParseL3Packet(syn.data(), syn.size());
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(f.IsRetry(*p, "default-deny", t0));
  EXPECT_TRUE(f.IsRetry(*p, "default-deny", t0 + std::chrono::seconds(1)));
  EXPECT_TRUE(f.IsRetry(*p, "default-deny", t0 + std::chrono::seconds(63)));
  EXPECT_FALSE(f.IsRetry(*p, "default-deny", t0 + std::chrono::seconds(200)));  // window over: a new attempt
  EXPECT_FALSE(f.IsRetry(*p, "allow:other", t0));                               // another rule
  // Another source port is another connection; UDP and non-SYN TCP are never retries.
  Bytes other = syn;
  Put16(other, 20, 40002);
  auto q = ParseL3Packet(other.data(), other.size());
  EXPECT_FALSE(f.IsRetry(*q, "default-deny", t0));
  Bytes ack = Ipv4(6, {203, 0, 113, 30}, Tcp(8081, 0x10));
  auto a = ParseL3Packet(ack.data(), ack.size());
  EXPECT_FALSE(f.IsRetry(*a, "default-deny", t0));
  EXPECT_FALSE(f.IsRetry(*a, "default-deny", t0));
  Bytes udp = Ipv4(17, {203, 0, 113, 10}, Udp(9999));
  auto u = ParseL3Packet(udp.data(), udp.size());
  EXPECT_FALSE(f.IsRetry(*u, "default-deny", t0));
  EXPECT_FALSE(f.IsRetry(*u, "default-deny", t0));
  // Bounded: a guest opening endless flows cannot grow it.
  for (int i = 0; i < 10000; ++i) {
    Bytes s = syn;
    Put16(s, 20, static_cast<uint16_t>(i));
    Put16(s, 22, static_cast<uint16_t>(i / 7));
    auto x = ParseL3Packet(s.data(), s.size());
    f.IsRetry(*x, "default-deny", t0);
  }
  EXPECT_LE(f.size(), SynRetryFilter::kMaxFlows);
}

TEST(EgressFlowEnd, OneRecordAtCloseOrAtDestroy) {
  FlowEndTracker t;
  CtEvent e;
  e.id = 7;
  e.status = (1u << 4) | (1u << 3);  // IPS_SRC_NAT, IPS_CONFIRMED
  e.l3 = 2;                          // AF_INET
  e.proto = 6;
  e.dst = 0xCB00711E;  // 203.0.113.30
  e.dport = 8080;
  e.tcp_state = 3;  // ESTABLISHED: not the end
  EXPECT_FALSE(t.OnEvent(e, 1'100'000'000));
  EXPECT_EQ(t.pending(), 0u);
  e.tcp_state = 7;  // TIME_WAIT: the end, with the counters and start a GET fetched
  e.bytes_orig = 120;
  e.bytes_reply = 4000;
  e.start_ns = 1'000'000'000;
  auto f = t.OnEvent(e, 1'250'000'000);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->dst, 0xCB00711Eu);
  EXPECT_EQ(f->dport, 8080);
  EXPECT_EQ(f->bytes_out, 120u);
  EXPECT_EQ(f->bytes_in, 4000u);
  EXPECT_EQ(f->duration_ms, 250);
  EXPECT_FALSE(t.OnEvent(e, 1'900'000'000));  // a later update: nothing more
  CtEvent d = e;
  d.kind = CtEvent::Kind::kDestroy;
  d.stop_ns = 121'250'000'000;  // ~2 min of TIME_WAIT later: already recorded
  EXPECT_FALSE(t.OnEvent(d, 121'300'000'000));
  EXPECT_EQ(t.pending(), 0u);
  // A flow that timed out (no close seen) is recorded at its destroy.
  CtEvent o = d;
  o.id = 8;
  o.tcp_state = 3;
  auto g = t.OnEvent(o, 200'000'000'000);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->duration_ms, 120'250);
  EXPECT_EQ(g->bytes_in, 4000u);
}

TEST(EgressFlowEnd, OnlyForwardedGuestFlows) {
  FlowEndTracker t;
  CtEvent d;
  d.kind = CtEvent::Kind::kDestroy;
  d.l3 = 2;
  d.proto = 6;
  d.status = (1u << 4);  // SNAT only: a CIDR flow
  EXPECT_TRUE(t.OnEvent(d, 1));
  d.status = (1u << 5);  // DNAT only: proxied/resolver
  EXPECT_FALSE(t.OnEvent(d, 1));
  d.status = (1u << 4) | (1u << 5);  // both: an inbound agent connection
  EXPECT_FALSE(t.OnEvent(d, 1));
  d.status = 0;  // neither: the netns's own
  EXPECT_FALSE(t.OnEvent(d, 1));
  d.status = (1u << 4);
  d.proto = 17;
  EXPECT_FALSE(t.OnEvent(d, 1));
  d.proto = 6;
  d.l3 = 10;
  EXPECT_FALSE(t.OnEvent(d, 1));
  // Bounded.
  CtEvent u;
  u.l3 = 2;
  u.proto = 6;
  u.status = (1u << 4);
  u.tcp_state = 8;
  for (uint32_t i = 0; i < 10000; ++i) {
    u.id = i;
    t.OnEvent(u, i);
  }
  EXPECT_LE(t.pending(), FlowEndTracker::kMaxFlows);
}
