// GET /files (download) and POST /files (upload, spec §4.1). Uploads stream
// to disk chunk by chunk: multipart parts through MultipartParser, raw
// application/octet-stream bodies (optionally gzip, inflated by zlib as they
// arrive). Errors use the envd JSON shape {"code":<http>,"message":...}.
#include <fcntl.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <ctime>
#include <set>
#include <thread>

#include <boost/asio/post.hpp>

#include "agent/agent.h"
#include "agent/as_user.h"
#include "agent/file_metadata.h"
#include "agent/fs_util.h"
#include "agent/log.h"
#include "envd/multipart.h"
#include "agent/paths.h"
#include "common/fd.h"
#include "common/hex.h"
#include "envd/messages.h"

namespace airlock::agent {
namespace {

constexpr size_t kDownloadChunk = 256 * 1024;
// The most of a file stat calls empty that one download reads (Download).
constexpr uint64_t kMaxUnsizedDownload = 64ull << 20;

int HttpStatusFor(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: case StatusCode::kAlreadyExists: return 400;
    case StatusCode::kFailedPrecondition: return 400;  // e.g. metadata on a filesystem without xattrs
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kResourceExhausted: return 507;
    default: return 500;
  }
}

StatusOr<User> FilesUser(Agent& agent, const http::Conn& s) {
  if (auto name = s.Query("username"); name && !name->empty()) return agent.UserByName(*name);
  return agent.UserFromAuthHeader(s);
}

class Gunzip {
 public:
  Gunzip() { ok_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK; }
  ~Gunzip() { inflateEnd(&z_); }
  Gunzip(const Gunzip&) = delete;
  Gunzip& operator=(const Gunzip&) = delete;

  Status Feed(std::string_view in, const std::function<Status(std::string_view)>& out) {
    if (!ok_) return Internal("zlib init failed");
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z_.avail_in = static_cast<uInt>(in.size());
    char buf[64 * 1024];
    do {
      if (ended_ && z_.avail_in > 0) {  // concatenated gzip members
        if (inflateReset(&z_) != Z_OK) return InvalidArgument("gzip: reset failed");
        ended_ = false;
      }
      z_.next_out = reinterpret_cast<Bytef*>(buf);
      z_.avail_out = sizeof buf;
      int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
        return InvalidArgument(std::string("gzip: ") + (z_.msg ? z_.msg : "corrupt data"));
      }
      size_t n = sizeof buf - z_.avail_out;
      if (n > 0) RETURN_IF_ERROR(out(std::string_view(buf, n)));
      if (rc == Z_STREAM_END) ended_ = true;
      if (rc == Z_BUF_ERROR) break;  // needs more input
    } while (z_.avail_in > 0 || z_.avail_out == 0);
    return OkStatus();
  }
  Status Finish() { return ended_ ? OkStatus() : InvalidArgument("gzip: truncated stream"); }

 private:
  z_stream z_{};
  bool ok_ = false;
  bool ended_ = false;
};

// A temporary name beside `path` ("<dir>/.<name>.airlock-upload-<16 hex>").
std::string TempUploadPath(const std::string& path) {
  unsigned char r[8];
  if (getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) {
    uint64_t v = static_cast<uint64_t>(getpid()) ^ static_cast<uint64_t>(time(nullptr)) << 20;
    std::memcpy(r, &v, sizeof r);
  }
  return ParentPath(path) + "/." + BaseName(path) + ".airlock-upload-" + HexEncode(r, sizeof r);
}

