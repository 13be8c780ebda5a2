#include "http/socket_options.h"

#include <fcntl.h>

namespace airlock::http {

void SetCloexec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

}  // namespace airlock::http
