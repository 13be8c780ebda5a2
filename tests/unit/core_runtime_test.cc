// Runtimes per sandbox (core/runtime_set.h, core/template_runtime.h,
// registry v6): template names that carry a runtime, the lazily opened set
// of runtimes (a fake opener: no VMM), the API error of an operation a
// runtime cannot do, and the runtime column of a registry written before it.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/registry.h"
#include "core/runtime_set.h"
#include "core/template_runtime.h"
#include "tests/unit/scoped_dir.h"

namespace airlock {
namespace {

const std::vector<std::string> kTwo = {"qemu", "gvisor"};

TEST(TemplateRuntimeTest, BuiltInTemplateWithARuntimeSuffix) {
  TemplateRef r = ParseTemplateRuntime("base-gvisor", "qemu", kTwo);
  EXPECT_EQ(r.image_template, "base");
  EXPECT_EQ(r.runtime, "gvisor");
  EXPECT_TRUE(r.runtime_in_name);
  r = ParseTemplateRuntime("code-interpreter-gvisor", "qemu", kTwo);
  EXPECT_EQ(r.image_template, "code-interpreter");
  EXPECT_EQ(r.runtime, "gvisor");
  // An alias of a built-in is that built-in.
  r = ParseTemplateRuntime("code-interpreter-v1-gvisor", "qemu", kTwo);
  EXPECT_EQ(r.image_template, "code-interpreter");
  EXPECT_EQ(r.runtime, "gvisor");
  // The name wins over the default, whichever it is.
  r = ParseTemplateRuntime("base-gvisor", "gvisor", kTwo);
  EXPECT_EQ(r.runtime, "gvisor");
}

// Names no snapshot or custom template of a team may take (issue 32: a
// team's snapshot named "base" took over every other team's creates).
TEST(TemplateRuntimeTest, BuiltInNamesInEveryFormAreReserved) {
  for (const std::string name : {"base", "BASE", "Base", "base-gvisor", "base-qemu", "code-interpreter",
                                 "code-interpreter-v1", "code-interpreter-v1-gvisor", "base:latest", "base:v1"}) {
    EXPECT_TRUE(IsBuiltInTemplateName(name)) << name;
  }
  for (const std::string name : {"app", "my-base", "base2", "base-firecracker", "snap-0123", "based"}) {
    EXPECT_FALSE(IsBuiltInTemplateName(name)) << name;
  }
}

TEST(TemplateRuntimeTest, BaseQemuIsQemusBaseOnAGvisorDefaultDaemon) {
  TemplateRef r = ParseTemplateRuntime("base-qemu", "gvisor", kTwo);
  EXPECT_EQ(r.image_template, "base");
  EXPECT_EQ(r.runtime, "qemu");
  EXPECT_TRUE(r.runtime_in_name);
}

TEST(TemplateRuntimeTest, OtherNamesRunOnTheDefault) {
  for (const std::string name : {"base", "code-interpreter", "code-interpreter-v1", "my-app", "my-app-gvisor",
                                 "gvisor", "-gvisor", "base-gvisorx", "base-firecracker"}) {
    for (const std::string def : {"qemu", "gvisor"}) {
      TemplateRef r = ParseTemplateRuntime(name, def, kTwo);
      EXPECT_EQ(r.image_template, name) << name;
      EXPECT_EQ(r.runtime, def) << name;
      EXPECT_FALSE(r.runtime_in_name) << name;
    }
  }
  // Only registered runtimes count: with qemu alone, "base-gvisor" is just a name.
  TemplateRef r = ParseTemplateRuntime("base-gvisor", "qemu", {"qemu"});
  EXPECT_EQ(r.image_template, "base-gvisor");
  EXPECT_EQ(r.runtime, "qemu");
}

TEST(TemplateRuntimeTest, ShownNameIsTheInverse) {
  EXPECT_EQ(TemplateNameOn("base", "gvisor"), "base-gvisor");
  EXPECT_EQ(TemplateNameOn("code-interpreter", "gvisor"), "code-interpreter-gvisor");
  EXPECT_EQ(TemplateNameOn("base", "qemu"), "base");
  EXPECT_EQ(TemplateNameOn("base", ""), "base");
  // A daemon whose default is gvisor shows base as base, and base-qemu for qemu's.
  EXPECT_EQ(TemplateNameOn("base", "gvisor", "gvisor"), "base");
  EXPECT_EQ(TemplateNameOn("base", "qemu", "gvisor"), "base-qemu");
  EXPECT_EQ(TemplateNameOn("my-app", "gvisor"), "my-app");  // custom: never renamed
  for (const std::string name : {"base", "code-interpreter"}) {
    TemplateRef r = ParseTemplateRuntime(TemplateNameOn(name, "gvisor"), "qemu", kTwo);
    EXPECT_EQ(r.image_template, name);
    EXPECT_EQ(r.runtime, "gvisor");
  }
}

// A runtime that starts nothing; its name is what it was opened as.
class FakeRuntime final : public Runtime {
 public:
  explicit FakeRuntime(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  std::string accelerator() const override { return "none"; }
  StatusOr<std::unique_ptr<VmInstance>> Start(const VmStartRequest&) override { return Unimplemented("fake"); }

 private:
  std::string name_;
};

struct FakeOpener {
  std::atomic<int> opens{0};
  bool gvisor_works = false;
  RuntimeSet::Opener Get() {
    return [this](std::string_view name, const RuntimeOptions&) -> StatusOr<std::unique_ptr<Runtime>> {
      ++opens;
      if (name != "qemu" && name != "gvisor") return InvalidArgument("unknown runtime '" + std::string(name) + "'");
      if (name == "gvisor" && !gvisor_works) return FailedPrecondition("runsc not found (install gVisor's runsc)");
      return std::unique_ptr<Runtime>(new FakeRuntime(std::string(name)));
    };
  }
};

TEST(RuntimeSetTest, DefaultOpenedAtOnceOthersOnFirstUseAndKept) {
  FakeOpener f;
  auto set = RuntimeSet::Open("qemu", {}, f.Get());
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(f.opens, 1);
  EXPECT_EQ((*set)->default_name(), "qemu");
  EXPECT_EQ((*set)->default_runtime().name(), "qemu");
  auto q = (*set)->Named("");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, &(*set)->default_runtime());
  EXPECT_EQ(f.opens, 1);

