// Unit tests of FilterMigrationStream (runtime/qemu/migration_stream.h) on
// streams built in QEMU 7.2's format: what a delta drops and keeps, what a
// fork file gets, that the output loads to the same memory as the input,
// and that malformed or hostile streams are refused (every truncation
// included) without touching anything out of bounds.
#include "runtime/qemu/migration_stream.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "common/fd.h"
#include "tests/unit/migration_stream_builder.h"

namespace airlock::qemu {
namespace {

using testing::ApplyStream;
using testing::kTestPage;
using testing::PageOf;
using testing::StreamBuilder;

class StringReader final : public StreamReader {
 public:
  explicit StringReader(std::string s, size_t step = 7) : s_(std::move(s)), step_(step) {}
  StatusOr<size_t> ReadSome(char* p, size_t max) override {
    size_t n = std::min({max, step_, s_.size() - pos_});
    std::memcpy(p, s_.data() + pos_, n);
    pos_ += n;
    return n;
  }

 private:
  std::string s_;
  size_t step_, pos_ = 0;
};

class StringWriter final : public StreamWriter {
 public:
  Status Write(const char* p, size_t n) override {
    out.append(p, n);
    return OkStatus();
  }
  std::string out;
};

constexpr uint64_t kPages = 8;
constexpr uint64_t kBlock = kPages * kTestPage;

// The base a delta is taken against: page 0 'a', page 1 'b', page 5 'f'
// (data); the other pages are holes.
struct Base {
  std::string bytes = std::string(kBlock, '\0');
  std::vector<bool> data = std::vector<bool>(kPages, false);
  Base() {
    for (auto [page, c] : {std::pair{0, 'a'}, {1, 'b'}, {5, 'f'}}) {
      bytes.replace(page * kTestPage, kTestPage, PageOf(c));
      data[page] = true;
    }
  }
  RamPagePolicy Policy() const {
    RamPagePolicy p;
    p.block_bytes = kBlock;
    p.base = reinterpret_cast<const unsigned char*>(bytes.data());
    p.base_data = &data;
    return p;
  }
};

StatusOr<std::string> Filter(const std::string& in, const RamPagePolicy& p, MigrationFilterStats* stats = nullptr,
                             size_t step = 7) {
  StringReader r(in, step);
  StringWriter w;
  ASSIGN_OR_RETURN(MigrationFilterStats s, FilterMigrationStream(r, w, p));
  if (stats) *stats = s;
  EXPECT_EQ(s.bytes_in, in.size());
  EXPECT_EQ(s.bytes_out, w.out.size());
  return w.out;
}

// A stream as a clone's pause writes it: every page of mem0 (some equal to
// the base, some not, one sent twice), a ROM block's page in between.
std::string CloneStream() {
  StreamBuilder b;
  b.Header().RamStart({{"mem0", kBlock}, {"rom", kTestPage}});
  b.SectionBegin(0x02)
      .Page("mem0", 0 * kTestPage, PageOf('a'))                         // = base: dropped
      .Page("mem0", 1 * kTestPage, PageOf('X'), true)                   // differs: kept
      .Zero("mem0", 2 * kTestPage, 0, true)                             // zero over a hole: dropped
      .Page("rom", 0, PageOf('r'))                                      // another block: kept
      .Page("mem0", 3 * kTestPage, PageOf('d'))                         // over a hole: kept
      .Zero("mem0", 5 * kTestPage, 0, true)                             // zero over data: kept
      .Page("mem0", 6 * kTestPage, std::string(kTestPage, '\0'), true)  // zeros over a hole: dropped
      .SectionEnd();
  b.SectionBegin(0x03)
      .Page("mem0", 1 * kTestPage, PageOf('b'))  // sent again, now = base: kept (order matters)
      .SectionEnd();
  b.DevicesAndEof();
  return b.str();
}

TEST(MigrationStream, DeltaDropsWhatEqualsTheBaseAndLoadsToTheSameMemory) {
  Base base;
  MigrationFilterStats st;
  auto out = Filter(CloneStream(), base.Policy(), &st);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(st.ignore_shared);
  EXPECT_EQ(st.pages_dropped, 3u);
  EXPECT_EQ(st.pages_kept, 4u);
  EXPECT_EQ(st.other_pages, 1u);
  EXPECT_LT(out->size(), CloneStream().size());
  // Loading the whole stream into zeroed RAM and loading the delta into the
  // base give the same memory.
  std::map<std::string, std::string> full, delta;
  ASSERT_TRUE(ApplyStream(CloneStream(), full));
  delta["mem0"] = base.bytes;
  ASSERT_TRUE(ApplyStream(*out, delta));
  EXPECT_TRUE(full["mem0"] == delta["mem0"]);
  EXPECT_TRUE(full["rom"] == delta["rom"]);
  // The device sections and the end pass through byte for byte.
  const std::string tail = CloneStream().substr(CloneStream().find(std::string("\x04\0\0\0\x03", 5)));
  EXPECT_EQ(out->substr(out->size() - tail.size()), tail);
  // Filtering again changes nothing more.
  auto again = Filter(*out, base.Policy());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *out);
}

TEST(MigrationStream, ContinueIsReencodedWhenTheRecordBeforeItWasDropped) {
  Base base;
  StreamBuilder b;
  b.Header().RamStart({{"mem0", kBlock}, {"rom", kTestPage}});
  b.SectionBegin(0x02)
      .Page("rom", 0, PageOf('r'))
      .Page("mem0", 0, PageOf('a'))                    // dropped
      .Page("mem0", 4 * kTestPage, PageOf('e'), true)  // CONTINUE of a dropped record's block
      .SectionEnd()
      .DevicesAndEof();
  auto out = Filter(b.str(), base.Policy());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::map<std::string, std::string> mem{{"mem0", base.bytes}};
  ASSERT_TRUE(ApplyStream(*out, mem));
  EXPECT_EQ(mem["mem0"].substr(4 * kTestPage, kTestPage), PageOf('e')) << "the page went to the wrong block";
  EXPECT_EQ(mem["rom"], PageOf('r'));
}

TEST(MigrationStream, ForkFileGetsTheBlocksPagesAndTheStreamNone) {
  UniqueFd fd(::memfd_create("fork-ram-test", MFD_CLOEXEC));
  ASSERT_TRUE(fd);
  ASSERT_EQ(::ftruncate(fd.get(), kBlock), 0);
  RamPagePolicy p;
  p.block_bytes = kBlock;
  p.file_fd = fd.get();
  MigrationFilterStats st;
  auto out = Filter(CloneStream(), p, &st, 4096 + 3);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(st.pages_kept, 0u);
  EXPECT_EQ(st.other_pages, 1u);
  std::map<std::string, std::string> full, streamed;
  ASSERT_TRUE(ApplyStream(CloneStream(), full));
  ASSERT_TRUE(ApplyStream(*out, streamed));
  EXPECT_EQ(streamed["mem0"], std::string(kBlock, '\0')) << "mem0 pages left in the stream";
  EXPECT_TRUE(streamed["rom"] == full["rom"]);
  std::string file(kBlock, '\0');
  ASSERT_EQ(::pread(fd.get(), file.data(), kBlock, 0), static_cast<ssize_t>(kBlock));
  EXPECT_TRUE(file == full["mem0"]) << "the fork file is not the parent's memory";
  // Zero records leave holes: page 7 was never sent, pages 2 and 5 only as zeros.
  EXPECT_EQ(::lseek(fd.get(), 7 * kTestPage, SEEK_DATA), -1) << "the last page is not a hole";
  EXPECT_EQ(::lseek(fd.get(), 2 * kTestPage, SEEK_HOLE), static_cast<off_t>(2 * kTestPage));
}

TEST(MigrationStream, PassThroughKeepsEveryPage) {
  RamPagePolicy none;
  MigrationFilterStats st;
  auto out = Filter(CloneStream(), none, &st);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(st.other_pages, 8u);  // every record, the ROM's too
  std::map<std::string, std::string> a, b;
  ASSERT_TRUE(ApplyStream(CloneStream(), a));
  ASSERT_TRUE(ApplyStream(*out, b));
  EXPECT_TRUE(a == b);
}

TEST(MigrationStream, EveryTruncationIsDataLoss) {
  Base base;
  const std::string s = CloneStream();
  // Up to the device sections (after them, bytes pass through unparsed).
  const size_t devices = s.find(std::string("\x04\0\0\0\x03", 5));
  for (size_t n = 0; n < devices; n += (n < 200 ? 1 : 97)) {
    auto out = Filter(s.substr(0, n), base.Policy());
    ASSERT_FALSE(out.ok()) << n;
    EXPECT_EQ(out.status().code(), StatusCode::kDataLoss) << n << ": " << out.status().ToString();
  }
}

TEST(MigrationStream, HostileStreamsAreRefused) {
  Base base;
  auto refuse = [&](const std::string& s, StatusCode code, const std::string& words) {
    auto out = Filter(s, base.Policy());
    ASSERT_FALSE(out.ok()) << words;
    EXPECT_EQ(out.status().code(), code) << out.status().ToString();
    EXPECT_NE(out.status().message().find(words), std::string::npos) << out.status().ToString();
  };
  refuse(StreamBuilder().Be32(0x12345678).Be32(3).str(), StatusCode::kDataLoss, "not a QEMU migration stream");
  refuse(StreamBuilder().Be32(0x5145564d).Be32(2).str(), StatusCode::kDataLoss, "stream version 2");
  {
    StreamBuilder b;
    b.Header().U8(0x05).Name("configuration/mystery").Be32(1);
    refuse(b.str(), StatusCode::kDataLoss, "unknown configuration subsection");
  }
  {
    StreamBuilder b;
    b.Header().RamStart({{"mem0", kBlock}});
    b.SectionBegin(0x02).Page("mem0", kBlock, PageOf('x')).SectionEnd().DevicesAndEof();
    refuse(b.str(), StatusCode::kDataLoss, "beyond RAM block");
  }
  {
    StreamBuilder b;
    b.Header().RamStart({{"mem0", kBlock}});
    b.SectionBegin(0x02).Page("other", 0, PageOf('x')).SectionEnd().DevicesAndEof();
    refuse(b.str(), StatusCode::kDataLoss, "which the block list did not name");
  }
  {
    StreamBuilder b;
    b.Header().RamStart({{"mem0", kBlock}});
    b.SectionBegin(0x02).Page("mem0", 0, PageOf('x'), /*cont=*/true).SectionEnd().DevicesAndEof();
    refuse(b.str(), StatusCode::kDataLoss, "CONTINUE before any RAM block");
  }
  {
    StreamBuilder b;
    b.Header().RamStart({{"mem0", kBlock}});
    b.SectionBegin(0x02).Be64(0x100).Name("mem0").Be32(10).SectionEnd();
    refuse(b.str(), StatusCode::kDataLoss, "not understood");
  }
  {
    StreamBuilder b;
    b.Header().RamStart({{"mem0", kBlock}}).RamStart({{"mem0", kBlock}}, 5);
    refuse(b.str(), StatusCode::kDataLoss, "only one \"ram\" section");
  }
  {
    StreamBuilder b;  // a block list that does not add up to its total
    b.Header().U8(0x01).Be32(2).Name("ram").Be32(0).Be32(4).Be64(kTestPage | 0x04).Name("mem0").Be64(kBlock).Be64(0);
    refuse(b.str(), StatusCode::kDataLoss, "longer than the RAM");
  }
  {
    StreamBuilder b;  // a footer naming another section
    b.Header().U8(0x01).Be32(2).Name("ram").Be32(0).Be32(4).Be64(kBlock | 0x04).Name("mem0").Be64(kBlock).Be64(0);
    b.Be64(0x10).U8(0x7e).Be32(9);
    refuse(b.str(), StatusCode::kDataLoss, "section footer 9");
  }
  {
    StreamBuilder b;
    b.Header().RamStart({{"mem0", 2 * kBlock}}).DevicesAndEof();
    refuse(b.str(), StatusCode::kFailedPrecondition, "expected");
  }
  {
    StreamBuilder b;  // the policy's block is not in the stream at all
    b.Header().RamStart({{"microvm.ram", kBlock}}).DevicesAndEof();
    refuse(b.str(), StatusCode::kFailedPrecondition, "has no RAM block 'mem0'");
  }
}

TEST(MigrationStream, PolicyArgumentsAreChecked) {
  Base base;
  RamPagePolicy both = base.Policy();
  both.file_fd = 0;
  StringReader r("");
  StringWriter w;
  EXPECT_EQ(FilterMigrationStream(r, w, both).status().code(), StatusCode::kInvalidArgument);
  RamPagePolicy odd = base.Policy();
  odd.block_bytes = 1000;
  EXPECT_EQ(FilterMigrationStream(r, w, odd).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace airlock::qemu
