// artefacts.h: digests and their sidecars, the artefact server over plain
// HTTP on loopback, and FetchArtefact against it, with extent records and
// with plain bytes: byte-exact and still sparse copies, holes and zero
// blocks kept off the wire, corrupt copies refused on either side, resumed
// parts, cut connections, a holder that ignores Range, malformed record
// streams and chunked framing from a fake holder, refused grants, the disk
// budget, unknown digests and the Range and Accept forms. Files of a few
// MiB, mostly holes.
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
#include <boost/asio/steady_timer.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "cluster/artefact_hash.h"
#include "cluster/artefacts.h"
#include "common/fd.h"
#include "http/client.h"
#include "http/listener.h"
#include "image/hash.h"
#include "tests/unit/scoped_dir.h"

namespace airlock::cluster {
namespace {

constexpr int64_t kMiB = 1 << 20;
// The data bytes of MakeSparse's file: what extent records must carry.
constexpr int64_t kSparseData = 100000 + 300000 + 5000;

using artefact_internal::AppendExtentHeader;
using artefact_internal::kExtentsType;

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

// One extent record: its header, then `data` ('D').
std::string Record(char kind, int64_t offset, int64_t length, std::string_view data = {}) {
  std::string out;
  AppendExtentHeader(out, kind, offset, length);
  out.append(data);
  return out;
}

// A body of extent records back into the logical bytes it covers from
// `from` (records checked as the fetch checks them).
StatusOr<std::string> Unrecord(std::string_view body, int64_t from, int64_t size) {
  std::string out;
  artefact_internal::ExtentReader reader(from, size);
  RETURN_IF_ERROR(reader.Feed(body, {[&](std::string_view b) {
                                       out.append(b);
                                       return OkStatus();
                                     },
                                     [&](int64_t n) {
                                       out.append(static_cast<size_t>(n), '\0');
                                       return OkStatus();
                                     }}));
  if (!reader.done()) return Unavailable("the records end at byte " + std::to_string(reader.off()));
  return out;
}

// An HTTP holder on loopback answering every request with `handler`.
class FakeHolder {
 public:
  explicit FakeHolder(http::Conn::Handler handler) : listener_(io_, std::move(handler), http::Limits{}) {
    EXPECT_TRUE(listener_.Listen("127.0.0.1:0").ok());
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeHolder() {
    io_.stop();
    thread_.join();
  }
  uint16_t port() const { return listener_.port(); }

 private:
  boost::asio::io_context io_;
  http::Listener listener_;
  std::thread thread_;
};

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

// Run with extent records (true) and with plain bytes (false).
class ArtefactsWireTest : public ArtefactsTest, public ::testing::WithParamInterface<bool> {
 protected:
  FetchRequest Request() const {
    FetchRequest r = ArtefactsTest::Request();
    r.extents = GetParam();
    return r;
  }
  // What a fetch of the logical bytes [from, size) may have received.
  void ExpectReceived(int64_t got, int64_t from) const {
    const auto size = static_cast<int64_t>(content_.size());
    if (!GetParam()) {
      EXPECT_EQ(got, size - from);
      return;
    }
    EXPECT_GT(got, 0);
    EXPECT_LT(got, (size - from) / 4) << "holes went over the wire";
  }
};

INSTANTIATE_TEST_SUITE_P(Wire, ArtefactsWireTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Extents" : "Plain"; });

TEST_P(ArtefactsWireTest, FetchesAByteExactSparseCopy) {
  FetchRequest r = Request();
  auto got = FetchArtefact(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectReceived(got->bytes_received, 0);
  if (GetParam()) {
    // The data (file-system blocks around it) and a record header each.
    EXPECT_GE(got->bytes_received, kSparseData);
    EXPECT_LT(got->bytes_received, kSparseData + 4 * 64 * 1024);
  }
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
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[1], 0);
  EXPECT_GE(bytes[2], kSparseData);
  EXPECT_LT(bytes[2], kMiB);
  EXPECT_EQ(ReadAll(r.dest), content_);
}

TEST_P(ArtefactsWireTest, ResumesFromAPart) {
  FetchRequest r = Request();
  const int64_t prefix = 1536 * 1024 + 77;
  WriteFile(Part(r), std::string_view(content_).substr(0, prefix));
  auto got = FetchArtefact(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->resumed);
  ExpectReceived(got->bytes_received, prefix);
  EXPECT_EQ(ReadAll(r.dest), content_);
}

TEST_P(ArtefactsWireTest, ACutConnectionIsResumedWithinTheCall) {
  // Odd cut points: inside records and their headers.
  CuttingProxy proxy(server_->port(), 2, GetParam() ? 150 * 1024 + 7 : 700 * 1024);
  FetchRequest r = Request();
  r.port = proxy.port();
  auto got = FetchArtefact(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectReceived(got->bytes_received, 0);
  EXPECT_EQ(proxy.connections(), 3);
  EXPECT_EQ(ReadAll(r.dest), content_);
  EXPECT_LT(Allocated(r.dest), 2 * kMiB) << "the copy is not sparse";
}

TEST_P(ArtefactsWireTest, TooManyCutsKeepThePartForALaterCall) {
  CuttingProxy proxy(server_->port(), 10, GetParam() ? 100 * 1024 + 3 : 600 * 1024);
  FetchRequest r = Request();
  r.port = proxy.port();
  r.retries = 1;
  auto got = FetchArtefact(r);
  ASSERT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(Part(r).c_str(), &st), 0);
  EXPECT_GT(st.st_size, 1000 * 1024);
  EXPECT_EQ(ReadAll(Part(r)), content_.substr(0, static_cast<size_t>(st.st_size)));
  EXPECT_FALSE(Exists(r.dest));
  r.port = server_->port();
  auto later = FetchArtefact(r);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_TRUE(later->resumed);
  ExpectReceived(later->bytes_received, st.st_size);
  EXPECT_EQ(ReadAll(r.dest), content_);
}

TEST_F(ArtefactsTest, HolesAndZeroBlocksStayOffTheWire) {
  // 8 MiB: data, a hole, 2 MiB of zeros written (allocated), data with a
  // zero block inside and zeros around it in its blocks, a hole, data at
  // the end.
  const std::string path = root_.path + "/a/zeros.ext4";
  const int64_t size = 8 * kMiB;
  std::string content(static_cast<size_t>(size), '\0');
  std::mt19937 rng(7);
  auto fill = [&](int64_t from, int64_t len) {
    for (int64_t i = from; i < from + len; ++i) content[static_cast<size_t>(i)] = static_cast<char>(1 + rng() % 255);
  };
  fill(0, 70000);
  fill(3 * kMiB + 100, 100000);
  fill(3 * kMiB + 256 * 1024, 30000);  // after two zero blocks
  fill(size - 10, 10);
  {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.valid());
    for (auto [from, len] : {std::pair<int64_t, int64_t>{0, 70000}, {kMiB, 2 * kMiB + 512 * 1024}, {size - 10, 10}}) {
      ASSERT_EQ(::pwrite(fd.get(), content.data() + from, static_cast<size_t>(len), from), len);
    }
    ASSERT_EQ(::ftruncate(fd.get(), size), 0);
  }
  ASSERT_GE(Allocated(path), 2 * kMiB + 512 * 1024) << "the zeros are not allocated";
  const std::string digest = image::Sha256Hex(content);
  Serve(digest, path);
  FetchRequest r = ArtefactsTest::Request(digest, size);
  r.allocated = Allocated(path);
  auto got = FetchArtefact(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(ReadAll(r.dest), content);
  EXPECT_EQ(DigestOf(r.dest)->sha256, digest);
  // The data's 64 KiB blocks at most, and a header per record.
  const int64_t data = 70000 + 100000 + 30000 + 10;
  EXPECT_GE(got->bytes_received, data);
  EXPECT_LT(got->bytes_received, data + 5 * 64 * 1024);
  EXPECT_LT(Allocated(r.dest), kMiB) << "zero blocks were written";
  std::cout << "wire bytes " << got->bytes_received << " for " << size << " logical (" << data << " data)\n";
}

TEST_F(ArtefactsTest, AMalformedRecordStreamIsACut) {
  const auto size = static_cast<int64_t>(content_.size());
  const std::string_view c = content_;
  const std::string d0 = Record('D', 0, 1000, c.substr(0, 1000));
  const struct {
    const char* what;
    std::string body;
    const char* error;
  } cases[] = {
      {"overlap", d0 + Record('D', 500, 10, c.substr(500, 10)), "it says byte 500 (an overlap)"},
      {"gap", d0 + Record('Z', 2000, 10), "it says byte 2000 (a gap)"},
      {"past the size", d0 + Record('Z', 1000, size), "length 4194304 with 4193304 bytes left"},
      {"unknown kind", d0 + Record('X', 1000, 10), "unknown kind 0x58"},
      {"empty record", d0 + Record('Z', 1000, 0), "length 0 with"},
      {"ends early", d0, "the answer ended at byte 1000 of 4194304"},
      {"header cut", d0 + Record('Z', 1000, 10).substr(0, 7), "the answer ended at byte 1000"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.what);
    FakeHolder holder([&](std::shared_ptr<http::Conn> conn) {
      conn->BeginResponse(200, kExtentsType, std::nullopt);
      conn->Write(k.body);
      conn->EndResponse();
    });
    FetchRequest r = Request();
    r.port = holder.port();
    r.retries = 0;
    auto got = FetchArtefact(r);
    ASSERT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
    EXPECT_NE(got.status().message().find(k.error), std::string::npos) << got.status().message();
    EXPECT_FALSE(Exists(r.dest));
    // What the part keeps is the artefact's prefix: a later call resumes.
    const std::string part = Exists(Part(r)) ? ReadAll(Part(r)) : "";
    EXPECT_EQ(part, content_.substr(0, part.size()));
    ::unlink(Part(r).c_str());
  }
}

TEST_F(ArtefactsTest, MalformedChunkedFramingIsACut) {
  const std::string head = std::string("HTTP/1.1 200 OK\r\nContent-Type: ") + kExtentsType +
                           "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  const std::string rec = Record('D', 0, 5, std::string_view(content_).substr(0, 5));
  const std::pair<std::string, const char*> cases[] = {
      {"zz\r\n" + rec + "\r\n0\r\n\r\n", "a bad chunk size"},
      {"-12\r\n" + rec + "\r\n0\r\n\r\n", "a bad chunk size"},
      {"1234567890abcdef0\r\n" + rec, "a bad chunk size"},
      {"3\r\n" + rec + "\r\n0\r\n\r\n", "a chunk longer than its size"},
      {"12\n" + rec, "a line without CRLF"},
      {std::string(2000, '1'), "a line over 1024 bytes"},
      {"12\r\n" + rec + "\r\n0\r\n\r\n", "the answer ended at byte 5"},
      {"12\r\n" + rec + "\r\n0\r\n\r\nmore", "bytes after the last chunk"},
      {"12\r\n" + rec + "\r\n0\r\nTrailer: " + std::string(17000, 't'), "a line over 16384 bytes"},
      {"12\r\n" + rec, "cut after byte 5"},
  };
  for (const auto& [raw, error] : cases) {
    SCOPED_TRACE(raw.substr(0, 20));
    FakeHolder holder([&, raw = raw](std::shared_ptr<http::Conn> conn) {
      conn->SendRaw(head + raw);
      conn->FinishRaw(false);
    });
    FetchRequest r = Request();
    r.port = holder.port();
    r.retries = 0;
    auto got = FetchArtefact(r);
    ASSERT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
    EXPECT_NE(got.status().message().find(error), std::string::npos) << got.status().message();
    EXPECT_FALSE(Exists(r.dest));
    const std::string part = Exists(Part(r)) ? ReadAll(Part(r)) : "";
    EXPECT_EQ(part, content_.substr(0, part.size()));
    ::unlink(Part(r).c_str());
  }
}

TEST_F(ArtefactsTest, BytesAfterTheLastRecordAreACutThatLosesNothing) {
  // The artefact is whole before them: the digest decides.
  const auto size = static_cast<int64_t>(content_.size());
  FakeHolder holder([&](std::shared_ptr<http::Conn> conn) {
    conn->BeginResponse(200, kExtentsType, std::nullopt);
    conn->Write(Record('D', 0, size, content_) + "x");
    conn->EndResponse();
  });
  FetchRequest r = Request();
  r.port = holder.port();
  r.retries = 0;
  auto got = FetchArtefact(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(ReadAll(r.dest), content_);
}

// A holder that sends a byte now and then (within the idle timeout) is cut
// at the whole fetch's deadline; what came is kept for a later call.
TEST_F(ArtefactsTest, AHolderThatTricklesIsCutAtTheDeadline) {
  FakeHolder holder([&](std::shared_ptr<http::Conn> conn) {
    conn->BeginResponse(200, kExtentsType, std::nullopt);
    auto timer = std::make_shared<boost::asio::steady_timer>(conn->executor());
    auto off = std::make_shared<int64_t>(0);
    auto step = std::make_shared<std::function<void()>>();
    *step = [this, conn, timer, off, step] {
      if (conn->closed()) return;
      conn->Write(Record('D', *off, 1, std::string_view(content_).substr(static_cast<size_t>(*off), 1)));
      ++*off;
      timer->expires_after(std::chrono::milliseconds(100));
      timer->async_wait([step](boost::system::error_code ec) {
        if (!ec) (*step)();
      });
    };
    (*step)();
  });
  FetchRequest r = Request();
  r.port = holder.port();
  r.deadline = std::chrono::seconds(1);
  const auto t0 = std::chrono::steady_clock::now();
  auto got = FetchArtefact(r);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status().ToString();
  EXPECT_NE(got.status().message().find("deadline"), std::string::npos) << got.status().message();
  EXPECT_LT(took, std::chrono::seconds(4));
  EXPECT_FALSE(Exists(r.dest));
  EXPECT_TRUE(Exists(Part(r))) << "the bytes that came are kept for a later call";
}

TEST_F(ArtefactsTest, WellFormedRecordsOfOtherBytesAreDataLoss) {
  const auto size = static_cast<int64_t>(content_.size());
  FakeHolder holder([&](std::shared_ptr<http::Conn> conn) {
    conn->BeginResponse(200, kExtentsType, std::nullopt);
    conn->Write(Record('D', 0, 3, "abc") + Record('Z', 3, size - 3));
    conn->EndResponse();
  });
  FetchRequest r = Request();
  r.port = holder.port();
  auto got = FetchArtefact(r);
  ASSERT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status().ToString();
  EXPECT_FALSE(Exists(r.dest));
  EXPECT_FALSE(Exists(Part(r)));
}

TEST_F(ArtefactsTest, RecordsWithAContentLengthAreReadToo) {
  // Another holder may frame the records with a Content-Length.
  std::string body;
  for (int64_t off = 0; off < static_cast<int64_t>(content_.size()); off += kMiB) {
    body += Record('D', off, kMiB, std::string_view(content_).substr(static_cast<size_t>(off), kMiB));
  }
  FakeHolder holder([&](std::shared_ptr<http::Conn> conn) { conn->Respond(200, kExtentsType, body); });
  FetchRequest r = Request();
  r.port = holder.port();
  auto got = FetchArtefact(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes_received, static_cast<int64_t>(body.size()));
  EXPECT_EQ(ReadAll(r.dest), content_);
  EXPECT_LT(Allocated(r.dest), 2 * kMiB) << "the copy is not sparse";
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
  // Extent records, asked for by Accept: holes and zeros are not sent.
  const std::pair<std::string, std::string> accept{"Accept", std::string("text/plain, ") + kExtentsType};
  auto records = Get(path, {grant, accept});
  EXPECT_EQ(records.status, 200);
  EXPECT_EQ(records.Header("content-type"), kExtentsType);
  EXPECT_EQ(records.Header("transfer-encoding"), "chunked");
  EXPECT_EQ(records.Header("vary"), "Accept");
  EXPECT_LT(records.body.size(), content_.size() / 8);
  auto logical = Unrecord(records.body, 0, 4 * kMiB);
  ASSERT_TRUE(logical.ok()) << logical.status().ToString();
  EXPECT_EQ(*logical, content_);
  // Over the logical offsets: the records begin at N.
  for (int64_t from : {int64_t{1}, int64_t{4194000}, kMiB + 12345 + 7, 2 * kMiB}) {
    auto part = Get(path, {grant, accept, {"Range", "bytes=" + std::to_string(from) + "-"}});
    EXPECT_EQ(part.status, 206);
    EXPECT_EQ(part.Header("content-range"), "bytes " + std::to_string(from) + "-4194303/4194304");
    logical = Unrecord(part.body, from, 4 * kMiB);
    ASSERT_TRUE(logical.ok()) << from << ": " << logical.status().ToString();
    EXPECT_EQ(*logical, content_.substr(static_cast<size_t>(from))) << from;
  }
  EXPECT_EQ(Get(path, {grant, accept, {"Range", "bytes=4194304-"}}).status, 416);
  // Refused with q=0: plain bytes.
  auto refused = Get(path, {grant, {"Accept", std::string(kExtentsType) + ";q=0"}});
  EXPECT_EQ(refused.Header("content-type"), "application/octet-stream");
  EXPECT_EQ(refused.body, content_);
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

TEST(ArtefactWireTest, AcceptListsTheExtentType) {
  using artefact_internal::AcceptsExtents;
  EXPECT_TRUE(AcceptsExtents("application/x-airlock-extents"));
  EXPECT_TRUE(AcceptsExtents("text/html, Application/X-Airlock-Extents ; q=0.5"));
  EXPECT_TRUE(AcceptsExtents("application/x-airlock-extents;v=1"));
  EXPECT_FALSE(AcceptsExtents(""));
  EXPECT_FALSE(AcceptsExtents("*/*"));
  EXPECT_FALSE(AcceptsExtents("application/octet-stream"));
  EXPECT_FALSE(AcceptsExtents("application/x-airlock-extents-2"));
  EXPECT_FALSE(AcceptsExtents("application/x-airlock-extents;q=0"));
  EXPECT_FALSE(AcceptsExtents("application/x-airlock-extents; q=0.000"));
}

// The fetch's readers take a body in any pieces: split everywhere.
TEST(ArtefactWireTest, ReadersTakeTheirInputInAnyPieces) {
  const std::string logical = std::string(70, 'a') + std::string(100, '\0') + "xyz";
  const std::string body =
      Record('D', 0, 70, std::string_view(logical).substr(0, 70)) + Record('Z', 70, 100) + Record('D', 170, 3, "xyz");
  ASSERT_EQ(body.size(), 10u + 0x66);
  const std::string framed =
      "a;ext=1\r\n" + body.substr(0, 10) + "\r\n" + "66\r\n" + body.substr(10) + "\r\n0\r\nX-Trailer: 1\r\n\r\n";
  for (size_t cut = 0; cut <= framed.size(); ++cut) {
    artefact_internal::ChunkedDecoder decoder;
    std::string decoded;
    const artefact_internal::ChunkedDecoder::Out out = [&](std::string_view b) {
      decoded.append(b);
      return OkStatus();
    };
    ASSERT_TRUE(decoder.Feed(std::string_view(framed).substr(0, cut), out).ok()) << cut;
    ASSERT_TRUE(decoder.Feed(std::string_view(framed).substr(cut), out).ok()) << cut;
    EXPECT_TRUE(decoder.done()) << cut;
    EXPECT_EQ(decoded, body) << cut;
    EXPECT_EQ(decoder.Feed("x", out).code(), StatusCode::kUnavailable);
  }
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    std::string got;
    artefact_internal::ExtentReader reader(0, static_cast<int64_t>(logical.size()));
    const artefact_internal::ExtentReader::Sinks sinks{[&](std::string_view b) {
                                                         got.append(b);
                                                         return OkStatus();
                                                       },
                                                       [&](int64_t n) {
                                                         got.append(static_cast<size_t>(n), '\0');
                                                         return OkStatus();
                                                       }};
    ASSERT_TRUE(reader.Feed(std::string_view(body).substr(0, cut), sinks).ok()) << cut;
    EXPECT_EQ(reader.done(), cut == body.size());
    ASSERT_TRUE(reader.Feed(std::string_view(body).substr(cut), sinks).ok()) << cut;
    EXPECT_TRUE(reader.done()) << cut;
    EXPECT_EQ(got, logical) << cut;
  }
}

}  // namespace
}  // namespace airlock::cluster