// One upload request; writes its files one after another. Each file is
// written under a temporary name in its directory and renamed onto its
// final path only once all its bytes are in (Close): an upload that fails or
// is cut off mid-body leaves neither a truncated file at the final path nor
// the temporary one (Abort, also run by the destructor).
class Upload {
 public:
  Upload(Agent& agent, User user, Metadata metadata)
      : agent_(agent), user_(std::move(user)), metadata_(std::move(metadata)) {}
  ~Upload() { Abort(); }
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  // Creates the parents and opens the file, all with the user's permissions
  // (as_user.h): what the user cannot write is permission_denied (403). A
  // symlink as the last component is refused (O_NOFOLLOW), so a link planted
  // in a shared directory cannot redirect a root upload.
  Status Open(const std::string& raw_path) {
    ASSIGN_OR_RETURN(std::string path, ResolvePath(raw_path, user_.home));
    if (!seen_.insert(path).second) return InvalidArgument("path '" + path + "' is given more than once");
    std::string tmp = TempUploadPath(path);
    RETURN_IF_ERROR(RunAsUser(user_, agent_.can_switch_user(), [&]() -> Status {
      struct stat st;
      if (lstat(path.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) return InvalidArgument("path '" + path + "' is a directory");
        if (S_ISLNK(st.st_mode)) return InvalidArgument("path '" + path + "' is a symlink; it is not followed");
      }
      RETURN_IF_ERROR(MakeDirs(ParentPath(path)));
      // The temporary file is the user's (the kernel sets the owner), so the
      // renamed file is too; a root upload over a user's file makes it root's.
      fd_.Reset(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
      if (!fd_) return ErrnoError("open " + tmp);
      return OkStatus();
    }));
    path_ = path;
    tmp_ = tmp;
    return OkStatus();
  }

  Status Write(std::string_view data) {
    if (!fd_) return OkStatus();  // a part we ignore
    while (!data.empty()) {
      ssize_t n = write(fd_.get(), data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("write " + path_);
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return OkStatus();
  }

  Status Close() {
    if (!fd_) return OkStatus();
    // The temporary file is new: setting the request's keys makes them the
    // file's whole user.e2b.* set. A failure here aborts the file.
    if (!metadata_.empty()) RETURN_IF_ERROR(WriteMetadata(fd_.get(), path_, metadata_));
    int rc = close(fd_.Release());
    if (rc != 0) return ErrnoError("close " + tmp_);
    // rename() replaces the final path atomically, with the user's rights.
    RETURN_IF_ERROR(RunAsUser(user_, agent_.can_switch_user(), [&]() -> Status {
      if (rename(tmp_.c_str(), path_.c_str()) != 0) return ErrnoError("rename " + tmp_ + " to " + path_);
      return OkStatus();
    }));
    tmp_.clear();
    envd::OJson e = envd::OJson::object();
    e["path"] = path_;
    e["name"] = BaseName(path_);
    e["type"] = "file";
    if (!metadata_.empty()) {
      envd::OJson m = envd::OJson::object();
      for (const auto& [k, v] : metadata_) m[k] = v;
      e["metadata"] = std::move(m);
    }
    result_.push_back(std::move(e));
    return OkStatus();
  }

  envd::OJson& result() { return result_; }

  // Drops the file being written (its temporary name); idempotent.
  void Abort() {
    fd_.Reset();
    if (!tmp_.empty()) (void)unlink(tmp_.c_str());
    tmp_.clear();
  }

 private:
  Agent& agent_;
  User user_;
  Metadata metadata_;
  UniqueFd fd_;
  std::string path_;
  std::string tmp_;  // the temporary name while a file is open
  std::set<std::string> seen_;
  envd::OJson result_ = envd::OJson::array();
};

void Finish(std::shared_ptr<http::Conn> s, std::shared_ptr<Upload> up, Status st) {
  if (!st.ok() || s->closed()) up->Abort();  // cut off mid-body: nothing at the final path
  if (s->closed()) return;
  if (st.ok()) st = up->Close();
  if (!st.ok()) up->Abort();
  if (!st.ok()) {
    LogDebug("upload failed: %s", st.ToString().c_str());
    return RespondHttpError(*s, HttpStatusFor(st), st.message());
  }
  if (up->result().empty()) return RespondHttpError(*s, 400, "no file in the upload");
  s->Respond(200, "application/json", envd::Dump(up->result()));
}

// Streams an open file into the response, pausing on backpressure: a
// fixed-length body of `size` bytes, or (to_eof) a chunked body read until
// EOF, for the files whose size stat cannot tell (procfs, sysfs: 0), as envd
// does. Such a file is read non-blocking, so one that has nothing to give
// yet (/proc/kmsg) ends its body instead of holding the agent, and at most
// kMaxUnsizedDownload bytes of it are sent.
class Download : public std::enable_shared_from_this<Download> {
 public:
  Download(std::shared_ptr<http::Conn> s, UniqueFd fd, uint64_t size, bool to_eof)
      : s_(std::move(s)), fd_(std::move(fd)), remaining_(size), to_eof_(to_eof), buf_(kDownloadChunk) {}
  void Start() {
    std::weak_ptr<Download> weak = shared_from_this();
    s_->SetOnDrain([weak] {
      if (auto self = weak.lock()) self->Pump();
    });
    keep_ = shared_from_this();  // alive until the body is out
    Pump();
  }

 private:
  void Pump() {
    while (remaining_ > 0 && !s_->closed() && s_->pending_bytes() < (1u << 20)) {
      ssize_t n = read(fd_.get(), buf_.data(), std::min<uint64_t>(buf_.size(), remaining_));
      if (n < 0 && errno == EINTR) continue;
      if (to_eof_ && (n == 0 || (n < 0 && errno == EAGAIN))) {  // its end, or nothing more yet
        remaining_ = 0;
        break;
      }
      // A read error, or a sized file that shrank (the promised length
      // cannot be met): the body is cut off, which the client sees.
      if (n <= 0) {
        s_->Abort();
        keep_.reset();
        return;
      }
      remaining_ -= static_cast<uint64_t>(n);
      s_->Write(std::string_view(buf_.data(), static_cast<size_t>(n)));
    }
    if (remaining_ == 0 || s_->closed()) {
      s_->EndResponse();
      keep_.reset();
    }
  }
  std::shared_ptr<http::Conn> s_;
  UniqueFd fd_;
  uint64_t remaining_;
  bool to_eof_;
  std::vector<char> buf_;
  std::shared_ptr<Download> keep_;
};

// POST /files/compose's copy, as the user: every source (a regular file,
// opened with the user's rights) appended to a new file beside
// `destination`, renamed onto it once complete, then the sources removed (as
// envd's compose.go). Zero-copy (copy_file_range) where the kernel can.
StatusOr<envd::OJson> Compose(const std::vector<std::string>& sources, const std::string& destination) {
  struct stat dst;
  const bool dst_exists = stat(destination.c_str(), &dst) == 0;
  if (dst_exists && S_ISDIR(dst.st_mode)) return InvalidArgument("destination '" + destination + "' is a directory");
  std::vector<UniqueFd> in;
  for (const auto& src : sources) {
    // O_NONBLOCK: a FIFO named as a source must not hold the open.
    UniqueFd fd(open(src.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd && errno == ENOENT) return NotFound("source file not found: " + src);
    if (!fd) return ErrnoError("open " + src);
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return ErrnoError("fstat " + src);
    if (!S_ISREG(st.st_mode)) return InvalidArgument("source path is not a regular file: " + src);
    // The same file by another path (a link, a symlinked directory): its
    // removal after the rename would remove the result.
    if (dst_exists && st.st_dev == dst.st_dev && st.st_ino == dst.st_ino)
      return InvalidArgument("source path \"" + src + "\" cannot be the same as destination");
    int flags = fcntl(fd.get(), F_GETFL);
    if (flags >= 0) (void)fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    in.push_back(std::move(fd));
  }
  RETURN_IF_ERROR(MakeDirs(ParentPath(destination)));
  const std::string tmp = TempUploadPath(destination);
  UniqueFd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!out) return ErrnoError("create " + tmp);
  auto fail = [&](Status st) {
    out.Reset();
    (void)unlink(tmp.c_str());
    return st;
  };
  std::vector<char> buf;
  for (size_t i = 0; i < in.size(); ++i) {
    for (;;) {
      ssize_t n = copy_file_range(in[i].get(), nullptr, out.get(), nullptr, 1 << 30, 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        // A filesystem pair the kernel cannot copy between: read and write.
        buf.resize(kDownloadChunk);
        n = read(in[i].get(), buf.data(), buf.size());
        for (ssize_t done = 0; n > 0 && done < n;) {
          ssize_t w = write(out.get(), buf.data() + done, static_cast<size_t>(n - done));
          if (w < 0 && errno == EINTR) continue;
          if (w < 0) return fail(ErrnoError("write " + tmp));
          done += w;
        }
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail(ErrnoError("compose " + sources[i]));
      if (n == 0) break;
    }
  }
  if (close(out.Release()) != 0) return fail(ErrnoError("close " + tmp));
  if (rename(tmp.c_str(), destination.c_str()) != 0) return fail(ErrnoError("rename " + tmp + " to " + destination));
  for (const auto& src : sources) (void)unlink(src.c_str());
  envd::OJson e = envd::OJson::object();
  e["path"] = destination;
  e["name"] = BaseName(destination);
  e["type"] = "file";
  return e;
}

}  // namespace

// POST /files/compose (envd's files API, compose.go): {"source_paths":
// [path...], "destination": path, "username"?: name}; relative paths are the
// user's home's. 200 EntryInfo of the destination; 400 (no sources, no
// destination, a source that is the destination or not a regular file), 401
// (unknown user), 403, 404 (a source missing), 507 (disk full). The copy runs
// on a thread of its own, with the user's rights (as_user.h), so a large
// compose never holds the agent.
void HandleFilesCompose(Agent& agent, std::shared_ptr<http::Conn> s) {
  s->ReadBodyToString(kMaxRequestBody, [&agent, s](StatusOr<std::string> body) {
    if (!body.ok()) return RespondHttpError(*s, 400, body.status().message());
    envd::Json j = envd::Json::parse(*body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return RespondHttpError(*s, 400, "invalid request body: not a JSON object");
    auto sources_it = j.find("source_paths");
    if (sources_it == j.end() || !sources_it->is_array() || sources_it->empty())
      return RespondHttpError(*s, 400, "source_paths must not be empty");
    auto dest_it = j.find("destination");
    if (dest_it == j.end() || !dest_it->is_string() || dest_it->get<std::string>().empty())
      return RespondHttpError(*s, 400, "destination is required");
    StatusOr<User> user = agent.UserFromAuthHeader(*s);
    if (auto u = j.find("username"); u != j.end() && u->is_string() && !u->get<std::string>().empty())
      user = agent.UserByName(u->get<std::string>());
    if (!user.ok()) return RespondHttpError(*s, 401, user.status().message());
    auto destination = ResolvePath(dest_it->get<std::string>(), user->home);
    if (!destination.ok()) return RespondHttpError(*s, 400, destination.status().message());
    std::vector<std::string> sources;
    for (const auto& src : *sources_it) {
      if (!src.is_string()) return RespondHttpError(*s, 400, "source_paths must be strings");
      auto path = ResolvePath(src.get<std::string>(), user->home);
      if (!path.ok()) return RespondHttpError(*s, 400, path.status().message());
      if (*path == *destination)
        return RespondHttpError(*s, 400, "source path \"" + src.get<std::string>() + "\" cannot be the same as destination");
      sources.push_back(*path);
    }
    std::thread([&agent, s, user = *user, sources = std::move(sources), destination = *destination] {
      auto entry = RunAsUser<envd::OJson>(user, agent.can_switch_user(), [&] { return Compose(sources, destination); });
      asio::post(s->executor(), [s, entry = std::move(entry)] {
        if (!entry.ok()) return RespondHttpError(*s, HttpStatusFor(entry.status()), entry.status().message());
        s->Respond(200, "application/json", envd::Dump(*entry));
      });
    }).detach();
  });
}

void HandleFilesGet(Agent& agent, std::shared_ptr<http::Conn> s) {
  auto user = FilesUser(agent, *s);
  if (!user.ok()) return RespondHttpError(*s, 401, user.status().message());
  auto path = ResolvePath(s->Query("path").value_or(""), user->home);
  if (!path.ok()) return RespondHttpError(*s, 400, path.status().message());
  // Opened with the user's permissions (as_user.h); reads then use the fd.
  UniqueFd fd;
  Status opened = RunAsUser(*user, agent.can_switch_user(), [&]() -> Status {
    fd.Reset(open(path->c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd && errno == ENOENT) return NotFound("path '" + *path + "' does not exist");
    if (!fd) return ErrnoError("open " + *path);
    return OkStatus();
  });
  if (!opened.ok()) return RespondHttpError(*s, HttpStatusFor(opened), opened.message());
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return RespondHttpError(*s, 500, "fstat " + *path);
  if (S_ISDIR(st.st_mode)) return RespondHttpError(*s, 400, "path '" + *path + "' is a directory");
  if (!S_ISREG(st.st_mode)) return RespondHttpError(*s, 400, "path '" + *path + "' is not a regular file");
  if (st.st_size == 0) {
    // Empty, or a procfs/sysfs file whose size is not known until read.
    int flags = fcntl(fd.get(), F_GETFL);
    if (flags < 0 || fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
      return RespondHttpError(*s, 500, "fcntl " + *path);
    }
    s->BeginResponse(200, "application/octet-stream", std::nullopt);
    return std::make_shared<Download>(s, std::move(fd), kMaxUnsizedDownload, true)->Start();
  }
  s->BeginResponse(200, "application/octet-stream", static_cast<uint64_t>(st.st_size));
  std::make_shared<Download>(s, std::move(fd), static_cast<uint64_t>(st.st_size), false)->Start();
}

void HandleFilesPost(Agent& agent, std::shared_ptr<http::Conn> s) {
  auto user = FilesUser(agent, *s);
  if (!user.ok()) return RespondHttpError(*s, 401, user.status().message());
  auto metadata = MetadataFromHeaders(s->Headers());
  if (!metadata.ok()) return RespondHttpError(*s, 400, metadata.status().message());
  auto up = std::make_shared<Upload>(agent, *user, std::move(*metadata));
  std::optional<std::string> query_path = s->Query("path");
  if (query_path && query_path->empty()) query_path.reset();
  std::string ct = s->Header("Content-Type");
  std::string encoding = s->Header("Content-Encoding");

  if (strncasecmp(ct.c_str(), "multipart/form-data", 19) == 0) {
    auto boundary = envd::MultipartBoundary(ct);
    if (!boundary.ok()) return RespondHttpError(*s, 400, boundary.status().message());
    envd::MultipartParser::Callbacks cb;
    cb.on_part_begin = [up, query_path](const envd::PartHeaders& h) -> Status {
      if (h.name != "file") return OkStatus();  // other fields are ignored
      if (query_path) return up->Open(*query_path);
      if (!h.filename || h.filename->empty()) return InvalidArgument("file part without a filename");
      return up->Open(*h.filename);
    };
    cb.on_part_data = [up](std::string_view d) { return up->Write(d); };
    cb.on_part_end = [up] { return up->Close(); };
    auto parser = std::make_shared<envd::MultipartParser>(*boundary, std::move(cb));
    return s->ReadBody([parser](std::string_view chunk) { return parser->Feed(chunk); },
                       [s, up, parser](Status st) {
                         if (st.ok()) st = parser->Finish();
                         Finish(s, up, st);
                       });
  }

  bool octet = ct.empty() || strncasecmp(ct.c_str(), "application/octet-stream", 24) == 0;
  if (!octet) return RespondHttpError(*s, 400, "unsupported content type '" + ct + "'");
  if (!query_path) return RespondHttpError(*s, 400, "the path query parameter is required for raw uploads");
  std::shared_ptr<Gunzip> gz;
  if (strcasecmp(encoding.c_str(), "gzip") == 0 || strcasecmp(encoding.c_str(), "x-gzip") == 0) {
    gz = std::make_shared<Gunzip>();
  } else if (!encoding.empty() && strcasecmp(encoding.c_str(), "identity") != 0) {
    return RespondHttpError(*s, 400, "unsupported content encoding '" + encoding + "'");
  }
  Status st = up->Open(*query_path);
  if (!st.ok()) return RespondHttpError(*s, HttpStatusFor(st), st.message());
  s->ReadBody(
      [up, gz](std::string_view chunk) -> Status {
        if (!gz) return up->Write(chunk);
        return gz->Feed(chunk, [&](std::string_view d) { return up->Write(d); });
      },
      [s, up, gz](Status st) {
        if (st.ok() && gz) st = gz->Finish();
        Finish(s, up, st);
      });
}

}  // namespace airlock::agent
