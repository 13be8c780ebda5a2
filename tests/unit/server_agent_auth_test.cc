// The agent's side of sandbox auth (agent/auth.h): POST /init, the
// X-Access-Token check, the exempt paths and signed /files URLs, against an
// in-process Agent on 127.0.0.1:<free port>.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "agent/auth.h"
#include "tests/unit/loopback_http.h"

namespace airlock::agent {
namespace {

// Signatures as the SDK computes them (spec §4.2): "v1_" + unpadded base64 of
// SHA-256("<path>:<operation>:<user>:<token>[:<expiration>]"). Expected
// values computed independently (Python hashlib).
TEST(AgentAuthTest, FileSignatureKnownVectors) {
  EXPECT_EQ(FileSignature("/home/user/a.txt", "read", "", "tok", std::nullopt), "v1_Zkbb3914oLJLvMBzCAHQhm2ydBLxbSx2eQUR/kLdvIY");
  EXPECT_EQ(FileSignature("/home/user/a.txt", "write", "root", "tok", 1767323045), "v1_c2qyCWEXv9vQwQg1ZvGMaq/J8saYSfmfa8Xkejbw5+s");
}

TEST(AgentAuthTest, HelpersParseAndCompare) {
  EXPECT_TRUE(SecureEqual("abc", "abc"));
  EXPECT_FALSE(SecureEqual("abc", "abd"));
  EXPECT_FALSE(SecureEqual("abc", "ab"));
  std::string sig = FileSignature("/home/user/a.txt", "read", "", "tok", std::nullopt);
  EXPECT_EQ(sig.rfind("v1_", 0), 0u);
  EXPECT_EQ(sig.find('='), std::string::npos);
  EXPECT_NE(sig, FileSignature("/home/user/a.txt", "write", "", "tok", std::nullopt));
  EXPECT_NE(sig, FileSignature("/home/user/a.txt", "read", "", "tok", 123));
}

class AgentServer : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/agent-auth-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    AgentOptions o;
    o.listen = "127.0.0.1:0";
    o.access_token_file = TokenFile();
    agent_ = std::make_unique<Agent>(io_, o);
    ASSERT_TRUE(agent_->Start().ok());
    port_ = agent_->port();
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    io_.stop();
    thread_.join();
    std::filesystem::remove_all(dir_);
  }
  // Where the agent writes the token for the code interpreter.
  std::string TokenFile() const { return dir_ + "/airlock/access-token"; }
  std::string ReadTokenFile() const {
    std::ifstream f(TokenFile());
    if (!f) return "<none>";
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // One request on its own connection; returns "status\nbody".
  std::pair<int, std::string> Req(const std::string& method, const std::string& target, const std::string& headers,
                                  const std::string& body = "") {
    const std::string out = test_util::LoopbackHttp(port_, method, target, headers, body, "x");
    int status = out.size() > 12 ? std::atoi(out.c_str() + 9) : 0;
    size_t p = out.find("\r\n\r\n");
    return {status, p == std::string::npos ? "" : out.substr(p + 4)};
  }
  std::string dir_;
  asio::io_context io_;
  std::unique_ptr<Agent> agent_;
  uint16_t port_ = 0;
  std::thread thread_;
};

TEST_F(AgentServer, InitSetsTokenOnceAndEveryPathChecksIt) {
  // Before /init: open (backwards compatible with token-less use).
  EXPECT_EQ(Req("GET", "/envs", "").first, 200);
  EXPECT_EQ(Req("POST", "/init", "Content-Type: application/json\r\n", "{not json").first, 400);
  auto init = Req("POST", "/init", "", R"({"accessToken":"secret","envVars":{"A":"1"}})");
  EXPECT_EQ(init.first, 204) << init.second;
  // Exempt: /health. Everything else needs the token.
  EXPECT_EQ(Req("GET", "/health", "").first, 204);
  auto no = Req("GET", "/envs", "");
  EXPECT_EQ(no.first, 401);
  EXPECT_NE(no.second.find("\"code\":401"), std::string::npos) << no.second;
  EXPECT_EQ(Req("GET", "/envs", "X-Access-Token: wrong\r\n").first, 401);
  EXPECT_EQ(Req("POST", "/process.Process/List", "Content-Type: application/json\r\n", "{}").first, 401);
  auto ok = Req("GET", "/envs", "X-Access-Token: secret\r\n");
  EXPECT_EQ(ok.first, 200);
  EXPECT_EQ(ok.second, R"({"A":"1"})");
  // The token cannot be replaced without the current one.
  EXPECT_EQ(Req("POST", "/init", "", R"({"accessToken":"mine"})").first, 401);
  EXPECT_EQ(Req("POST", "/init", "X-Access-Token: secret\r\n", R"({"accessToken":"next"})").first, 204);
  EXPECT_EQ(Req("GET", "/envs", "X-Access-Token: secret\r\n").first, 401);
  EXPECT_EQ(Req("GET", "/envs", "X-Access-Token: next\r\n").first, 200);
  // /files: a valid signature instead of the header; a bad or expired one fails.
  std::string path = "/nonexistent-airlock-test";
  std::string sig = FileSignature(path, "read", "", "next", std::nullopt);
  EXPECT_EQ(Req("GET", "/files?path=" + path, "").first, 401);
  EXPECT_EQ(Req("GET", "/files?path=" + path + "&signature=v1_bogus", "").first, 401);
  auto signed_req = Req("GET", "/files?path=" + path + "&signature=" + sig, "");
  // Past the token check: 404, or 401 "invalid username" when this host has
  // no user named `user`; never a signature/token failure.
  EXPECT_EQ(signed_req.second.find("signature"), std::string::npos) << signed_req.second;
  EXPECT_EQ(signed_req.second.find("X-Access-Token"), std::string::npos) << signed_req.second;
  std::string expired = FileSignature(path, "read", "", "next", 1000);
  EXPECT_EQ(Req("GET", "/files?path=" + path + "&signature=" + expired + "&signature_expiration=1000", "").first, 401);
}

// The code interpreter learns the token from a file the agent writes at
// each /init (issue 32): root's alone, replaced at each rotation, removed
// when cleared; a token that cannot be written fails /init and is not set.
TEST_F(AgentServer, InitWritesTheTokenForTheInterpreterAndFollowsRotation) {
  EXPECT_EQ(ReadTokenFile(), "<none>");
  ASSERT_EQ(Req("POST", "/init", "", R"({"accessToken":"secret"})").first, 204);
  EXPECT_EQ(ReadTokenFile(), "secret");
  struct stat st {};
  ASSERT_EQ(::stat(TokenFile().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_ + "/airlock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(Req("POST", "/init", "X-Access-Token: secret\r\n", R"({"accessToken":"next"})").first, 204);
  EXPECT_EQ(ReadTokenFile(), "next");
  ASSERT_EQ(Req("POST", "/init", "X-Access-Token: next\r\n", R"({"accessToken":""})").first, 204);
  EXPECT_EQ(ReadTokenFile(), "<none>");
  EXPECT_EQ(Req("GET", "/envs", "").first, 200);  // cleared: open, as before /init
  // The file's directory cannot be made: /init fails, and the token is not set.
  std::filesystem::remove_all(dir_ + "/airlock");
  std::ofstream(dir_ + "/airlock") << "a file where the directory goes";
  auto failed = Req("POST", "/init", "", R"({"accessToken":"unwritten"})");
  EXPECT_EQ(failed.first, 500) << failed.second;
  EXPECT_NE(failed.second.find("interpreter"), std::string::npos) << failed.second;
  EXPECT_EQ(Req("GET", "/envs", "").first, 200);
}

}  // namespace
}  // namespace airlock::agent
