// Guest image files shared between a cluster's nodes (issue 38 item 1;
// docs/multinode.md): a custom template's rootfs.ext4 built on one node is
// fetched by another node that lacks it. Files are content-addressed by
// SHA-256, large (GiBs), sparse, mode 0444 and never modified once made.
//
// Digest (artefacts.cc):
//   DigestOf(path): SHA-256 over the file's logical bytes (holes read as
//   zeros; SEEK_DATA/SEEK_HOLE skip reading them), size (st_size) and
//   allocated (st_blocks * 512). Cached in the sidecar "<path>.sha256", text
//   "<64 hex> <size> <mtime_ns> <ino>\n", trusted only while the file's size,
//   mtime and inode still match; a sidecar that cannot be written (a read-only
//   directory) is not an error. Errors: ErrnoError naming the path.
//
// Wire (artefact_server.cc), HTTP/1.1, one route:
//   GET /artefacts/<64 lowercase hex>
//     X-Airlock-Grant: <token>   (required; the registry's grant)
//     Range: bytes=N-            (optional; the only form served)
//     Accept: application/x-airlock-extents   (optional: extent records)
//   200, or 206 with Content-Range: bytes N-<size-1>/<size> (N: logical
//   offset, whichever body), with X-Airlock-Digest and Vary: Accept; body:
//   - plain (no Accept listing the type, case-insensitive; ";q=0" is no):
//     application/octet-stream, Content-Length: size - N, the file's bytes
//     from N, holes as zeros;
//   - extents: application/x-airlock-extents, Transfer-Encoding: chunked
//     (the length is not known before), a sequence of records that covers
//     [N, size) exactly, in order, each beginning where the last ended:
//       u8 kind ('D' data, 'Z' zeros), u64 BE offset, u32 BE length (>0),
//       then `length` bytes for 'D', none for 'Z'.
//     The server sends holes (SEEK_DATA/SEEK_HOLE) and 64 KiB-aligned
//     all-zero pieces of what it reads (allocated zeros) as 'Z' (at most
//     1 GiB each), the rest as 'D' (at most one read, read_chunk bytes);
//     record and HTTP chunk boundaries are unrelated. A read that fails
//     cuts the connection (no last chunk): the peer resumes.
//   Measured (loopback, tests' throwaway run): 2.94 GB logical with 560 MiB
//   of data and 140 MiB of allocated zeros crossed as 587 MB.
//   Errors, JSON {"code","message"} (http/json_error.h):
//     400 a malformed digest or Range (anything but "bytes=N-")
//     403 no grant, or the grant was refused (check_grant's PermissionDenied
//         message)
//     404 another path, or path_of says NotFound
//     405 a method other than GET
//     416 N >= size (Content-Range: bytes */<size>)
//     500 "artefact <digest> on this node is corrupt" (its DigestOf is not
//         the digest asked; logged)
//     503 check_grant/path_of failed otherwise, or too many transfers
//   Over a cluster's mutual TLS, peers reach it through the node's TLS
//   listener (gateway/tls_front.h TlsClientAuth::peer_*; cluster_tls.h
//   FromFrontsAndPeers): it listens on loopback only.
//
// Fetch (artefact_fetch.cc): FetchArtefact, blocking, as FetchRequest says.
// Errors: InvalidArgument (request shape), ResourceExhausted (disk budget,
// before any byte is written), PermissionDenied (the holder refused the
// grant, or its TLS identity is not holder_node), NotFound (the holder
// lacks it), DataLoss (the bytes received do not hash to the digest: the
// part is deleted; or the holder's own copy is corrupt), Unavailable /
// DeadlineExceeded (the connection failed, or the body was malformed, after
// its retries: the part is kept, a later call resumes), ErrnoError for the
// local file system.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

struct ssl_st;

namespace boost::asio {
class io_context;
namespace ssl {
class context;
}
}  // namespace boost::asio

