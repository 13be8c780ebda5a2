// How much an OCI image's layers expand to on the host, counted before
// umoci unpacks them (oci_base.cc): a 4 MB layer of zeros is 4 GiB on disk.
// Each layer blob (gzip, zstd or plain tar, told apart by magic bytes, never
// by the manifest's media type) is decompressed as a stream and its tar
// headers read; the data is skipped, never stored. A layer's size is
//   sum over entries of (512 + the entry's logical size)
// where the logical size is that of a regular file (a PAX `size=`, a GNU
// sparse file's real size, a base-256 size field all count) and 0 for
// directories, links and device nodes (as Go's archive/tar, which umoci
// uses, reads them). Layers add up (a later layer's whiteouts are not
// subtracted): an upper bound of the unpacked tree. Counting stops as soon
// as the cap is passed, so a bomb costs the cap's worth of decompression.
//
// Errors: ResourceExhausted when the total passes the cap (the message
// names the cap and the layer); DataLoss for a blob that is not a tar (bad
// header checksum, a truncated entry, corrupt gzip); FailedPrecondition for
// a zstd layer when the `zstd` program is missing; errno statuses with the
// path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::image {

struct TarTally {
  uint64_t bytes = 0;    // sum of (512 + logical size) over entries
  uint64_t entries = 0;  // every member, PAX/GNU extension headers excepted
};

// Reads a tar stream fed in pieces of any size. Feed returns
// ResourceExhausted once tally().bytes passes `limit` (then stop feeding),
// DataLoss for bytes that are not a tar stream. done() after the two zero
// blocks that end an archive (what follows is ignored).
class TarCounter {
 public:
  explicit TarCounter(uint64_t limit) : limit_(limit) {}
  Status Feed(std::string_view data);
  // OK when the stream ended on an entry boundary (end blocks or EOF).
  Status Finish() const;
  const TarTally& tally() const { return tally_; }
  bool done() const { return zero_blocks_ >= 2; }

 private:
  Status Header(const unsigned char* h);
  Status PaxRecords(std::string_view text);

  uint64_t limit_;
  TarTally tally_;
  std::string header_;    // a partial header block
  uint64_t skip_ = 0;     // data bytes (incl. padding) of the current entry still to skip
  bool collect_ = false;  // the current entry's data is a PAX header's records
  std::string pax_;       // those records, while collected
  uint64_t pax_left_ = 0; // record bytes of that header still to come (the rest is padding)
  uint64_t pax_size_ = 0;
  bool pax_has_size_ = false;
  uint64_t pax_real_size_ = 0;
  bool pax_has_real_size_ = false;
  int zero_blocks_ = 0;
};

// Tally of one layer blob at `path` (compression detected by magic), read
// until the archive ends or the tally passes `limit` (ResourceExhausted).
// Errors name the blob's path.
StatusOr<TarTally> TallyLayer(const std::string& path, uint64_t limit);

// All of `layers` (blob paths, in order) against `max_bytes`. OK with the
// total; ResourceExhausted naming the cap and the layer at which it passed.
StatusOr<TarTally> CheckUnpackedSize(const std::vector<std::string>& layers, uint64_t max_bytes);

}  // namespace airlock::image
