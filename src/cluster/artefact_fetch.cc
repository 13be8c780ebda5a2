// Fetching an artefact from the node that holds it (artefacts.h
// FetchArtefact): one blocking call, a private io_context per connection
// (each operation bounded by run_for), the part file written sparsely and
// hashed as it grows. The body is plain bytes (Content-Length) or, when the
// holder answers kExtentsType, extent records (chunked, or Content-Length).
#include <fcntl.h>
#include <openssl/ssl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster/artefact_hash.h"
#include "cluster/artefacts.h"
#include "cluster/cluster_tls.h"
#include "common/fd.h"
#include "common/log.h"

namespace airlock::cluster {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using artefact_internal::AllZero;
using artefact_internal::ChunkedDecoder;
using artefact_internal::ExtentReader;
using artefact_internal::Sha256;

constexpr int64_t kHoleBlock = artefact_internal::kZeroBlock;
constexpr size_t kMaxHead = 16 * 1024;
constexpr size_t kMaxErrorBody = 64 * 1024;

// The part file: bytes arrive in order from `off()`; each 64 KiB-aligned
// block is written when whole, or left a hole when all zeros (AddZeros
// passes over whole blocks without a write). Settle()
// writes a partial block and sets the file's size to off(), so the part's
// size is always where a later call resumes.
class PartWriter {
 public:
  // `reserve`: free bytes the file system must keep; checked every
  // kReserveEvery bytes written (the holder's `allocated` is its word only).
  PartWriter(int fd, std::string path, int64_t off, int64_t reserve = 0)
      : fd_(fd), path_(std::move(path)), off_(off), start_(off), reserve_(reserve) {}
  int64_t off() const { return off_; }
  Status Add(std::string_view data) {
    while (!data.empty()) {
      const int64_t pos = start_ + static_cast<int64_t>(block_.size());
      const int64_t boundary = (pos / kHoleBlock + 1) * kHoleBlock;
      const auto take = static_cast<size_t>(std::min<int64_t>(boundary - pos, static_cast<int64_t>(data.size())));
      block_.append(data.substr(0, take));
      data.remove_prefix(take);
      off_ += static_cast<int64_t>(take);
      if (start_ + static_cast<int64_t>(block_.size()) == boundary) RETURN_IF_ERROR(WriteBlock());
    }
    return OkStatus();
  }
  Status AddZeros(int64_t n) {
    if (n > 0 && (!block_.empty() || off_ % kHoleBlock != 0)) {  // the rest of the block begun
      const int64_t boundary = (off_ / kHoleBlock + 1) * kHoleBlock;
      const int64_t k = std::min(n, boundary - off_);
      block_.append(static_cast<size_t>(k), '\0');
      off_ += k;
      n -= k;
      if (off_ == boundary) RETURN_IF_ERROR(WriteBlock());
    }
    if (n == 0) return OkStatus();
    // Whole blocks need no write: past the part's size they read as zeros.
    const int64_t skip = n / kHoleBlock * kHoleBlock;
    start_ += skip;
    off_ += skip;
    block_.append(static_cast<size_t>(n - skip), '\0');
    off_ += n - skip;
    return OkStatus();
  }
  Status Settle() {
    RETURN_IF_ERROR(WriteBlock());
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return ErrnoError("fstat " + path_);
    if (st.st_size != off_ && ::ftruncate(fd_, off_) != 0) return ErrnoError("ftruncate " + path_);
    return OkStatus();
  }
  Status Restart() {
    block_.clear();
    off_ = start_ = 0;
    if (::ftruncate(fd_, 0) != 0) return ErrnoError("ftruncate " + path_);
    return OkStatus();
  }

