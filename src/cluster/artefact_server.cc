// The artefact server: GET /artefacts/<digest> (artefacts.h "Wire"), as
// plain bytes or, for a client that accepts it, as extent records.
//
// Threads: the caller's io thread runs the listener, the connections and
// the file reads (a chunk per write, paced by the connection's
// backpressure; reads that find only zeros hand the thread back every
// kReadsPerTurn reads); the workers run what may block for long (check_grant,
// path_of, DigestOf of a file without a valid sidecar) and post the
// outcome back to the io thread. What is posted holds the connection and
// the callbacks (ServeShared), never the server: a server destroyed while
// `io` still runs leaves nothing dangling, and the workers never hold the
// pool that runs them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstring>
#include <optional>

#include "cluster/artefact_hash.h"
#include "cluster/artefacts.h"
#include "common/fd.h"
#include "common/log.h"
#include "http/conn.h"
#include "http/listener.h"

namespace airlock::cluster {

namespace asio = boost::asio;
using artefact_internal::AllZero;
using artefact_internal::AppendExtentHeader;
using artefact_internal::kExtentData;
using artefact_internal::kExtentZeros;
using artefact_internal::kMaxZeroExtent;
using artefact_internal::kZeroBlock;

namespace {

constexpr int kReadsPerTurn = 16;  // reads per turn of the io thread that sent nothing

// What the worker found for one request: an error answer, or an open file.
struct PreparedArtefact {
  int status = 0;  // an error answer when not 0
  std::string message;
  UniqueFd fd;
  int64_t size = 0;
};

PreparedArtefact RefuseArtefact(int status, std::string message) {
  PreparedArtefact p;
  p.status = status;
  p.message = std::move(message);
  return p;
}

// One response body being streamed; `slot` frees its transfer slot.
struct ArtefactTransfer {
  UniqueFd fd;
  int64_t off = 0, end = 0;  // logical bytes: the next one to send, the file's size
  std::string buf;
  std::shared_ptr<void> slot;
  // Extent records only:
  int64_t data_end = 0;               // where the data region holding `off` ends (SEEK_HOLE)
  bool holes = true;                  // SEEK_DATA works on this file system
  int64_t zero_at = 0, zero_len = 0;  // a 'Z' record still growing
};

}  // namespace

namespace artefact_internal {

// What a request needs after the server may be gone.
struct ServeShared {
  ArtefactPathFn path_of;
  ArtefactGrantFn check_grant;
  ArtefactServerOptions options;
  std::atomic<int> transfers{0};
};

}  // namespace artefact_internal

namespace {

using artefact_internal::ServeShared;

PreparedArtefact Prepare(const ServeShared& shared, const std::string& digest, const std::string& token);
void Serve(const std::shared_ptr<http::Conn>& c, PreparedArtefact p, std::optional<int64_t> from, bool extents,
           std::shared_ptr<void> slot, const std::string& digest, size_t chunk);
void Pump(const std::shared_ptr<http::Conn>& c, const std::shared_ptr<ArtefactTransfer>& t);
void PumpExtents(const std::shared_ptr<http::Conn>& c, const std::shared_ptr<ArtefactTransfer>& t);

}  // namespace

struct ArtefactServer::Impl {
  Impl(asio::io_context& io, std::shared_ptr<artefact_internal::ServeShared> shared)
      : io(io), shared(std::move(shared)) {}
  void Handle(const std::shared_ptr<http::Conn>& c);

