#include "server/http_conn.h"

#include <fcntl.h>
#include <strings.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace airlock::server {
namespace {

constexpr size_t kBodyChunk = 64 * 1024;
constexpr size_t kMaxGather = 64;

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void SetCloexec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

std::string UrlDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && Hex(s[i + 1]) >= 0 && Hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(Hex(s[i + 1]) * 16 + Hex(s[i + 2])));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string JsonError(int status, const std::string& message) {
  return nlohmann::json{{"code", status}, {"message", message}}.dump(-1, ' ', false,
                                                                      nlohmann::json::error_handler_t::replace);
}

HttpConn::HttpConn(tcp::socket socket, Handler handler, HttpLimits limits)
    : socket_(std::move(socket)),
      handler_(std::move(handler)),
      limits_(limits),
      timer_(socket_.get_executor()),
      body_buf_(kBodyChunk) {
  boost::system::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  if (!ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
}

void HttpConn::Start() {
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  SetCloexec(socket_.native_handle());
  ReadHeader();
}

void HttpConn::ArmTimer(std::chrono::milliseconds d) {
  uint64_t gen = ++timer_gen_;
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this(), gen](boost::system::error_code ec) {
    if (ec || gen != self->timer_gen_ || self->closed_) return;
    self->timed_out_ = true;
    boost::system::error_code ignored;
    self->socket_.cancel(ignored);  // the pending read fails with operation_aborted
  });
}

void HttpConn::DisarmTimer() {
  ++timer_gen_;
  timer_.cancel();
}

