// FilterMigrationStream (migration_stream.h): a pull parser of QEMU 7.2's
// precopy stream with a re-encoder for RAM page records.
//
// The stream, as QEMU 7.2 writes it (migration/savevm.c, migration/ram.c):
//   be32 magic 0x5145564d, be32 version 3
//   [0x07 configuration: be32 len, name; subsections 0x05 len name be32 ver:
//      "configuration/target-page-bits" be32, "configuration/capabilities"
//      be32 n × (u8 len, name), "configuration/uuid" 16 bytes]
//   sections: u8 type, be32 section id; START and FULL add u8 len, idstr,
//      be32 instance, be32 version; each ends with an optional footer
//      (0x7e, be32 section id).
//      "ram" START/PART/END data: records, be64 (offset | flags), until EOS:
//        MEM_SIZE 0x04  the block list: u8 len, name, be64 length
//                       [, be64 address with x-ignore-shared]
//        ZERO 0x02      [u8 len, name unless CONTINUE 0x20], u8 fill byte
//        PAGE 0x08      [u8 len, name unless CONTINUE], 4096 bytes
//        EOS 0x10
//   then FULL device sections, EOF 0x00 and the JSON description, which
//   this filter passes through as they are (nothing of them is parsed).
#include "runtime/qemu/migration_stream.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace airlock::qemu {
namespace {

constexpr uint32_t kFileMagic = 0x5145564d;  // "QEVM"
constexpr uint32_t kFileVersion = 3;
constexpr uint8_t kVmEof = 0x00, kSectionStart = 0x01, kSectionPart = 0x02, kSectionEnd = 0x03, kSectionFull = 0x04,
                  kSubsection = 0x05, kConfiguration = 0x07, kSectionFooter = 0x7e;
constexpr uint64_t kFlagZero = 0x02, kFlagMemSize = 0x04, kFlagPage = 0x08, kFlagEos = 0x10, kFlagContinue = 0x20;
constexpr uint64_t kPage = 4096, kFlagMask = kPage - 1;
constexpr size_t kBufBytes = 1 << 20;
constexpr int kMaxBlocks = 64;
constexpr uint32_t kMaxCapabilities = 64;

class Filter {
 public:
  Filter(StreamReader& in, StreamWriter& out, const RamPagePolicy& p) : in_(in), out_(out), policy_(p) {
    buf_.resize(kBufBytes);
    obuf_.reserve(kBufBytes);
  }

  StatusOr<MigrationFilterStats> Run() {
    RETURN_IF_ERROR(Header());
    while (true) {
      ASSIGN_OR_RETURN(uint8_t type, U8());
      if (type == kSectionFull || type == kVmEof) {
        // Device state and the end: passed through as they are.
        Emit(&type, 1);
        RETURN_IF_ERROR(CopyRest());
        break;
      }
      if (type != kSectionStart && type != kSectionPart && type != kSectionEnd)
        return Bad("section type 0x" + Hex(type) + " where a RAM or device section was expected");
      Emit(&type, 1);
      ASSIGN_OR_RETURN(uint32_t id, Be32());
      EmitBe32(id);
      if (type == kSectionStart) {
        ASSIGN_OR_RETURN(std::string idstr, Name());
        ASSIGN_OR_RETURN(uint32_t instance, Be32());
        ASSIGN_OR_RETURN(uint32_t version, Be32());
        if (idstr != "ram" || have_ram_)
          return Bad("iterable section '" + idstr + "': only one \"ram\" section is understood");
        have_ram_ = true;
        ram_section_ = id;
        EmitName(idstr);
        EmitBe32(instance);
        EmitBe32(version);
      } else if (!have_ram_ || id != ram_section_) {
        return Bad("section " + std::to_string(id) + " is not the \"ram\" section");
      }
      RETURN_IF_ERROR(RamRecords());
      ASSIGN_OR_RETURN(int next, Peek());
      if (next == kSectionFooter) {
        (void)U8();
        ASSIGN_OR_RETURN(uint32_t fid, Be32());
        if (fid != id) return Bad("section footer " + std::to_string(fid) + " ends section " + std::to_string(id));
        uint8_t f = kSectionFooter;
        Emit(&f, 1);
        EmitBe32(fid);
      }
    }
    if (policy_.file_fd >= 0 || policy_.base) {
      if (!policy_block_seen_) return FailedPrecondition("migration stream has no RAM block '" + policy_.block + "'");
    }
    RETURN_IF_ERROR(FlushRun());
    RETURN_IF_ERROR(Flush());
    stats_.bytes_in = consumed_;
    return stats_;
  }

