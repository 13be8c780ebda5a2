#include "http/conn.h"

#include <fcntl.h>
#include <strings.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <cstdio>
#include <limits>

#include "http/json_error.h"
#include "http/socket_options.h"
#include "http/status_reason.h"
#include "http/url.h"

namespace airlock::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {
constexpr size_t kBodyChunk = 64 * 1024;
constexpr size_t kMaxGather = 64;
}  // namespace

struct Conn::Parser {
  explicit Parser(const asio::any_io_executor& ex) : timer(ex), body_buf(kBodyChunk) {}
  asio::steady_timer timer;
  beast::flat_buffer buffer;
  std::optional<bhttp::request_parser<bhttp::buffer_body>> p;
  std::vector<char> body_buf;
};

Method ParseMethod(std::string_view t) {
  if (t == "GET") return Method::kGet;
  if (t == "HEAD") return Method::kHead;
  if (t == "POST") return Method::kPost;
  if (t == "PUT") return Method::kPut;
  if (t == "DELETE") return Method::kDelete;
  if (t == "PATCH") return Method::kPatch;
  if (t == "OPTIONS") return Method::kOptions;
  if (t == "CONNECT") return Method::kConnect;
  if (t == "TRACE") return Method::kTrace;
  return Method::kOther;
}

Conn::Conn(tcp::socket socket, Handler handler, Limits limits)
    : socket_(std::move(socket)),
      handler_(std::move(handler)),
      limits_(std::move(limits)),
      parser_(std::make_unique<Parser>(socket_.get_executor())) {
  boost::system::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  if (!ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
}

Conn::~Conn() = default;

void Conn::Start() {
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  SetCloexec(socket_.native_handle());
  ReadHeader();
}

void Conn::Log(LogLevel level, const std::string& message) const {
  if (limits_.log) limits_.log(level, message);
}

void Conn::ArmTimer(std::chrono::milliseconds d) {
  uint64_t gen = ++timer_gen_;
  timed_out_ = false;
  parser_->timer.expires_after(d);
  parser_->timer.async_wait([self = shared_from_this(), gen](boost::system::error_code ec) {
    if (ec || gen != self->timer_gen_ || self->closed_) return;
    self->timed_out_ = true;
    boost::system::error_code ignored;
    self->socket_.cancel(ignored);  // the pending read fails with operation_aborted
  });
}

void Conn::DisarmTimer() {
  ++timer_gen_;
  parser_->timer.cancel();
}

void Conn::ReadHeader() {
  auto& p = parser_->p;
  p.emplace();
  p->header_limit(static_cast<uint32_t>(limits_.header_limit));
  p->body_limit(std::numeric_limits<std::uint64_t>::max());  // boost::none is broken in 1.74
  method_ = Method::kOther;
  method_string_.clear();
  target_.clear();
  path_.clear();
  query_.clear();
  headers_.clear();
  on_drain_ = nullptr;
  on_close_ = nullptr;
  on_response_ = nullptr;       // per request, as the body handed back:
  replay_body_.reset();         // a handler that read no body leaves none to the next request
  respond_body_ = nullptr;
  body_done_ = body_reading_ = chunked_request_ = false;
  content_length_.reset();
  response_started_ = response_ended_ = chunked_ = false;
  watching_ = false;
  timed_out_ = false;
  ArmTimer(limits_.header_timeout);
  bhttp::async_read_header(socket_, parser_->buffer, *p, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->DisarmTimer();
    bool quiet = ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
                 ec == asio::error::operation_aborted;
    if (ec && !self->timed_out_ && quiet) return self->Close();
    self->OnHeader(!ec, self->timed_out_, ec == bhttp::error::header_limit, ec ? ec.message() : "");
  });
}

void Conn::OnHeader(bool ok, bool timed_out, bool header_too_large, const std::string& error) {
  if (closed_) return;
  if (!ok) {
    keep_alive_ = false;
    // An idle keep-alive connection (nothing of a next request yet) just closes.
    if (timed_out && parser_->buffer.size() == 0) return limits_.passive_close.count() > 0 ? ResetAndClose() : Close();
    if (timed_out) return RespondError(408, "request header not received within the time limit");
    return RespondError(header_too_large ? 431 : 400, "malformed HTTP request: " + error);
  }
  auto& p = *parser_->p;
  const auto& head = p.get().base();
  method_string_ = std::string(head.method_string());
  method_ = ParseMethod(method_string_);
  target_ = std::string(head.target());
  for (const auto& f : head) headers_.emplace_back(std::string(f.name_string()), std::string(f.value()));
  keep_alive_ = p.keep_alive();
  body_done_ = p.is_done();
  chunked_request_ = p.chunked();
  if (auto len = p.content_length()) content_length_ = *len;
  auto [path, query] = SplitTarget(target_);
  path_ = std::move(path);
  query_ = ParseQuery(query);
  try {
    handler_(shared_from_this());
  } catch (const std::exception& e) {
    Log(LogLevel::kError, std::string("http handler threw: ") + e.what());
    if (!response_started_) {
      keep_alive_ = false;
      RespondError(500, "internal error");
    } else {
      Close();
    }
  }
}