void HttpConn::ReadHeader() {
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(limits_.header_limit));
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // boost::none is broken in 1.74
  target_.clear();
  path_.clear();
  query_.clear();
  on_drain_ = nullptr;
  on_close_ = nullptr;
  body_done_ = body_reading_ = chunked_request_ = false;
  content_length_.reset();
  response_started_ = response_ended_ = chunked_ = false;
  watching_ = false;
  timed_out_ = false;
  ArmTimer(limits_.header_timeout);
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](boost::beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void HttpConn::OnHeader(boost::beast::error_code ec) {
  DisarmTimer();
  if (ec) {
    if (timed_out_ && buffer_.size() > 0) {
      keep_alive_ = false;
      return RespondError(408, "request header not received within the time limit");
    }
    if (!timed_out_ && ec != http::error::end_of_stream && ec != asio::error::eof &&
        ec != asio::error::connection_reset && ec != asio::error::operation_aborted && !closed_) {
      keep_alive_ = false;
      int status = ec == http::error::header_limit ? 431 : 400;
      return RespondError(status, "malformed HTTP request: " + ec.message());
    }
    Close();
    return;
  }
  head_ = parser_->get().base();
  keep_alive_ = parser_->keep_alive();
  body_done_ = parser_->is_done();
  chunked_request_ = parser_->chunked();
  if (auto len = parser_->content_length()) content_length_ = *len;
  target_ = std::string(head_.target());
  size_t q = target_.find('?');
  path_ = UrlDecode(std::string_view(target_).substr(0, q), false);
  if (q != std::string::npos) {
    std::string_view qs = std::string_view(target_).substr(q + 1);
    size_t i = 0;
    while (i <= qs.size()) {
      size_t amp = qs.find('&', i);
      if (amp == std::string_view::npos) amp = qs.size();
      std::string_view kv = qs.substr(i, amp - i);
      if (!kv.empty()) {
        size_t eq = kv.find('=');
        query_.emplace(UrlDecode(kv.substr(0, eq), true),
                       eq == std::string_view::npos ? "" : UrlDecode(kv.substr(eq + 1), true));
      }
      i = amp + 1;
    }
  }
  try {
    handler_(shared_from_this());
  } catch (const std::exception& e) {
    LOG_ERROR("http handler threw: {}", e.what());
    if (!response_started_) {
      keep_alive_ = false;
      RespondError(500, "internal error");
    } else {
      Close();
    }
  }
}

std::optional<std::string> HttpConn::Query(const std::string& key) const {
  auto it = query_.find(key);
  if (it == query_.end()) return std::nullopt;
  return it->second;
}

std::string HttpConn::Header(std::string_view name) const {
  auto it = head_.find(boost::beast::string_view(name.data(), name.size()));
  if (it == head_.end()) return {};
  return std::string(it->value());
}

void HttpConn::ReadBodyChunk(ChunkFn fn) {
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
  auto& body = parser_->get().body();
  body.data = body_buf_.data();
  body.size = body_buf_.size();
  ArmTimer(limits_.body_idle_timeout);
  http::async_read(socket_, buffer_, *parser_,
                   [self = shared_from_this(), fn = std::move(fn)](boost::beast::error_code ec, size_t) {
                     self->DisarmTimer();
                     if (ec == http::error::need_buffer) ec = {};
                     if (ec) {
                       Status st = self->timed_out_
                                       ? DeadlineExceeded("request body stalled for more than " +
                                                          std::to_string(self->limits_.body_idle_timeout.count()) +
                                                          " ms")
                                       : Unavailable("request body: " + ec.message());
                       self->keep_alive_ = false;
                       return fn(st, {}, true);
                     }
                     size_t got = self->body_buf_.size() - self->parser_->get().body().size;
                     self->body_done_ = self->parser_->is_done();
                     fn(OkStatus(), std::string_view(self->body_buf_.data(), got), self->body_done_);
                   });
}

void HttpConn::ReadBodyToString(size_t limit, std::function<void(StatusOr<std::string>)> done) {
  ReadStringStep(std::make_shared<std::string>(), limit,
                 std::make_shared<std::function<void(StatusOr<std::string>)>>(std::move(done)));
}

void HttpConn::ReadStringStep(std::shared_ptr<std::string> body, size_t limit,
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

void HttpConn::Respond(int status, std::string_view content_type, std::string body, const HeaderList& extra) {
  if (limits_.redact) body = limits_.redact(body);
  BeginResponse(status, content_type, body.size(), extra);
  if (!body.empty()) Write(body);
  EndResponse();
}

void HttpConn::RespondError(int status, const std::string& message, const HeaderList& extra) {
  Respond(status, "application/json", JsonError(status, message), extra);
}

namespace {
const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}
}  // namespace

void HttpConn::BeginResponse(int status, std::string_view content_type, std::optional<uint64_t> length,
                             const HeaderList& extra) {
  if (response_started_ || closed_) return;
  response_started_ = true;
  if (on_respond_) std::exchange(on_respond_, nullptr)(status);
  if (!body_done_) keep_alive_ = false;  // an unread body makes the connection unusable
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\n";
  if (!content_type.empty()) h += "Content-Type: " + std::string(content_type) + "\r\n";
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

void HttpConn::Write(std::string_view data) {
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

void HttpConn::EndResponse() {
  if (!response_started_ || response_ended_ || closed_) return;
  response_ended_ = true;
  if (chunked_) Enqueue("0\r\n\r\n");
  else Flush();
}

void HttpConn::SendRaw(std::string data) {
  if (closed_ || response_ended_) return;
  response_started_ = true;
  Enqueue(std::move(data));
}

void HttpConn::FinishRaw(bool keep_alive) {
  if (closed_ || response_ended_) return;
  response_started_ = true;
  if (!keep_alive) keep_alive_ = false;
  response_ended_ = true;
  Flush();
}

void HttpConn::Enqueue(std::string data) {
  if (closed_) return;
  pending_ += data.size();
  out_.push_back(std::move(data));
  Flush();
}

void HttpConn::Flush() {
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
    if (ec) {
      self->Close();
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      self->pending_ -= self->out_.front().size();
      self->out_.pop_front();
    }
    if (self->pending_ < kLowWatermark && self->on_drain_) {
      auto fn = self->on_drain_;
      fn();
    }
    self->Flush();
  });
}

void HttpConn::AfterResponse() {
  on_drain_ = nullptr;
  on_close_ = nullptr;
  if (!keep_alive_ || !body_done_) {
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    Close();
    return;
  }
  if (watching_) {
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

void HttpConn::WatchForDisconnect() {
  if (closed_ || watching_ || !body_done_) return;
  watching_ = true;
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
    if (!self->watching_ || ec) return;
    self->watching_ = false;
    char c;
    ssize_t n = ::recv(self->socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) self->Close();
  });
}

std::pair<tcp::socket, std::string> HttpConn::DetachSocket() {
  DisarmTimer();
  watching_ = false;
  std::string extra(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  buffer_.consume(buffer_.size());
  closed_ = true;
  response_ended_ = true;
  out_.clear();
  pending_ = 0;
  on_drain_ = nullptr;
  on_close_ = nullptr;
  return {std::move(socket_), std::move(extra)};
}

void HttpConn::Close() {
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

Status HttpListener::Listen(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("listen address '" + address + "' is not ip:port");
  boost::system::error_code ec;
  std::string host = address.substr(0, colon);
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  auto ip = asio::ip::make_address(host.empty() ? "127.0.0.1" : host, ec);
  if (ec) return InvalidArgument("listen address '" + address + "': " + ec.message());
  char* end = nullptr;
  unsigned long port = std::strtoul(address.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port > 65535) return InvalidArgument("listen address '" + address + "': bad port");
  tcp::endpoint ep(ip, static_cast<uint16_t>(port));
  acceptor_.open(ep.protocol(), ec);
  // VMMs are spawned by worker threads: no socket of ours may leak into them
  // (a leaked listener would keep the port busy after a daemon restart).
  if (!ec) SetCloexec(acceptor_.native_handle());
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("listen on " + address + ": " + ec.message());
  Accept();
  return OkStatus();
}

uint16_t HttpListener::port() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec).port();
}

void HttpListener::Stop() {
  boost::system::error_code ec;
  acceptor_.close(ec);
}

void HttpListener::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (!ec) {
      std::make_shared<HttpConn>(std::move(socket), handler_, limits_)->Start();
    } else if (ec == asio::error::operation_aborted || !acceptor_.is_open()) {
      return;
    } else {
      LOG_WARN("accept: {}", ec.message());
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space) {
        auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
        t->async_wait([this, t](boost::system::error_code) { Accept(); });
        return;
      }
    }
    Accept();
  });
}

}  // namespace airlock::server
