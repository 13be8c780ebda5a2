#include <gtest/gtest.h>

#include "envd/multipart.h"

namespace airlock::envd {
namespace {

struct Part {
  PartHeaders h;
  std::string data;
  bool ended = false;
};

struct Collector {
  std::vector<Part> parts;
  MultipartParser::Callbacks Callbacks() {
    MultipartParser::Callbacks cb;
    cb.on_part_begin = [this](const PartHeaders& h) {
      parts.push_back(Part{h, "", false});
      return OkStatus();
    };
    cb.on_part_data = [this](std::string_view d) {
      parts.back().data.append(d);
      return OkStatus();
    };
    cb.on_part_end = [this] {
      parts.back().ended = true;
      return OkStatus();
    };
    return cb;
  }
};

const std::string kBoundary = "----formdata-undici-013202202674";

std::string Body() {
  std::string b;
  b += "--" + kBoundary + "\r\n";
  b += "Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/dir/a b.txt\"\r\n";
  b += "Content-Type: application/octet-stream\r\n\r\n";
  b += std::string("line1\r\n--not-a-boundary\r\n\0\xff binary", 40);
  b += "\r\n--" + kBoundary + "\r\n";
  b += "Content-Disposition: form-data; name=\"file\"; filename=\"c.txt\"\r\n\r\n";
  b += "";  // empty file
  b += "\r\n--" + kBoundary + "\r\n";
  b += "Content-Disposition: form-data; name=\"other\"\r\n\r\n";
  b += "field value";
  b += "\r\n--" + kBoundary + "\r\n";
  b += "content-disposition: form-data; name=\"file\"; filename=\"/tmp/\xc3\xa9t\xc3\xa9/\xe6\x97\xa5.bin\"\r\n\r\n";
  b += "\r\n\r\n";
  b += "\r\n--" + kBoundary + "--\r\n";
  return b;
}

void CheckParts(const std::vector<Part>& p) {
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].h.name, "file");
  EXPECT_EQ(p[0].h.filename, "/home/user/dir/a b.txt");
  EXPECT_EQ(p[0].h.content_type, "application/octet-stream");
  EXPECT_EQ(p[0].data, std::string("line1\r\n--not-a-boundary\r\n\0\xff binary", 40));
  EXPECT_EQ(p[1].h.filename, "c.txt");
  EXPECT_EQ(p[1].data, "");
  EXPECT_EQ(p[2].h.name, "other");
  EXPECT_FALSE(p[2].h.filename.has_value());
  EXPECT_EQ(p[2].data, "field value");
  EXPECT_EQ(p[3].h.filename, "/tmp/\xc3\xa9t\xc3\xa9/\xe6\x97\xa5.bin");
  EXPECT_EQ(p[3].data, "\r\n\r\n");
  for (const auto& x : p) EXPECT_TRUE(x.ended);
}

TEST(Multipart, WholeBody) {
  Collector c;
  MultipartParser p(kBoundary, c.Callbacks());
  ASSERT_TRUE(p.Feed(Body()).ok());
  ASSERT_TRUE(p.Finish().ok());
  CheckParts(c.parts);
}

TEST(Multipart, SplitAtEveryByte) {
  std::string body = Body();
  for (size_t i = 0; i <= body.size(); ++i) {
    Collector c;
    MultipartParser p(kBoundary, c.Callbacks());
    ASSERT_TRUE(p.Feed(std::string_view(body).substr(0, i)).ok()) << i;
    ASSERT_TRUE(p.Feed(std::string_view(body).substr(i)).ok()) << i;
    ASSERT_TRUE(p.Finish().ok()) << i;
    CheckParts(c.parts);
  }
}

TEST(Multipart, ByteByByte) {
  std::string body = Body();
  Collector c;
  MultipartParser p(kBoundary, c.Callbacks());
  for (char ch : body) ASSERT_TRUE(p.Feed(std::string_view(&ch, 1)).ok());
  ASSERT_TRUE(p.Finish().ok());
  CheckParts(c.parts);
}

TEST(Multipart, PreambleAndEpilogueIgnored) {
  Collector c;
  MultipartParser p("xyz", c.Callbacks());
  ASSERT_TRUE(p.Feed("preamble\r\n--xyz\r\nContent-Disposition: form-data; name=\"file\"; "
                     "filename=\"a\"\r\n\r\nDATA\r\n--xyz--\r\nepilogue junk")
                  .ok());
  ASSERT_TRUE(p.Finish().ok());
  ASSERT_EQ(c.parts.size(), 1u);
  EXPECT_EQ(c.parts[0].data, "DATA");
}

TEST(Multipart, ExtendedFilename) {
  Collector c;
  MultipartParser p("b", c.Callbacks());
  ASSERT_TRUE(p.Feed("--b\r\nContent-Disposition: form-data; name=file; filename=\"x\"; "
                     "filename*=UTF-8''%C3%A9%20z.txt\r\n\r\nq\r\n--b--")
                  .ok());
  ASSERT_TRUE(p.Finish().ok());
  EXPECT_EQ(c.parts[0].h.filename, "\xc3\xa9 z.txt");
  EXPECT_EQ(c.parts[0].h.name, "file");
}

TEST(Multipart, Malformed) {
  Collector c;
  {
    MultipartParser p("b", c.Callbacks());
    ASSERT_TRUE(p.Feed("--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc").ok());
    EXPECT_EQ(p.Finish().code(), StatusCode::kInvalidArgument);  // truncated
  }
  {
    MultipartParser p("b", c.Callbacks());
    EXPECT_FALSE(p.Feed("--b\r\nNoColonHere\r\n\r\nabc\r\n--b--").ok());
  }
  {
    MultipartParser p("b", c.Callbacks());
    EXPECT_FALSE(p.Feed("--b\r\nContent-Type: text/plain\r\n\r\nabc\r\n--b--").ok());  // no disposition
  }
  {
    MultipartParser p("b", c.Callbacks());
    EXPECT_FALSE(p.Feed("--bXYZ\r\n").ok());  // garbage after boundary
  }
  {
    MultipartParser p("b", c.Callbacks());
    std::string huge = "--b\r\nX-Pad: " + std::string(20000, 'a');
    EXPECT_FALSE(p.Feed(huge).ok());  // header block too large
    EXPECT_FALSE(p.Feed("more").ok());  // stays failed
  }
  {
    MultipartParser p("b", c.Callbacks());
    ASSERT_TRUE(p.Feed("no boundary at all").ok());
    EXPECT_FALSE(p.Finish().ok());
  }
  {
    MultipartParser::Callbacks cb;
    cb.on_part_begin = [](const PartHeaders&) { return InvalidArgument("nope"); };
    MultipartParser p("b", cb);
    EXPECT_EQ(p.Feed("--b\r\nContent-Disposition: form-data; name=a\r\n\r\n").message(), "nope");
  }
}

TEST(Multipart, Boundary) {
  EXPECT_EQ(*MultipartBoundary("multipart/form-data; boundary=----abc"), "----abc");
  EXPECT_EQ(*MultipartBoundary("Multipart/Form-Data; charset=x; boundary=\"q r\""), "q r");
  EXPECT_FALSE(MultipartBoundary("multipart/form-data").ok());
  EXPECT_FALSE(MultipartBoundary("application/json; boundary=x").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=" + std::string(71, 'x')).ok());
}

}  // namespace
}  // namespace airlock::envd