namespace airlock::cluster {

struct FileDigest {
  std::string sha256;     // 64 lowercase hex over the logical bytes, holes as zeros
  int64_t size = 0;       // logical (st_size)
  int64_t allocated = 0;  // st_blocks * 512
};

StatusOr<FileDigest> DigestOf(const std::string& path);
// Writes the sidecar for `path` (its size, mtime and inode now) saying its
// digest is `sha256`: for a writer that hashed the bytes as it wrote them.
// Atomic (a temporary sibling renamed); errors name the path.
Status WriteDigestSidecar(const std::string& path, const std::string& sha256);

// 64 lowercase hex characters.
bool IsArtefactDigest(std::string_view digest);

// A Range header's value as ArtefactServer reads it: "" → nullopt (the
// whole file); "bytes=N-" (N decimal, no sign, at most 18 digits) → N;
// anything else (other units, a last byte, suffixes, several ranges,
// spaces) → InvalidArgument.
StatusOr<std::optional<int64_t>> ParseArtefactRange(std::string_view value);

inline constexpr char kArtefactGrantHeader[] = "X-Airlock-Grant";
inline constexpr char kArtefactPathPrefix[] = "/artefacts/";

// The local file holding `digest`; NotFound → 404, another error → 503.
using ArtefactPathFn = std::function<StatusOr<std::string>(const std::string& digest)>;
// Whether `token` grants `digest` to the caller; PermissionDenied → 403
// with its message, another error → 503.
using ArtefactGrantFn = std::function<Status(const std::string& token, const std::string& digest)>;

struct ArtefactServerOptions {
  int workers = 2;                 // threads for path_of, check_grant and DigestOf
  int max_transfers = 32;          // requests at once; more get 503
  size_t read_chunk = 256 * 1024;  // bytes read from the file per write
};

// Threads: the connections and the file reads run on `io` (the caller runs
// it: give the server an io_context of its own, as a read may wait on the
// disk); path_of, check_grant and DigestOf (blocking: a registry query, a
// hash of a file without a valid sidecar) on `workers` threads of the
// server's own. A body is read from the file a chunk at a time as the peer
// takes it (Conn's backpressure): never whole in memory.
class ArtefactServer {
 public:
  ArtefactServer(boost::asio::io_context& io, ArtefactPathFn path_of, ArtefactGrantFn check_grant,
                 ArtefactServerOptions options = {});
  ~ArtefactServer();  // Stop()
  ArtefactServer(const ArtefactServer&) = delete;
  ArtefactServer& operator=(const ArtefactServer&) = delete;
  // "ip:port" (port 0: a free one). Errors as http::Listener::Listen's;
  // FailedPrecondition when started twice or a callback is missing.
  Status Start(const std::string& address);
  uint16_t port() const;
  // Closes the listener (connections end with their response, or when
  // `io` stops) and joins the workers. Call it (and the destructor) on
  // `io`'s thread or while `io` is not running.
  void Stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

struct FetchRequest {
  std::string host;  // the holder's IP literal
  uint16_t port = 0;
  std::string holder_node;  // the holder's node name (errors; TLS identity)
  std::string digest;       // 64 lowercase hex
  int64_t size = 0;         // logical bytes expected
  int64_t allocated = 0;    // the holder's allocated bytes (the disk budget)
  std::string grant;        // X-Airlock-Grant
  std::string dest;         // final path; must not exist unless a finished copy
  // Same file system as dest. Holds fetch-<digest>.part (kept across calls
  // and restarts: a later call resumes from it) and fetch-<digest>.lock.
  std::string tmp_dir;
  // Mutual TLS to the holder: this node's client side
  // (cluster_tls.h PeerClientContext: its certificate, the cluster CA as
  // the only trust) and the check of the peer's certificate after the
  // handshake (PeerIsNode(holder_node)), required with `tls`; a refusal is
  // PermissionDenied. Null: plain HTTP (serve --insecure-cluster).
  std::shared_ptr<boost::asio::ssl::context> tls;
  std::function<Status(ssl_st* ssl)> peer_check;
  // Free bytes the fetch must leave on tmp_dir's file system: refused
  // (ResourceExhausted) when free - (allocated - the part's allocation)
  // would fall below it.
  int64_t reserve_bytes = 0;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};  // connect + TLS handshake
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(30)};     // no byte for this long: cut
  int retries = 3;                                                      // cut connections resumed within one call
  // The whole call, retries included: a holder that sends slowly (a byte
  // now and then, within idle_timeout) is cut at this (DeadlineExceeded;
  // the part is kept, a later call resumes).
  std::chrono::milliseconds deadline{std::chrono::minutes(30)};
  // Ask for extent records (Accept: application/x-airlock-extents): holes
  // and zero blocks do not cross the wire. A holder that answers plain
  // bytes is served as before. false: ask for plain bytes.
  bool extents = true;
};

struct FetchResult {
  // Body bytes on the wire in this call (for extents: record headers and
  // data; chunked framing not counted).
  int64_t bytes_received = 0;
  bool resumed = false;  // a part from an earlier call was used
};

// Blocking; call it on a worker. Serialised per digest by an flock on
// <tmp_dir>/fetch-<digest>.lock (across processes too): a second caller
// waits, then finds dest and returns {0, false}. Resumes a part with
// "Range: bytes=<part size>-" after re-hashing the part (an answer of 200
// instead of 206 starts over). Asks for extent records (r.extents) and
// reads whichever body comes by its Content-Type: records framed chunked
// or by Content-Length, plain bytes by Content-Length. Strict: malformed
// chunked framing, a record of another kind, out of order (a gap or an
// overlap), of length 0 or past size, bytes after the last record, a body
// that ends early: Unavailable, handled as a cut connection (the part
// keeps what came before; resumed within the retries, else kept for a
// later call). A cut after the last byte loses nothing: the digest
// decides. The logical bytes are hashed in order ('Z' as zeros). Writes
// sparsely: a 64 KiB-aligned block of zeros (sent or 'Z') becomes a hole.
// Over TLS it names ALPN kArtefactAlpn (cluster_tls.h), so the holder's
// listener sends it to its artefact server. A retry waits 100 ms times its number first. On success: the
// SHA-256 and size verified, fsync, chmod 0444, rename to dest (its
// DigestOf sidecar written too). A dest of another size is AlreadyExists;
// a failed call leaves no empty part. Errors as the file comment says.
StatusOr<FetchResult> FetchArtefact(const FetchRequest& r);

}  // namespace airlock::cluster
