// DirWatcher on the real kernel inotify (a temp dir, the test's own
// credentials), the pure event mapping, and the metadata header rules.
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "agent/dir_watcher.h"
#include "agent/file_metadata.h"
#include "agent/fs_util.h"

namespace airlock::agent {
namespace {

using envd::EventType;
using Ev = std::pair<std::string, EventType>;

TEST(WatchEvents, MaskMapsToEnvdTypesInEnvdOrder) {
  using V = std::vector<EventType>;
  EXPECT_EQ(EventTypesForMask(IN_CREATE), V{EventType::kCreate});
  EXPECT_EQ(EventTypesForMask(IN_CREATE | IN_ISDIR), V{EventType::kCreate});
  EXPECT_EQ(EventTypesForMask(IN_MOVED_TO), V{EventType::kCreate});
  EXPECT_EQ(EventTypesForMask(IN_MOVED_FROM), V{EventType::kRename});
  EXPECT_EQ(EventTypesForMask(IN_MOVE_SELF), V{EventType::kRename});
  EXPECT_EQ(EventTypesForMask(IN_ATTRIB), V{EventType::kChmod});
  EXPECT_EQ(EventTypesForMask(IN_MODIFY), V{EventType::kWrite});
  EXPECT_EQ(EventTypesForMask(IN_DELETE), V{EventType::kRemove});
  EXPECT_EQ(EventTypesForMask(IN_DELETE_SELF), V{EventType::kRemove});
  EXPECT_EQ(EventTypesForMask(IN_DELETE | IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM),
            (V{EventType::kCreate, EventType::kRename, EventType::kChmod, EventType::kWrite, EventType::kRemove}));
  EXPECT_TRUE(EventTypesForMask(IN_ACCESS | IN_OPEN | IN_CLOSE_WRITE | IN_IGNORED).empty());
}

TEST(WatchEvents, RelativeNamesAndUploadTempNames) {
  EXPECT_EQ(JoinRelative(".", "a"), "a");
  EXPECT_EQ(JoinRelative("sub", "a"), "sub/a");
  EXPECT_EQ(JoinRelative("sub/x", ""), "sub/x");
  EXPECT_EQ(UploadTempTarget(".a.txt.airlock-upload-0123456789abcdef"), "a.txt");
  EXPECT_EQ(UploadTempTarget("..hidden.airlock-upload-0123456789abcdef"), ".hidden");
  EXPECT_FALSE(UploadTempTarget("a.txt.airlock-upload-0123456789abcdef"));   // no leading dot
  EXPECT_FALSE(UploadTempTarget(".a.airlock-upload-0123456789ABCDEF"));      // upper-case hex
  EXPECT_FALSE(UploadTempTarget(".a.airlock-upload-0123456789abcde"));       // 15 digits
  EXPECT_FALSE(UploadTempTarget("..airlock-upload-0123456789abcdef"));       // empty name
  EXPECT_FALSE(UploadTempTarget("plain.txt"));
}

TEST(FileMetadata, HeadersToKeys) {
  auto m = MetadataFromHeaders({{"Content-Type", "x"}, {"X-Metadata-Owner", "Alice B"}, {"x-metadata-TAG", ""}});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, (Metadata{{"owner", "Alice B"}, {"tag", ""}}));
  EXPECT_TRUE(MetadataFromHeaders({})->empty());
}

TEST(FileMetadata, RejectsBadInput) {
  auto bad = [](std::vector<std::pair<std::string, std::string>> h) {
    auto m = MetadataFromHeaders(h);
    EXPECT_FALSE(m.ok());
    return m.ok() ? std::string() : m.status().message();
  };
  EXPECT_NE(bad({{"X-Metadata-", "v"}}).find("no key"), std::string::npos);
  EXPECT_NE(bad({{"X-Metadata-A", "1"}, {"x-metadata-a", "2"}}).find("more than once"), std::string::npos);
  EXPECT_NE(bad({{"X-Metadata-A", "caf\xc3\xa9"}}).find("not printable"), std::string::npos);
  EXPECT_NE(bad({{"X-Metadata-A", "tab\there"}}).find("not printable"), std::string::npos);
  EXPECT_NE(bad({{"X-Metadata-" + std::string(kMaxMetadataKeyBytes + 1, 'k'), "v"}}).find("key of"),
            std::string::npos);
  EXPECT_NE(bad({{"X-Metadata-big", std::string(kMaxMetadataTotalBytes, 'v')}}).find("in all"), std::string::npos);
  std::vector<std::pair<std::string, std::string>> many;
  for (size_t i = 0; i <= kMaxMetadataEntries; ++i) many.push_back({"X-Metadata-k" + std::to_string(i), "v"});
  EXPECT_NE(bad(many).find("keys"), std::string::npos);
  // The longest key and the biggest total still pass.
  EXPECT_TRUE(MetadataFromHeaders({{"X-Metadata-" + std::string(kMaxMetadataKeyBytes, 'k'), "v"}}).ok());
}

class DirWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/airlock-watch-test-XXXXXX";  // not tmpfs: xattrs work
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    watcher_.reset();
    (void)!system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::shared_ptr<DirWatcher> Open(bool recursive, size_t max_queued = 4096) {
    DirWatcher::Options o;
    o.root = dir_;
    o.recursive = recursive;
    o.max_queued = max_queued;
    auto w = DirWatcher::Create(io_, o, &budget_, UserDb{}, [](const std::function<Status()>& fn) { return fn(); });
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok()) return nullptr;
    (*w)->Resume();
    return *w;
  }
  // Runs the loop until `n` events arrived (or 5 s passed); returns all taken.
  std::vector<Ev> WaitFor(DirWatcher& w, size_t n) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (got_.size() < n && std::chrono::steady_clock::now() < end && w.error().ok()) {
      io_.run_for(std::chrono::milliseconds(20));
      io_.restart();
      for (auto& e : w.Take()) got_.emplace_back(e.name, e.type);
    }
    return got_;
  }
  void Sh(const std::string& script) { ASSERT_EQ(system(("cd '" + dir_ + "' && " + script).c_str()), 0) << script; }

  std::string dir_;
  boost::asio::io_context io_;
  WatchBudget budget_;
  std::shared_ptr<DirWatcher> watcher_;
  std::vector<Ev> got_;
};

