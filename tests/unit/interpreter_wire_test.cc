// The Jupyter wire (interpreter/wire.h): signing, framing, and what happens
// to hostile frames (bad signature, missing parts, non-JSON, huge, invalid
// UTF-8).
#include "interpreter/wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace airlock::interpreter {
namespace {

using json = nlohmann::json;

std::vector<std::string_view> Views(const std::vector<std::string>& f) { return {f.begin(), f.end()}; }

TEST(InterpreterWire, SignIsHmacSha256Hex) {
  // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
  EXPECT_EQ(Sign("Jefe", {"what do ya ", "want for nothing?"}),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Sign("", {"x"}), "");
}

TEST(InterpreterWire, SerializeThenParseRoundTrips) {
  json h = MakeHeader("execute_request", "sess");
  EXPECT_EQ(h["version"], "5.3");
  EXPECT_EQ(h["session"], "sess");
  EXPECT_EQ(h["msg_type"], "execute_request");
  EXPECT_EQ(h["msg_id"].get<std::string>().size(), 36u);
  auto f = SerializeMessage("k3y", h, json{{"code", "1+1"}});
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(f[0], "<IDS|MSG>");
  EXPECT_EQ(f[1], Sign("k3y", {f[2], f[3], f[4], f[5]}));
  // With routing ids in front, as a ROUTER/PUB peer may add.
  std::vector<std::string> in = {"id1", "id2"};
  in.insert(in.end(), f.begin(), f.end());
  in.push_back("a buffer");
  auto m = ParseMessage("k3y", Views(in));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->msg_type(), "execute_request");
  EXPECT_EQ(m->msg_id(), h["msg_id"]);
  EXPECT_EQ(m->parent_id(), "");
  EXPECT_EQ(m->content["code"], "1+1");
}

std::vector<std::string> Signed(const std::string& key, std::string header, std::string parent, std::string meta,
                                std::string content) {
  std::vector<std::string> f = {"<IDS|MSG>", "", header, parent, meta, content};
  f[1] = Sign(key, {f[2], f[3], f[4], f[5]});
  return f;
}

TEST(InterpreterWire, WrongSignatureIsRefused) {
  auto f = Signed("k", R"({"msg_type":"stream"})", "{}", "{}", R"({"text":"x"})");
  f[1][0] = f[1][0] == 'a' ? 'b' : 'a';
  auto m = ParseMessage("k", Views(f));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kPermissionDenied);
  auto g = Signed("other", R"({"msg_type":"stream"})", "{}", "{}", "{}");
  EXPECT_FALSE(ParseMessage("k", Views(g)).ok());
  auto t = Signed("k", R"({"msg_type":"stream"})", "{}", "{}", "{}");
  t[1].pop_back();  // truncated signature
  EXPECT_FALSE(ParseMessage("k", Views(t)).ok());
  t[1] = "";
  EXPECT_FALSE(ParseMessage("k", Views(t)).ok());
}

TEST(InterpreterWire, MissingPartsAreRefused) {
  EXPECT_FALSE(ParseMessage("k", {}).ok());
  EXPECT_FALSE(ParseMessage("k", {"no", "delimiter", "{}", "{}", "{}", "{}"}).ok());
  auto f = Signed("k", "{}", "{}", "{}", "{}");
  for (size_t n = 0; n < f.size(); ++n) {
    std::vector<std::string> cut(f.begin(), f.begin() + static_cast<long>(n));
    EXPECT_FALSE(ParseMessage("k", Views(cut)).ok()) << n;
  }
}

TEST(InterpreterWire, NonJsonAndNonObjectsAreRefused) {
  for (const char* bad : {"not json", "[1,2]", "\"s\"", "{", "", "null"}) {
    auto f = Signed("k", bad, "{}", "{}", "{}");
    EXPECT_FALSE(ParseMessage("k", Views(f)).ok()) << bad;
    f = Signed("k", "{}", "{}", "{}", bad);
    EXPECT_FALSE(ParseMessage("k", Views(f)).ok()) << bad;
  }
}

TEST(InterpreterWire, InvalidUtf8IsReplacedNotRefused) {
  auto f = Signed("k", R"({"msg_type":"stream"})", "{}", "{}", "{\"text\":\"a\xff\xc3(b\xed\xa0\x80z\"}");
  auto m = ParseMessage("k", Views(f));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->content["text"], "a\xEF\xBF\xBD\xEF\xBF\xBD(b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDz");
}

TEST(InterpreterWire, HugeContentIsNotParsed) {
  std::string big = "{\"text\":\"" + std::string(3u << 20, 'x') + "\"}";
  auto f = Signed("k", R"({"msg_type":"stream","msg_id":"m"})", R"({"msg_id":"p"})", "{}", big);
  auto m = ParseMessage("k", Views(f), 1u << 20);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->content_too_large);
  EXPECT_EQ(m->content_bytes, big.size());
  EXPECT_EQ(m->parent_id(), "p");
  EXPECT_TRUE(m->content.empty());
  auto whole = ParseMessage("k", Views(f), 8u << 20);
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->content_too_large);
  EXPECT_EQ(whole->content["text"].get<std::string>().size(), 3u << 20);
  // The predicate form sees the header first.
  auto pred = ParseMessage("k", Views(f), [](const KernelMessage& head, size_t) { return head.msg_type() != "stream"; });
  ASSERT_TRUE(pred.ok());
  EXPECT_TRUE(pred->content_too_large);
}

TEST(InterpreterWire, UuidsAreV4AndDistinct) {
  std::string a = NewUuid(), b = NewUuid();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 36u);
  EXPECT_EQ(a[14], '4');
  EXPECT_EQ(a[8], '-');
}

}  // namespace
}  // namespace airlock::interpreter