std::optional<std::string> Conn::Query(const std::string& key) const {
  auto it = query_.find(key);
  if (it == query_.end()) return std::nullopt;
  return it->second;
}

std::string Conn::Header(std::string_view name) const {
  for (const auto& [k, v] : headers_) {
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  }
  return {};
}

void Conn::ReadBodyChunk(ChunkFn fn) {
  if (replay_body_) {
    asio::post(socket_.get_executor(),
               [fn = std::move(fn), body = std::exchange(replay_body_, std::nullopt)] { fn(OkStatus(), *body, true); });
    return;
  }
  if (closed_) {
    asio::post(socket_.get_executor(), [fn = std::move(fn)] { fn(Unavailable("connection closed"), {}, true); });
    return;
  }
  if (body_done_) {
    asio::post(socket_.get_executor(), [fn = std::move(fn)] { fn(OkStatus(), {}, true); });
    return;
  }
  if (!body_reading_) {
    body_reading_ = true;
    std::string expect = Header("Expect");
    if (strcasecmp(expect.c_str(), "100-continue") == 0) Enqueue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  auto& body = parser_->p->get().body();
  body.data = parser_->body_buf.data();
  body.size = parser_->body_buf.size();
  ArmTimer(limits_.body_idle_timeout);
  body_read_in_flight_ = true;
  bhttp::async_read(socket_, parser_->buffer, *parser_->p,
                    [self = shared_from_this(), fn = std::move(fn)](beast::error_code ec, size_t) {
                      self->body_read_in_flight_ = false;
                      if (self->draining_) {
                        // The response ended first; DrainThenClose took the socket.
                        return fn(Unavailable("request body: the response ended first"), {}, true);
                      }
                      self->DisarmTimer();
                      if (ec == bhttp::error::need_buffer) ec = {};
                      if (ec || self->closed_) {
                        Status st =
                            self->timed_out_
                                ? DeadlineExceeded("request body stalled for more than " +
                                                   std::to_string(self->limits_.body_idle_timeout.count()) + " ms")
                                : Unavailable("request body: " + (ec ? ec.message() : "connection closed"));
                        self->keep_alive_ = false;
                        return fn(st, {}, true);
                      }
                      auto& p = *self->parser_->p;
                      size_t got = self->parser_->body_buf.size() - p.get().body().size;
                      self->body_done_ = p.is_done();
                      fn(OkStatus(), std::string_view(self->parser_->body_buf.data(), got), self->body_done_);
                    });
}

void Conn::ReadBody(PushFn on_chunk, std::function<void(Status)> on_done) {
  PushStep(std::make_shared<PushFn>(std::move(on_chunk)),
           std::make_shared<std::function<void(Status)>>(std::move(on_done)), std::make_shared<Status>());
}

void Conn::PushStep(std::shared_ptr<PushFn> on_chunk, std::shared_ptr<std::function<void(Status)>> on_done,
                    std::shared_ptr<Status> first_error) {
  ReadBodyChunk(
      [self = shared_from_this(), on_chunk, on_done, first_error](Status st, std::string_view chunk, bool done) {
        if (!st.ok()) {
          self->Log(LogLevel::kDebug, "body read failed: " + st.ToString());
          // Broken: nothing can be answered. Stalled: the handler may answer.
          if (st.code() != StatusCode::kDeadlineExceeded && !self->draining_) self->Close();
          return (*on_done)(st);
        }
        if (!chunk.empty() && first_error->ok()) {
          Status cs;
          try {
            cs = (*on_chunk)(chunk);
          } catch (const std::exception& e) {
            cs = Internal(std::string("body handler: ") + e.what());
          }
          if (!cs.ok()) *first_error = cs;
        }
        if (done) return (*on_done)(*first_error);
        self->PushStep(on_chunk, on_done, first_error);
      });
}

void Conn::ReadBodyToString(size_t limit, std::function<void(StatusOr<std::string>)> done) {
  ReadStringStep(std::make_shared<std::string>(), limit,
                 std::make_shared<std::function<void(StatusOr<std::string>)>>(std::move(done)));
}

void Conn::ReadStringStep(std::shared_ptr<std::string> body, size_t limit,
                          std::shared_ptr<std::function<void(StatusOr<std::string>)>> done) {
  ReadBodyChunk([self = shared_from_this(), body, limit, done](Status st, std::string_view chunk, bool finished) {
    if (!st.ok()) return (*done)(st);
    if (body->size() + chunk.size() > limit) {
      self->keep_alive_ = false;
      return (*done)(ResourceExhausted("request body exceeds " + std::to_string(limit) + " bytes"));
    }
    body->append(chunk);
    if (finished) return (*done)(std::move(*body));
    self->ReadStringStep(body, limit, done);
  });
}

void Conn::Respond(int status, std::string_view content_type, std::string body, const HeaderList& extra) {
  if (limits_.redact) body = limits_.redact(body);
  respond_body_ = &body;
  BeginResponse(status, content_type, body.size(), extra);
  respond_body_ = nullptr;
  if (!body.empty()) Write(body);
  EndResponse();
}

void Conn::RespondError(int status, const std::string& message, const HeaderList& extra) {
  Respond(status, "application/json", JsonError(status, message), extra);
}

void Conn::RespondErrorWithCode(int status, const std::string& message, std::string_view error_code,
                                const HeaderList& extra) {
  Respond(status, "application/json", JsonError(status, message, error_code), extra);
}

void Conn::BeginResponse(int status, std::string_view content_type, std::optional<uint64_t> length,
                         const HeaderList& extra) {
  if (response_started_) return;
  if (on_response_) std::exchange(on_response_, nullptr)(status, content_type, respond_body_);
  if (closed_) return;
  response_started_ = true;
  if (on_respond_) std::exchange(on_respond_, nullptr)(status);
  if (!body_done_) keep_alive_ = false;  // an unread body makes the connection unusable
  std::string h = "HTTP/1.1 " + std::to_string(status) + " ";
  h += ReasonPhrase(status);
  h += "\r\n";
  if (!content_type.empty()) {
    h += "Content-Type: ";
    h += content_type;
    h += "\r\n";
  }
  for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
  if (status == 204 || status == 304) {
    chunked_ = false;
  } else if (length) {
    h += "Content-Length: " + std::to_string(*length) + "\r\n";
    chunked_ = false;
  } else {
    h += "Transfer-Encoding: chunked\r\n";
    chunked_ = true;
  }
  if (!keep_alive_) h += "Connection: close\r\n";
  h += "\r\n";
  Enqueue(std::move(h));
}

void Conn::Write(std::string_view data) {
  if (!response_started_ || response_ended_ || closed_ || data.empty()) return;
  if (chunked_) {
    char hdr[24];
    int n = std::snprintf(hdr, sizeof hdr, "%zx\r\n", data.size());
    std::string c;
    c.reserve(data.size() + static_cast<size_t>(n) + 2);
    c.append(hdr, static_cast<size_t>(n));
    c.append(data);
    c.append("\r\n");
    Enqueue(std::move(c));
  } else {
    Enqueue(std::string(data));
  }
}

void Conn::EndResponse() {
  if (!response_started_ || response_ended_ || closed_) return;
  response_ended_ = true;
  if (chunked_)
    Enqueue("0\r\n\r\n");
  else
    Flush();
}

void Conn::SendRaw(std::string data) {
  if (closed_ || response_ended_) return;
  response_started_ = true;
  Enqueue(std::move(data));
}

void Conn::FinishRaw(bool keep_alive) {
  if (closed_ || response_ended_) return;
  response_started_ = true;
  if (!keep_alive) keep_alive_ = false;
  response_ended_ = true;
  Flush();
}

void Conn::Enqueue(std::string data) {
  if (closed_) return;
  pending_ += data.size();
  out_.push_back(std::move(data));
  Flush();
}

void Conn::Flush() {
  if (writing_ || closed_) return;
  if (out_.empty()) {
    if (response_ended_) AfterResponse();
    return;
  }
  writing_ = true;
  size_t n = std::min(out_.size(), kMaxGather);
  std::vector<asio::const_buffer> bufs;
  bufs.reserve(n);
  for (size_t i = 0; i < n; ++i) bufs.emplace_back(asio::buffer(out_[i]));
  asio::async_write(socket_, bufs, [self = shared_from_this(), n](boost::system::error_code ec, size_t) {
    self->writing_ = false;
    // Closed meanwhile (out_ is cleared): the completion may still report
    // success when it was queued before the close.
    if (ec || self->closed_) {
      self->Close();
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      self->pending_ -= self->out_.front().size();
      self->out_.pop_front();
    }
    if (self->pending_ < kLowWatermark && self->on_drain_) {
      auto fn = self->on_drain_;  // may replace itself
      fn();
    }
    self->Flush();
  });
}

void Conn::AfterResponse() {
  on_drain_ = nullptr;
  on_close_ = nullptr;
  if (!keep_alive_ || !body_done_) {
    if (limits_.passive_close.count() > 0 && body_done_) return LingerThenClose();
    // The agent under gVisor (passive_close) keeps closing at once: its
    // drain would hold the guest's endpoint in a state gVisor's checkpoint
    // refuses (a refused checkpoint in CI runs of the lingering close).
    if (!body_done_ && limits_.passive_close.count() == 0) return DrainThenClose();
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    Close();
    return;
  }
  if (watching_) {
    // The disconnect watcher's wait is still pending; cancel it before reading.
    watching_ = false;
    boost::system::error_code ec;
    socket_.cancel(ec);
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (!self->closed_) self->ReadHeader();
    });
    return;
  }
  ReadHeader();
}

