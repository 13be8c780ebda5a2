// OCI bases (image/oci_base.h): the parts that need no registry, no skopeo
// and no root. The pull itself runs in tests/e2e/template_oci.test.mjs.
#include <gtest/gtest.h>

#include "image/oci_base.h"

#include <stdlib.h>

#include <filesystem>

namespace airlock::image {
namespace {

TEST(OciRefTest, ValidReferences) {
  for (const char* ok : {"python:3.12-slim", "127.0.0.1:5000/test/pyslim:1", "library/debian",
                         "localhost/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                         "Example.COM/x_y/z-w:v1.2"}) {
    EXPECT_TRUE(ValidateImageRef(ok).ok()) << ok;
  }
}

TEST(OciRefTest, RefusedReferences) {
  for (const char* bad :
       {"", "-x", "/abs", ":tag", "@sha256:00", "a b", "a;rm -rf /", "a$(id)", "ü/x", "docker://x\n"}) {
    auto st = ValidateImageRef(bad);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(ValidateImageRef(std::string(513, 'a')).ok());
  EXPECT_TRUE(ValidateImageRef(std::string(512, 'a')).ok());
}

TEST(OciRefTest, RegistryOfFollowsDockerNaming) {
  EXPECT_EQ(RegistryOf("127.0.0.1:5000/test/pyslim:1"), "127.0.0.1:5000");
  EXPECT_EQ(RegistryOf("registry.example:443/a"), "registry.example:443");
  EXPECT_EQ(RegistryOf("localhost/a/b"), "localhost");
  EXPECT_EQ(RegistryOf("python:3"), "");
  EXPECT_EQ(RegistryOf("library/python:3"), "");
  EXPECT_EQ(RegistryOf("myorg/app"), "");
}

TEST(OciRefTest, PinnedRefDropsTheTag) {
  const std::string d = "sha256:" + std::string(64, 'a');
  EXPECT_EQ(PinnedRef("127.0.0.1:5000/test/pyslim:1", d), "127.0.0.1:5000/test/pyslim@" + d);
  EXPECT_EQ(PinnedRef("127.0.0.1:5000/test/pyslim", d), "127.0.0.1:5000/test/pyslim@" + d);
  EXPECT_EQ(PinnedRef("python:3.12", d), "python@" + d);
  EXPECT_EQ(PinnedRef("python", d), "python@" + d);
  EXPECT_EQ(PinnedRef("x/y@sha256:" + std::string(64, 'b'), d), "x/y@sha256:" + std::string(64, 'b'));
}

TEST(OciRefTest, RegistryHosts) {
  for (const char* ok : {"127.0.0.1:5000", "localhost", "registry.internal", "my-reg.example:443"})
    EXPECT_TRUE(ValidateRegistryHost(ok).ok()) << ok;
  for (const char* bad : {"", ":5000", "host:", "host:123456", "host:x", "-host", "host/path", "Host", "a b"})
    EXPECT_FALSE(ValidateRegistryHost(bad).ok()) << bad;
}

TEST(OciRefTest, SkopeoErrorIsTheFatalMessageTrimmed) {
  EXPECT_EQ(
      SkopeoError("time=\"2026-12-03T07:18:39Z\" level=fatal msg=\"Error parsing image name "
                  "\\\"docker://127.0.0.1:15077/test/nope:1\\\": reading manifest 1 in 127.0.0.1:15077/test/nope: "
                  "manifest unknown: manifest unknown\"\n"),
      "reading manifest 1 in 127.0.0.1:15077/test/nope: manifest unknown: manifest unknown");
  EXPECT_EQ(SkopeoError("time=\"x\" level=warning msg=\"something\"\n"
                        "time=\"y\" level=fatal msg=\"initializing source docker://h/a:1: pinging container registry "
                        "h: Get \\\"https://h/v2/\\\": dial tcp: connection refused\"\n"),
            "pinging container registry h: Get \"https://h/v2/\": dial tcp: connection refused");
  // Not skopeo's log format: the last line as it is.
  EXPECT_EQ(SkopeoError("first\nsecond line\n\n"), "second line");
  EXPECT_EQ(SkopeoError(""), "");
  const std::string big = "time=\"t\" level=fatal msg=\"" + std::string(5000, 'e') + "\"";
  EXPECT_LE(SkopeoError(big).size(), 603u);
}

// A build from an OCI image holds the bases (shared, several at once); the
// sweep of unused bases runs only when no build holds them, one at a time.
TEST(OciBasesHoldTest, BuildsShareTheHoldAndTheSweepRunsOnlyWithoutOne) {
  char tmpl[] = "/tmp/airlock-oci-hold-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    auto first = OciBasesHold(dir);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    auto second = OciBasesHold(dir);
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    auto sweep = TryOciBasesSweep(dir);
    ASSERT_FALSE(sweep.ok());
    EXPECT_EQ(sweep.status().code(), StatusCode::kFailedPrecondition);
    *first = UniqueFd();
    EXPECT_FALSE(TryOciBasesSweep(dir).ok()) << "one build still holds them";
  }
  auto sweep = TryOciBasesSweep(dir);
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  EXPECT_FALSE(TryOciBasesSweep(dir).ok()) << "one sweep at a time";
  *sweep = UniqueFd();
  EXPECT_TRUE(OciBasesHold(dir).ok()) << "a build after the sweep";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace airlock::image