 private:
  // ---- input ----
  Status Fill(size_t n) {
    if (end_ - pos_ >= n) return OkStatus();
    if (pos_ > 0) {
      std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
      end_ -= pos_;
      pos_ = 0;
    }
    while (end_ < n) {
      ASSIGN_OR_RETURN(size_t got, in_.ReadSome(buf_.data() + end_, buf_.size() - end_));
      if (got == 0) return Bad("stream ends early (truncated)");
      end_ += got;
    }
    return OkStatus();
  }
  const char* Take(size_t n) {  // after Fill(n)
    const char* p = buf_.data() + pos_;
    pos_ += n;
    consumed_ += n;
    return p;
  }
  StatusOr<int> Peek() {
    RETURN_IF_ERROR(Fill(1));
    return static_cast<unsigned char>(buf_[pos_]);
  }
  StatusOr<uint8_t> U8() {
    RETURN_IF_ERROR(Fill(1));
    return static_cast<uint8_t>(*Take(1));
  }
  StatusOr<uint64_t> BeN(int bytes) {
    RETURN_IF_ERROR(Fill(bytes));
    const auto* p = reinterpret_cast<const unsigned char*>(Take(bytes));
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
    return v;
  }
  StatusOr<uint32_t> Be32() {
    ASSIGN_OR_RETURN(uint64_t v, BeN(4));
    return static_cast<uint32_t>(v);
  }
  StatusOr<uint64_t> Be64() { return BeN(8); }
  StatusOr<std::string> Bytes(size_t n) {
    RETURN_IF_ERROR(Fill(n));
    return std::string(Take(n), n);
  }
  StatusOr<std::string> Name() {  // u8 length, then that many bytes
    ASSIGN_OR_RETURN(uint8_t len, U8());
    return Bytes(len);
  }
  Status CopyRest() {
    Emit(buf_.data() + pos_, end_ - pos_);
    consumed_ += end_ - pos_;
    pos_ = end_ = 0;
    while (true) {
      ASSIGN_OR_RETURN(size_t got, in_.ReadSome(buf_.data(), buf_.size()));
      if (got == 0) return OkStatus();
      consumed_ += got;
      Emit(buf_.data(), got);
      if (obuf_.size() >= kBufBytes) RETURN_IF_ERROR(Flush());
    }
  }

  // ---- output ----
  void Emit(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    obuf_.insert(obuf_.end(), c, c + n);
  }
  void EmitBe32(uint32_t v) {
    unsigned char b[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
    Emit(b, 4);
  }
  void EmitBe64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = uint8_t(v >> (56 - 8 * i));
    Emit(b, 8);
  }
  void EmitName(const std::string& s) {
    uint8_t len = static_cast<uint8_t>(s.size());
    Emit(&len, 1);
    Emit(s.data(), s.size());
  }
  Status Flush() {
    if (obuf_.empty()) return OkStatus();
    RETURN_IF_ERROR(out_.Write(obuf_.data(), obuf_.size()));
    stats_.bytes_out += obuf_.size();
    obuf_.clear();
    return OkStatus();
  }

  Status Bad(const std::string& what) const {
    return Status(StatusCode::kDataLoss, "migration stream, byte " + std::to_string(consumed_) + ": " + what);
  }
  static std::string Hex(uint64_t v) {
    char b[20];
    std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
    return b;
  }