void Conn::WatchForDisconnect() {
  if (closed_ || watching_ || !body_done_) return;
  watching_ = true;
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
    if (!self->watching_ || ec) return;  // cancelled or response finished
    self->watching_ = false;
    char c;
    ssize_t n = ::recv(self->socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) self->Close();
    // n > 0: a pipelined request; it is read after this response.
  });
}

std::pair<tcp::socket, std::string> Conn::DetachSocket() {
  DisarmTimer();
  watching_ = false;
  auto& buf = parser_->buffer;
  std::string extra(static_cast<const char*>(buf.data().data()), buf.size());
  buf.consume(buf.size());
  closed_ = true;
  response_ended_ = true;
  out_.clear();
  pending_ = 0;
  on_drain_ = nullptr;
  on_close_ = nullptr;
  return {std::move(socket_), std::move(extra)};
}

void Conn::LingerThenClose() {
  watching_ = false;
  ArmTimer(limits_.passive_close);
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](boost::system::error_code) {
    bool timed_out = self->timed_out_;
    self->DisarmTimer();
    if (self->closed_) return;
    if (timed_out) {  // the client keeps its end open: close ours as usual
      boost::system::error_code ec;
      self->socket_.shutdown(tcp::socket::shutdown_send, ec);
    }
    self->Close();  // after the client's FIN: a passive close, no TIME_WAIT here
  });
}