 private:
  Status WriteBlock() {
    // Past the part's size every byte reads as zero: zeros need no write.
    if (!AllZero(block_.data(), block_.size())) {
      size_t done = 0;
      while (done < block_.size()) {
        ssize_t n = ::pwrite(fd_, block_.data() + done, block_.size() - done, start_ + static_cast<int64_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoError("write " + path_);
        done += static_cast<size_t>(n);
      }
      written_ += static_cast<int64_t>(block_.size());
      if (reserve_ > 0 && written_ >= next_check_) {
        next_check_ = written_ + kReserveEvery;
        struct statvfs fs {};
        if (::fstatvfs(fd_, &fs) == 0 && static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize) < reserve_)
          return ResourceExhausted("the copy into " + path_ + " stopped: the file system must keep " +
                                   std::to_string(reserve_) + " bytes free");
      }
    }
    start_ += static_cast<int64_t>(block_.size());
    block_.clear();
    return OkStatus();
  }

  static constexpr int64_t kReserveEvery = int64_t{64} << 20;
  int fd_;
  std::string path_;
  int64_t off_;    // bytes taken
  int64_t start_;  // where block_ begins
  std::string block_;
  int64_t reserve_ = 0, written_ = 0, next_check_ = 0;
};

// One connection to the holder, TCP or mutual TLS; every operation bounded.
// The whole fetch ran past FetchRequest::deadline (a holder that sends
// slowly): the part is kept, a later call resumes.
Status FetchDeadline(const FetchRequest& r) {
  return DeadlineExceeded("the fetch of artefact " + r.digest + " from node " + r.holder_node + " ran past its " +
                          std::to_string(r.deadline.count() / 1000) + " s deadline");
}

class FetchConn {
 public:
  // `end`: the whole fetch's deadline (FetchRequest::deadline from its start).
  FetchConn(const FetchRequest& r, std::chrono::steady_clock::time_point end) : r_(r), end_(end), sock_(io_) {}

  Status Connect() {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(r_.host, ec);
    if (ec) return InvalidArgument("node " + r_.holder_node + "'s address " + r_.host + " is not an IP literal");
    auto [cec, n] = Run([&](auto h) { sock_.async_connect(tcp::endpoint(addr, r_.port), [h](auto e) { h(e, 0); }); },
                        r_.connect_timeout);
    if (cec) return Unavailable("connect to node " + r_.holder_node + " at " + Where() + ": " + cec.message());
    sock_.set_option(tcp::no_delay(true), ec);
    if (!r_.tls) return OkStatus();
    tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(sock_, *r_.tls);
    // Ask the node's TLS listener for its artefact server (a `both`
    // member's certificate would otherwise reach its API).
    std::string alpn(1, static_cast<char>(std::strlen(kArtefactAlpn)));
    alpn += kArtefactAlpn;
    SSL_set_alpn_protos(tls_->native_handle(), reinterpret_cast<const unsigned char*>(alpn.data()),
                        static_cast<unsigned>(alpn.size()));
    auto [hec, hn] =
        Run([&](auto h) { tls_->async_handshake(asio::ssl::stream_base::client, [h](auto e) { h(e, 0); }); },
            r_.connect_timeout);
    if (hec) return Unavailable("TLS to node " + r_.holder_node + " at " + Where() + ": " + hec.message());
    if (Status s = r_.peer_check(tls_->native_handle()); !s.ok()) {
      return PermissionDenied("node " + r_.holder_node + " at " + Where() + ": " + s.message());
    }
    return OkStatus();
  }

  Status WriteAll(const std::string& data) {
    RETURN_IF_ERROR(Left().status());
    auto [ec, n] = Run(
        [&](auto h) {
          if (tls_) return asio::async_write(*tls_, asio::buffer(data), h);
          asio::async_write(sock_, asio::buffer(data), h);
        },
        *Left());
    if (ec == asio::error::timed_out && !Left().ok()) return Left().status();
    if (ec) return Unavailable("sending to node " + r_.holder_node + ": " + ec.message());
    return OkStatus();
  }