  // ---- header and configuration ----
  Status Header() {
    ASSIGN_OR_RETURN(uint32_t magic, Be32());
    ASSIGN_OR_RETURN(uint32_t version, Be32());
    if (magic != kFileMagic) return Bad("not a QEMU migration stream (magic 0x" + Hex(magic) + ")");
    if (version != kFileVersion) return Bad("stream version " + std::to_string(version) + ", not 3");
    EmitBe32(magic);
    EmitBe32(version);
    ASSIGN_OR_RETURN(int next, Peek());
    if (next != kConfiguration) return OkStatus();
    (void)U8();
    uint8_t c = kConfiguration;
    Emit(&c, 1);
    ASSIGN_OR_RETURN(uint32_t len, Be32());
    if (len > 256) return Bad("machine type name of " + std::to_string(len) + " bytes");
    ASSIGN_OR_RETURN(std::string machine, Bytes(len));
    EmitBe32(len);
    Emit(machine.data(), machine.size());
    while (true) {
      ASSIGN_OR_RETURN(int sub, Peek());
      if (sub != kSubsection) return OkStatus();
      (void)U8();
      ASSIGN_OR_RETURN(std::string name, Name());
      ASSIGN_OR_RETURN(uint32_t ver, Be32());
      uint8_t s = kSubsection;
      Emit(&s, 1);
      EmitName(name);
      EmitBe32(ver);
      if (name == "configuration/target-page-bits") {
        ASSIGN_OR_RETURN(uint32_t bits, Be32());
        if (bits != 12) return Bad("target page bits " + std::to_string(bits) + ", not 12");
        EmitBe32(bits);
      } else if (name == "configuration/capabilities") {
        ASSIGN_OR_RETURN(uint32_t n, Be32());
        if (n > kMaxCapabilities) return Bad(std::to_string(n) + " capabilities");
        EmitBe32(n);
        for (uint32_t i = 0; i < n; ++i) {
          ASSIGN_OR_RETURN(std::string cap, Name());
          if (cap == "x-ignore-shared") stats_.ignore_shared = true;
          if (cap == "postcopy-ram") return Bad("postcopy streams are not understood");
          EmitName(cap);
        }
      } else if (name == "configuration/uuid") {
        ASSIGN_OR_RETURN(std::string uuid, Bytes(16));
        Emit(uuid.data(), uuid.size());
      } else {
        return Bad("unknown configuration subsection '" + name + "'");
      }
    }
  }

  // ---- RAM ----
  struct Block {
    uint64_t length = 0;
    bool policy = false;  // the policy's block
  };

  Status RamRecords() {
    while (true) {
      ASSIGN_OR_RETURN(uint64_t v, Be64());
      const uint64_t flags = v & kFlagMask, addr = v & ~kFlagMask;
      const uint64_t kind = flags & ~kFlagContinue;
      if (kind == kFlagEos) {
        EmitBe64(v);
        return OkStatus();
      }
      if (kind == kFlagMemSize) {
        if (flags & kFlagContinue) return Bad("block list with CONTINUE");
        RETURN_IF_ERROR(BlockList(v, addr));
        continue;
      }
      if (kind != kFlagZero && kind != kFlagPage)
        return Bad("RAM record flags 0x" + Hex(flags) + " (compressed, XBZRLE or RDMA pages are not understood)");
      std::string name;
      if (flags & kFlagContinue) {
        if (last_in_.empty()) return Bad("CONTINUE before any RAM block was named");
        name = last_in_;
      } else {
        ASSIGN_OR_RETURN(name, Name());
      }
      auto it = blocks_.find(name);
      if (it == blocks_.end()) return Bad("page of RAM block '" + name + "', which the block list did not name");
      last_in_ = name;
      const Block& b = it->second;
      if (addr >= b.length || b.length - addr < kPage)
        return Bad("page at 0x" + Hex(addr) + " beyond RAM block '" + name + "' of 0x" + Hex(b.length) + " bytes");
      const char* data = nullptr;
      uint8_t fill = 0;
      if (kind == kFlagPage) {
        RETURN_IF_ERROR(Fill(kPage));
        data = Take(kPage);
      } else {
        ASSIGN_OR_RETURN(fill, U8());
      }
      if (b.policy) {
        RETURN_IF_ERROR(PolicyPage(name, addr, data, fill));
      } else {
        ++stats_.other_pages;
        EmitPage(name, addr, data, fill);
      }
      if (obuf_.size() >= kBufBytes) RETURN_IF_ERROR(Flush());
    }
  }

  Status BlockList(uint64_t v, uint64_t total) {
    EmitBe64(v);
    int count = 0;
    while (total > 0) {
      if (++count > kMaxBlocks) return Bad("more than " + std::to_string(kMaxBlocks) + " RAM blocks");
      ASSIGN_OR_RETURN(std::string name, Name());
      ASSIGN_OR_RETURN(uint64_t length, Be64());
      EmitName(name);
      EmitBe64(length);
      if (stats_.ignore_shared) {
        ASSIGN_OR_RETURN(uint64_t gpa, Be64());
        EmitBe64(gpa);
      }
      if (length > total) return Bad("RAM block '" + name + "' longer than the RAM the list announces");
      if (length % kPage != 0) return Bad("RAM block '" + name + "' is not a whole number of pages");
      total -= length;
      Block b;
      b.length = length;
      b.policy = name == policy_.block && (policy_.base || policy_.file_fd >= 0);
      if (b.policy) {
        if (length != policy_.block_bytes)
          return FailedPrecondition("RAM block '" + name + "' is " + std::to_string(length) + " bytes, expected " +
                                    std::to_string(policy_.block_bytes));
        if (policy_.base && (!policy_.base_data || policy_.base_data->size() != length / kPage))
          return InvalidArgument("delta base map does not cover RAM block '" + name + "'");
        policy_block_seen_ = true;
        seen_.assign(length / kPage, false);
      }
      auto [it, inserted] = blocks_.emplace(name, b);
      if (!inserted) {
        // A second list (QEMU sends one per setup): it must say the same.
        if (it->second.length != length) return Bad("RAM block '" + name + "' changed size");
      }
    }
    return OkStatus();
  }

