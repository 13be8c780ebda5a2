// Test helper: builds migration streams in QEMU 7.2's precopy format (the
// layout runtime/qemu/migration_stream.cc documents), and a reference loader
// that applies a stream's RAM records to memory as QEMU's ram_load_precopy
// does. Shared by the unit test and the fuzzer's seeds.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace airlock::qemu::testing {

constexpr uint64_t kTestPage = 4096;

class StreamBuilder {
 public:
  StreamBuilder& Be32(uint32_t v) {
    for (int i = 3; i >= 0; --i) s_.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  StreamBuilder& Be64(uint64_t v) {
    for (int i = 7; i >= 0; --i) s_.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  StreamBuilder& U8(uint8_t v) {
    s_.push_back(static_cast<char>(v));
    return *this;
  }
  StreamBuilder& Name(const std::string& n) {
    U8(static_cast<uint8_t>(n.size()));
    s_ += n;
    return *this;
  }
  StreamBuilder& Raw(const std::string& b) {
    s_ += b;
    return *this;
  }
  // Magic, version 3, configuration "microvm" with the capabilities given.
  StreamBuilder& Header(bool ignore_shared = true) {
    Be32(0x5145564d).Be32(3).U8(0x07).Be32(7).Raw("microvm");
    if (ignore_shared) U8(0x05).Name("configuration/capabilities").Be32(1).Be32(1).Name("x-ignore-shared");
    ignore_shared_ = ignore_shared;
    return *this;
  }
  // The "ram" START section's header and block list (then EOS and footer).
  StreamBuilder& RamStart(const std::vector<std::pair<std::string, uint64_t>>& blocks, uint32_t section = 2) {
    U8(0x01).Be32(section).Name("ram").Be32(0).Be32(4);
    uint64_t total = 0;
    for (auto& b : blocks) total += b.second;
    Be64(total | 0x04);
    for (auto& b : blocks) {
      Name(b.first).Be64(b.second);
      if (ignore_shared_) Be64(0);
    }
    return Be64(0x10).U8(0x7e).Be32(section);
  }
  StreamBuilder& SectionBegin(uint8_t type, uint32_t section = 2) { return U8(type).Be32(section); }
  StreamBuilder& SectionEnd(uint32_t section = 2) { return Be64(0x10).U8(0x7e).Be32(section); }
  // A page record; `cont`: CONTINUE (no block name).
  StreamBuilder& Page(const std::string& block, uint64_t off, const std::string& data, bool cont = false) {
    Be64(off | 0x08 | (cont ? 0x20 : 0));
    if (!cont) Name(block);
    return Raw(data);
  }
  StreamBuilder& Zero(const std::string& block, uint64_t off, uint8_t fill = 0, bool cont = false) {
    Be64(off | 0x02 | (cont ? 0x20 : 0));
    if (!cont) Name(block);
    return U8(fill);
  }
  // A device section (opaque bytes), EOF and a JSON description.
  StreamBuilder& DevicesAndEof() {
    U8(0x04).Be32(3).Name("timer").Be32(0).Be32(2).Raw(std::string(37, '\x5a')).U8(0x7e).Be32(3);
    return U8(0x00).U8(0x06).Be32(9).Raw("{\"a\":1} ");
  }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
  bool ignore_shared_ = true;
};

inline std::string PageOf(char c) { return std::string(kTestPage, c); }

// Applies the RAM records of a well-formed stream (as FilterMigrationStream
// writes them) to `mem` (block name → bytes), as QEMU's loader would.
// Returns false on anything it does not expect.
inline bool ApplyStream(const std::string& s, std::map<std::string, std::string>& mem) {
  size_t p = 0;
  auto need = [&](size_t n) { return p + n <= s.size(); };
  auto u8 = [&]() { return static_cast<uint8_t>(s[p++]); };
  auto be = [&](int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(s[p++]);
    return v;
  };
  auto name = [&]() {
    size_t len = u8();
    std::string n = s.substr(p, len);
    p += len;
    return n;
  };
  if (!need(9)) return false;
  p = 8;
  bool ignore_shared = false;
  if (static_cast<uint8_t>(s[p]) == 0x07) {
    ++p;
    uint32_t len = static_cast<uint32_t>(be(4));
    p += len;
    while (need(1) && static_cast<uint8_t>(s[p]) == 0x05) {
      ++p;
      std::string sub = name();
      be(4);
      if (sub != "configuration/capabilities") return false;
      uint32_t n = static_cast<uint32_t>(be(4));
      for (uint32_t i = 0; i < n; ++i)
        if (name() == "x-ignore-shared") ignore_shared = true;
    }
  }
  std::string last;
  while (need(1)) {
    uint8_t type = u8();
    if (type == 0x04 || type == 0x00) return true;
    be(4);
    if (type == 0x01) {
      name();
      be(8);
    }
    while (true) {
      if (!need(8)) return false;
      uint64_t v = be(8), flags = v & 0xfff, off = v & ~0xfffull;
      if (flags == 0x10) break;
      if (flags & 0x04) {
        uint64_t total = off;
        while (total) {
          std::string n = name();
          uint64_t len = be(8);
          if (ignore_shared) be(8);
          if (!mem.count(n)) mem[n] = std::string(len, '\0');
          total -= len;
        }
        continue;
      }
      std::string block = (flags & 0x20) ? last : name();
      last = block;
      if (!mem.count(block) || off + kTestPage > mem[block].size()) return false;
      if (flags & 0x08) {
        mem[block].replace(off, kTestPage, s.substr(p, kTestPage));
        p += kTestPage;
      } else if (flags & 0x02) {
        mem[block].replace(off, kTestPage, std::string(kTestPage, static_cast<char>(u8())));
      } else {
        return false;
      }
    }
    if (need(1) && static_cast<uint8_t>(s[p]) == 0x7e) p += 5;
  }
  return false;
}

}  // namespace airlock::qemu::testing
