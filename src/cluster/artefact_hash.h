// Internal to the artefact files (artefacts.h): incremental SHA-256
// (OpenSSL EVP) and hashing a file's prefix with its holes read as zeros
// without reading them. Not for other modules.
#pragma once

#include <cstdint>
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

}  // namespace airlock::cluster::artefact_internal
