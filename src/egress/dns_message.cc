#include "egress/dns_message.h"

#include <algorithm>

namespace airlock::egress::dns {
namespace {

uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t Get32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
void Put16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}
void Put32(std::vector<uint8_t>& v, uint32_t x) {
  Put16(v, static_cast<uint16_t>(x >> 16));
  Put16(v, static_cast<uint16_t>(x));
}

// Reads a (possibly compressed) name at *pos; advances *pos past it in the
// original stream. Lower-cases; labels may hold only [A-Za-z0-9-_] (anything
// else is refused: a resolver for sandboxes has no use for binary labels).
Status ReadName(const uint8_t* data, size_t size, size_t* pos, std::string* out) {
  out->clear();
  size_t p = *pos;
  bool jumped = false;
  int jumps = 0;
  size_t wire_len = 1;
  while (true) {
    if (p >= size) return InvalidArgument("dns: name runs past the message");
    uint8_t len = data[p];
    if ((len & 0xC0) == 0xC0) {
      if (p + 1 >= size) return InvalidArgument("dns: truncated compression pointer");
      size_t target = ((len & 0x3F) << 8) | data[p + 1];
      if (target >= p) return InvalidArgument("dns: forward compression pointer");
      if (++jumps > 32) return InvalidArgument("dns: too many compression pointers");
      if (!jumped) *pos = p + 2;
      jumped = true;
      p = target;
      continue;
    }
    if ((len & 0xC0) != 0) return InvalidArgument("dns: unsupported label type");
    if (len == 0) {
      if (!jumped) *pos = p + 1;
      return OkStatus();
    }
    if (p + 1 + len > size) return InvalidArgument("dns: label runs past the message");
    wire_len += len + 1;
    if (wire_len > 255) return InvalidArgument("dns: name longer than 255 bytes");
    if (!out->empty()) out->push_back('.');
    for (size_t i = 0; i < len; ++i) {
      char c = static_cast<char>(data[p + 1 + i]);
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
      if (!ok) return InvalidArgument("dns: label holds a byte outside [A-Za-z0-9-_]");
      out->push_back(c);
    }
    p += 1 + len;
  }
}

void WriteName(std::vector<uint8_t>& v, const std::string& name) {
  size_t i = 0;
  while (i < name.size()) {
    size_t j = name.find('.', i);
    if (j == std::string::npos) j = name.size();
    size_t len = std::min<size_t>(j - i, 63);
    v.push_back(static_cast<uint8_t>(len));
    v.insert(v.end(), name.begin() + i, name.begin() + i + len);
    i = j + 1;
  }
  v.push_back(0);
}

}  // namespace

StatusOr<Question> ParseQuery(const uint8_t* data, size_t size) {
  if (size < 12) return InvalidArgument("dns: message shorter than a header");
  if (size > kMaxMessage) return InvalidArgument("dns: message too long");
  Question q;
  q.id = Get16(data);
  uint16_t flags = Get16(data + 2);
  if (flags & 0x8000) return InvalidArgument("dns: not a query (QR=1)");
  if (((flags >> 11) & 0xF) != 0) return InvalidArgument("dns: opcode is not QUERY");
  q.recursion_desired = flags & 0x0100;
  if (Get16(data + 4) != 1) return InvalidArgument("dns: QDCOUNT must be 1");
  if (Get16(data + 6) != 0 || Get16(data + 8) != 0) return InvalidArgument("dns: query has answer/authority records");
  size_t pos = 12;
  RETURN_IF_ERROR(ReadName(data, size, &pos, &q.name));
  if (pos + 4 > size) return InvalidArgument("dns: truncated question");
  q.qtype = Get16(data + pos);
  q.qclass = Get16(data + pos + 2);
  if (q.qclass != kClassIn) return InvalidArgument("dns: class is not IN");
  return q;
}

std::vector<uint8_t> BuildQuery(uint16_t id, const std::string& name, uint16_t qtype) {
  std::vector<uint8_t> v;
  Put16(v, id);
  Put16(v, 0x0100);  // RD
  Put16(v, 1);
  Put16(v, 0);
  Put16(v, 0);
  Put16(v, 0);
  WriteName(v, name);
  Put16(v, qtype);
  Put16(v, kClassIn);
  return v;
}