  // 0: the peer closed.
  StatusOr<size_t> ReadSome(char* buf, size_t len) {
    ASSIGN_OR_RETURN(auto wait, Left());
    auto [ec, n] = Run(
        [&](auto h) {
          if (tls_) return tls_->async_read_some(asio::buffer(buf, len), h);
          sock_.async_read_some(asio::buffer(buf, len), h);
        },
        wait);
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) return size_t{0};
    if (ec == asio::error::timed_out && !Left().ok()) return Left().status();
    if (ec == asio::error::timed_out) {
      return DeadlineExceeded("node " + r_.holder_node + " sent nothing for " +
                              std::to_string(r_.idle_timeout.count()) + " ms");
    }
    if (ec) return Unavailable("reading from node " + r_.holder_node + ": " + ec.message());
    return n;
  }

 private:
  std::string Where() const { return r_.host + ":" + std::to_string(r_.port); }
  // How long the next read or write may wait: the idle timeout, or less
  // when the whole fetch's deadline comes first; kDeadlineExceededWhole past it.
  StatusOr<std::chrono::milliseconds> Left() const {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return FetchDeadline(r_);
    return std::min(left, r_.idle_timeout);
  }

  template <class Init>
  std::pair<boost::system::error_code, size_t> Run(Init init, std::chrono::milliseconds timeout) {
    boost::system::error_code result = asio::error::would_block;
    size_t got = 0;
    init([&result, &got](boost::system::error_code ec, size_t n) {
      result = ec;
      got = n;
    });
    io_.restart();
    io_.run_for(timeout);
    if (!io_.stopped()) {  // timed out: cancel, and let the handler run
      boost::system::error_code ignored;
      sock_.close(ignored);
      io_.run();
      return {asio::error::timed_out, got};
    }
    return {result, got};
  }

  const FetchRequest& r_;
  const std::chrono::steady_clock::time_point end_;
  asio::io_context io_;
  tcp::socket sock_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;
};

struct ReplyHead {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string rest;                            // body bytes read with the head
};

StatusOr<ReplyHead> ReadHead(FetchConn& w, const std::string& holder) {
  std::string buf;
  char chunk[8192];
  size_t end = std::string::npos;
  while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
    if (buf.size() > kMaxHead) return Unavailable("node " + holder + " sent an answer head over 16 KiB");
    ASSIGN_OR_RETURN(size_t n, w.ReadSome(chunk, sizeof chunk));
    if (n == 0) return Unavailable("node " + holder + " closed the connection before answering");
    buf.append(chunk, n);
  }
  ReplyHead h;
  h.rest = buf.substr(end + 4);
  buf.resize(end);
  size_t eol = buf.find("\r\n");
  std::string line = buf.substr(0, eol);
  if (line.size() < 12 || line.compare(0, 5, "HTTP/") != 0 || line[8] != ' ') {
    return Unavailable("node " + holder + " did not answer HTTP: " + line.substr(0, 80));
  }
  h.status = std::atoi(line.substr(9, 3).c_str());
  while (eol != std::string::npos) {
    size_t next = buf.find("\r\n", eol + 2);
    std::string field = buf.substr(eol + 2, next == std::string::npos ? std::string::npos : next - eol - 2);
    eol = next;
    size_t colon = field.find(':');
    if (colon == std::string::npos) continue;
    std::string name = field.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    size_t v = field.find_first_not_of(" \t", colon + 1);
    h.headers[name] = v == std::string::npos ? "" : field.substr(v, field.find_last_not_of(" \t") - v + 1);
  }
  return h;
}

StatusOr<int64_t> ContentLength(const ReplyHead& h, const std::string& holder) {
  auto it = h.headers.find("content-length");
  if (it == h.headers.end() || it->second.empty() || it->second.size() > 18 ||
      it->second.find_first_not_of("0123456789") != std::string::npos) {
    return Unavailable("node " + holder + " answered " + std::to_string(h.status) + " without a Content-Length");
  }
  return std::stoll(it->second);
}

// The message of an error answer: its JSON "message", else its text.
std::string ErrorMessage(FetchConn& w, ReplyHead h, const std::string& holder) {
  std::string body = std::move(h.rest);
  auto len = ContentLength(h, holder);
  const size_t want = len.ok() ? std::min<size_t>(static_cast<size_t>(*len), kMaxErrorBody) : 0;
  char chunk[8192];
  while (body.size() < want) {
    auto n = w.ReadSome(chunk, sizeof chunk);
    if (!n.ok() || *n == 0) break;
    body.append(chunk, *n);
  }
  body.resize(std::min(body.size(), want));
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  return body.substr(0, 200);
}

