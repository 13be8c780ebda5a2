// artefacts.h: digests and their sidecars, the artefact server over plain
// HTTP on loopback, and FetchArtefact against it: byte-exact and still
// sparse copies, corrupt copies refused on either side, resumed parts, cut
// connections, a holder that ignores Range, refused grants, the disk budget,
// unknown digests and the Range forms. Files of a few MiB, mostly holes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "cluster/artefacts.h"
#include "common/fd.h"
#include "http/client.h"
#include "http/listener.h"
#include "image/hash.h"
#include "tests/unit/scoped_dir.h"

namespace airlock::cluster {
namespace {

constexpr int64_t kMiB = 1 << 20;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

int64_t Allocated(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<int64_t>(st.st_blocks) * 512;
}

// A sparse file of `size` bytes: three runs of random bytes, holes between;
// returns its content.
std::string MakeSparse(const std::string& path, int64_t size, unsigned seed) {
  std::string content(static_cast<size_t>(size), '\0');
  std::mt19937 rng(seed);
  auto fill = [&](int64_t from, int64_t len) {
    for (int64_t i = from; i < from + len; ++i) content[static_cast<size_t>(i)] = static_cast<char>(1 + rng() % 255);
  };
  fill(0, 100000);
  fill(kMiB + 12345, 300000);
  fill(size - 5000, 5000);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  EXPECT_TRUE(fd.valid());
  for (auto [from, len] : {std::pair<int64_t, int64_t>{0, 100000}, {kMiB + 12345, 300000}, {size - 5000, 5000}}) {
    EXPECT_EQ(::pwrite(fd.get(), content.data() + from, static_cast<size_t>(len), from), len);
  }
  EXPECT_EQ(::ftruncate(fd.get(), size), 0);
  return content;
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Forwards loopback connections to `to` one at a time; the first `cuts` are
// cut after `limit` bytes from the server.
class CuttingProxy {
 public:
  CuttingProxy(uint16_t to, int cuts, int64_t limit) : to_(to), cuts_(cuts), limit_(limit) {
    listen_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listen_.get(), 8), 0);
    socklen_t len = sizeof a;
    ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~CuttingProxy() {
    stop_ = true;
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void Run() {
    while (!stop_) {
      pollfd p{listen_.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      UniqueFd client(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!client) continue;
      UniqueFd server(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(to_);
      if (::connect(server.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) continue;
      const bool cut = connections_++ < cuts_;
      Pump(client.get(), server.get(), cut ? limit_ : INT64_MAX);
    }
  }
  void Pump(int client, int server, int64_t limit) {
    int64_t down = 0;
    char buf[64 * 1024];
    while (!stop_) {
      pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      if (p[0].revents) {
        ssize_t n = ::read(client, buf, sizeof buf);
        if (n <= 0 || ::write(server, buf, static_cast<size_t>(n)) != n) return;
      }
      if (p[1].revents) {
        ssize_t n = ::read(server, buf, static_cast<size_t>(std::min<int64_t>(sizeof buf, limit - down)));
        if (n <= 0) return;
        size_t done = 0;
        while (done < static_cast<size_t>(n)) {
          ssize_t w = ::write(client, buf + done, static_cast<size_t>(n) - done);
          if (w <= 0) return;
          done += static_cast<size_t>(w);
        }
        down += n;
        if (down >= limit) return;  // the cut
      }
    }
  }
  uint16_t to_;
  int cuts_;
  int64_t limit_;
  UniqueFd listen_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

class ArtefactsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.path = test_util::MakeTempDir("airlock-artefacts");
    ASSERT_FALSE(root_.path.empty());
    ASSERT_TRUE(std::filesystem::create_directories(root_.path + "/a"));
    ASSERT_TRUE(std::filesystem::create_directories(root_.path + "/b/tmp"));
    src_ = root_.path + "/a/rootfs.ext4";
    content_ = MakeSparse(src_, 4 * kMiB, 1);
    ::chmod(src_.c_str(), 0444);
    digest_ = image::Sha256Hex(content_);
    Serve(digest_, src_);
    auto path_of = [this](const std::string& d) -> StatusOr<std::string> {
      std::lock_guard<std::mutex> l(mu_);
      auto it = files_.find(d);
      if (it == files_.end()) return NotFound("no artefact " + d + " here");
      return it->second;
    };
    auto check_grant = [](const std::string& token, const std::string& d) -> Status {
      if (token == "grant-for-" + d.substr(0, 8)) return OkStatus();
      return PermissionDenied("grant " + token + " is not for artefact " + d);
    };
    server_ = std::make_unique<ArtefactServer>(io_, path_of, check_grant);
    ASSERT_TRUE(server_->Start("127.0.0.1:0").ok());
    io_thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    work_.reset();
    io_.stop();
    if (io_thread_.joinable()) io_thread_.join();
    server_.reset();
  }

  void Serve(const std::string& digest, const std::string& path) {
    std::lock_guard<std::mutex> l(mu_);
    files_[digest] = path;
  }

  FetchRequest Request(const std::string& digest, int64_t size) const {
    FetchRequest r;
    r.host = "127.0.0.1";
    r.port = server_->port();
    r.holder_node = "n1";
    r.digest = digest;
    r.size = size;
    r.allocated = Allocated(src_);
    r.grant = "grant-for-" + digest.substr(0, 8);
    r.dest = root_.path + "/b/rootfs.ext4";
    r.tmp_dir = root_.path + "/b/tmp";
    r.idle_timeout = std::chrono::seconds(5);
    return r;
  }
  FetchRequest Request() const { return Request(digest_, static_cast<int64_t>(content_.size())); }
  std::string Part(const FetchRequest& r) const { return r.tmp_dir + "/fetch-" + r.digest + ".part"; }

  http::HttpReply Get(const std::string& target, std::vector<std::pair<std::string, std::string>> headers) {
    http::HttpCall c;
    c.host = "127.0.0.1";
    c.port = server_->port();
    c.target = target;
    c.headers = std::move(headers);
    auto r = http::HttpDo(c);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : http::HttpReply{};
  }

  test_util::ScopedDir root_;
  std::string src_, content_, digest_;
  std::mutex mu_;
  std::map<std::string, std::string> files_;
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{io_.get_executor()};
  std::unique_ptr<ArtefactServer> server_;
  std::thread io_thread_;
};

TEST_F(ArtefactsTest, DigestOfHashesHolesAsZerosAndCachesItInASidecar) {
  auto d = DigestOf(src_);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->sha256, digest_);
  EXPECT_EQ(d->size, 4 * kMiB);
  EXPECT_LT(d->allocated, 2 * kMiB);  // holes
  const std::string sidecar = ReadAll(src_ + ".sha256");
  EXPECT_EQ(sidecar.substr(0, 65), digest_ + " ") << sidecar;
  // A sidecar is trusted while the file's size, mtime and inode match...
  std::string lie(64, 'a');
  ASSERT_TRUE(WriteDigestSidecar(src_, lie).ok());
  EXPECT_EQ(DigestOf(src_)->sha256, lie);
  // ...and not once the file changed.
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, src_.c_str(), times, 0), 0);
  EXPECT_EQ(DigestOf(src_)->sha256, digest_);
  EXPECT_EQ(DigestOf(root_.path + "/missing").status().code(), StatusCode::kNotFound);
}

TEST_F(ArtefactsTest, FetchesAByteExactSparseCopy) {
  FetchRequest r = Request();
  auto got = FetchArtefact(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes_received, 4 * kMiB);
  EXPECT_FALSE(got->resumed);
  EXPECT_EQ(ReadAll(r.dest), content_);
  EXPECT_LT(Allocated(r.dest), 2 * kMiB) << "the copy is not sparse";
  struct stat st {};
  ASSERT_EQ(::stat(r.dest.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  EXPECT_FALSE(Exists(Part(r)));
  EXPECT_EQ(DigestOf(r.dest)->sha256, digest_);
  // A second fetch finds it there.
  auto again = FetchArtefact(r);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->bytes_received, 0);
}

TEST_F(ArtefactsTest, ConcurrentFetchesOfOneDigestTransferItOnce) {
  FetchRequest r = Request();
  std::vector<int64_t> bytes(3, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      auto got = FetchArtefact(r);
      if (got.ok()) bytes[i] = got->bytes_received;
    });
  }
  for (auto& t : threads) t.join();
  std::sort(bytes.begin(), bytes.end());
  EXPECT_EQ(bytes, (std::vector<int64_t>{0, 0, 4 * kMiB}));
  EXPECT_EQ(ReadAll(r.dest), content_);
}

TEST_F(ArtefactsTest, ResumesFromAPart) {
  FetchRequest r = Request();
  const int64_t prefix = 1536 * 1024 + 77;
  WriteFile(Part(r), std::string_view(content_).substr(0, prefix));
  auto got = FetchArtefact(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->resumed);
  EXPECT_EQ(got->bytes_received, 4 * kMiB - prefix);
  EXPECT_EQ(ReadAll(r.dest), content_);
}

TEST_F(ArtefactsTest, ACutConnectionIsResumedWithinTheCall) {
  CuttingProxy proxy(server_->port(), 2, 700 * 1024);
  FetchRequest r = Request();
  r.port = proxy.port();
  auto got = FetchArtefact(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes_received, 4 * kMiB);
  EXPECT_EQ(proxy.connections(), 3);
  EXPECT_EQ(ReadAll(r.dest), content_);
}

TEST_F(ArtefactsTest, TooManyCutsKeepThePartForALaterCall) {
  CuttingProxy proxy(server_->port(), 10, 600 * 1024);
  FetchRequest r = Request();
  r.port = proxy.port();
  r.retries = 1;
  auto got = FetchArtefact(r);
  ASSERT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(Part(r).c_str(), &st), 0);
  EXPECT_GT(st.st_size, 1000 * 1024);
  EXPECT_FALSE(Exists(r.dest));
  r.port = server_->port();
  auto later = FetchArtefact(r);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_TRUE(later->resumed);
  EXPECT_EQ(later->bytes_received, 4 * kMiB - st.st_size);
  EXPECT_EQ(ReadAll(r.dest), content_);
}

