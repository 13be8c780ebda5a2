#include <gtest/gtest.h>

#include "envd/connect_error.h"
#include "envd/envelope.h"

namespace airlock::envd {
namespace {

TEST(Envelope, EncodeMatchesSpec) {
  EXPECT_EQ(EncodeEndStream(OkStatus()), std::string("\x02\x00\x00\x00\x02{}", 7));
  std::string e = EncodeEnvelope("{\"a\":1}");
  ASSERT_EQ(e.size(), 12u);
  EXPECT_EQ(e.substr(0, 5), std::string("\x00\x00\x00\x00\x07", 5));
}

TEST(Envelope, EndStreamErrorRoundTrip) {
  std::string p = EndStreamPayload(InvalidArgument("cwd '/nonexistent' does not exist"));
  EXPECT_EQ(p, R"({"error":{"code":"invalid_argument","message":"cwd '/nonexistent' does not exist"}})");
  Status st = ParseEndStream(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "cwd '/nonexistent' does not exist");
  EXPECT_TRUE(ParseEndStream("{}").ok());
  EXPECT_TRUE(ParseEndStream(R"({"metadata":{"k":["v"]}})").ok());
  EXPECT_EQ(ParseEndStream("nope").code(), StatusCode::kInternal);
  EXPECT_EQ(ParseEndStream(R"({"error":{"code":"bogus"}})").code(), StatusCode::kUnknown);
}

TEST(Envelope, DecoderSplitsAtEveryByte) {
  std::string stream = EncodeEnvelope(R"({"event":{"start":{"pid":1234}}})") + EncodeEnvelope("") +
                       EncodeEnvelope(std::string(300, 'x')) + EncodeEndStream(NotFound("nope"));
  for (size_t a = 0; a <= stream.size(); ++a) {
    for (size_t b = a; b <= stream.size(); b += 7) {
      EnvelopeDecoder d;
      ASSERT_TRUE(d.Feed(std::string_view(stream).substr(0, a)).ok());
      ASSERT_TRUE(d.Feed(std::string_view(stream).substr(a, b - a)).ok());
      ASSERT_TRUE(d.Feed(std::string_view(stream).substr(b)).ok());
      std::vector<Envelope> got;
      while (auto e = d.Next()) got.push_back(*e);
      ASSERT_EQ(got.size(), 4u);
      EXPECT_EQ(got[0].payload, R"({"event":{"start":{"pid":1234}}})");
      EXPECT_EQ(got[1].payload, "");
      EXPECT_EQ(got[2].payload.size(), 300u);
      EXPECT_TRUE(got[3].end_stream());
      EXPECT_EQ(ParseEndStream(got[3].payload).code(), StatusCode::kNotFound);
      EXPECT_TRUE(d.AtBoundary());
    }
  }
}

TEST(Envelope, DecoderByteByByte) {
  std::string stream = EncodeEnvelope("hello") + EncodeEndStream(OkStatus());
  EnvelopeDecoder d;
  int n = 0;
  for (char c : stream) {
    ASSERT_TRUE(d.Feed(std::string_view(&c, 1)).ok());
    while (d.Next()) ++n;
  }
  EXPECT_EQ(n, 2);
}

TEST(Envelope, OversizeRejectedBeforeBuffering) {
  EnvelopeDecoder d(1024);
  Status st = d.Feed(std::string("\x00\x7f\xff\xff\xff", 5));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("exceeds the limit"), std::string::npos);
  EXPECT_EQ(d.Feed("more").code(), StatusCode::kResourceExhausted);  // stays failed
  EnvelopeDecoder ok(5);
  EXPECT_TRUE(ok.Feed(EncodeEnvelope("12345")).ok());
  EXPECT_FALSE(ok.Feed(EncodeEnvelope("123456")).ok());
}

TEST(Envelope, CompressedAndUnknownFlagsRejected) {
  EnvelopeDecoder d;
  EXPECT_EQ(d.Feed(std::string("\x01\x00\x00\x00\x00", 5)).code(), StatusCode::kInvalidArgument);
  EnvelopeDecoder d2;
  EXPECT_EQ(d2.Feed(std::string("\x80\x00\x00\x00\x00", 5)).code(), StatusCode::kInvalidArgument);
}

TEST(ConnectError, HttpStatusAndJson) {
  EXPECT_EQ(HttpStatusForCode(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusForCode(StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpStatusForCode(StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusForCode(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusForCode(StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpStatusForCode(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(ErrorJsonBody(NotFound("no such pid")), R"({"code":"not_found","message":"no such pid"})");
  Status st = StatusFromErrorResponse(404, R"({"code":"already_exists","message":"x"})");
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(StatusFromErrorResponse(404, "plain").code(), StatusCode::kUnimplemented);
  EXPECT_EQ(StatusFromErrorResponse(400, "").code(), StatusCode::kInternal);
  for (int i = 1; i <= 16; ++i) {
    auto c = static_cast<StatusCode>(i);
    EXPECT_EQ(StatusCodeFromName(StatusCodeName(c)), c);
  }
  EXPECT_FALSE(StatusCodeFromName("ok_not").has_value());
}

}  // namespace
}  // namespace airlock::envd