struct FetchState {
  const FetchRequest& r;
  PartWriter& part;
  Sha256& hash;
  std::chrono::steady_clock::time_point end;  // the whole fetch's deadline
  int64_t received = 0;
  bool resumed = false;
};

std::string LowerCase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The body of a 200/206 into the part: its framing (chunked or
// Content-Length) undone, then plain bytes or extent records. A body that
// ends early or is malformed is a cut (Unavailable): the part keeps what
// came before, and the next attempt resumes after it.
Status ReadBody(FetchState& a, FetchConn& w, ReplyHead h, const std::string& what) {
  const FetchRequest& r = a.r;
  const bool extents = LowerCase(h.headers["content-type"]) == artefact_internal::kExtentsType;
  const std::string te = LowerCase(h.headers["transfer-encoding"]);
  if (!te.empty() && te != "chunked") return Unavailable(what + ": Transfer-Encoding \"" + te.substr(0, 40) + "\"");
  const bool chunked = !te.empty();
  int64_t left = 0;  // Content-Length's bytes to come
  if (!chunked) {
    ASSIGN_OR_RETURN(left, ContentLength(h, r.holder_node));
    if (!extents && left != r.size - a.part.off()) {
      return Status(StatusCode::kDataLoss, what + ": " + std::to_string(left) + " bytes offered from byte " +
                                               std::to_string(a.part.off()) + ", but it has " + std::to_string(r.size));
    }
  }
  ExtentReader records(a.part.off(), r.size);
  const ExtentReader::Sinks sinks{[&](std::string_view bytes) {
                                    a.hash.Update(bytes);
                                    return a.part.Add(bytes);
                                  },
                                  [&](int64_t n) {
                                    a.hash.UpdateZeros(n);
                                    return a.part.AddZeros(n);
                                  }};
  // Decoded body bytes: what bytes_received counts.
  const ChunkedDecoder::Out body = [&](std::string_view bytes) -> Status {
    a.received += static_cast<int64_t>(bytes.size());
    if (extents) return records.Feed(bytes, sinks);
    if (static_cast<int64_t>(bytes.size()) > r.size - a.part.off()) {
      return Unavailable("more bytes than the artefact has");
    }
    return sinks.data(bytes);
  };
  ChunkedDecoder decoder;
  auto feed = [&](std::string_view wire) -> Status {
    Status s;
    if (chunked) {
      s = decoder.Feed(wire, body);
    } else {
      wire = wire.substr(0, static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(wire.size()))));
      left -= static_cast<int64_t>(wire.size());
      s = body(wire);
    }
    if (s.code() == StatusCode::kUnavailable) return Unavailable(what + ": " + s.message());
    return s;
  };
  RETURN_IF_ERROR(feed(h.rest));
  std::string buf(256 * 1024, '\0');
  while (chunked ? !decoder.done() : left > 0) {
    ASSIGN_OR_RETURN(size_t n, w.ReadSome(buf.data(), buf.size()));
    if (n == 0) return Unavailable(what + ": cut after byte " + std::to_string(a.part.off()));
    RETURN_IF_ERROR(feed(std::string_view(buf.data(), n)));
  }
  if (extents ? !records.done() : a.part.off() != r.size) {
    return Unavailable(what + ": the answer ended at byte " + std::to_string(a.part.off()) + " of " +
                       std::to_string(r.size));
  }
  return OkStatus();
}

