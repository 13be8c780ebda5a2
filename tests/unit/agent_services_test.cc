// The agent's service supervisor (agent/services.h): declarations parse or
// are refused with a reason, and a service that dies is started again.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "agent/services.h"
#include "scoped_dir.h"
#include "../wait_for.h"

namespace airlock::agent {
namespace {

TEST(ServiceSpec, ParsesAFullDeclaration) {
  auto s = ParseServiceSpec(
      R"({"name":"interpreter","argv":["/usr/local/bin/x","--a"],"user":"user","cwd":"/tmp","env":{"K":"V"}})", "f");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name, "interpreter");
  EXPECT_EQ(s->argv, (std::vector<std::string>{"/usr/local/bin/x", "--a"}));
  EXPECT_EQ(s->user, "user");
  EXPECT_EQ(s->cwd, "/tmp");
  EXPECT_EQ(s->env.at("K"), "V");
}

TEST(ServiceSpec, DefaultsAndFallbackName) {
  auto s = ParseServiceSpec(R"({"argv":["/bin/true"]})", "fromfile");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->name, "fromfile");
  EXPECT_EQ(s->user, "root");
  EXPECT_EQ(s->cwd, "/");
}

TEST(ServiceSpec, RestartPolicy) {
  EXPECT_TRUE(ParseServiceSpec(R"({"argv":["/x"]})", "f")->restart_on_success);
  EXPECT_TRUE(ParseServiceSpec(R"({"argv":["/x"],"restart":"always"})", "f")->restart_on_success);
  EXPECT_FALSE(ParseServiceSpec(R"({"argv":["/x"],"restart":"on-failure"})", "f")->restart_on_success);
  for (const char* bad : {R"({"argv":["/x"],"restart":"never"})", R"({"argv":["/x"],"restart":true})"}) {
    EXPECT_EQ(ParseServiceSpec(bad, "f").status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ServiceSpec, RefusesBadDeclarations) {
  for (const char* bad : {"", "[]", "{", R"({"argv":[]})", R"({"argv":"x"})", R"({"argv":["relative"]})",
                          R"({"argv":[1]})", R"({"argv":["/x"],"env":{"A=B":"c"}})",
                          R"({"argv":["/x"],"env":{"A":1}})", R"({"argv":["/x"],"user":""})",
                          R"({"argv":["/x"],"name":7})"}) {
    auto s = ParseServiceSpec(bad, "f");
    EXPECT_FALSE(s.ok()) << bad;
    if (!s.ok()) EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ServiceSupervisor, BackoffDoublesToThirtySeconds) {
  EXPECT_EQ(ServiceSupervisor::Backoff(0).count(), 1000);
  EXPECT_EQ(ServiceSupervisor::Backoff(1).count(), 1000);
  EXPECT_EQ(ServiceSupervisor::Backoff(2).count(), 2000);
  EXPECT_EQ(ServiceSupervisor::Backoff(3).count(), 4000);
  EXPECT_EQ(ServiceSupervisor::Backoff(50).count(), 30000);
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The real agent binary on `root` with `services`, its stderr to `log`.
pid_t StartAgent(const std::string& root, const std::string& services, const std::string& log) {
  pid_t agent = fork();
  if (agent == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    execl(AIRLOCK_AGENT_BINARY, "airlock-agent", "--listen", "127.0.0.1:0", "--root-prefix", root.c_str(),
          "--services-dir", services.c_str(), (char*)nullptr);
    _exit(127);
  }
  return agent;
}

// The real agent binary with a services dir: a service that exits at once is
// started again (after the 1 s backoff), with its declared environment; a bad
// declaration beside it is skipped without stopping the agent.
TEST(ServiceSupervisor, AgentRestartsAServiceThatDies) {
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-services-test")};
  ASSERT_FALSE(dir.path.empty());
  std::string root = dir.path + "/root", services = dir.path + "/services", out = dir.path + "/runs";
  ASSERT_EQ(system(("mkdir -p " + root + "/etc " + services).c_str()), 0);
  std::ofstream(root + "/etc/passwd") << "root:x:0:0:root:/:/bin/sh\nuser:x:1000:1000::/tmp:/bin/sh\n";
  std::ofstream(root + "/etc/group") << "root:x:0:\nuser:x:1000:\n";
  std::ofstream(services + "/a.json") << R"({"argv":["/bin/sh","-c","echo \"$MARK\" >> )" << out
                                      << R"("],"user":")" << "root"
                                      << R"(","env":{"MARK":"run"}})";
  std::ofstream(services + "/broken.json") << "{not json";
  std::string log = dir.path + "/agent.log";
  pid_t agent = StartAgent(root, services, log);
  bool restarted = WaitFor([&] { return Slurp(out) == "run\nrun\n" || Slurp(out).size() > 8; },
                           std::chrono::seconds(30));
  kill(agent, SIGTERM);
  waitpid(agent, nullptr, 0);
  EXPECT_TRUE(restarted) << "runs: " << Slurp(out) << "\nagent log:\n" << Slurp(log);
  EXPECT_NE(Slurp(log).find("broken.json"), std::string::npos) << Slurp(log);
}

// "on-failure" (a template's start command): an exit 0 is the end of it, a
// failing exit is restarted. Measured against an "always" service beside
// them: by its third run (>= 3 s of backoff), the failing one has been
// started again and the finished one has not.
TEST(ServiceSupervisor, OnFailureServiceThatSucceedsRunsOnce) {
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-services-test")};
  ASSERT_FALSE(dir.path.empty());
  std::string root = dir.path + "/root", services = dir.path + "/services";
  ASSERT_EQ(system(("mkdir -p " + root + "/etc " + services).c_str()), 0);
  std::ofstream(root + "/etc/passwd") << "root:x:0:0:root:/:/bin/sh\n";
  std::ofstream(root + "/etc/group") << "root:x:0:\n";
  auto declare = [&](const std::string& name, const std::string& exit_code, const std::string& restart) {
    std::ofstream(services + "/" + name + ".json")
        << R"({"argv":["/bin/sh","-c","echo run >> )" << dir.path << "/" << name << "; exit " << exit_code
        << R"("],"restart":")" << restart << R"("})";
  };
  declare("done", "0", "on-failure");
  declare("fails", "3", "on-failure");
  declare("clock", "0", "always");
  std::string log = dir.path + "/agent.log";
  pid_t agent = StartAgent(root, services, log);
  bool three = WaitFor([&] { return Slurp(dir.path + "/clock") == "run\nrun\nrun\n"; }, std::chrono::seconds(60));
  std::string done = Slurp(dir.path + "/done"), fails = Slurp(dir.path + "/fails");
  kill(agent, SIGTERM);
  waitpid(agent, nullptr, 0);
  ASSERT_TRUE(three) << Slurp(log);
  EXPECT_EQ(done, "run\n") << Slurp(log);
  EXPECT_GE(fails.size(), 8u) << fails;
  EXPECT_NE(Slurp(log).find("service done finished (exit 0); not restarted"), std::string::npos) << Slurp(log);
}

}  // namespace
}  // namespace airlock::agent
