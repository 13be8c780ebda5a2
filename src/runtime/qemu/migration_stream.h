// A filter over the migration stream QEMU 7.2 writes for `migrate` (precopy,
// stream version 3; QEMU's migration/savevm.c and migration/ram.c, the
// format docs/snapshots.md "RAM deltas and fork files" describes). It passes
// the header, the configuration and every device section through unchanged
// and decides, page by page, what becomes of the pages of one RAM block (the
// guest RAM backend, kRamBackendId):
//
//   kept     re-encoded into the output stream (the restoring QEMU loads it);
//   dropped  because the VM that restores the stream maps the same bytes
//            already: the page equals the base RAM file's (a *delta*: pause,
//            checkpoint and named snapshots of a clone write only what it
//            changed since its template or fork);
//   moved    into a RAM file of the snapshot's own that its restores map
//            copy-on-write (a fork: children share every page neither wrote).
//
// Pages of other RAM blocks (ROMs, ACPI tables) are always kept. A record
// that names its block by CONTINUE is re-encoded with the name whenever a
// dropped record stood between it and its block's last kept one, so the
// output is a valid stream for QEMU's loader.
//
// The input is untrusted (QEMU runs what the guest makes it run): every
// length, offset and flag is checked, nothing is allocated from a length in
// the stream beyond fixed bounds, and anything this filter does not know
// (compressed or XBZRLE pages, postcopy, commands, an iterable section other
// than "ram") is DataLoss naming the byte offset, never a guess.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace airlock::qemu {

// Where the stream comes from: the socket QEMU writes to (bounded by size
// and deadline by its implementation), or a buffer (tests, the fuzzer).
class StreamReader {
 public:
  virtual ~StreamReader() = default;
  // Up to `max` bytes into `p`; 0 only at the end of the stream.
  virtual StatusOr<size_t> ReadSome(char* p, size_t max) = 0;
};

// Where the filtered stream goes (the snapshot's memory file, with its CRC).
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  virtual Status Write(const char* p, size_t n) = 0;
};

struct RamPagePolicy {
  std::string block = "mem0";  // the RAM block the policy applies to
  uint64_t block_bytes = 0;    // its size (the guest RAM); the stream must agree
  // Delta: the base RAM, block_bytes long and read-only, that restores will
  // map; `base_data[i]` says whether page i of it may be non-zero (false:
  // all zeros, and never read). Pages equal to the base are dropped.
  const unsigned char* base = nullptr;
  const std::vector<bool>* base_data = nullptr;
  // Fork file: >= 0, a file of block_bytes (sparse, zero-filled) that gets
  // every non-zero page of the block; the block's pages leave the stream.
  int file_fd = -1;
};

struct MigrationFilterStats {
  uint64_t bytes_in = 0, bytes_out = 0;
  uint64_t pages_kept = 0;     // of the policy's block, left in the stream
  uint64_t pages_dropped = 0;  // equal to the base
  uint64_t pages_to_file = 0;  // written into file_fd (non-zero pages)
  uint64_t other_pages = 0;    // of other RAM blocks (always kept)
  bool ignore_shared = false;  // the stream was written with x-ignore-shared
};

// Filters `in` into `out` by `policy` (neither base nor file_fd: every page
// is kept, and the stream is only checked and re-encoded). DataLoss for a
// malformed or truncated stream; FailedPrecondition when the policy's block
// is missing or of another size; the reader's and writer's errors as they are.
StatusOr<MigrationFilterStats> FilterMigrationStream(StreamReader& in, StreamWriter& out, const RamPagePolicy& policy);

}  // namespace airlock::qemu
