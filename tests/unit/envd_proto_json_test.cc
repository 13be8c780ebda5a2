#include <gtest/gtest.h>

#include "envd/proto_json.h"

namespace airlock::envd {
namespace {

TEST(Base64, RoundTripAllLengths) {
  std::string data;
  for (int i = 0; i < 300; ++i) {
    auto enc = Base64Encode(data);
    EXPECT_EQ(enc.size() % 4, 0u);
    auto dec = Base64Decode(enc);
    ASSERT_TRUE(dec.ok());
    EXPECT_EQ(*dec, data);
    data.push_back(static_cast<char>(i * 37));
  }
}

TEST(Base64, Vectors) {
  EXPECT_EQ(Base64Encode("hi\n"), "aGkK");
  EXPECT_EQ(Base64Encode("err\n"), "ZXJyCg==");
  EXPECT_EQ(Base64Encode("abc\n"), "YWJjCg==");
  EXPECT_EQ(*Base64Decode("ZXJyCg"), "err\n");       // missing padding
  EXPECT_EQ(*Base64Decode("-_8="), std::string("\xfb\xff", 2));  // URL-safe
  EXPECT_EQ(*Base64Decode("+/8="), std::string("\xfb\xff", 2));
  EXPECT_FALSE(Base64Decode("a").ok());
  EXPECT_FALSE(Base64Decode("ab!d").ok());
  EXPECT_EQ(*Base64Decode(""), "");
}

TEST(Int64, StringsAndNumbers) {
  EXPECT_EQ(Int64ToJson(11).dump(), "\"11\"");
  EXPECT_EQ(*Int64FromJson(nlohmann::json("11")), 11);
  EXPECT_EQ(*Int64FromJson(nlohmann::json(11)), 11);
  EXPECT_EQ(*Int64FromJson(nlohmann::json("-9223372036854775808")), INT64_MIN);
  EXPECT_EQ(*Int64FromJson(nlohmann::json(12.0)), 12);
  EXPECT_FALSE(Int64FromJson(nlohmann::json("1x")).ok());
  EXPECT_FALSE(Int64FromJson(nlohmann::json("")).ok());
  EXPECT_FALSE(Int64FromJson(nlohmann::json(1.5)).ok());
  EXPECT_FALSE(Int64FromJson(nlohmann::json::array()).ok());
  EXPECT_FALSE(Uint32FromJson(nlohmann::json(-1)).ok());
  EXPECT_FALSE(Uint32FromJson(nlohmann::json(4294967296LL)).ok());
  EXPECT_EQ(*Uint32FromJson(nlohmann::json("1234")), 1234u);
  EXPECT_EQ(*Uint64FromJson(nlohmann::json("18446744073709551615")), UINT64_MAX);
  // 2^64 and 2^63 as floats (what max() rounds to): out of range, not a cast
  // with undefined behaviour.
  EXPECT_FALSE(Uint64FromJson(nlohmann::json::parse("18446744073709551616")).ok());
  EXPECT_FALSE(Int64FromJson(nlohmann::json(9223372036854775808.0)).ok());
  EXPECT_EQ(*Uint64FromJson(nlohmann::json(9007199254740992.0)), 9007199254740992u);
}

TEST(Timestamp, FormatAndParse) {
  Timestamp t{1767323045, 500000000};
  EXPECT_EQ(FormatTimestamp(t), "2026-01-02T03:04:05.500Z");
  EXPECT_EQ(*ParseTimestamp("2026-01-02T03:04:05.500Z"), t);
  EXPECT_EQ(FormatTimestamp({0, 0}), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatTimestamp({1, 1000}), "1970-01-01T00:00:01.000001Z");
  EXPECT_EQ(FormatTimestamp({1, 1}), "1970-01-01T00:00:01.000000001Z");
  EXPECT_EQ(FormatTimestamp({-1, 0}), "1969-12-31T23:59:59Z");
  EXPECT_EQ(FormatTimestamp({951782400, 0}), "2000-02-29T00:00:00Z");
  EXPECT_EQ(*ParseTimestamp("2026-01-02T04:04:05.5+01:00"), t);
  EXPECT_EQ(ParseTimestamp("2026-01-02T03:04:05.123456789Z")->nanos, 123456789);
  EXPECT_FALSE(ParseTimestamp("2026-01-02").ok());
  EXPECT_FALSE(ParseTimestamp("2026-01-02T03:04:05").ok());
  EXPECT_FALSE(ParseTimestamp("2026-13-02T03:04:05Z").ok());
  EXPECT_FALSE(ParseTimestamp("2026-01-02T03:04:05.Z").ok());
  EXPECT_FALSE(ParseTimestamp("2026-01-02T03:04:05.1234567891Z").ok());
  for (int64_t s : {0LL, 86399LL, 1767323045LL, 4102444800LL, -86400LL * 365}) {
    for (int32_t ns : {0, 1000000, 123000, 7}) {
      Timestamp x{s, ns};
      EXPECT_EQ(*ParseTimestamp(FormatTimestamp(x)), x);
    }
  }
}

TEST(Enums, NamesAndNumbers) {
  EXPECT_EQ(FileTypeName(FileType::kDirectory), "FILE_TYPE_DIRECTORY");
  EXPECT_EQ(*FileTypeFromJson(nlohmann::json("FILE_TYPE_SYMLINK")), FileType::kSymlink);
  EXPECT_EQ(*FileTypeFromJson(nlohmann::json(1)), FileType::kFile);
  EXPECT_FALSE(FileTypeFromJson(nlohmann::json("FILE_TYPE_X")).ok());
  EXPECT_EQ(EventTypeName(EventType::kWrite), "EVENT_TYPE_WRITE");
  EXPECT_EQ(*EventTypeFromJson(nlohmann::json(4)), EventType::kRename);
  EXPECT_EQ(SignalName(Signal::kSigkill), "SIGNAL_SIGKILL");
  EXPECT_EQ(*SignalFromJson(nlohmann::json("SIGNAL_SIGTERM")), Signal::kSigterm);
  EXPECT_EQ(*SignalFromJson(nlohmann::json(9)), Signal::kSigkill);
  EXPECT_EQ(static_cast<int>(*SignalFromJson(nlohmann::json(2))), 2);  // open enum
  EXPECT_FALSE(SignalFromJson(nlohmann::json("SIGINT")).ok());
}

}  // namespace
}  // namespace airlock::envd
