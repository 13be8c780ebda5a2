// OutputTail: drains a file descriptor (the guest console socket, QEMU's
// stderr pipe) on a background thread and keeps only the last `capacity`
// bytes in memory. Nothing is written to disk, so a hostile guest printing
// without end costs bounded memory and one core's worth of reads at most.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::qemu {

class OutputTail {
 public:
  explicit OutputTail(size_t capacity) : capacity_(capacity) {}
  ~OutputTail() { Stop(); }
  OutputTail(const OutputTail&) = delete;
  OutputTail& operator=(const OutputTail&) = delete;

  // Starts draining `fd` (taken over) until EOF or Stop().
  Status Start(UniqueFd fd);
  void Stop();
  // The last bytes read (≤ capacity), oldest first.
  std::string Tail() const;
  // Total bytes ever read (including dropped ones).
  uint64_t total_bytes() const { return total_.load(); }
  bool Contains(const std::string& needle) const;
  // Writes `bytes` to the fd being drained (a socket: the console's input)
  // without blocking; all or nothing as far as the socket buffer allows
  // (Unavailable when it would block or is not started, an errno status else).
  Status Write(std::string_view bytes);

 private:
  void Loop();
  void Append(const char* data, size_t n);

  const size_t capacity_;
  UniqueFd fd_, stop_r_, stop_w_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::string buf_;
  std::atomic<uint64_t> total_{0};
};

}  // namespace airlock::qemu