TEST_F(ArtefactsTest, AHolderThatIgnoresRangeMeansStartingOver) {
  boost::asio::io_context io;
  http::Listener plain(
      io, [this](std::shared_ptr<http::Conn> c) { c->Respond(200, "application/octet-stream", content_); },
      http::Limits{});
  ASSERT_TRUE(plain.Listen("127.0.0.1:0").ok());
  std::thread t([&] { io.run(); });
  FetchRequest r = Request();
  r.port = plain.port();
  WriteFile(Part(r), std::string(100000, 'x'));  // a prefix that is wrong, too
  auto got = FetchArtefact(r);
  io.stop();
  t.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->resumed);
  EXPECT_EQ(got->bytes_received, 4 * kMiB);
  EXPECT_EQ(ReadAll(r.dest), content_);
}

TEST_F(ArtefactsTest, BytesThatDoNotMatchTheDigestAreRefused) {
  // The holder's sidecar lies: it serves other bytes under this digest.
  const std::string other = root_.path + "/a/other.ext4";
  MakeSparse(other, 4 * kMiB, 2);
  const std::string claimed = image::Sha256Hex("something else");
  ASSERT_TRUE(WriteDigestSidecar(other, claimed).ok());
  Serve(claimed, other);
  FetchRequest r = Request(claimed, 4 * kMiB);
  auto got = FetchArtefact(r);
  ASSERT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status().ToString();
  EXPECT_EQ(got.status().message(), "the copy of artefact " + claimed +
                                        " from node n1 does not match its digest (got " +
                                        image::Sha256Hex(ReadAll(other)) + "): refused");
  EXPECT_FALSE(Exists(r.dest));
  EXPECT_FALSE(Exists(Part(r)));
}