TEST_F(DirWatcherTest, NonRecursiveSeesOnlyTheTopLevel) {
  Sh("mkdir sub");
  auto w = Open(false);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->watch_count(), 1u);
  Sh("touch sub/inner && printf x > a.txt && mv a.txt b.txt && chmod 600 b.txt && rm b.txt");
  auto ev = WaitFor(*w, 6);
  EXPECT_EQ(ev, (std::vector<Ev>{{"a.txt", EventType::kCreate},
                                 {"a.txt", EventType::kWrite},
                                 {"a.txt", EventType::kRename},
                                 {"b.txt", EventType::kCreate},
                                 {"b.txt", EventType::kChmod},
                                 {"b.txt", EventType::kRemove}}));
}

TEST_F(DirWatcherTest, RecursiveFollowsNewDirectoriesAndRenames) {
  Sh("mkdir -p old/deep");
  auto w = Open(true);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->watch_count(), 3u);
  // mkdir -p and a file inside before the agent can add the watches: the
  // scan reports them, each once.
  Sh("mkdir -p n1/n2/n3 && : > n1/n2/n3/f");
  auto ev = WaitFor(*w, 4);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev, (std::vector<Ev>{{"n1", EventType::kCreate},
                                 {"n1/n2", EventType::kCreate},
                                 {"n1/n2/n3", EventType::kCreate},
                                 {"n1/n2/n3/f", EventType::kCreate}}));
  // Give the kernel time to deliver any duplicate before the next step.
  got_.clear();
  Sh("printf y >> n1/n2/n3/f");
  EXPECT_EQ(WaitFor(*w, 1), (std::vector<Ev>{{"n1/n2/n3/f", EventType::kWrite}}));
  got_.clear();
  // A directory renamed inside the tree keeps its watches under the new name.
  Sh("mv old renamed && : > renamed/deep/x && rm -r renamed");
  ev = WaitFor(*w, 6);
  EXPECT_EQ(ev, (std::vector<Ev>{{"old", EventType::kRename},
                                 {"renamed", EventType::kCreate},
                                 {"renamed/deep/x", EventType::kCreate},
                                 {"renamed/deep/x", EventType::kRemove},
                                 {"renamed/deep", EventType::kRemove},
                                 {"renamed", EventType::kRemove}}));
  // Deleted directories gave their watches back.
  for (int i = 0; i < 20 && w->watch_count() != 4u; ++i) WaitFor(*w, 100), got_.clear();
  EXPECT_EQ(w->watch_count(), 4u);  // root + n1/n2/n3
  EXPECT_EQ(budget_.used, 4u);
  // Moved out of the tree: no more events from it.
  got_.clear();
  std::string outside = dir_ + "-outside";
  Sh("mv n1 '" + outside + "' && : > '" + outside + "/n2/late' && : > marker");
  ev = WaitFor(*w, 2);
  EXPECT_EQ(ev, (std::vector<Ev>{{"n1", EventType::kRename}, {"marker", EventType::kCreate}}));
  EXPECT_EQ(w->watch_count(), 1u);
  (void)!system(("rm -rf '" + outside + "'").c_str());
  w->Close();
  EXPECT_EQ(budget_.used, 0u);
}