StatusOr<Answer> ParseResponse(const uint8_t* data, size_t size, uint16_t id, const std::string& name, uint16_t qtype) {
  if (size < 12) return InvalidArgument("dns: response shorter than a header");
  if (Get16(data) != id) return InvalidArgument("dns: response id mismatch");
  uint16_t flags = Get16(data + 2);
  if (!(flags & 0x8000)) return InvalidArgument("dns: not a response");
  if (flags & 0x0200) return InvalidArgument("dns: truncated response (TC)");
  Answer a;
  a.rcode = flags & 0xF;
  uint16_t qd = Get16(data + 4), an = Get16(data + 6);
  if (qd != 1) return InvalidArgument("dns: response QDCOUNT must be 1");
  size_t pos = 12;
  std::string qname;
  RETURN_IF_ERROR(ReadName(data, size, &pos, &qname));
  if (pos + 4 > size) return InvalidArgument("dns: truncated question");
  if (qname != name || Get16(data + pos) != qtype) return InvalidArgument("dns: response is for another question");
  pos += 4;
  // The chain of names whose A records belong to `name`.
  std::vector<std::string> chain = {name};
  struct Rr {
    std::string owner;
    uint16_t type;
    uint32_t ttl;
    size_t rdata, rdlen;
  };
  std::vector<Rr> rrs;
  for (uint16_t i = 0; i < an; ++i) {
    Rr rr;
    RETURN_IF_ERROR(ReadName(data, size, &pos, &rr.owner));
    if (pos + 10 > size) return InvalidArgument("dns: truncated record");
    rr.type = Get16(data + pos);
    rr.ttl = Get32(data + pos + 4);
    rr.rdlen = Get16(data + pos + 8);
    rr.rdata = pos + 10;
    if (rr.rdata + rr.rdlen > size) return InvalidArgument("dns: record data runs past the message");
    pos = rr.rdata + rr.rdlen;
    if (Get16(data + rr.rdata - 8) != kClassIn) continue;
    rrs.push_back(std::move(rr));
  }
  // Follow CNAMEs (bounded: at most 8 hops, in any order of records).
  for (int hop = 0; hop < 8; ++hop) {
    bool grew = false;
    for (const auto& rr : rrs) {
      if (rr.type != kTypeCname || std::find(chain.begin(), chain.end(), rr.owner) == chain.end()) continue;
      size_t p = rr.rdata;
      std::string target;
      RETURN_IF_ERROR(ReadName(data, size, &p, &target));
      if (std::find(chain.begin(), chain.end(), target) == chain.end()) {
        chain.push_back(target);
        grew = true;
      }
    }
    if (!grew) break;
  }
  for (const auto& rr : rrs) {
    if (rr.type != kTypeA || rr.rdlen != 4) continue;
    if (std::find(chain.begin(), chain.end(), rr.owner) == chain.end()) continue;
    a.a.push_back({Get32(data + rr.rdata), rr.ttl});
    if (a.a.size() >= 32) break;
  }
  return a;
}

std::vector<uint8_t> BuildResponse(const Question& q, uint8_t rcode, const std::vector<ARecord>& a) {
  std::vector<uint8_t> v;
  Put16(v, q.id);
  uint16_t flags = 0x8000 | 0x0080 | (rcode & 0xF);  // QR, RA
  if (q.recursion_desired) flags |= 0x0100;
  Put16(v, flags);
  Put16(v, 1);
  Put16(v, static_cast<uint16_t>(a.size()));
  Put16(v, 0);
  Put16(v, 0);
  WriteName(v, q.name);
  Put16(v, q.qtype);
  Put16(v, q.qclass);
  for (const auto& r : a) {
    Put16(v, 0xC00C);  // pointer to the question's name
    Put16(v, kTypeA);
    Put16(v, kClassIn);
    Put32(v, r.ttl);
    Put16(v, 4);
    Put32(v, r.ip);
  }
  return v;
}

std::vector<uint8_t> BuildFormErr(const uint8_t* data, size_t size) {
  if (size < 2) return {};
  std::vector<uint8_t> v = {data[0], data[1], 0x80, static_cast<uint8_t>(0x80 | kRcodeFormErr)};
  v.resize(12, 0);
  return v;
}

}  // namespace airlock::egress::dns
