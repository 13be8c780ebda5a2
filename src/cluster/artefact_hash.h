// Internal to the artefact files (artefacts.h): incremental SHA-256
// (OpenSSL EVP), hashing a file's prefix with its holes read as zeros
// without reading them, and the pieces of the extent encoding (artefacts.h
// "Wire") that the server and the fetch share: the record header, the
// Accept check, and the fetch's strict readers of chunked framing and of
// records (they see a peer's bytes: bounded, and never trusting a length).
// Not for other modules.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

struct evp_md_ctx_st;

namespace airlock::cluster::artefact_internal {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Reset();
  void Update(std::string_view bytes);
  void UpdateZeros(int64_t n);
  std::string FinalHex();  // 64 lowercase hex; Reset() before reusing

 private:
  evp_md_ctx_st* ctx_;
};

// Feeds the first `len` logical bytes of `fd` into `h`: data regions are
// read (1 MiB at a time), holes (SEEK_DATA/SEEK_HOLE, where the file system
// has them) hashed as zeros. A file shorter than `len`: OutOfRange. Errors
// name `path`.
Status HashPrefix(int fd, int64_t len, Sha256& h, const std::string& path);

// The block a fetch writes or leaves a hole, and the server's unit of
// zeros found in data: 64 KiB, aligned to the file's offsets.
inline constexpr int64_t kZeroBlock = 64 * 1024;
inline bool AllZero(const char* p, size_t n) { return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0); }

// ---- the extent encoding ----

inline constexpr char kExtentsType[] = "application/x-airlock-extents";
inline constexpr char kExtentData = 'D';
inline constexpr char kExtentZeros = 'Z';
inline constexpr size_t kExtentHeaderSize = 13;              // kind, u64 BE offset, u32 BE length
inline constexpr int64_t kMaxZeroExtent = int64_t{1} << 30;  // what the server puts in one 'Z'

// Appends {kind, offset, length} (length 1..2^32-1).
void AppendExtentHeader(std::string& out, char kind, int64_t offset, int64_t length);

// Whether an Accept header's value lists kExtentsType (case-insensitive,
// parameters ignored, "q=0" honoured as a refusal).
bool AcceptsExtents(std::string_view accept);

// Decodes an HTTP/1.1 chunked body: Feed() wire bytes as they come, the
// decoded bytes go to `out` in order. Strict: a size line is 1..15 hex
// digits (an extension after ';' is skipped), ended by CRLF, at most 1 KiB;
// a chunk's data is followed by CRLF; after the last chunk, trailer lines
// (16 KiB in all) up to an empty line. Malformed framing, or any byte after
// the end: Unavailable ("chunked framing: ..."). An error from `out` is
// returned as it is.
class ChunkedDecoder {
 public:
  using Out = std::function<Status(std::string_view)>;
  Status Feed(std::string_view in, const Out& out);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  // Appends up to a '\n' to line_; true with the line (CR stripped) whole.
  StatusOr<bool> TakeLine(std::string_view& in, size_t limit);

  State state_ = State::kSize;
  std::string line_;
  uint64_t left_ = 0;   // data left in the current chunk
  size_t trailer_ = 0;  // trailer bytes so far
};

// Reads a body of extent records covering [from, size): Feed() its bytes
// as they come; a 'D' record's bytes go to `data` (in pieces, in order), a
// 'Z' record's length to `zeros`. Refused, as Unavailable ("extent record
// at byte N: ..."): a kind other than 'D'/'Z', an offset other than where
// the last record ended (a gap or an overlap), a length of 0 or past
// `size`, a byte after the record that ends at `size`. An error from a sink
// is returned as it is. off() is the logical offset reached (inside a 'D'
// record too); done() once it is `size` with no record open.
class ExtentReader {
 public:
  struct Sinks {
    std::function<Status(std::string_view)> data;
    std::function<Status(int64_t)> zeros;
  };
  ExtentReader(int64_t from, int64_t size) : off_(from), size_(size) {}
  Status Feed(std::string_view body, const Sinks& sinks);
  int64_t off() const { return off_; }
  bool done() const { return off_ == size_ && data_left_ == 0; }

 private:
  int64_t off_, size_;
  int64_t data_left_ = 0;  // bytes of the open 'D' record still to come
  std::string header_;     // a header's first bytes, when split across Feeds
};

}  // namespace airlock::cluster::artefact_internal