TEST_F(DirWatcherTest, UploadTemporaryNamesAreHidden) {
  auto w = Open(false);
  ASSERT_TRUE(w);
  Sh("printf data > .up.txt.airlock-upload-00112233aabbccdd && mv .up.txt.airlock-upload-00112233aabbccdd up.txt");
  // As envd's upload (create, chown, write); an empty upload writes nothing.
  EXPECT_EQ(WaitFor(*w, 3), (std::vector<Ev>{{"up.txt", EventType::kCreate},
                                             {"up.txt", EventType::kChmod},
                                             {"up.txt", EventType::kWrite}}));
  got_.clear();
  Sh(": > .e.txt.airlock-upload-00112233aabbccdd && mv .e.txt.airlock-upload-00112233aabbccdd e.txt && : > marker");
  EXPECT_EQ(WaitFor(*w, 3), (std::vector<Ev>{{"e.txt", EventType::kCreate},
                                             {"e.txt", EventType::kChmod},
                                             {"marker", EventType::kCreate}}));
}

TEST_F(DirWatcherTest, RemovingTheWatchedDirectoryReportsDot) {
  auto w = Open(true);
  ASSERT_TRUE(w);
  ASSERT_EQ(rmdir(dir_.c_str()), 0);
  EXPECT_EQ(WaitFor(*w, 1), (std::vector<Ev>{{".", EventType::kRemove}}));
  mkdir(dir_.c_str(), 0700);  // for TearDown
}

TEST_F(DirWatcherTest, ErrorsAndTheWatchBudget) {
  DirWatcher::Options o;
  auto direct = [](const std::function<Status()>& fn) { return fn(); };
  o.root = dir_ + "/missing";
  auto missing = DirWatcher::Create(io_, o, &budget_, UserDb{}, direct);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  Sh(": > file");
  o.root = dir_ + "/file";
  EXPECT_EQ(DirWatcher::Create(io_, o, &budget_, UserDb{}, direct).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(budget_.used, 0u);
  Sh("mkdir -p t/a t/b t/c");
  o.root = dir_ + "/t";
  o.recursive = true;
  budget_.max = 3;
  auto over = DirWatcher::Create(io_, o, &budget_, UserDb{}, direct);
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("at most 3"), std::string::npos) << over.status().message();
  EXPECT_EQ(budget_.used, 0u);
  budget_.max = 4;
  auto fits = DirWatcher::Create(io_, o, &budget_, UserDb{}, direct);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(budget_.used, 4u);
  // A new directory past the budget ends the running watch.
  (*fits)->Resume();
  Sh("mkdir t/d");
  WaitFor(**fits, 100);
  EXPECT_EQ((*fits)->error().code(), StatusCode::kResourceExhausted);
  (*fits)->Close();
  EXPECT_EQ(budget_.used, 0u);
}

