// QmpClient: a QEMU Machine Protocol client over a unix socket.
// Connect() reads the greeting and negotiates capabilities; Execute() sends
// {"execute": cmd, "arguments": args, "id": n} and waits (bounded by a
// timeout) for the reply with that id, returning its "return" value, or the
// "error" (class + desc) as a Status. Asynchronous events read meanwhile are
// kept (the last kMaxEvents) for inspection. The peer (QEMU) is treated as
// untrusted: lines are capped at kMaxLine bytes and must parse as objects.
// Thread-safe: one Execute at a time.
#pragma once

#include <chrono>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::qemu {

class QmpClient {
 public:
  static constexpr size_t kMaxLine = 1 << 20;
  static constexpr size_t kMaxEvents = 64;

  // Connects to `socket_path` and negotiates; Unavailable if nobody listens.
  static StatusOr<std::unique_ptr<QmpClient>> Connect(const std::string& socket_path,
                                                      std::chrono::milliseconds timeout);

  StatusOr<nlohmann::json> Execute(const std::string& command, const nlohmann::json& arguments = nullptr,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(5));
  const nlohmann::json& greeting() const { return greeting_; }
  // The pid of the process that listens on the socket (SO_PEERCRED); -1 if unknown.
  pid_t PeerPid() const;
  // Events seen so far (oldest first), e.g. {"event":"SHUTDOWN",...}.
  std::deque<nlohmann::json> events() const;

 private:
  explicit QmpClient(UniqueFd fd) : fd_(std::move(fd)) {}
  StatusOr<nlohmann::json> ReadMessage(std::chrono::steady_clock::time_point deadline);
  Status Send(const nlohmann::json& msg, std::chrono::steady_clock::time_point deadline);
  StatusOr<nlohmann::json> ExecuteLocked(const std::string& command, const nlohmann::json& arguments,
                                         std::chrono::milliseconds timeout);

  UniqueFd fd_;
  std::string buf_;
  nlohmann::json greeting_;
  uint64_t next_id_ = 1;
  mutable std::mutex mu_;
  std::deque<nlohmann::json> events_;
};

}  // namespace airlock::qemu
