// Files conformance in a real microVM (issue 12 items 5, 8, 9), through the
// host's own envd client: symlinkTarget resolved like envd, user.e2b.*
// metadata set inside the guest shown by Stat/ListDir and kept by a rename,
// and the polled watcher RPCs (CreateWatcher / GetWatcherEvents /
// RemoveWatcher) with a recursive watch that follows a directory created
// later. The SDK's streaming watchDir is covered in tests/e2e/files.test.mjs.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/manager.h"
#include "tests/integration/harness.h"
#include "tests/integration/manager_fixture.h"

namespace airlock::testing {
namespace {

using Clock = std::chrono::steady_clock;

void RunShell(const EnvdClient& agent, const std::string& script, const std::string& user = "user") {
  ExecRequest r;
  r.cmd = "/bin/bash";
  r.args = {"-c", script};
  r.user = user;
  std::string err;
  ExecCallbacks cb;
  cb.on_stderr = [&](std::string_view b) { err.append(b); };
  auto res = agent.Exec(r, cb);
  ASSERT_TRUE(res.ok()) << script << ": " << res.status().ToString();
  EXPECT_EQ(res->exit_code, 0) << script << "\n" << err;
}

TEST(FilesWatchTest, SymlinksMetadataAndPolledWatcher) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenManager();
  ASSERT_TRUE(m);
  auto sb = m->Create({});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const EnvdClient& agent = (*sb)->agent();

  // Item 5: the resolved absolute target; a dangling link gives its own path.
  RunShell(agent, "mkdir -p ~/l/real && : > ~/l/real/f && ln -s real/f ~/l/rel && ln -s gone ~/l/dangling");
  auto rel = agent.Stat("/home/user/l/rel");
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  EXPECT_EQ(rel->type, envd::FileType::kFile);  // envd follows the link
  EXPECT_EQ(rel->symlink_target, "/home/user/l/real/f");
  EXPECT_EQ(agent.Stat("/home/user/l/dangling")->symlink_target, "/home/user/l/dangling");

  // Item 9: xattrs set in the guest (python3; the base image has no attr).
  RunShell(agent, "echo x > ~/m.txt && python3 -c \"import os; os.setxattr('/home/user/m.txt', 'user.e2b.owner', b'bob')\"");
  auto st = agent.Stat("/home/user/m.txt");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->metadata, (std::map<std::string, std::string>{{"owner", "bob"}}));
  RunShell(agent, "mkdir -p ~/md && mv ~/m.txt ~/md/n.txt");
  auto list = agent.ListDir("/home/user/md", 1);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].metadata.at("owner"), "bob");

  // Item 8: the polled watcher, recursive, as the default user.
  RunShell(agent, "mkdir ~/pw");
  auto created = agent.Call("filesystem.Filesystem/CreateWatcher", {{"path", "pw"}, {"recursive", true}});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::string id = (*created)["watcherId"];
  auto poll_until = [&](size_t n) {
    std::vector<std::string> got;
    auto end = Clock::now() + std::chrono::seconds(60);
    while (got.size() < n && Clock::now() < end) {
      auto r = agent.Call("filesystem.Filesystem/GetWatcherEvents", {{"watcherId", id}});
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok()) break;
      for (auto& e : (*r)["events"]) got.push_back(e["type"].get<std::string>() + " " + e["name"].get<std::string>());
      if (got.size() < n) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return got;
  };
  RunShell(agent, "mkdir ~/pw/later");
  EXPECT_EQ(poll_until(1), (std::vector<std::string>{"EVENT_TYPE_CREATE later"}));
  RunShell(agent, "echo hi > ~/pw/later/f && mv ~/pw/later/f ~/pw/g && rm ~/pw/g");
  EXPECT_EQ(poll_until(5), (std::vector<std::string>{"EVENT_TYPE_CREATE later/f", "EVENT_TYPE_WRITE later/f",
                                                      "EVENT_TYPE_RENAME later/f", "EVENT_TYPE_CREATE g",
                                                      "EVENT_TYPE_REMOVE g"}));
  EXPECT_TRUE(agent.Call("filesystem.Filesystem/RemoveWatcher", {{"watcherId", id}}).ok());
  auto gone = agent.Call("filesystem.Filesystem/GetWatcherEvents", {{"watcherId", id}});
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status().ToString();
  auto missing = agent.Call("filesystem.Filesystem/CreateWatcher", {{"path", "/no/such/dir"}});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  // The requesting user's rights: /root is not readable by `user`.
  auto denied = agent.Call("filesystem.Filesystem/CreateWatcher", {{"path", "/root"}});
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied) << denied.status().ToString();
  EXPECT_TRUE(agent.Call("filesystem.Filesystem/CreateWatcher", {{"path", "/root"}}, "root").ok());

  EXPECT_TRUE(m->Destroy((*sb)->id()).ok());
}

}  // namespace
}  // namespace airlock::testing
