// http::Conn: one server-side HTTP/1.1 connection (keep-alive, one request
// at a time; a pipelined request waits until the response before it ended),
// on a single-threaded io_context. Shared by the daemon (untrusted clients,
// the data-plane proxy) and the guest agent. Contract:
//   - the request head is at most `Limits::header_limit` bytes (else 431 and
//     close) and must arrive within `header_timeout` of the connection being
//     ready for it (a partial head gets 408 and close; an idle keep-alive
//     connection is closed silently); header names keep their spelling;
//   - the body (Content-Length or chunked, decoded) is pulled one chunk at a
//     time with ReadBodyChunk(), each chunk within `body_idle_timeout` (else
//     deadline_exceeded to the caller and no keep-alive), so a consumer gives
//     backpressure simply by not asking for the next chunk; ReadBody() and
//     ReadBodyToString() are push-style and bounded wrappers around it;
//   - no deadline applies while a response is written: a long streamed
//     response (a process's output) lives as long as the peer reads it;
//   - responses are queued writes: Respond() for whole bodies,
//     BeginResponse()/Write()/EndResponse() for streamed ones (Content-Length
//     or chunked), SendRaw()/FinishRaw() for bytes already framed (a proxy);
//     pending_bytes() and SetOnDrain() give backpressure; nothing is buffered
//     beyond what the handler queued;
//   - an exception thrown by the handler becomes a 500 JSON (or a close once
//     the response began); none leaves this layer.
// Status lines take their phrase from ReasonPhrase() (status_reason.h); error
// bodies are JsonError() (json_error.h). Beast is an implementation detail:
// nothing of it is visible here.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace airlock::http {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

enum class Method { kOther, kGet, kHead, kPost, kPut, kDelete, kPatch, kOptions, kConnect, kTrace };
// Exact (case-sensitive, RFC 9110 §9.1) token → Method; kOther otherwise.
Method ParseMethod(std::string_view token);

enum class LogLevel { kDebug, kWarning, kError };
using LogFn = std::function<void(LogLevel, const std::string&)>;

