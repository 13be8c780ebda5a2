#include "runtime/qemu/output_tail.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace airlock::qemu {

Status OutputTail::Start(UniqueFd fd) {
  if (thread_.joinable()) return FailedPrecondition("OutputTail already started");
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  stop_r_.Reset(p[0]);
  stop_w_.Reset(p[1]);
  fd_ = std::move(fd);
  thread_ = std::thread([this] { Loop(); });
  return OkStatus();
}

void OutputTail::Stop() {
  if (!thread_.joinable()) return;
  (void)!::write(stop_w_.get(), "x", 1);
  thread_.join();
  fd_.Reset();
}

void OutputTail::Loop() {
  char buf[16384];
  while (true) {
    pollfd p[2] = {{fd_.get(), POLLIN, 0}, {stop_r_.get(), POLLIN, 0}};
    int r = ::poll(p, 2, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return;
      Append(buf, static_cast<size_t>(n));
    }
  }
}

void OutputTail::Append(const char* data, size_t n) {
  total_ += n;
  std::lock_guard<std::mutex> lock(mu_);
  if (n >= capacity_) {
    buf_.assign(data + (n - capacity_), capacity_);
    return;
  }
  buf_.append(data, n);
  // Trim in chunks so appends stay amortised O(n).
  if (buf_.size() > capacity_ + capacity_ / 4) buf_.erase(0, buf_.size() - capacity_);
}

std::string OutputTail::Tail() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (buf_.size() > capacity_) return buf_.substr(buf_.size() - capacity_);
  return buf_;
}

bool OutputTail::Contains(const std::string& needle) const {
  std::lock_guard<std::mutex> lock(mu_);
  return buf_.find(needle) != std::string::npos;
}

Status OutputTail::Write(std::string_view bytes) {
  // fd_ is set before the thread starts and reset after it is joined (Stop):
  // the same thread that calls Start and Stop calls this (the VMM's owner).
  if (!thread_.joinable() || !fd_) return Unavailable("the console is not connected");
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd_.get(), bytes.data() + done, bytes.size() - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Unavailable("the console input is full");
    if (n < 0) return ErrnoError("send to the console");
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace airlock::qemu
