// Builds TLS ClientHello bytes for tests and fuzz seeds (not a TLS stack:
// just the record + handshake framing around a server_name extension).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

inline std::vector<uint8_t> BuildClientHello(const std::string& sni, bool ech = false, const std::string& sni2 = "") {
  auto put16 = [](std::vector<uint8_t>& v, size_t x) {
    v.push_back(static_cast<uint8_t>(x >> 8));
    v.push_back(static_cast<uint8_t>(x));
  };
  std::vector<uint8_t> ext;
  if (!sni.empty()) {
    std::vector<uint8_t> list;
    for (const auto& n : {sni, sni2}) {
      if (n.empty()) continue;
      list.push_back(0);
      put16(list, n.size());
      list.insert(list.end(), n.begin(), n.end());
    }
    put16(ext, 0);
    put16(ext, list.size() + 2);
    put16(ext, list.size());
    ext.insert(ext.end(), list.begin(), list.end());
  }
  // supported_versions (TLS 1.3, 1.2)
  ext.insert(ext.end(), {0x00, 0x2b, 0x00, 0x05, 0x04, 0x03, 0x04, 0x03, 0x03});
  if (ech) ext.insert(ext.end(), {0xfe, 0x0d, 0x00, 0x02, 0x00, 0x00});
  std::vector<uint8_t> body = {0x03, 0x03};
  for (int i = 0; i < 32; ++i) body.push_back(static_cast<uint8_t>(i));
  body.push_back(0);                                  // session id
  body.insert(body.end(), {0x00, 0x02, 0x13, 0x01});  // one cipher suite
  body.insert(body.end(), {0x01, 0x00});              // null compression
  put16(body, ext.size());
  body.insert(body.end(), ext.begin(), ext.end());
  std::vector<uint8_t> hs = {0x01, static_cast<uint8_t>(body.size() >> 16), static_cast<uint8_t>(body.size() >> 8),
                             static_cast<uint8_t>(body.size())};
  hs.insert(hs.end(), body.begin(), body.end());
  std::vector<uint8_t> rec = {0x16, 0x03, 0x01};
  put16(rec, hs.size());
  rec.insert(rec.end(), hs.begin(), hs.end());
  return rec;
}

// Re-frames one handshake record into records of at most `chunk` bytes.
inline std::vector<uint8_t> SplitIntoRecords(const std::vector<uint8_t>& rec, size_t chunk) {
  std::vector<uint8_t> out;
  for (size_t i = 5; i < rec.size(); i += chunk) {
    size_t n = std::min(chunk, rec.size() - i);
    out.insert(out.end(), {0x16, 0x03, 0x01, static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n)});
    out.insert(out.end(), rec.begin() + i, rec.begin() + i + n);
  }
  return out;
}