  // A runtime that cannot run here: its error, naming it and the fix; tried again next time.
  auto g = (*set)->Named("gvisor");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(g.status().message(), "runtime gvisor: runsc not found (install gVisor's runsc)");
  f.gvisor_works = true;
  g = (*set)->Named("gvisor");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->name(), "gvisor");
  const int opens = f.opens;
  EXPECT_EQ(*(*set)->Named("gvisor"), *g);  // cached
  EXPECT_EQ(f.opens, opens);

  // An unknown name: the registry's own message, untouched.
  auto u = (*set)->Named("vmware");
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(u.status().message(), "unknown runtime 'vmware'");
}

TEST(RuntimeSetTest, ADefaultThatCannotOpenFailsTheStart) {
  FakeOpener f;
  auto set = RuntimeSet::Open("gvisor", {}, f.Get());
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("runtime gvisor: runsc not found"), std::string::npos);
}

TEST(RuntimeSetTest, ConcurrentFirstUsesOpenOnce) {
  FakeOpener f;
  f.gvisor_works = true;
  auto set = RuntimeSet::Open("qemu", {}, f.Get());
  ASSERT_TRUE(set.ok());
  std::vector<std::thread> threads;
  std::vector<Runtime*> got(8, nullptr);
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      auto r = (*set)->Named("gvisor");
      if (r.ok()) got[i] = *r;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(f.opens, 2);  // qemu at Open, gvisor once
  for (Runtime* r : got) EXPECT_EQ(r, got[0]);
  EXPECT_NE(got[0], nullptr);
}

TEST(RuntimeSetTest, ASnapshotNotYetWrittenIsTheSavingSandboxsRuntimes) {
  FakeOpener f;
  f.gvisor_works = true;
  auto set = RuntimeSet::Open("qemu", {}, f.Get());
  ASSERT_TRUE(set.ok());
  auto r = (*set)->ForSnapshot("/nonexistent/airlock-snapshot", "gvisor");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->name(), "gvisor");
  r = (*set)->ForSnapshot("/nonexistent/airlock-snapshot");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->name(), "qemu");
}

TEST(RuntimeOpStatusTest, WhatARuntimeCannotDoNamesIt) {
  Status st =
      RuntimeOpStatus(Unimplemented("this VM cannot be snapshotted"), "gvisor", "pause without memory", "pause abc");
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(st.message(), "pause without memory is not supported by the gvisor runtime: this VM cannot be snapshotted");
  st = RuntimeOpStatus(ResourceExhausted("disk full"), "qemu", "pause", "pause abc");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(st.message(), "pause abc: disk full");
  EXPECT_EQ(RuntimeOpStatus(Internal("x"), "qemu", "fork").message(), "x");
  EXPECT_TRUE(RuntimeOpStatus(OkStatus(), "qemu", "fork").ok());
}