// The response ended before the request body did (an early 4xx, a relayed
// answer): the client may still be sending. Closing with its bytes unread
// would send an RST, which can destroy the response before the client reads
// it, or fail the client's write of the rest ("fetch failed"). So, the
// lingering close of RFC 9112 §9.6: FIN after the response, then read and
// drop what still comes until the client closes, kDrainBytes are dropped or
// kDrainTime passes; then close.
void Conn::DrainThenClose() {
  draining_ = true;
  watching_ = false;
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return Close();
  // A body read still pending ends first (its handler hears of the end);
  // the drain reads after it.
  if (body_read_in_flight_) socket_.cancel(ec);
  auto buf = std::make_shared<std::vector<char>>(16384);
  asio::post(socket_.get_executor(), [self = shared_from_this(), buf] {
    if (self->closed_) return;
    self->ArmTimer(kDrainTime);
    self->DrainStep(buf, 0);
  });
}

void Conn::DrainStep(std::shared_ptr<std::vector<char>> buf, size_t dropped) {
  socket_.async_read_some(asio::buffer(*buf), [self = shared_from_this(), buf, dropped](
                                                  boost::system::error_code ec, size_t n) {
    if (self->closed_) return;
    if (ec || self->timed_out_ || dropped + n >= kDrainBytes) return self->Close();
    self->DrainStep(buf, dropped + n);
  });
}

void Conn::ResetAndClose() {
  boost::system::error_code ec;
  socket_.set_option(asio::socket_base::linger(true, 0), ec);
  Close();
}

void Conn::Close() {
  if (closed_) return;
  closed_ = true;
  DisarmTimer();
  boost::system::error_code ec;
  socket_.cancel(ec);
  socket_.close(ec);
  out_.clear();
  pending_ = 0;
  on_drain_ = nullptr;
  auto fn = std::move(on_close_);
  on_close_ = nullptr;
  if (fn && !response_ended_) fn();
}

}  // namespace airlock::http