struct Limits {
  size_t header_limit = 64 * 1024;
  std::chrono::milliseconds header_timeout{std::chrono::seconds(30)};
  // Longest wait for the next piece of a request body.
  std::chrono::milliseconds body_idle_timeout{std::chrono::seconds(30)};
  // Never the first to close (0 = off): a response that ends its connection
  // waits up to this long for the client's FIN before closing (after it:
  // closes as usual), and an idle keep-alive connection that times out is
  // reset rather than closed. The server's side then never sits in
  // TIME_WAIT: for the agent under gVisor, whose checkpoint (runsc 20221219)
  // cannot save a TCP endpoint that is not closed or listening.
  std::chrono::milliseconds passive_close{0};
  // Applied to every body given to Respond()/RespondError() (secret
  // redaction); streamed (Write) and raw (SendRaw) bytes are not touched.
  std::function<std::string(std::string_view)> redact;
  // What the layer cannot hand to anyone (a throwing handler, a failed
  // accept); unset: dropped.
  LogFn log;
};

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  using Handler = std::function<void(std::shared_ptr<Conn>)>;
  // chunk: decoded body bytes (may be empty); done: the body is complete.
  using ChunkFn = std::function<void(Status, std::string_view chunk, bool done)>;

  Conn(boost::asio::ip::tcp::socket socket, Handler handler, Limits limits);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  void Start();

  // ---- request ----
  Method method() const { return method_; }
  const std::string& method_string() const { return method_string_; }
  const std::string& target() const { return target_; }  // raw, with query
  const std::string& path() const { return path_; }      // percent-decoded, no query
  // Query parameter (percent-decoded, '+' → ' '); nullopt when absent.
  std::optional<std::string> Query(const std::string& key) const;
  // First value of a header, "" when absent. Names are case-insensitive.
  std::string Header(std::string_view name) const;
  // Every header (name as sent, value), in order, duplicates kept.
  const HeaderList& Headers() const { return headers_; }
  bool chunked_request() const { return chunked_request_; }
  std::optional<uint64_t> content_length() const { return content_length_; }
  bool body_done() const { return body_done_; }
  const std::string& peer() const { return peer_; }  // "ip:port"

  // Pulls the next piece of the body; exactly one callback per call (posted
  // when nothing needs reading). Errors: deadline_exceeded (stalled longer
  // than body_idle_timeout), unavailable (connection broken or closed).
  void ReadBodyChunk(ChunkFn fn);
  // Streams the whole body to `on_chunk`. If on_chunk returns an error, the
  // rest is read and dropped and `on_done` gets that error. A broken
  // connection closes it (no response) and ends with unavailable; a stalled
  // body ends with deadline_exceeded (the handler may still answer).
  using PushFn = std::function<Status(std::string_view)>;
  void ReadBody(PushFn on_chunk, std::function<void(Status)> on_done);
  // The whole body, bounded: resource_exhausted past `limit` bytes (the rest
  // is not read; the connection closes after the response).
  void ReadBodyToString(size_t limit, std::function<void(StatusOr<std::string>)> done);
  // The body was read already (ReadBodyToString, by whoever looked at it
  // first) and is handed back: the next body read gets `body` whole.
  void ReplayBody(std::string body) { replay_body_ = std::move(body); }

  // ---- response ----
  void Respond(int status, std::string_view content_type, std::string body, const HeaderList& extra = {});
  // JsonError(status, message) as application/json.
  void RespondError(int status, const std::string& message, const HeaderList& extra = {});
  // JsonError(status, message, error_code): with E2B's machine-readable
  // error_code when it is not empty.
  void RespondErrorWithCode(int status, const std::string& message, std::string_view error_code,
                            const HeaderList& extra = {});
  // content_length: fixed-length body; nullopt → chunked (none for 204/304).
  void BeginResponse(int status, std::string_view content_type, std::optional<uint64_t> content_length,
                     const HeaderList& extra = {});
  void Write(std::string_view data);  // framed as a chunk when chunked
  void EndResponse();
  // Raw, already framed response bytes (status line and headers included).
  void SendRaw(std::string data);
  // End of a raw response; `keep_alive` false closes after the last byte.
  void FinishRaw(bool keep_alive);
  bool keep_alive() const { return keep_alive_; }
  bool response_started() const { return response_started_; }

  size_t pending_bytes() const { return pending_; }
  // Called whenever queued bytes drop below kLowWatermark after a write (may
  // replace itself); cleared when the response ends.
  void SetOnDrain(std::function<void()> fn) { on_drain_ = std::move(fn); }
  // Once, when the connection dies before the response ended.
  void SetOnClose(std::function<void()> fn) { on_close_ = std::move(fn); }
  // Once, with the status, when a response (not a raw one) begins (audit).
  void SetOnRespond(std::function<void(int)> fn) { on_respond_ = std::move(fn); }
  // Once, when a response begins, also on a connection the client has left:
  // its status, content type and, for Respond(), its body as sent (nullptr
  // for a response streamed with BeginResponse/Write). For a handler that
  // keeps what it answered (server/idempotency.h).
  using ResponseFn = std::function<void(int status, std::string_view content_type, const std::string* body)>;
  void SetOnResponse(ResponseFn fn) { on_response_ = std::move(fn); }
  // After the body is read: notice the peer hanging up during a long
  // response even when nothing is written (a pipelined request is left be).
  void WatchForDisconnect();
  bool closed() const { return closed_; }
  // Drops the connection now (e.g. a fixed-length body cannot be finished).
  void Abort() { Close(); }
  // Protocol upgrade (WebSocket, after the upstream's 101): hands over the
  // socket and the bytes already read past the request head. The Conn is
  // finished: no more callbacks, nothing more is written by it.
  std::pair<boost::asio::ip::tcp::socket, std::string> DetachSocket();
  boost::asio::any_io_executor executor() { return socket_.get_executor(); }

  static constexpr size_t kLowWatermark = 256 * 1024;

 private:
  struct Parser;  // Beast's parser and read buffer (conn.cc)

  void ReadHeader();
  void OnHeader(bool ok, bool timed_out, bool header_too_large, const std::string& error);
  void ReadStringStep(std::shared_ptr<std::string> body, size_t limit,
                      std::shared_ptr<std::function<void(StatusOr<std::string>)>> done);
  void PushStep(std::shared_ptr<PushFn> on_chunk, std::shared_ptr<std::function<void(Status)>> on_done,
                std::shared_ptr<Status> first_error);
  void ArmTimer(std::chrono::milliseconds d);
  void DisarmTimer();
  void Log(LogLevel level, const std::string& message) const;
  void Enqueue(std::string data);
  void Flush();
  void AfterResponse();
  void Close();
  // Limits::passive_close: waits for the client's FIN, then Close().
  void LingerThenClose();
  // The request body was not all read when the response ended: FIN, then
  // drop what the client still sends (bounded), then close (no RST).
  void DrainThenClose();
  void DrainStep(std::shared_ptr<std::vector<char>> buf, size_t dropped);
  static constexpr std::chrono::milliseconds kDrainTime{2000};
  static constexpr size_t kDrainBytes = 4 << 20;
  // Close() with an RST (SO_LINGER 0): no TIME_WAIT; for idle connections only.
  void ResetAndClose();

  boost::asio::ip::tcp::socket socket_;
  Handler handler_;
  Limits limits_;
  std::unique_ptr<Parser> parser_;
  uint64_t timer_gen_ = 0;
  bool timed_out_ = false;
  std::string peer_;

  Method method_ = Method::kOther;
  std::string method_string_, target_, path_;
  std::map<std::string, std::string> query_;
  HeaderList headers_;
  bool body_done_ = false;
  bool body_reading_ = false;
  bool body_read_in_flight_ = false;  // a ReadBodyChunk's read is pending
  bool draining_ = false;             // DrainThenClose owns the socket's reads
  bool chunked_request_ = false;
  std::optional<uint64_t> content_length_;
  std::optional<std::string> replay_body_;
  ResponseFn on_response_;
  const std::string* respond_body_ = nullptr;  // Respond()'s body while BeginResponse runs

  std::deque<std::string> out_;
  size_t pending_ = 0;
  bool writing_ = false;
  bool chunked_ = false;
  bool response_started_ = false;
  bool response_ended_ = false;
  bool keep_alive_ = true;
  bool closed_ = false;
  bool watching_ = false;
  std::function<void()> on_drain_;
  std::function<void()> on_close_;
  std::function<void(int)> on_respond_;
};

}  // namespace airlock::http
