#include "core/socket_watchdog.h"

#include <sys/socket.h>

#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

namespace airlock {
namespace {

using Clock = SocketWatchdog::Clock;

// The process's one watchdog thread; it waits until the earliest deadline of
// any watched socket (or a new watch) and never exits (leaked on purpose: a
// static destructor would race threads still using sockets at exit).
class Watchdog {
 public:
  static Watchdog& Get() {
    static Watchdog* w = new Watchdog();
    return *w;
  }

  void Add(std::shared_ptr<SocketWatchdog::Entry> e) {
    std::lock_guard<std::mutex> l(mu_);
    entries_.push_back(std::move(e));
    cv_.notify_one();
  }

  // After this returns the thread never touches e->fd.
  void Remove(const std::shared_ptr<SocketWatchdog::Entry>& e) {
    std::lock_guard<std::mutex> l(mu_);
    e->removed = true;
  }

 private:
  Watchdog() { std::thread([this] { Run(); }).detach(); }

  static Clock::time_point DeadlineOf(const SocketWatchdog::Entry& e) {
    Clock::time_point idle_end =
        Clock::time_point(Clock::duration(e.last_progress_ns.load(std::memory_order_relaxed))) + e.idle;
    return e.total_deadline ? std::min(idle_end, *e.total_deadline) : idle_end;
  }

  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      const auto now = Clock::now();
      Clock::time_point next = now + std::chrono::hours(1);
      for (auto it = entries_.begin(); it != entries_.end();) {
        auto& e = **it;
        if (e.removed) {
          it = entries_.erase(it);
          continue;
        }
        const auto due = DeadlineOf(e);
        if (due <= now) {
          e.fired.store(true);
          ::shutdown(e.fd, SHUT_RDWR);  // wakes the owner's blocked poll/recv/send
          it = entries_.erase(it);
          continue;
        }
        next = std::min(next, due);
        ++it;
      }
      cv_.wait_until(l, next);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::shared_ptr<SocketWatchdog::Entry>> entries_;
};

}  // namespace

SocketWatchdog::Watch& SocketWatchdog::Watch::operator=(Watch&& o) noexcept {
  if (this != &o) {
    if (entry_) Watchdog::Get().Remove(entry_);
    entry_ = std::move(o.entry_);
  }
  return *this;
}

SocketWatchdog::Watch::~Watch() {
  if (entry_) Watchdog::Get().Remove(entry_);
}

SocketWatchdog::Watch SocketWatchdog::Start(int fd, std::chrono::milliseconds idle,
                                            std::optional<std::chrono::milliseconds> total) {
  auto e = std::make_shared<Entry>();
  e->fd = fd;
  e->idle = idle;
  if (total) e->total_deadline = Clock::now() + *total;
  e->Touch();
  Watchdog::Get().Add(e);
  return Watch(std::move(e));
}

}  // namespace airlock
