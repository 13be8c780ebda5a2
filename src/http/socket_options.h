// Socket options every airlock HTTP endpoint sets by hand, on a socket the
// caller owns (no fd changes hands): best effort (errors ignored;
// the fd is one Asio or the kernel just gave us).
#pragma once

namespace airlock::http {

// Sets FD_CLOEXEC (Asio opens sockets without it): VMMs and guest commands
// are spawned from threads of the same process and must not inherit them.
void SetCloexec(int fd);

}  // namespace airlock::http
