// Socket options every airlock HTTP endpoint sets by hand, on a socket the
// caller owns (no fd changes hands): both are best effort (errors ignored;
// the fd is one Asio or the kernel just gave us).
#pragma once

#include <chrono>

namespace airlock::http {

// Sets FD_CLOEXEC (Asio opens sockets without it): VMMs and guest commands
// are spawned from threads of the same process and must not inherit them.
void SetCloexec(int fd);

// Bounds every blocking read and write on socket `fd` (SO_RCVTIMEO and
// SO_SNDTIMEO): Beast's expires_after applies to asynchronous operations only.
void SetSocketIoTimeout(int fd, std::chrono::milliseconds timeout);

}  // namespace airlock::http
