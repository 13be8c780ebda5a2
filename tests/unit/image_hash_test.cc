// Cache keys: deterministic, sensitive to every input, unambiguous.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "image/hash.h"

namespace airlock::image {
namespace {

TEST(HashTest, Sha256KnownVector) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(HashTest, Sha256FileMatchesData) {
  char tmpl[] = "/tmp/image_hash_testXXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  std::string data(3 << 20, 'q');  // more than one read buffer
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ::close(fd);
  auto h = Sha256File(tmpl);
  ::unlink(tmpl);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, Sha256Hex(data));
  auto missing = Sha256File("/nonexistent/x");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

KeyBuilder Base() {
  return std::move(KeyBuilder()
                       .Add("builder", "1")
                       .Add("suite", "bookworm")
                       .Add("packages", std::vector<std::string>{"bash", "git"}));
}

TEST(HashTest, KeyIsDeterministic) {
  EXPECT_EQ(Base().Digest(), Base().Digest());
  EXPECT_EQ(Base().Digest().size(), 64u);
  EXPECT_EQ(Base().ShortDigest(), Base().Digest().substr(0, 20));
}

TEST(HashTest, KeyChangesWithEveryInput) {
  std::string base = Base().Digest();
  EXPECT_NE(KeyBuilder()
                .Add("builder", "2")
                .Add("suite", "bookworm")
                .Add("packages", std::vector<std::string>{"bash", "git"})
                .Digest(),
            base);
  EXPECT_NE(KeyBuilder()
                .Add("builder", "1")
                .Add("suite", "trixie")
                .Add("packages", std::vector<std::string>{"bash", "git"})
                .Digest(),
            base);
  EXPECT_NE(KeyBuilder()
                .Add("builder", "1")
                .Add("suite", "bookworm")
                .Add("packages", std::vector<std::string>{"git", "bash"})
                .Digest(),
            base);
  EXPECT_NE(Base().Add("agent", "x").Digest(), base);
}

TEST(HashTest, KeyIsUnambiguous) {
  // Concatenation must not collide: ("ab","c") vs ("a","bc").
  EXPECT_NE(KeyBuilder().Add("ab", "c").Digest(), KeyBuilder().Add("a", "bc").Digest());
  EXPECT_NE(KeyBuilder().Add("p", std::vector<std::string>{"a,b"}).Digest(),
            KeyBuilder().Add("p", std::vector<std::string>{"a", "b"}).Digest());
}

}  // namespace
}  // namespace airlock::image
