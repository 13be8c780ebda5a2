// libFuzzer target for the L3 audit parser (src/egress/nflog_packet): the
// packets a guest sends that the sandbox netns's nftables logs. Input: one
// byte n, then n bytes of NFLOG prefix, then the packet.
// Properties: a record always has the prefix's decision and rule; the
// destination port is present only for TCP/UDP-like transports; parsing
// the packet cut at any length never crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "egress/nflog_packet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock::egress;
  if (size < 1) return 0;
  size_t n = data[0];
  if (n > size - 1) n = size - 1;
  std::string_view prefix(reinterpret_cast<const char*>(data + 1), n);
  const uint8_t* pkt = data + 1 + n;
  size_t len = size - 1 - n;
  auto rec = NflogToRecord(prefix, pkt, len);
  auto pre = ParseNflogPrefix(prefix);
  if (rec.has_value() != pre.has_value()) std::abort();
  if (rec) {
    if ((*rec)["decision"] != pre->decision || (*rec)["rule"] != pre->rule) std::abort();
    (void)rec->dump();  // valid UTF-8 JSON
  }
  auto p = ParseL3Packet(pkt, len);
  if (p.ok()) {
    if (p->version != 4 && p->version != 6) std::abort();
    if (p->dport && p->icmp_type) std::abort();
    if (p->fragment && (p->dport || p->icmp_type)) std::abort();
    for (size_t cut = 0; cut < len && cut < 128; ++cut) (void)ParseL3Packet(pkt, cut);
  }
  return 0;
}