TEST_F(ArtefactsTest, TheServerRefusesACopyWhoseDigestIsWrong) {
  const std::string other = root_.path + "/a/other.ext4";
  MakeSparse(other, 2 * kMiB, 3);
  const std::string claimed = image::Sha256Hex("not it");
  Serve(claimed, other);  // its sidecar (made now) says what it really is
  FetchRequest r = Request(claimed, 2 * kMiB);
  auto got = FetchArtefact(r);
  ASSERT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status().ToString();
  EXPECT_NE(got.status().message().find("artefact " + claimed + " on this node is corrupt"), std::string::npos)
      << got.status().message();
  EXPECT_FALSE(Exists(r.dest));
  EXPECT_FALSE(Exists(Part(r)));
}

TEST_F(ArtefactsTest, ARefusedGrantIsPermissionDenied) {
  FetchRequest r = Request();
  r.grant = "stolen";
  auto got = FetchArtefact(r);
  ASSERT_EQ(got.status().code(), StatusCode::kPermissionDenied) << got.status().ToString();
  EXPECT_NE(got.status().message().find("node n1 refused the grant for artefact " + digest_ +
                                        ": grant stolen is not for artefact " + digest_),
            std::string::npos)
      << got.status().message();
  EXPECT_FALSE(Exists(Part(r)));
}