  asio::io_context& io;
  std::shared_ptr<artefact_internal::ServeShared> shared;
  std::unique_ptr<asio::thread_pool> pool;
  std::unique_ptr<http::Listener> listener;
  bool started = false, stopped = false;
};

void ArtefactServer::Impl::Handle(const std::shared_ptr<http::Conn>& c) {
  if (c->method() != http::Method::kGet) return c->RespondError(405, "only GET is served here", {{"Allow", "GET"}});
  const std::string& path = c->path();
  const std::string_view prefix = kArtefactPathPrefix;
  if (path.compare(0, prefix.size(), prefix) != 0) return c->RespondError(404, "no such route: " + path);
  std::string digest = path.substr(prefix.size());
  if (!IsArtefactDigest(digest)) {
    return c->RespondError(400, "not an artefact digest (64 lowercase hex): " + digest.substr(0, 80));
  }
  std::string token = c->Header(kArtefactGrantHeader);
  if (token.empty()) return c->RespondError(403, std::string("no ") + kArtefactGrantHeader + " header");
  auto range = ParseArtefactRange(c->Header("Range"));
  if (!range.ok()) return c->RespondError(400, range.status().message());
  const bool extents = artefact_internal::AcceptsExtents(c->Header("Accept"));
  if (stopped || !pool) return c->RespondError(503, "the artefact server is stopping");
  if (shared->transfers.fetch_add(1) >= shared->options.max_transfers) {
    --shared->transfers;
    return c->RespondError(503, "too many artefact transfers at once on this node; try again");
  }
  std::shared_ptr<void> slot(nullptr, [sh = shared](void*) { --sh->transfers; });
  asio::post(*pool, [sh = shared, c, digest = std::move(digest), token = std::move(token), from = *range, extents,
                     slot = std::move(slot)]() mutable {
    auto p = std::make_shared<PreparedArtefact>(Prepare(*sh, digest, token));
    const size_t chunk = sh->options.read_chunk;
    asio::post(c->executor(),
               [c, p, from, extents, slot = std::move(slot), digest = std::move(digest), chunk]() mutable {
                 Serve(c, std::move(*p), from, extents, std::move(slot), digest, chunk);
               });
  });
}

namespace {

PreparedArtefact Prepare(const ServeShared& shared, const std::string& digest, const std::string& token) {
  if (Status s = shared.check_grant(token, digest); !s.ok()) {
    if (s.code() == StatusCode::kPermissionDenied) return RefuseArtefact(403, s.message());
    LOG_WARN("artefacts: checking a grant for {}: {}", digest, s.message());
    return RefuseArtefact(503, "the grant could not be checked: " + s.message());
  }
  auto path = shared.path_of(digest);
  if (!path.ok()) {
    if (path.status().code() == StatusCode::kNotFound) return RefuseArtefact(404, path.status().message());
    return RefuseArtefact(503, path.status().message());
  }
  PreparedArtefact p;
  p.fd = UniqueFd(::open(path->c_str(), O_RDONLY | O_CLOEXEC));
  if (!p.fd) {
    if (errno == ENOENT) return RefuseArtefact(404, "artefact " + digest + " is not on this node");
    return RefuseArtefact(503, ErrnoError("open " + *path).message());
  }
  auto d = DigestOf(*path);
  if (!d.ok()) {
    LOG_WARN("artefacts: digest of {}: {}", *path, d.status().message());
    return RefuseArtefact(503, d.status().message());
  }
  if (d->sha256 != digest) {
    LOG_ERROR("artefacts: {} holds {}, not the artefact {} it is listed as: refusing to serve it", *path, d->sha256,
              digest);
    return RefuseArtefact(500, "artefact " + digest + " on this node is corrupt");
  }
  struct stat st {};
  if (::fstat(p.fd.get(), &st) != 0 || st.st_size != d->size) {
    return RefuseArtefact(503, "artefact " + digest + " changed while it was checked; try again");
  }
  p.size = d->size;
  return p;
}

void Serve(const std::shared_ptr<http::Conn>& c, PreparedArtefact p, std::optional<int64_t> from, bool extents,
           std::shared_ptr<void> slot, const std::string& digest, size_t chunk) {
  if (c->closed()) return;
  if (p.status != 0) return c->RespondError(p.status, p.message);
  const int64_t start = from.value_or(0);
  if (from && start >= p.size) {
    return c->RespondError(416, "artefact " + digest + " has " + std::to_string(p.size) + " bytes",
                           {{"Content-Range", "bytes */" + std::to_string(p.size)}});
  }
  http::HeaderList extra = {{"X-Airlock-Digest", digest}, {"Accept-Ranges", "bytes"}, {"Vary", "Accept"}};
  if (from) {
    extra.emplace_back("Content-Range", "bytes " + std::to_string(start) + "-" + std::to_string(p.size - 1) + "/" +
                                            std::to_string(p.size));
  }
  auto t = std::make_shared<ArtefactTransfer>();
  t->fd = std::move(p.fd);
  t->off = start;
  t->end = p.size;
  // A 'D' record holds at most one read.
  t->buf.resize(std::clamp<size_t>(chunk, 4096, 64 << 20));
  t->slot = std::move(slot);
  if (extents) {  // its length is not known before: chunked
    c->BeginResponse(from ? 206 : 200, artefact_internal::kExtentsType, std::nullopt, extra);
    return PumpExtents(c, t);
  }
  c->BeginResponse(from ? 206 : 200, "application/octet-stream", static_cast<uint64_t>(p.size - start), extra);
  Pump(c, t);
}

void Pump(const std::shared_ptr<http::Conn>& c, const std::shared_ptr<ArtefactTransfer>& t) {
  while (t->off < t->end) {
    if (c->closed()) return;
    const auto want = static_cast<size_t>(std::min<int64_t>(t->end - t->off, static_cast<int64_t>(t->buf.size())));
    ssize_t n = ::pread(t->fd.get(), t->buf.data(), want, t->off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The length is promised: the peer sees a cut body and resumes.
      LOG_WARN("artefacts: reading at byte {}: {}", t->off, n < 0 ? std::strerror(errno) : "the file got shorter");
      return c->Abort();
    }
    t->off += n;
    c->Write(std::string_view(t->buf.data(), static_cast<size_t>(n)));
    if (c->pending_bytes() >= http::Conn::kLowWatermark) {
      c->SetOnDrain([wc = std::weak_ptr<http::Conn>(c), t] {
        if (auto conn = wc.lock()) Pump(conn, t);
      });
      return;
    }
  }
  c->SetOnDrain(nullptr);
  c->EndResponse();
}

// Ends the growing 'Z' record, if any, into `out`.
void FlushZeros(ArtefactTransfer& t, std::string& out) {
  if (t.zero_len > 0) AppendExtentHeader(out, kExtentZeros, t.zero_at, t.zero_len);
  t.zero_len = 0;
}

void AddZeros(ArtefactTransfer& t, std::string& out, int64_t n) {
  while (n > 0) {
    if (t.zero_len == 0) t.zero_at = t.off;
    const int64_t k = std::min(n, kMaxZeroExtent - t.zero_len);
    t.zero_len += k;
    t.off += k;
    n -= k;
    if (t.zero_len == kMaxZeroExtent) FlushZeros(t, out);
  }
}

void AddData(ArtefactTransfer& t, std::string& out, std::string_view bytes) {
  if (bytes.empty()) return;
  FlushZeros(t, out);
  AppendExtentHeader(out, kExtentData, t.off, static_cast<int64_t>(bytes.size()));
  out.append(bytes);
  t.off += static_cast<int64_t>(bytes.size());
}

// Appends to `out` the records for what follows t.off: a hole, or one read
// of a data region (ending on a 64 KiB boundary where it can), whose
// all-zero 64 KiB-aligned pieces go as zeros. True when it read.
StatusOr<bool> NextExtents(ArtefactTransfer& t, std::string& out) {
  if (t.off >= t.data_end) {
    t.data_end = t.end;
    if (t.holes) {
      off_t data = ::lseek(t.fd.get(), t.off, SEEK_DATA);
      if (data < 0 && errno == ENXIO) data = t.end;  // only a hole from here on
      if (data < 0) {
        t.holes = false;  // EINVAL: the file system cannot say; zeros are still found in what is read
      } else if (data > t.off) {
        AddZeros(t, out, std::min<int64_t>(data, t.end) - t.off);
        t.data_end = t.off;
        return false;
      } else if (off_t hole = ::lseek(t.fd.get(), t.off, SEEK_HOLE); hole > t.off) {
        t.data_end = std::min<int64_t>(hole, t.end);
      }
    }
  }
  int64_t stop = std::min<int64_t>(t.data_end, t.off + static_cast<int64_t>(t.buf.size()));
  if (const int64_t aligned = stop / kZeroBlock * kZeroBlock; stop < t.data_end && aligned > t.off) stop = aligned;
  ssize_t n = 0;
  do {
    n = ::pread(t.fd.get(), t.buf.data(), static_cast<size_t>(stop - t.off), t.off);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoError("read at byte " + std::to_string(t.off));
  if (n == 0) return OutOfRange("the file got shorter than byte " + std::to_string(t.off));
  const int64_t base = t.off;
  size_t run = 0;  // where the data not yet added begins in buf
  for (size_t i = 0; i < static_cast<size_t>(n);) {
    const int64_t at = base + static_cast<int64_t>(i);
    const auto j =
        static_cast<size_t>(std::min<int64_t>(n, (at / kZeroBlock + 1) * kZeroBlock - base));  // the piece's end
    if (AllZero(t.buf.data() + i, j - i)) {
      AddData(t, out, std::string_view(t.buf.data() + run, i - run));
      AddZeros(t, out, static_cast<int64_t>(j - i));
      run = j;
    }
    i = j;
  }
  AddData(t, out, std::string_view(t.buf.data() + run, static_cast<size_t>(n) - run));
  return true;
}

void PumpExtents(const std::shared_ptr<http::Conn>& c, const std::shared_ptr<ArtefactTransfer>& t) {
  std::string out;
  int reads = 0;
  while (t->off < t->end) {
    if (c->closed()) return;
    auto read = NextExtents(*t, out);
    if (!read.ok()) {
      // The chunked body is left unfinished: the peer sees a cut and resumes.
      LOG_WARN("artefacts: {}", read.status().message());
      return c->Abort();
    }
    reads += *read ? 1 : 0;
    if (!out.empty()) c->Write(out);
    out.clear();
    if (c->pending_bytes() >= http::Conn::kLowWatermark) {
      c->SetOnDrain([wc = std::weak_ptr<http::Conn>(c), t] {
        if (auto conn = wc.lock()) PumpExtents(conn, t);
      });
      return;
    }
    if (reads >= kReadsPerTurn) {
      // Zeros read from the disk send nothing: let the other connections
      // run, and let the peer see progress (its idle timeout).
      FlushZeros(*t, out);
      c->Write(out);
      c->SetOnDrain(nullptr);  // one pump at a time: the posted one
      asio::post(c->executor(), [c, t] { PumpExtents(c, t); });
      return;
    }
  }
  FlushZeros(*t, out);
  c->Write(out);
  c->SetOnDrain(nullptr);
  c->EndResponse();
}

}  // namespace

ArtefactServer::ArtefactServer(asio::io_context& io, ArtefactPathFn path_of, ArtefactGrantFn check_grant,
                               ArtefactServerOptions options) {
  auto shared = std::make_shared<artefact_internal::ServeShared>();
  shared->path_of = std::move(path_of);
  shared->check_grant = std::move(check_grant);
  shared->options = options;
  impl_ = std::make_shared<Impl>(io, std::move(shared));
}

ArtefactServer::~ArtefactServer() { Stop(); }

Status ArtefactServer::Start(const std::string& address) {
  Impl& i = *impl_;
  if (i.started) return FailedPrecondition("the artefact server was started already");
  if (!i.shared->path_of || !i.shared->check_grant) {
    return FailedPrecondition("the artefact server needs path_of and check_grant");
  }
  http::Limits limits;
  limits.header_limit = 16 * 1024;
  limits.header_timeout = std::chrono::seconds(10);
  limits.log = [](http::LogLevel level, const std::string& m) {
    if (level == http::LogLevel::kDebug) return LOG_DEBUG("artefacts: {}", m);
    LOG_WARN("artefacts: {}", m);
  };
  // Connections may outlive the server: they find it gone and answer 503.
  i.listener = std::make_unique<http::Listener>(
      i.io,
      [weak = std::weak_ptr<Impl>(impl_)](std::shared_ptr<http::Conn> c) {
        if (auto impl = weak.lock()) return impl->Handle(c);
        c->RespondError(503, "the artefact server is stopping");
      },
      limits);
  RETURN_IF_ERROR(i.listener->Listen(address));
  i.started = true;
  i.pool = std::make_unique<asio::thread_pool>(static_cast<size_t>(std::max(1, i.shared->options.workers)));
  return OkStatus();
}

uint16_t ArtefactServer::port() const { return impl_->listener ? impl_->listener->port() : 0; }

void ArtefactServer::Stop() {
  Impl& i = *impl_;
  if (!i.started || i.stopped) return;
  i.stopped = true;
  i.listener->Stop();
  i.pool->join();
}

}  // namespace airlock::cluster