// A flood while nobody takes events: reading pauses at max_queued, the
// kernel queue overflows, the watch ends with resource_exhausted after the
// events read before; memory stays at max_queued events.
TEST_F(DirWatcherTest, FloodOverflowsCleanly) {
  auto w = Open(false, 1000);
  ASSERT_TRUE(w);
  long max_queued_events = 16384;
  std::ifstream("/proc/sys/fs/inotify/max_queued_events") >> max_queued_events;
  int n = static_cast<int>(max_queued_events) + 5000;
  for (int i = 0; i < n; ++i) {
    int fd = open((dir_ + "/f" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    close(fd);
    if (i % 1000 == 0) {
      io_.poll();
      io_.restart();
    }
  }
  io_.poll();
  io_.restart();
  EXPECT_LE(w->queued(), 1000u + 2048u);  // one read past the cap at most
  size_t taken = 0;
  for (int i = 0; i < 1000 && w->error().ok(); ++i) {
    taken += w->Take().size();
    io_.run_for(std::chrono::milliseconds(5));
    io_.restart();
  }
  taken += w->Take().size();
  EXPECT_EQ(w->error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(w->error().message().find("overflowed"), std::string::npos);
  EXPECT_GT(taken, 1000u);
  EXPECT_LT(taken, static_cast<size_t>(n));
}

TEST(FsUtil, SymlinkTargetIsResolvedAbsolute) {
  char tmpl[] = "/var/tmp/airlock-link-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string d = tmpl;
  ASSERT_EQ(mkdir((d + "/real").c_str(), 0755), 0);
  std::ofstream(d + "/real/f.txt") << "x";
  ASSERT_EQ(symlink("real", (d + "/dirlink").c_str()), 0);
  ASSERT_EQ(symlink("dirlink/f.txt", (d + "/chain").c_str()), 0);
  ASSERT_EQ(symlink("nowhere", (d + "/dangling").c_str()), 0);
  ASSERT_EQ(symlink("loop", (d + "/loop").c_str()), 0);
  UserDb users;
  ASSERT_EQ(chmod((d + "/real/f.txt").c_str(), 0640), 0);
  auto e = StatEntry(d + "/chain", users);
  ASSERT_TRUE(e.ok());
  // envd follows the link for the type and mode, and keeps the link's path.
  EXPECT_EQ(e->type, envd::FileType::kFile);
  EXPECT_EQ(e->mode, 0640u);
  EXPECT_EQ(e->path, d + "/chain");
  EXPECT_EQ(e->symlink_target, d + "/real/f.txt");
  EXPECT_EQ(StatEntry(d + "/dirlink", users)->symlink_target, d + "/real");
  EXPECT_EQ(StatEntry(d + "/dirlink", users)->type, envd::FileType::kDirectory);
  // Dangling or looping: envd falls back to the link's own path, no type, mode 0.
  EXPECT_EQ(StatEntry(d + "/dangling", users)->symlink_target, d + "/dangling");
  EXPECT_EQ(StatEntry(d + "/dangling", users)->type, envd::FileType::kUnspecified);
  EXPECT_EQ(StatEntry(d + "/dangling", users)->mode, 0u);
  EXPECT_EQ(StatEntry(d + "/loop", users)->symlink_target, d + "/loop");
  EXPECT_FALSE(StatEntry(d + "/real/f.txt", users)->symlink_target.has_value());
  (void)!system(("rm -rf '" + d + "'").c_str());
}

TEST(FsUtil, MetadataIsReadFromXattrs) {
  char tmpl[] = "/var/tmp/airlock-xattr-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string d = tmpl, f = d + "/f";
  std::ofstream(f) << "x";
  if (setxattr(f.c_str(), "user.e2b.k", "v", 1, 0) != 0) {
    (void)!system(("rm -rf '" + d + "'").c_str());
    GTEST_SKIP() << "no user xattrs on /var/tmp here";
  }
  ASSERT_EQ(setxattr(f.c_str(), "user.other", "o", 1, 0), 0);
  ASSERT_EQ(setxattr(f.c_str(), "user.e2b.bin", "\x01\xff", 2, 0), 0);  // skipped: not printable
  int fd = open(f.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_TRUE(WriteMetadata(fd, f, {{"owner", "alice"}}).ok());
  close(fd);
  EXPECT_EQ(ReadMetadata(f), (Metadata{{"k", "v"}, {"owner", "alice"}}));
  EXPECT_EQ(StatEntry(f, UserDb{})->metadata, (Metadata{{"k", "v"}, {"owner", "alice"}}));
  ASSERT_EQ(rename(f.c_str(), (d + "/g").c_str()), 0);
  EXPECT_EQ(ReadMetadata(d + "/g").at("owner"), "alice");
  // tmpfs (Linux < 6.6) has no user xattrs: a clear failed_precondition.
  std::string t = "/dev/shm/airlock-xattr-" + std::to_string(getpid());
  fd = open(t.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) {
    Status st = WriteMetadata(fd, t, {{"a", "b"}});
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(st.message().find("does not support user extended attributes"), std::string::npos);
    }
    close(fd);
    unlink(t.c_str());
  }
  (void)!system(("rm -rf '" + d + "'").c_str());
}

}  // namespace
}  // namespace airlock::agent