  // A page (data, or `fill` repeated) of the policy's block.
  Status PolicyPage(const std::string& name, uint64_t addr, const char* data, uint8_t fill) {
    const uint64_t page = addr / kPage;
    const bool again = seen_[page];
    seen_[page] = true;
    if (policy_.file_fd >= 0) {
      // A page sent twice (never, with the VM stopped) overwrites the first.
      if (data) {
        RETURN_IF_ERROR(RunPage(addr, data));
      } else if (fill != 0 || again) {
        std::string filled(kPage, static_cast<char>(fill));
        RETURN_IF_ERROR(RunPage(addr, filled.data()));
      }
      if (data || fill != 0) ++stats_.pages_to_file;
      return OkStatus();
    }
    bool equal;
    const unsigned char* base = policy_.base + addr;
    const bool base_zero = !(*policy_.base_data)[page];
    if (data) {
      equal = base_zero ? IsFilled(data, 0) : std::memcmp(data, base, kPage) == 0;
    } else {
      equal = base_zero ? fill == 0 : IsFilled(reinterpret_cast<const char*>(base), fill);
    }
    // Once a page was kept, a later copy of it must be kept too, equal or
    // not: the loader applies records in order.
    if (equal && !again) {
      ++stats_.pages_dropped;
      return OkStatus();
    }
    ++stats_.pages_kept;
    EmitPage(name, addr, data, fill);
    return OkStatus();
  }

  static bool IsFilled(const char* p, uint8_t fill) {
    if (static_cast<uint8_t>(p[0]) != fill) return false;
    return std::memcmp(p, p + 1, kPage - 1) == 0;  // every byte equals its predecessor
  }

  void EmitPage(const std::string& name, uint64_t addr, const char* data, uint8_t fill) {
    const bool cont = name == last_out_;
    EmitBe64(addr | (data ? kFlagPage : kFlagZero) | (cont ? kFlagContinue : 0));
    if (!cont) EmitName(name);
    last_out_ = name;
    if (data)
      Emit(data, kPage);
    else
      Emit(&fill, 1);
  }

  // Fork file writes, coalesced into runs of adjacent pages.
  Status RunPage(uint64_t addr, const char* data) {
    if (!run_.empty() && (run_start_ + run_.size() != addr || run_.size() >= kBufBytes)) RETURN_IF_ERROR(FlushRun());
    if (run_.empty()) run_start_ = addr;
    run_.insert(run_.end(), data, data + kPage);
    return OkStatus();
  }
  Status FlushRun() {
    size_t off = 0;
    while (off < run_.size()) {
      ssize_t n = ::pwrite(policy_.file_fd, run_.data() + off, run_.size() - off, static_cast<off_t>(run_start_ + off));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("write the fork's RAM file");
      off += static_cast<size_t>(n);
    }
    run_.clear();
    return OkStatus();
  }

  StreamReader& in_;
  StreamWriter& out_;
  const RamPagePolicy& policy_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  uint64_t consumed_ = 0;
  std::vector<char> obuf_;
  std::vector<char> run_;
  uint64_t run_start_ = 0;
  bool have_ram_ = false;
  uint32_t ram_section_ = 0;
  std::map<std::string, Block> blocks_;
  std::string last_in_, last_out_;
  bool policy_block_seen_ = false;
  std::vector<bool> seen_;
  MigrationFilterStats stats_;
};

}  // namespace

StatusOr<MigrationFilterStats> FilterMigrationStream(StreamReader& in, StreamWriter& out, const RamPagePolicy& policy) {
  if (policy.base && policy.file_fd >= 0) return InvalidArgument("a RAM policy is a delta or a file, not both");
  if ((policy.base || policy.file_fd >= 0) && (policy.block_bytes == 0 || policy.block_bytes % kPage != 0))
    return InvalidArgument("RAM policy block size must be a non-zero number of pages");
  Filter f(in, out, policy);
  return f.Run();
}

}  // namespace airlock::qemu