// One connection: the request, the head, the body into the part.
Status OneAttempt(FetchState& a) {
  const FetchRequest& r = a.r;
  FetchConn w(r, a.end);
  RETURN_IF_ERROR(w.Connect());
  const int64_t from = a.part.off();
  const std::string host = r.host.find(':') == std::string::npos ? r.host : "[" + r.host + "]";
  std::string req = "GET " + std::string(kArtefactPathPrefix) + r.digest + " HTTP/1.1\r\nHost: " + host + ":" +
                    std::to_string(r.port) + "\r\n" + kArtefactGrantHeader + ": " + r.grant +
                    "\r\nConnection: close\r\n";
  if (r.extents) req += "Accept: " + std::string(artefact_internal::kExtentsType) + "\r\n";
  if (from > 0) req += "Range: bytes=" + std::to_string(from) + "-\r\n";
  req += "\r\n";
  RETURN_IF_ERROR(w.WriteAll(req));
  ASSIGN_OR_RETURN(ReplyHead h, ReadHead(w, r.holder_node));
  const std::string what = "artefact " + r.digest + " from node " + r.holder_node;
  switch (h.status) {
    case 200:
      if (from > 0) {  // the holder sends it all: start over
        RETURN_IF_ERROR(a.part.Restart());
        a.hash.Reset();
        a.resumed = false;
      }
      break;
    case 206: {
      const std::string want =
          "bytes " + std::to_string(from) + "-" + std::to_string(r.size - 1) + "/" + std::to_string(r.size);
      if (from == 0 || h.headers["content-range"] != want) {
        return Unavailable(what + ": Content-Range \"" + h.headers["content-range"] + "\", not \"" + want + "\"");
      }
      break;
    }
    case 403:
      return PermissionDenied("node " + r.holder_node + " refused the grant for artefact " + r.digest + ": " +
                              ErrorMessage(w, std::move(h), r.holder_node));
    case 404:
      return NotFound("node " + r.holder_node + " does not hold artefact " + r.digest + ": " +
                      ErrorMessage(w, std::move(h), r.holder_node));
    case 416:  // the holder's copy is shorter than the part: start over
      RETURN_IF_ERROR(a.part.Restart());
      a.hash.Reset();
      a.resumed = false;
      return Unavailable(what + ": range from " + std::to_string(from) + " refused (416)");
    case 500:
      return Status(StatusCode::kDataLoss,
                    "node " + r.holder_node + ": " + ErrorMessage(w, std::move(h), r.holder_node));
    case 503:
      return Unavailable("node " + r.holder_node + ": " + ErrorMessage(w, std::move(h), r.holder_node));
    default:
      return Internal("node " + r.holder_node + " answered " + std::to_string(h.status) + " for artefact " + r.digest +
                      ": " + ErrorMessage(w, std::move(h), r.holder_node));
  }
  return ReadBody(a, w, std::move(h), what);
}

Status CheckRequest(const FetchRequest& r) {
  if (!IsArtefactDigest(r.digest)) return InvalidArgument("not an artefact digest (64 lowercase hex): " + r.digest);
  if (r.size < 0 || r.allocated < 0 || r.reserve_bytes < 0) return InvalidArgument("negative artefact size or budget");
  if (r.host.empty() || r.port == 0 || r.holder_node.empty())
    return InvalidArgument("fetching an artefact needs the holder's node, address and port");
  if (r.dest.empty() || r.tmp_dir.empty()) return InvalidArgument("fetching an artefact needs dest and tmp_dir");
  if (r.grant.empty() || r.grant.size() > 4096 || std::any_of(r.grant.begin(), r.grant.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x21 || c == 0x7f;
      })) {
    return InvalidArgument("an artefact grant is 1..4096 visible characters");
  }
  if (r.tls && !r.peer_check) return InvalidArgument("cluster TLS to node " + r.holder_node + " without a peer check");
  return OkStatus();
}

Status SyncDir(const std::string& file) {
  const size_t slash = file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : file.substr(0, slash);
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd || ::fsync(fd.get()) != 0) return ErrnoError("fsync " + dir);
  return OkStatus();
}

