// libFuzzer target for the migration stream filter (runtime/qemu/
// migration_stream.h), whose input comes from QEMU, which runs what the guest
// makes it run. The first byte picks the policy (pass-through, delta against
// a fixed 8-page base, fork file into a memfd) and the read size; the rest is
// the stream. Seeds: tests/fuzz/corpus/qemu_migration_stream/ (streams in
// QEMU 7.2's format, tests/unit/migration_stream_builder.h's layout).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/fd.h"
#include "runtime/qemu/migration_stream.h"

namespace {
using namespace airlock;
using namespace airlock::qemu;

class Reader final : public StreamReader {
 public:
  Reader(const uint8_t* d, size_t n, size_t step) : d_(d), n_(n), step_(step) {}
  StatusOr<size_t> ReadSome(char* p, size_t max) override {
    size_t k = std::min({max, step_, n_ - pos_});
    std::memcpy(p, d_ + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  const uint8_t* d_;
  size_t n_, step_, pos_ = 0;
};

class Sink final : public StreamWriter {
 public:
  Status Write(const char*, size_t n) override {
    bytes += n;
    return OkStatus();
  }
  size_t bytes = 0;
};

constexpr uint64_t kPage = 4096, kPages = 8;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 3;
  const size_t step = 1 + (data[0] >> 2) * 97;
  static const std::string base = [] {
    std::string b(kPages * kPage, '\0');
    b.replace(0, kPage, std::string(kPage, 'a'));
    b.replace(5 * kPage, kPage, std::string(kPage, 'f'));
    return b;
  }();
  static const std::vector<bool> base_data = {true, false, false, false, false, true, false, false};
  RamPagePolicy p;
  p.block_bytes = kPages * kPage;
  UniqueFd file;
  if (mode == 1) {
    p.base = reinterpret_cast<const unsigned char*>(base.data());
    p.base_data = &base_data;
  } else if (mode == 2) {
    file.Reset(::memfd_create("fuzz-ram", MFD_CLOEXEC));
    if (!file || ::ftruncate(file.get(), static_cast<off_t>(p.block_bytes)) != 0) return 0;
    p.file_fd = file.get();
  }
  Reader r(data + 1, size - 1, step);
  Sink s;
  (void)FilterMigrationStream(r, s, p);
  return 0;
}
