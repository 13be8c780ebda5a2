// HttpConn: one HTTP/1.1 connection of the daemon (keep-alive, one request at
// a time), on the daemon's single io_context thread. Built for untrusted
// clients and for proxying:
//   - request header ≤ 64 KiB, read within `header_timeout` (else 408/431 and
//     close); underscore header names are kept (Beast accepts them);
//   - the body is pulled one chunk at a time (chunked or Content-Length,
//     decoded), each chunk within `body_idle_timeout`, so a producer (e.g. the
//     proxy) gives backpressure simply by not asking for the next chunk;
//   - responses are queued writes: Respond() for whole bodies,
//     BeginResponse()/Write()/EndResponse() for streamed ones, SendRaw()/
//     FinishRaw() for bytes already framed (the proxy); pending_bytes() and
//     SetOnDrain() give backpressure; nothing is buffered beyond what the
//     handler queued.
// No exception leaves this layer (a throwing handler gets a 500 JSON).
// JSON error bodies are {"code": <status>, "message": "..."} (spec §1.3).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace airlock::server {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpLimits {
  size_t header_limit = 64 * 1024;
  std::chrono::milliseconds header_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds body_idle_timeout{std::chrono::seconds(30)};
  // Applied to every body given to Respond()/RespondError() (secret
  // redaction); proxied bytes (SendRaw) are not touched.
  std::function<std::string(std::string_view)> redact;
};

class HttpConn : public std::enable_shared_from_this<HttpConn> {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpConn>)>;
  // chunk: decoded body bytes (may be empty); done: the body is complete.
  using ChunkFn = std::function<void(Status, std::string_view chunk, bool done)>;

  HttpConn(tcp::socket socket, Handler handler, HttpLimits limits);
  void Start();

  // ---- request ----
  http::verb method() const { return head_.method(); }
  std::string method_string() const { return std::string(head_.method_string()); }
  const std::string& target() const { return target_; }  // raw, with query
  const std::string& path() const { return path_; }      // percent-decoded, no query
  std::optional<std::string> Query(const std::string& key) const;
  std::string Header(std::string_view name) const;  // "" when absent
  const http::request_header<>& head() const { return head_; }
  bool chunked_request() const { return chunked_request_; }
  std::optional<uint64_t> content_length() const { return content_length_; }
  bool body_done() const { return body_done_; }
  std::string peer() const { return peer_; }

  // Pulls the next piece of the body; exactly one callback per call.
  void ReadBodyChunk(ChunkFn fn);
  // The whole body, bounded: resource_exhausted past `limit` bytes (the rest
  // is not read; the connection closes after the response).
  void ReadBodyToString(size_t limit, std::function<void(StatusOr<std::string>)> done);

  // ---- response ----
  void Respond(int status, std::string_view content_type, std::string body, const HeaderList& extra = {});
  void RespondError(int status, const std::string& message, const HeaderList& extra = {});
  void BeginResponse(int status, std::string_view content_type, std::optional<uint64_t> content_length,
                     const HeaderList& extra = {});
  void Write(std::string_view data);
  void EndResponse();
  // Raw, already framed response bytes (status line and headers included).
  void SendRaw(std::string data);
  // End of a raw response; `keep_alive` false closes after the last byte.
  void FinishRaw(bool keep_alive);
  bool keep_alive() const { return keep_alive_; }
  bool response_started() const { return response_started_; }

  size_t pending_bytes() const { return pending_; }
  void SetOnDrain(std::function<void()> fn) { on_drain_ = std::move(fn); }
  // Once, when the connection dies before the response ended.
  void SetOnClose(std::function<void()> fn) { on_close_ = std::move(fn); }
  // Once, with the status, when a response (not a raw one) begins (audit).
  void SetOnRespond(std::function<void(int)> fn) { on_respond_ = std::move(fn); }
  // After the body is read: notice the peer hanging up during a long response.
  void WatchForDisconnect();
  bool closed() const { return closed_; }
  void Abort() { Close(); }
  // Protocol upgrade (WebSocket, after the upstream's 101): hands over the
  // socket and the bytes already read past the request head. The HttpConn is
  // finished: no more callbacks, nothing more is written by it.
  std::pair<tcp::socket, std::string> DetachSocket();
  asio::any_io_executor executor() { return socket_.get_executor(); }

  static constexpr size_t kLowWatermark = 256 * 1024;

 private:
  void ReadHeader();
  void ReadStringStep(std::shared_ptr<std::string> body, size_t limit,
                      std::shared_ptr<std::function<void(StatusOr<std::string>)>> done);
  void OnHeader(boost::beast::error_code ec);
  void ArmTimer(std::chrono::milliseconds d);
  void DisarmTimer();
  void Enqueue(std::string data);
  void Flush();
  void AfterResponse();
  void Close();

  tcp::socket socket_;
  Handler handler_;
  HttpLimits limits_;
  asio::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  bool timed_out_ = false;
  std::string peer_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::buffer_body>> parser_;
  http::request_header<> head_;
  std::string target_, path_;
  std::map<std::string, std::string> query_;
  std::vector<char> body_buf_;
  bool body_done_ = false;
  bool body_reading_ = false;
  bool chunked_request_ = false;
  std::optional<uint64_t> content_length_;

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

class HttpListener {
 public:
  HttpListener(asio::io_context& io, HttpConn::Handler handler, HttpLimits limits)
      : io_(io), acceptor_(io), handler_(std::move(handler)), limits_(limits) {}
  // "ip:port"; port 0 picks a free one (see port()).
  Status Listen(const std::string& address);
  uint16_t port() const;
  void Stop();

 private:
  void Accept();
  asio::io_context& io_;
  tcp::acceptor acceptor_;
  HttpConn::Handler handler_;
  HttpLimits limits_;
};

std::string UrlDecode(std::string_view s, bool plus_is_space);
// Sets FD_CLOEXEC (Asio opens sockets without it).
void SetCloexec(int fd);
std::string JsonError(int status, const std::string& message);

}  // namespace airlock::server
