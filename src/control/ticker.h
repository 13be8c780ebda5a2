// Ticker: `tick` every `period` on the thread running the io_context, from
// Start() until Stop() (call Stop on that thread, or before the io_context
// runs; the owner outlives any pending wait by stopping first). A tick that
// has blocking work posts it elsewhere itself.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>

namespace airlock::control {

class Ticker {
 public:
  Ticker(boost::asio::io_context& io, std::chrono::milliseconds period, std::function<void()> tick)
      : timer_(io), period_(period), tick_(std::move(tick)) {}
  void Start() { Schedule(); }
  void Stop() { timer_.cancel(); }

 private:
  void Schedule() {
    timer_.expires_after(period_);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      tick_();
      Schedule();
    });
  }
  boost::asio::steady_timer timer_;
  std::chrono::milliseconds period_;
  std::function<void()> tick_;
};

}  // namespace airlock::control
