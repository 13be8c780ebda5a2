#include "agent/entropy.h"

#include <fcntl.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/fd.h"

namespace airlock::agent {

Status ReseedEntropy(std::string_view bytes, const char* device) {
  if (bytes.size() < kMinEntropyBytes || bytes.size() > kMaxEntropyBytes) {
    return InvalidArgument("entropy must be " + std::to_string(kMinEntropyBytes) + ".." +
                           std::to_string(kMaxEntropyBytes) + " bytes, got " + std::to_string(bytes.size()));
  }
  UniqueFd fd(::open(device, O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoError(std::string("open ") + device);
  // A plain write mixes the bytes into the pool (no credit, no capability needed).
  if (::write(fd.get(), bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    return ErrnoError(std::string("write ") + device);
  }
  std::vector<unsigned char> buf(sizeof(rand_pool_info) + bytes.size());
  auto* info = reinterpret_cast<rand_pool_info*>(buf.data());
  info->entropy_count = static_cast<int>(bytes.size() * 8);
  info->buf_size = static_cast<int>(bytes.size());
  std::memcpy(buf.data() + sizeof(rand_pool_info), bytes.data(), bytes.size());
  if (::ioctl(fd.get(), RNDADDENTROPY, info) != 0) {
    // gVisor's Sentry has no such ioctl on its random device (ENOTTY): its /dev/urandom reads the
    // host's getrandom on every read, so there is no guest pool to reseed and
    // the write above is all there is to do.
    struct stat st {};
    if (errno == ENOTTY && ::fstat(fd.get(), &st) == 0 && S_ISCHR(st.st_mode)) return OkStatus();
    return ErrnoError("ioctl RNDADDENTROPY");
  }
#ifdef RNDRESEEDCRNG
  if (::ioctl(fd.get(), RNDRESEEDCRNG) != 0) return ErrnoError("ioctl RNDRESEEDCRNG");
#endif
  return OkStatus();
}

}  // namespace airlock::agent