// A store that can drop memory: DropMemory of a directory without a snapshot
// is Read's NotFound.
class DroppingStore final : public SnapshotStore {
 public:
  StatusOr<SnapshotShape> Read(const std::string& dir) const override { return NotFound("no snapshot in " + dir); }
  Status Delete(const std::string&) const override { return OkStatus(); }
  Status DropMemory(const std::string& dir) const override { return Read(dir).status(); }
  StatusOr<std::string> ImageStamp(const std::string&) const override { return std::string("stamp"); }
};

class DroppingRuntime final : public Runtime {
 public:
  std::string_view name() const override { return "dropping"; }
  std::string accelerator() const override { return "none"; }
  StatusOr<std::unique_ptr<VmInstance>> Start(const VmStartRequest&) override { return Unimplemented("fake"); }
  const SnapshotStore& snapshots() const override { return store_; }

 private:
  DroppingStore store_;
};

TEST(RuntimeOpStatusTest, WhetherAStoreCanDropMemoryIsAskedBeforeASave) {
  FakeRuntime none("nosnap");  // NoSnapshotStore: every operation Unimplemented
  Status st = CheckDropsMemory(none, "/nonexistent/airlock-pause.tmp");
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(RuntimeOpStatus(st, "nosnap", "pause without memory").message(),
            "pause without memory is not supported by the nosnap runtime: this runtime has no snapshots");
  DroppingRuntime dropping;
  EXPECT_TRUE(CheckDropsMemory(dropping, "/nonexistent/airlock-pause.tmp").ok());
}

// A database of a daemon from before registry v2 (the first schema), with
// one sandbox: the migrations add every later column, and the sandbox reads
// as running on qemu.
TEST(RegistryMigrationTest, AnOldDatabaseSandboxRunsOnQemu) {
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-reg-v1")};
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/airlock.db";
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v1 =
        "CREATE TABLE sandboxes ("
        " id TEXT PRIMARY KEY, template TEXT NOT NULL, state TEXT NOT NULL,"
        " created_at INTEGER NOT NULL, ends_at INTEGER NOT NULL, metadata TEXT NOT NULL,"
        " env_vars TEXT NOT NULL, token TEXT NOT NULL, vcpus INTEGER NOT NULL, memory_mib INTEGER NOT NULL,"
        " netns_ip TEXT NOT NULL, vmm_pid INTEGER NOT NULL, run_dir TEXT NOT NULL);"
        "CREATE TABLE api_keys ("
        " id TEXT PRIMARY KEY, name TEXT NOT NULL, prefix TEXT NOT NULL, hash TEXT NOT NULL UNIQUE,"
        " created_at INTEGER NOT NULL);"
        "INSERT INTO sandboxes VALUES ('old1', 'base', 'running', 5, 6, '{}', '{}', 'tok', 1, 512,"
        " '198.18.0.2', 77, '/x/run/old1');";
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
  {
    auto reg = Registry::Open(path);
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    auto list = (*reg)->ListSandboxes();
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ((*list)[0].id, "old1");
    EXPECT_EQ((*list)[0].runtime, "qemu");
    EXPECT_EQ((*list)[0].vmm_pid, 77);
    // A new row keeps its runtime.
    SandboxRecord r = (*list)[0];
    r.id = "new1";
    r.runtime = "gvisor";
    ASSERT_TRUE((*reg)->PutSandbox(r).ok());
  }
  // Reopened (the migration runs once; a second open changes nothing).
  auto reg = Registry::Open(path);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  auto list = (*reg)->ListSandboxes();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  for (const auto& r : *list) EXPECT_EQ(r.runtime, r.id == "new1" ? "gvisor" : "qemu") << r.id;
}

