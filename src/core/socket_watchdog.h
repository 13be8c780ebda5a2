// Deadlines for synchronous socket I/O with a guest (EnvdClient).
//
// Asio's and Beast's synchronous reads and writes have no deadline:
// SO_RCVTIMEO only makes recv(2) return EAGAIN, after which Asio waits in
// poll(2) without a limit, and beast::tcp_stream::expires_after applies to
// asynchronous operations only. A guest that accepts a connection and then
// stalls would hold the calling daemon thread until the sandbox died.
//
// The watchdog is one thread for the whole process. A Watch names a socket,
// an idle limit (no byte moved either way for that long) and optionally a
// total limit for the whole exchange; when either passes, the watchdog
// calls shutdown(SHUT_RDWR) on the socket, which wakes the blocked
// poll/recv at once, and the Watch reports it fired so the caller can say
// DeadlineExceeded instead of "connection reset". Progress is what the
// WatchedStream wrapper records on each read_some/write_some that moved
// bytes.
#pragma once

#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <memory>
#include <optional>

namespace airlock {

class SocketWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // One watched socket; shared by the watchdog and its owner.
  struct Entry {
    int fd = -1;
    std::chrono::milliseconds idle{0};
    std::optional<Clock::time_point> total_deadline;
    std::atomic<int64_t> last_progress_ns{0};  // Clock time of the last byte moved
    std::atomic<bool> fired{false};
    bool removed = false;  // under the watchdog's mutex
    void Touch() { last_progress_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }
  };

  // Watches `fd` while the returned Watch lives. Destroy the Watch before
  // closing `fd`: after its destructor returns the watchdog never touches it.
  class Watch {
   public:
    Watch() = default;
    Watch(Watch&& o) noexcept : entry_(std::move(o.entry_)) {}
    Watch& operator=(Watch&& o) noexcept;
    ~Watch();
    bool fired() const { return entry_ && entry_->fired.load(); }
    void Touch() {
      if (entry_) entry_->Touch();
    }

   private:
    friend class SocketWatchdog;
    explicit Watch(std::shared_ptr<Entry> e) : entry_(std::move(e)) {}
    std::shared_ptr<Entry> entry_;
  };

  static Watch Start(int fd, std::chrono::milliseconds idle,
                     std::optional<std::chrono::milliseconds> total = std::nullopt);
};

// A Beast SyncReadStream/SyncWriteStream over a tcp_stream that tells its
// Watch about every transfer that moved bytes.
class WatchedStream {
 public:
  WatchedStream(boost::beast::tcp_stream& s, SocketWatchdog::Watch& w) : s_(s), w_(w) {}
  using executor_type = boost::beast::tcp_stream::executor_type;
  executor_type get_executor() { return s_.get_executor(); }

  template <class Buffers>
  size_t read_some(const Buffers& b) {
    size_t n = s_.socket().read_some(b);
    if (n) w_.Touch();
    return n;
  }
  template <class Buffers>
  size_t read_some(const Buffers& b, boost::system::error_code& ec) {
    size_t n = s_.socket().read_some(b, ec);
    if (n) w_.Touch();
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& b) {
    size_t n = s_.socket().write_some(b);
    if (n) w_.Touch();
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& b, boost::system::error_code& ec) {
    size_t n = s_.socket().write_some(b, ec);
    if (n) w_.Touch();
    return n;
  }

 private:
  boost::beast::tcp_stream& s_;
  SocketWatchdog::Watch& w_;
};

}  // namespace airlock
