// Entropy reseed after a snapshot restore (docs/snapshots.md): every restored
// copy of a guest starts with the snapshot's kernel RNG state, so the host
// sends fresh random bytes in POST /init ("entropy", base64) and the agent
// mixes them into the kernel pool, credits them and forces the CRNG to
// reseed, so no two forks or resumes share /dev/urandom output.
#pragma once

#include <string_view>

#include "common/status.h"

namespace airlock::agent {

inline constexpr size_t kMinEntropyBytes = 16;
inline constexpr size_t kMaxEntropyBytes = 512;

// Writes `bytes` to `device` (normally /dev/urandom), credits them with
// RNDADDENTROPY (8 bits per byte) and asks for RNDRESEEDCRNG. InvalidArgument
// when the size is outside [kMinEntropyBytes, kMaxEntropyBytes]; the ioctls
// need CAP_SYS_ADMIN (the guest's PID 1 has it): their failure is an error
// naming the ioctl, after the plain write (which always mixes) succeeded.
Status ReseedEntropy(std::string_view bytes, const char* device = "/dev/urandom");

}  // namespace airlock::agent
