// Unit tests of the snapshot feature's parsers and guards: the agent's
// entropy reseed (size bounds, errors naming the step) and the lifecycle
// fields of a create body.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "agent/entropy.h"
#include "server/server.h"
#include "tests/unit/scoped_dir.h"

namespace airlock {
namespace {

TEST(EntropyTest, SizeIsBounded) {
  EXPECT_EQ(agent::ReseedEntropy(std::string(15, 'x'), "/dev/null").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(agent::ReseedEntropy(std::string(513, 'x'), "/dev/null").code(), StatusCode::kInvalidArgument);
}

TEST(EntropyTest, NotARandomDeviceFailsAtTheIoctlAfterTheWrite) {
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-entropy")};
  ASSERT_FALSE(dir.path.empty());
  std::string path = dir.path + "/fake-urandom";
  { std::ofstream(path) << ""; }
  Status st = agent::ReseedEntropy(std::string(64, 'r'), path.c_str());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("RNDADDENTROPY"), std::string::npos) << st.ToString();
  std::ifstream f(path);
  std::string got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, std::string(64, 'r')) << "the bytes are mixed in by the plain write";
  EXPECT_FALSE(agent::ReseedEntropy(std::string(64, 'r'), (dir.path + "/missing").c_str()).ok());
}

TEST(LifecycleTest, ParsesTheSdkFields) {
  using nlohmann::json;
  auto l = server::ParseLifecycle(json::parse(R"({"autoPause":true,"autoResume":{"enabled":true}})"));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_TRUE(l->auto_pause);
  EXPECT_TRUE(l->auto_pause_memory);
  EXPECT_TRUE(l->auto_resume);
  auto none = server::ParseLifecycle(json::object());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->auto_pause);
  EXPECT_FALSE(none->auto_resume);
  auto fs_only = server::ParseLifecycle(json::parse(R"({"autoPause":true,"autoPauseMemory":false})"));
  ASSERT_TRUE(fs_only.ok());
  EXPECT_FALSE(fs_only->auto_pause_memory);
  for (const char* bad : {R"({"autoPause":"yes"})", R"({"autoResume":true})", R"({"autoResume":{"enabled":1}})",
                          R"({"autoResume":{"enabled":true}})",
                          R"({"autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}})"}) {
    EXPECT_EQ(server::ParseLifecycle(json::parse(bad)).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace airlock
