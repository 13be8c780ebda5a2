// The artefact server: GET /artefacts/<digest> (artefacts.h "Wire").
//
// Threads: the caller's io thread runs the listener, the connections and
// the file reads (a chunk per write, paced by the connection's
// backpressure); the workers run what may block for long (check_grant,
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

#include "cluster/artefacts.h"
#include "common/fd.h"
#include "common/log.h"
#include "http/conn.h"
#include "http/listener.h"

namespace airlock::cluster {

namespace asio = boost::asio;

namespace {

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
  int64_t off = 0, end = 0;
  std::string buf;
  std::shared_ptr<void> slot;
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
void Serve(const std::shared_ptr<http::Conn>& c, PreparedArtefact p, std::optional<int64_t> from,
           std::shared_ptr<void> slot, const std::string& digest, size_t chunk);
void Pump(const std::shared_ptr<http::Conn>& c, const std::shared_ptr<ArtefactTransfer>& t);

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
  if (stopped || !pool) return c->RespondError(503, "the artefact server is stopping");
  if (shared->transfers.fetch_add(1) >= shared->options.max_transfers) {
    --shared->transfers;
    return c->RespondError(503, "too many artefact transfers at once on this node; try again");
  }
  std::shared_ptr<void> slot(nullptr, [sh = shared](void*) { --sh->transfers; });
  asio::post(*pool, [sh = shared, c, digest = std::move(digest), token = std::move(token), from = *range,
                     slot = std::move(slot)]() mutable {
    auto p = std::make_shared<PreparedArtefact>(Prepare(*sh, digest, token));
    const size_t chunk = sh->options.read_chunk;
    asio::post(c->executor(), [c, p, from, slot = std::move(slot), digest = std::move(digest), chunk]() mutable {
      Serve(c, std::move(*p), from, std::move(slot), digest, chunk);
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

void Serve(const std::shared_ptr<http::Conn>& c, PreparedArtefact p, std::optional<int64_t> from,
           std::shared_ptr<void> slot, const std::string& digest, size_t chunk) {
  if (c->closed()) return;
  if (p.status != 0) return c->RespondError(p.status, p.message);
  const int64_t start = from.value_or(0);
  if (from && start >= p.size) {
    return c->RespondError(416, "artefact " + digest + " has " + std::to_string(p.size) + " bytes",
                           {{"Content-Range", "bytes */" + std::to_string(p.size)}});
  }
  http::HeaderList extra = {{"X-Airlock-Digest", digest}, {"Accept-Ranges", "bytes"}};
  if (from) {
    extra.emplace_back("Content-Range", "bytes " + std::to_string(start) + "-" + std::to_string(p.size - 1) + "/" +
                                            std::to_string(p.size));
  }
  c->BeginResponse(from ? 206 : 200, "application/octet-stream", static_cast<uint64_t>(p.size - start), extra);
  auto t = std::make_shared<ArtefactTransfer>();
  t->fd = std::move(p.fd);
  t->off = start;
  t->end = p.size;
  t->buf.resize(chunk);
  t->slot = std::move(slot);
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