// FetchArtefact under the lock, dest absent: the part is open.
StatusOr<FetchResult> FetchIntoPart(const FetchRequest& r, int part, const std::string& part_path) {
  const auto start = std::chrono::steady_clock::now();
  struct stat st {};
  if (::fstat(part, &st) != 0) return ErrnoError("fstat " + part_path);
  int64_t have = st.st_size;
  if (have > r.size) {
    if (::ftruncate(part, 0) != 0) return ErrnoError("ftruncate " + part_path);
    have = 0;
    st.st_blocks = 0;
  }
  struct statvfs fs {};
  if (::statvfs(r.tmp_dir.c_str(), &fs) != 0) return ErrnoError("statvfs " + r.tmp_dir);
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  const int64_t need = std::max<int64_t>(0, r.allocated - static_cast<int64_t>(st.st_blocks) * 512);
  if (free_bytes - need < r.reserve_bytes) {
    return ResourceExhausted("artefact " + r.digest + " from node " + r.holder_node + " needs " + std::to_string(need) +
                             " more bytes on " + r.tmp_dir + ", which has " + std::to_string(free_bytes) +
                             " free and must keep " + std::to_string(r.reserve_bytes) + " free");
  }
  Sha256 hash;
  if (have > 0) RETURN_IF_ERROR(artefact_internal::HashPrefix(part, have, hash, part_path));
  PartWriter writer(part, part_path, have, r.reserve_bytes);
  FetchState a{r, writer, hash, start + r.deadline};
  a.resumed = have > 0;
  for (int cuts = 0; writer.off() < r.size;) {
    Status s = OneAttempt(a);
    RETURN_IF_ERROR(writer.Settle());
    if (s.ok()) continue;
    const bool again = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
    if (again && writer.off() == r.size) {  // a cut after the last byte: the digest decides
      LOG_INFO("artefacts: fetching {} from node {}: {} (after the last byte)", r.digest, r.holder_node, s.message());
      continue;
    }
    if (!again || cuts >= r.retries || std::chrono::steady_clock::now() >= a.end) return s;
    ++cuts;
    std::this_thread::sleep_for(std::chrono::milliseconds(100) * cuts);  // a busy or restarting holder
    LOG_INFO("artefacts: fetching {} from node {}: {} (resuming at byte {}, try {} of {})", r.digest, r.holder_node,
             s.message(), writer.off(), cuts, r.retries);
  }
  RETURN_IF_ERROR(writer.Settle());
  const std::string got = hash.FinalHex();
  if (got != r.digest) {
    ::unlink(part_path.c_str());
    return Status(StatusCode::kDataLoss, "the copy of artefact " + r.digest + " from node " + r.holder_node +
                                             " does not match its digest (got " + got + "): refused");
  }
  if (::fsync(part) != 0) return ErrnoError("fsync " + part_path);
  if (::fchmod(part, 0444) != 0) return ErrnoError("chmod " + part_path);
  if (::rename(part_path.c_str(), r.dest.c_str()) != 0) return ErrnoError("rename " + part_path + " to " + r.dest);
  RETURN_IF_ERROR(SyncDir(r.dest));
  if (Status s = WriteDigestSidecar(r.dest, r.digest); !s.ok()) LOG_WARN("artefacts: {}", s.message());
  return FetchResult{a.received, a.resumed};
}

}  // namespace

StatusOr<FetchResult> FetchArtefact(const FetchRequest& r) {
  RETURN_IF_ERROR(CheckRequest(r));
  const std::string base = r.tmp_dir + "/fetch-" + r.digest;
  const std::string lock_path = base + ".lock", part_path = base + ".part";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock) return ErrnoError("open " + lock_path);
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return ErrnoError("flock " + lock_path);
  }
  struct stat st {};
  if (::stat(r.dest.c_str(), &st) == 0) {
    if (st.st_size == r.size) return FetchResult{};  // another fetch finished it
    return AlreadyExists(r.dest + " exists with " + std::to_string(st.st_size) + " bytes, not artefact " + r.digest +
                         "'s " + std::to_string(r.size));
  }
  UniqueFd part(::open(part_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!part) return ErrnoError("open " + part_path);
  auto result = FetchIntoPart(r, part.get(), part_path);
  // A part that holds nothing is no progress to keep.
  if (!result.ok() && ::fstat(part.get(), &st) == 0 && st.st_size == 0) ::unlink(part_path.c_str());
  return result;
}

}  // namespace airlock::cluster
