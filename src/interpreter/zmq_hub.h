// ZmqHub: the one thread that owns every ZeroMQ socket of the interpreter.
// Per kernel: shell and control DEALERs and an IOPub SUB (subscribed to
// everything, receive high-water mark 0 = never drop), connected to the
// ports of the kernel's connection file.
//
// Other threads (the io thread) call Add/Send/Remove; they only queue a
// command and wake the hub through an eventfd, never block on ZeroMQ. The
// hub receives every message, verifies its HMAC (ParseMessage; a bad or
// malformed message is dropped and counted) and hands it to `on_message`,
// on the hub thread; the server's callback posts it to the io thread.
// The output cap is applied twice: exactly by the io thread (execution.h),
// on the lines it writes, and roughly here, so that a kernel printing
// faster than lines can be made never grows a backlog: per kernel, the raw
// content bytes of output messages (stream, display_data, execute_result,
// error) of one parent request are summed, and past `max_content` their
// content is no longer parsed (content_too_large; the io thread then ends
// the execution with OutputLimitExceeded and interrupts the kernel). What is
// left per message is the HMAC and a small header parse.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "interpreter/kernel_process.h"
#include "interpreter/wire.h"

namespace airlock::interpreter {

enum class Channel { kShell, kControl, kIopub };

class ZmqHub {
 public:
  using OnMessage = std::function<void(uint64_t kernel, Channel, KernelMessage)>;
  using OnDropped = std::function<void(uint64_t kernel, const Status&)>;

  ZmqHub(OnMessage on_message, OnDropped on_dropped, size_t max_content);
  ~ZmqHub();  // stops and joins the thread
  ZmqHub(const ZmqHub&) = delete;
  ZmqHub& operator=(const ZmqHub&) = delete;

  Status Start();
  void Stop();

  // Sockets for kernel `id` (a number never reused). `pidfd` (may be
  // invalid): the hub SIGINTs the kernel through it the moment a request's
  // output passes max_content, without waiting for the io thread to get
  // there; the io thread interrupts too (execution.h), this only cuts the
  // latency, so a fast-printing kernel leaves less in flight.
  void Add(uint64_t id, const ConnectionInfo& info, UniqueFd pidfd);
  void Send(uint64_t id, Channel channel, std::vector<std::string> frames);
  void Remove(uint64_t id);

  uint64_t dropped() const { return dropped_.load(); }

 private:
  struct Command {
    enum Kind { kAdd, kSend, kRemove } kind = kSend;
    uint64_t id = 0;
    ConnectionInfo info;
    UniqueFd pidfd;
    Channel channel = Channel::kShell;
    std::vector<std::string> frames;
  };
  struct Impl;

  void Push(Command c);
  void Run();

  OnMessage on_message_;
  OnDropped on_dropped_;
  size_t max_content_;
  std::mutex mu_;
  std::deque<Command> commands_;
  bool stopping_ = false;
  UniqueFd wake_;
  std::thread thread_;
  std::atomic<uint64_t> dropped_{0};
  std::unique_ptr<Impl> impl_;
};

}  // namespace airlock::interpreter
