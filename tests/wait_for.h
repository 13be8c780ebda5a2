// WaitFor(condition, deadline): the way tests wait for something to happen,
// instead of sleeping a fixed time and hoping it did. Header-only, for unit
// and integration tests alike.
//
// `condition` is polled every `poll` (default 50 ms) until it returns true or
// the deadline passes; it is checked once more at the deadline, so a slow
// machine never fails a test whose condition holds just in time. Returns
// whether it held. Use the result: EXPECT_TRUE(WaitFor(...)) << what.
#pragma once

#include <chrono>
#include <thread>
#include <utility>

namespace airlock {

template <typename Condition>
bool WaitFor(Condition&& condition, std::chrono::steady_clock::time_point deadline,
             std::chrono::milliseconds poll = std::chrono::milliseconds(50)) {
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    auto left = deadline - std::chrono::steady_clock::now();
    std::this_thread::sleep_for(left < poll ? std::chrono::duration_cast<std::chrono::milliseconds>(left) : poll);
  }
  return condition();
}

// The same, with the deadline `timeout` from now.
template <typename Condition, typename Rep, typename Period>
bool WaitFor(Condition&& condition, std::chrono::duration<Rep, Period> timeout,
             std::chrono::milliseconds poll = std::chrono::milliseconds(50)) {
  return WaitFor(
      std::forward<Condition>(condition),
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout),
      poll);
}

}  // namespace airlock
