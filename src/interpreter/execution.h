// Execution: the HTTP side of one POST /execute. The 200 NDJSON response
// begins at once (the SDK's requestTimeoutMs covers only the headers), then
// lines are written as the kernel produces them:
//   - output lines (stdout/stderr/result/error) are counted; the line that
//     would cross `max_output_bytes` is cut (a stream's text) or dropped, the
//     kernel is interrupted (on_limit), further output is dropped, and the
//     response ends with the OutputLimitExceeded error and end_of_execution.
//     So at most about the cap is ever queued on the connection, however
//     slowly the client reads;
//   - a keepalive line after every `keepalive` of silence;
//   - end_of_execution is always the last line (Finish).
// The client going away (SetOnClose + WatchForDisconnect) calls on_gone once.
// Single-threaded: the io thread only.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "http/conn.h"
#include "interpreter/request.h"
#include "interpreter/wire.h"

namespace airlock::interpreter {

class Execution : public std::enable_shared_from_this<Execution> {
 public:
  Execution(std::shared_ptr<http::Conn> conn, ExecuteRequest request, std::string access_token,
            size_t max_output_bytes, std::chrono::milliseconds keepalive);

  const ExecuteRequest& request() const { return request_; }
  const std::string& access_token() const { return access_token_; }

  // Sends the headers, watches for the client going away, arms keepalives.
  void Begin();
  void SetOnGone(std::function<void()> fn) { on_gone_ = std::move(fn); }
  void SetOnLimit(std::function<void()> fn) { on_limit_ = std::move(fn); }

  // An IOPub message of the user's execution (stream, results, error,
  // execute_input); status and the rest are ignored here.
  void OnIopub(const KernelMessage& m);
  // The execute_reply, kept until Complete(): the shell and IOPub channels
  // are not ordered with each other, so the reply may come before the
  // IOPub error it repeats.
  void OnReply(const nlohmann::json& content) { reply_ = content; }
  // The kernel finished (reply and IOPub idle, so every IOPub message of the
  // execution has been seen): from the reply, execution_count if no
  // execute_input gave it, an error the IOPub did not carry, or
  // ExecutionAborted; then Finish().
  void Complete();
  // Ends the response: an optional error line, then end_of_execution.
  void Finish(std::optional<std::string> error_line = std::nullopt);

  bool gone() const { return gone_; }
  bool finished() const { return finished_; }
  bool limit_hit() const { return limit_hit_; }
  size_t output_bytes() const { return output_bytes_; }

 private:
  void WriteLine(const std::string& line);
  void WriteOutput(std::string line, const char* stream_name, std::string_view stream_text);
  void HitLimit();
  void ArmKeepalive();
  void OnClientGone();

  std::shared_ptr<http::Conn> conn_;
  ExecuteRequest request_;
  std::string access_token_;
  size_t max_output_bytes_;
  std::chrono::milliseconds keepalive_;
  boost::asio::steady_timer timer_;
  std::chrono::steady_clock::time_point last_write_;
  size_t output_bytes_ = 0;
  bool counted_ = false;
  bool error_sent_ = false;
  nlohmann::json reply_;
  bool limit_hit_ = false;
  bool gone_ = false;
  bool finished_ = false;
  std::function<void()> on_gone_, on_limit_;
};

// The error lines the server itself produces.
std::string UnexpectedEndLine();
std::string OutputLimitLine(size_t max_output_bytes);

}  // namespace airlock::interpreter
