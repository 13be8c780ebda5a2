// GET/PUT /airlock/root-changes (agent/root_changes.h): the daemon's
// disk-only snapshot of a gVisor guest, out and back in. Behind the same
// access token as every other route; a tenant that calls it reads or writes
// nothing it could not with a command as root.
//
// GET answers 200 application/x-tar, chunked, written by a thread into a
// pipe this connection drains (the walk blocks; the agent's loop must not).
// An export that fails part-way ends the connection without the last chunk,
// so the daemon never keeps a cut archive as complete. 501 where the guest
// has no template tree at kRootBaseMount (a microVM: its disk is kept as is).
// PUT takes such a tar as the body and answers 200 {"entries", "deleted",
// "bytes", "skipped", "firstError"}; 400 for a malformed archive.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <memory>
#include <mutex>
#include <thread>

#include "agent/agent.h"
#include "agent/log.h"
#include "agent/root_changes.h"
#include "envd/messages.h"
#include "http/conn.h"

namespace airlock::agent {
namespace {

namespace asio = boost::asio;

struct ExportResult {
  std::mutex mu;
  bool done = false;
  Status status;
  RootChangesStats stats;
};

// Drains the pipe into the response, pausing while the peer is slow.
class ExportPump : public std::enable_shared_from_this<ExportPump> {
 public:
  ExportPump(std::shared_ptr<http::Conn> s, int read_fd, std::shared_ptr<ExportResult> result)
      : s_(std::move(s)), sd_(s_->executor(), read_fd), result_(std::move(result)), buf_(1 << 16) {}
  void Start() {
    std::weak_ptr<ExportPump> weak = shared_from_this();
    s_->SetOnDrain([weak] {
      if (auto self = weak.lock()) self->Read();
    });
    keep_ = shared_from_this();
    Read();
  }

 private:
  void Read() {
    if (reading_ || s_->closed() || s_->pending_bytes() >= (1u << 20)) {
      if (s_->closed()) Stop();
      return;
    }
    reading_ = true;
    auto self = shared_from_this();
    sd_.async_read_some(asio::buffer(buf_), [self](boost::system::error_code ec, size_t n) {
      self->reading_ = false;
      if (self->s_->closed()) return self->Stop();
      if (n > 0) self->s_->Write(std::string_view(self->buf_.data(), n));
      if (ec) return self->End();
      self->Read();
    });
  }
  void End() {
    // The writer closed its end: it is done, one way or the other.
    bool ok = false;
    {
      std::lock_guard<std::mutex> l(result_->mu);
      ok = result_->done && result_->status.ok();
      if (ok) {
        LogInfo("root changes exported: %llu entries, %llu removed, %llu bytes, %llu skipped%s%s",
                static_cast<unsigned long long>(result_->stats.entries),
                static_cast<unsigned long long>(result_->stats.deleted),
                static_cast<unsigned long long>(result_->stats.bytes),
                static_cast<unsigned long long>(result_->stats.skipped),
                result_->stats.first_error.empty() ? "" : "; first: ", result_->stats.first_error.c_str());
      } else {
        LogError("root changes export failed: %s", result_->status.message().c_str());
      }
    }
    if (ok)
      s_->EndResponse();
    else
      s_->Abort();
    Stop();
  }
  void Stop() {
    boost::system::error_code ignored;
    sd_.close(ignored);  // the writer then sees EPIPE and stops
    keep_.reset();
  }

  std::shared_ptr<http::Conn> s_;
  asio::posix::stream_descriptor sd_;
  std::shared_ptr<ExportResult> result_;
  std::vector<char> buf_;
  bool reading_ = false;
  std::shared_ptr<ExportPump> keep_;
};

void HandleExport(std::shared_ptr<http::Conn> s) {
  struct stat st;
  if (::stat(kRootBaseMount, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return RespondHttpError(*s, 501, std::string("this guest has no template tree at ") + kRootBaseMount +
                                         " (its runtime keeps its disk itself)");
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return RespondHttpError(*s, 500, "pipe: " + std::string(std::strerror(errno)));
  auto result = std::make_shared<ExportResult>();
  std::thread([w = p[1], result] {
    RootChangesStats stats;
    Status st = WriteRootChanges("/", kRootBaseMount, MountPointsBelowRoot(), w, &stats);
    {
      std::lock_guard<std::mutex> l(result->mu);
      result->done = true;
      result->status = st;
      result->stats = stats;
    }
    ::close(w);
  }).detach();
  s->BeginResponse(200, "application/x-tar", std::nullopt);
  std::make_shared<ExportPump>(s, p[0], result)->Start();
}

void HandleImport(std::shared_ptr<http::Conn> s) {
  auto importer = std::make_shared<RootChangesImporter>("/");
  s->ReadBody([importer](std::string_view chunk) { return importer->Feed(chunk); },
              [s, importer](Status st) {
                if (st.ok()) st = importer->Finish();
                if (!st.ok()) {
                  LogError("root changes import failed: %s", st.message().c_str());
                  return RespondHttpError(*s, st.code() == StatusCode::kInternal ? 500 : 400, st.message());
                }
                const RootChangesStats& r = importer->stats();
                LogInfo("root changes imported: %llu entries, %llu removed, %llu bytes, %llu skipped%s%s",
                        static_cast<unsigned long long>(r.entries), static_cast<unsigned long long>(r.deleted),
                        static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.skipped),
                        r.first_error.empty() ? "" : "; first: ", r.first_error.c_str());
                envd::OJson j = {{"entries", r.entries}, {"deleted", r.deleted}, {"bytes", r.bytes},
                                 {"skipped", r.skipped}, {"firstError", r.first_error}};
                s->Respond(200, "application/json", envd::Dump(j));
              });
}

}  // namespace

void HandleRootChanges(Agent& agent, std::shared_ptr<http::Conn> s) {
  (void)agent;
  if (s->method() == http::Method::kGet) return HandleExport(std::move(s));
  if (s->method() == http::Method::kPut) return HandleImport(std::move(s));
  RespondHttpError(*s, 405, "method not allowed");
}

}  // namespace airlock::agent
