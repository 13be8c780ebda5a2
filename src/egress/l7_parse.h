// What the egress proxy reads of a guest's first bytes before deciding
// (our own code: the bytes come from an attacker inside the sandbox).
//
//   ParseClientHello: TLS records (type 22) holding a ClientHello, reassembled
//     across records up to 16 KiB; returns the server_name (host_name type).
//     Refused: no SNI, more than one name, a non-DNS name, an Encrypted Client
//     Hello extension (its inner name would be hidden from the allowlist).
//   ParseHttpRequestHead: an HTTP/1.x request head up to 16 KiB; returns the
//     Host (lower-case, port stripped). Refused: no or several Host headers,
//     an absolute-form target naming another host, CONNECT, obs-fold, bytes
//     outside the grammar.
// Both return kNeedMore while the input may still become valid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace airlock::egress {

struct L7Result {
  enum class Kind { kOk, kNeedMore, kInvalid };
  Kind kind = Kind::kNeedMore;
  std::string host;     // kOk: the normalised name
  std::string error;    // kInvalid: why
  size_t consumed = 0;  // kOk (HTTP): bytes of the request head incl. the blank line
};

inline constexpr size_t kMaxL7Head = 16 * 1024;

L7Result ParseClientHello(const uint8_t* data, size_t size);
L7Result ParseHttpRequestHead(const uint8_t* data, size_t size);

}  // namespace airlock::egress
