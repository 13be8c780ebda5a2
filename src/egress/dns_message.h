// DNS messages (RFC 1035), the subset airlock's resolver needs. Our own code:
// every byte here comes from a guest or from the network.
//
//   ParseQuery:    a guest's query: exactly one question, QR=0, OPCODE=0,
//                  class IN; names ≤ 255 bytes, compression pointers only
//                  backwards, at most 32 jumps. Anything else: InvalidArgument.
//   BuildQuery:    the query airlock sends upstream (fresh id, RD=1, just the
//                  question: nothing of the guest's message is forwarded).
//   ParseResponse: an upstream answer to BuildQuery: id and question must
//                  match; collects A records of the name and its CNAME chain.
//   BuildResponse: our answer to the guest (QR=1, RA=1, the question echoed,
//                  A records; rcode NOERROR / NXDOMAIN / SERVFAIL / FORMERR).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace airlock::egress::dns {

inline constexpr uint16_t kTypeA = 1;
inline constexpr uint16_t kTypeCname = 5;
inline constexpr uint16_t kTypeAaaa = 28;
inline constexpr uint16_t kClassIn = 1;
inline constexpr uint8_t kRcodeNoError = 0, kRcodeFormErr = 1, kRcodeServFail = 2, kRcodeNxDomain = 3, kRcodeNotImp = 4,
                         kRcodeRefused = 5;
inline constexpr size_t kMaxMessage = 4096;

struct Question {
  uint16_t id = 0;
  bool recursion_desired = false;
  std::string name;  // lower-case, no trailing dot, "" for the root
  uint16_t qtype = 0;
  uint16_t qclass = 0;
};

struct ARecord {
  uint32_t ip = 0;   // host byte order
  uint32_t ttl = 0;  // seconds
};

struct Answer {
  uint8_t rcode = 0;
  std::vector<ARecord> a;  // A records of the name (following CNAMEs)
};

StatusOr<Question> ParseQuery(const uint8_t* data, size_t size);
std::vector<uint8_t> BuildQuery(uint16_t id, const std::string& name, uint16_t qtype);
StatusOr<Answer> ParseResponse(const uint8_t* data, size_t size, uint16_t id, const std::string& name, uint16_t qtype);
std::vector<uint8_t> BuildResponse(const Question& q, uint8_t rcode, const std::vector<ARecord>& a);
// A FORMERR answer to bytes that did not parse, when at least the id is readable.
std::vector<uint8_t> BuildFormErr(const uint8_t* data, size_t size);

}  // namespace airlock::egress::dns