TEST_F(ArtefactsTest, TheDiskBudgetIsCheckedBeforeAnyByte) {
  FetchRequest r = Request();
  r.reserve_bytes = int64_t{1} << 60;
  auto got = FetchArtefact(r);
  ASSERT_EQ(got.status().code(), StatusCode::kResourceExhausted) << got.status().ToString();
  EXPECT_NE(got.status().message().find("must keep"), std::string::npos) << got.status().message();
  EXPECT_FALSE(Exists(Part(r)));
  EXPECT_FALSE(Exists(r.dest));
}

TEST_F(ArtefactsTest, AnUnknownDigestIsNotFound) {
  FetchRequest r = Request(std::string(64, 'e'), 10);
  auto got = FetchArtefact(r);
  ASSERT_EQ(got.status().code(), StatusCode::kNotFound) << got.status().ToString();
  EXPECT_NE(got.status().message().find("node n1 does not hold artefact"), std::string::npos);
  EXPECT_EQ(FetchArtefact(Request("not-hex", 10)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ArtefactsTest, TheWire) {
  const std::string path = std::string(kArtefactPathPrefix) + digest_;
  const std::pair<std::string, std::string> grant{kArtefactGrantHeader, "grant-for-" + digest_.substr(0, 8)};
  auto whole = Get(path, {grant});
  EXPECT_EQ(whole.status, 200);
  EXPECT_EQ(whole.body, content_);
  auto tail = Get(path, {grant, {"Range", "bytes=4194000-"}});
  EXPECT_EQ(tail.status, 206);
  EXPECT_EQ(tail.Header("content-range"), "bytes 4194000-4194303/4194304");
  EXPECT_EQ(tail.body, content_.substr(4194000));
  EXPECT_EQ(Get(path, {grant, {"Range", "bytes=4194304-"}}).status, 416);
  EXPECT_EQ(Get(path, {grant, {"Range", "bytes=0-10"}}).status, 400);
  EXPECT_EQ(Get(path, {}).status, 403);
  EXPECT_EQ(Get(path, {{kArtefactGrantHeader, "nope"}}).status, 403);
  // The grant is checked first, and is for one digest.
  EXPECT_EQ(Get(std::string(kArtefactPathPrefix) + std::string(64, 'e'), {grant}).status, 403);
  EXPECT_EQ(Get(std::string(kArtefactPathPrefix) + std::string(64, 'e'), {{kArtefactGrantHeader, "grant-for-eeeeeeee"}})
                .status,
            404);
  EXPECT_EQ(Get(std::string(kArtefactPathPrefix) + "ABC", {grant}).status, 400);
  EXPECT_EQ(Get("/other", {grant}).status, 404);
}

TEST(ArtefactRangeTest, OnlyBytesFromNToTheEnd) {
  EXPECT_EQ(*ParseArtefactRange(""), std::nullopt);
  EXPECT_EQ(*ParseArtefactRange("bytes=0-"), 0);
  EXPECT_EQ(*ParseArtefactRange("bytes=123456789-"), 123456789);
  for (const char* bad : {"bytes=", "bytes=-", "bytes=-5", "bytes=1-2", "bytes=1-,5-", "bytes= 1-", "bytes=+1-",
                          "bytes=-1-", "items=1-", "bytes=1", "bytes=9999999999999999999-", "BYTES=1-"}) {
    EXPECT_EQ(ParseArtefactRange(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace airlock::cluster
