// HTTP/1.1 server on one single-threaded io_context (Boost.Beast parser,
// hand-written response framing). One Session per connection handles one
// request at a time (keep-alive, no pipelining). Handlers get the Session,
// read the body as a stream of chunks (chunked or Content-Length; never
// buffered whole unless they ask for a bounded string), then either
// Respond() once or BeginResponse()/Write()/EndResponse() for streamed
// bodies. Every write is queued; pending_bytes() and the drain callback give
// producers backpressure. No exception leaves this layer.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace airlock::agent {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

using HeaderList = std::vector<std::pair<std::string, std::string>>;

class Session : public std::enable_shared_from_this<Session> {
 public:
  using ChunkFn = std::function<Status(std::string_view)>;
  using DoneFn = std::function<void(Status)>;
  using Handler = std::function<void(std::shared_ptr<Session>)>;

  Session(tcp::socket socket, Handler handler);
  void Start();

  // ---- request ----
  http::verb method() const { return head_.method(); }
  const std::string& path() const { return path_; }  // percent-decoded, no query
  // Query parameter (percent-decoded); nullopt when absent.
  std::optional<std::string> Query(const std::string& key) const;
  // Header value, "" when absent. Names are case-insensitive.
  std::string Header(std::string_view name) const;
  // Every header (name as sent, value), in order, duplicates kept.
  HeaderList Headers() const;

  // Streams the body to on_chunk. If on_chunk returns an error, the rest of
  // the body is read and dropped and on_done gets that error. A broken
  // connection ends with unavailable and the session closes (no response).
  void ReadBody(ChunkFn on_chunk, DoneFn on_done);
  // Whole body, bounded: resource_exhausted past `limit` bytes.
  void ReadBodyToString(size_t limit, std::function<void(StatusOr<std::string>)> done);

  // ---- response ----
  void Respond(int status, std::string_view content_type, std::string body, const HeaderList& extra = {});
  // content_length: fixed-length body; nullopt → chunked.
  void BeginResponse(int status, std::string_view content_type, std::optional<uint64_t> content_length,
                     const HeaderList& extra = {});
  void Write(std::string_view data);  // framed as a chunk when chunked
  void EndResponse();
  size_t pending_bytes() const { return pending_; }
  // Called whenever queued bytes drop below the low watermark after a write.
  void SetOnDrain(std::function<void()> fn) { on_drain_ = std::move(fn); }
  // Called once when the connection dies while a response is in progress.
  void SetOnClose(std::function<void()> fn) { on_close_ = std::move(fn); }
  // While a long response is streamed: notice the peer hanging up even when
  // nothing is written.
  void WatchForDisconnect();
  bool closed() const { return closed_; }
  // Drops the connection now (e.g. a fixed-length body cannot be finished).
  void Abort() { Close(); }
  tcp::socket::executor_type executor() { return socket_.get_executor(); }

 private:
  void ReadHeader();
  void OnHeader(boost::beast::error_code ec);
  void ReadMoreBody();
  void Enqueue(std::string data);
  void Flush();
  void AfterResponse();
  void Close();

  tcp::socket socket_;
  Handler handler_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::buffer_body>> parser_;
  http::request_header<> head_;
  std::string path_;
  std::map<std::string, std::string> query_;
  std::vector<char> body_buf_;
  ChunkFn on_chunk_;
  DoneFn on_done_;
  Status body_error_;
  bool body_done_ = false;

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
};

class HttpServer {
 public:
  HttpServer(asio::io_context& io, Session::Handler handler) : io_(io), acceptor_(io), handler_(std::move(handler)) {}
  // "ip:port"; port 0 picks a free one (see port()).
  Status Listen(const std::string& address);
  uint16_t port() const;

 private:
  void Accept();
  asio::io_context& io_;
  tcp::acceptor acceptor_;
  Session::Handler handler_;
};

// Percent-decoding for query strings ('+' → ' ').
std::string UrlDecode(std::string_view s, bool plus_is_space);

}  // namespace airlock::agent