// Idempotency keys (registry v8, server/idempotency.h): per team; the first
// claim holds the key, a later one sees the holder (fingerprint, answer);
// an answer outlives the connection (a restarted daemon replays it); keys
// older than the window go, and so does an unanswered one past `stale`;
// a starting daemon frees the unanswered ones.
TEST(RegistryIdempotencyTest, ClaimAnswerReplayAcrossReopenWindowAndRelease) {
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-reg-idem")};
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/airlock.db";
  const int64_t window = 1000, stale = 100;
  {
    auto reg = Registry::Open(path);
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    auto first = (*reg)->ClaimIdempotencyKey("acme", "k1", "fp-a", 10, window, stale);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_FALSE(first->has_value()) << "a free key is held by its first call";
    auto again = (*reg)->ClaimIdempotencyKey("acme", "k1", "fp-a", 20, window, stale);
    ASSERT_TRUE(again.ok() && again->has_value());
    EXPECT_FALSE((*again)->answered) << "still running";
    EXPECT_FALSE((*(*reg)->ClaimIdempotencyKey("beta", "k1", "fp-a", 20, window, stale)).has_value())
        << "another team's key of the same name is another key";
    ASSERT_TRUE((*reg)->AnswerIdempotencyKey("acme", "k1", 201, "application/json", R"({"sandboxID":"x"})").ok());
  }
  auto reg = Registry::Open(path);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  ASSERT_TRUE((*reg)->ReleaseUnansweredIdempotencyKeys().ok());
  auto held = (*reg)->ClaimIdempotencyKey("acme", "k1", "fp-b", 30, window, stale);
  ASSERT_TRUE(held.ok() && held->has_value());
  EXPECT_EQ((*held)->fingerprint, "fp-a");
  EXPECT_TRUE((*held)->answered);
  EXPECT_EQ((*held)->status, 201);
  EXPECT_EQ((*held)->content_type, "application/json");
  EXPECT_EQ((*held)->body, R"({"sandboxID":"x"})");
  EXPECT_FALSE((*(*reg)->ClaimIdempotencyKey("beta", "k1", "fp-a", 30, window, stale)).has_value())
      << "beta's unanswered call was freed at the reopen";
  EXPECT_TRUE((*(*reg)->ClaimIdempotencyKey("beta", "k1", "fp-a", 30 + stale - 1, window, stale)).has_value());
  EXPECT_FALSE((*(*reg)->ClaimIdempotencyKey("beta", "k1", "fp-a", 30 + stale + 1, window, stale)).has_value())
      << "an unanswered call past stale is taken for lost";
  EXPECT_TRUE((*(*reg)->ClaimIdempotencyKey("acme", "k1", "fp-a", 10 + window - 1, window, stale)).has_value());
  EXPECT_FALSE((*(*reg)->ClaimIdempotencyKey("acme", "k1", "fp-a", 10 + window + 1, window, stale)).has_value())
      << "past the window the key is free again";
  ASSERT_TRUE((*reg)->ReleaseIdempotencyKey("acme", "k1").ok());
  EXPECT_FALSE((*(*reg)->ClaimIdempotencyKey("acme", "k1", "fp-c", 2000, window, stale)).has_value());
}

// The rollback journal (registry v7, core/checkpoints.cc): an intent outlives
// the connection that wrote it (a daemon killed mid-rollback), is replaced
// phase by phase, cleared, and goes with its sandbox's row.
TEST(RegistryRollbackIntentTest, KeptAcrossReopenReplacedClearedAndDeletedWithItsSandbox) {
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-reg-rollback")};
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/airlock.db";
  {
    auto reg = Registry::Open(path);
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    SandboxRecord r;
    r.id = "sb1";
    ASSERT_TRUE((*reg)->PutSandbox(r).ok());
    ASSERT_TRUE((*reg)->PutRollbackIntent({"sb1", "ckpt-00000000000000aa", kRollbackStopping, 41, 5}).ok());
  }
  auto reg = Registry::Open(path);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  auto list = (*reg)->ListRollbackIntents();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].sandbox_id, "sb1");
  EXPECT_EQ((*list)[0].checkpoint_id, "ckpt-00000000000000aa");
  EXPECT_EQ((*list)[0].phase, kRollbackStopping);
  EXPECT_EQ((*list)[0].vmm_pid, 41);
  ASSERT_TRUE((*reg)->PutRollbackIntent({"sb1", "ckpt-00000000000000aa", kRollbackRestored, 42, 6}).ok());
  list = (*reg)->ListRollbackIntents();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u) << "one intent per sandbox";
  EXPECT_EQ((*list)[0].phase, kRollbackRestored);
  EXPECT_EQ((*list)[0].vmm_pid, 42);
  ASSERT_TRUE((*reg)->ClearRollbackIntent("sb1").ok());
  ASSERT_TRUE((*reg)->ClearRollbackIntent("sb1").ok()) << "clearing none is fine";
  EXPECT_TRUE((*reg)->ListRollbackIntents()->empty());
  ASSERT_TRUE((*reg)->PutRollbackIntent({"sb1", "ckpt-00000000000000bb", kRollbackStopping, 43, 7}).ok());
  ASSERT_TRUE((*reg)->DeleteSandbox("sb1").ok());
  EXPECT_TRUE((*reg)->ListRollbackIntents()->empty()) << "a killed sandbox has no rollback to complete";
}

}  // namespace
}  // namespace airlock
