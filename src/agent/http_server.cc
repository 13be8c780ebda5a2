#include "agent/http_server.h"

#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <limits>

#include "agent/log.h"

namespace airlock::agent {
namespace {

constexpr size_t kBodyChunk = 64 * 1024;
constexpr size_t kHeaderLimit = 64 * 1024;
constexpr size_t kLowWatermark = 256 * 1024;
constexpr size_t kMaxGather = 64;

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

const char* Reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 507: return "Insufficient Storage";
    default: return "Status";
  }
}

}  // namespace

std::string UrlDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() + 0 && Hex(s[i + 1]) >= 0 && Hex(s[i + 2]) >= 0) {
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

Session::Session(tcp::socket socket, Handler handler)
    : socket_(std::move(socket)), handler_(std::move(handler)), body_buf_(kBodyChunk) {}

void Session::Start() {
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  ReadHeader();
}

void Session::ReadHeader() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // boost::none is broken in 1.74
  path_.clear();
  query_.clear();
  on_chunk_ = nullptr;
  on_done_ = nullptr;
  on_drain_ = nullptr;
  on_close_ = nullptr;
  body_error_ = OkStatus();
  body_done_ = false;
  response_started_ = response_ended_ = chunked_ = false;
  watching_ = false;
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](boost::beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void Session::OnHeader(boost::beast::error_code ec) {
  if (ec) {
    if (ec != http::error::end_of_stream && ec != asio::error::eof && ec != asio::error::connection_reset &&
        ec != asio::error::operation_aborted && !closed_) {
      // A malformed request: answer once, then close.
      keep_alive_ = false;
      int status = ec == http::error::header_limit ? 431 : 400;
      Respond(status, "application/json",
              "{\"code\":" + std::to_string(status) + ",\"message\":\"malformed HTTP request: " + ec.message() + "\"}");
      return;
    }
    Close();
    return;
  }
  head_ = parser_->get().base();
  keep_alive_ = parser_->keep_alive();
  body_done_ = parser_->is_done();
  std::string_view target(head_.target().data(), head_.target().size());
  size_t q = target.find('?');
  path_ = UrlDecode(target.substr(0, q), false);
  if (q != std::string_view::npos) {
    std::string_view qs = target.substr(q + 1);
    size_t i = 0;
    while (i <= qs.size()) {
      size_t amp = qs.find('&', i);
      if (amp == std::string_view::npos) amp = qs.size();
      std::string_view kv = qs.substr(i, amp - i);
      if (!kv.empty()) {
        size_t eq = kv.find('=');
        std::string k = UrlDecode(kv.substr(0, eq), true);
        std::string v = eq == std::string_view::npos ? "" : UrlDecode(kv.substr(eq + 1), true);
        query_.emplace(std::move(k), std::move(v));
      }
      i = amp + 1;
    }
  }
  try {
    handler_(shared_from_this());
  } catch (const std::exception& e) {
    LogError("handler threw: %s", e.what());
    if (!response_started_) {
      keep_alive_ = false;
      Respond(500, "application/json", "{\"code\":500,\"message\":\"internal error\"}");
    } else {
      Close();
    }
  }
}

std::optional<std::string> Session::Query(const std::string& key) const {
  auto it = query_.find(key);
  if (it == query_.end()) return std::nullopt;
  return it->second;
}

HeaderList Session::Headers() const {
  HeaderList out;
  for (const auto& f : head_) {
    out.emplace_back(std::string(f.name_string().data(), f.name_string().size()),
                     std::string(f.value().data(), f.value().size()));
  }
  return out;
}

std::string Session::Header(std::string_view name) const {
  auto it = head_.find(boost::beast::string_view(name.data(), name.size()));
  if (it == head_.end()) return {};
  return std::string(it->value());
}

void Session::ReadBody(ChunkFn on_chunk, DoneFn on_done) {
  on_chunk_ = std::move(on_chunk);
  on_done_ = std::move(on_done);
  if (body_done_) {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (auto done = std::move(self->on_done_)) done(self->body_error_);
    });
    return;
  }
  std::string expect = Header("Expect");
  if (expect.size() == 12 && strcasecmp(expect.c_str(), "100-continue") == 0) {
    Enqueue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  ReadMoreBody();
}

void Session::ReadMoreBody() {
  auto& body = parser_->get().body();
  body.data = body_buf_.data();
  body.size = body_buf_.size();
  http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](boost::beast::error_code ec, size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      LogDebug("body read failed: %s", ec.message().c_str());
      self->on_chunk_ = nullptr;
      auto done = std::move(self->on_done_);
      self->Close();
      if (done) done(Unavailable("request body: " + ec.message()));
      return;
    }
    size_t got = self->body_buf_.size() - self->parser_->get().body().size;
    if (got > 0 && self->body_error_.ok() && self->on_chunk_) {
      Status st;
      try {
        st = self->on_chunk_(std::string_view(self->body_buf_.data(), got));
      } catch (const std::exception& e) {
        st = Internal(std::string("body handler: ") + e.what());
      }
      if (!st.ok()) self->body_error_ = st;
    }
    if (self->parser_->is_done()) {
      self->body_done_ = true;
      if (auto done = std::move(self->on_done_)) done(self->body_error_);
      return;
    }
    self->ReadMoreBody();
  });
}

void Session::ReadBodyToString(size_t limit, std::function<void(StatusOr<std::string>)> done) {
  auto body = std::make_shared<std::string>();
  ReadBody(
      [body, limit](std::string_view chunk) -> Status {
        if (body->size() + chunk.size() > limit) {
          return ResourceExhausted("request body exceeds " + std::to_string(limit) + " bytes");
        }
        body->append(chunk);
        return OkStatus();
      },
      [body, done = std::move(done)](Status st) {
        if (!st.ok()) return done(st);
        done(std::move(*body));
      });
}

void Session::Respond(int status, std::string_view content_type, std::string body, const HeaderList& extra) {
  BeginResponse(status, content_type, body.size(), extra);
  if (!body.empty()) Write(body);
  EndResponse();
}

void Session::BeginResponse(int status, std::string_view content_type, std::optional<uint64_t> length,
                            const HeaderList& extra) {
  if (response_started_ || closed_) return;
  response_started_ = true;
  // A body we did not consume makes the connection unusable for the next request.
  if (!body_done_) keep_alive_ = false;
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\n";
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

void Session::Write(std::string_view data) {
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

void Session::EndResponse() {
  if (!response_started_ || response_ended_ || closed_) return;
  response_ended_ = true;
  if (chunked_) Enqueue("0\r\n\r\n");
  else Flush();
}

void Session::Enqueue(std::string data) {
  if (closed_) return;
  pending_ += data.size();
  out_.push_back(std::move(data));
  Flush();
}

void Session::Flush() {
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

void Session::AfterResponse() {
  on_drain_ = nullptr;
  on_close_ = nullptr;
  if (!keep_alive_ || !body_done_) {
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

void Session::WatchForDisconnect() {
  if (closed_ || watching_ || !body_done_) return;
  watching_ = true;
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
    if (!self->watching_ || ec) return;  // cancelled or response finished
    self->watching_ = false;
    char c;
    ssize_t n = ::recv(self->socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      self->Close();
    }
    // n > 0: a pipelined request; it will be read after this response.
  });
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
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

Status HttpServer::Listen(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("listen address '" + address + "' is not ip:port");
  boost::system::error_code ec;
  std::string host = address.substr(0, colon);
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  auto ip = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) return InvalidArgument("listen address '" + address + "': " + ec.message());
  unsigned long port = std::strtoul(address.c_str() + colon + 1, nullptr, 10);
  if (port > 65535) return InvalidArgument("listen port out of range");
  tcp::endpoint ep(ip, static_cast<uint16_t>(port));
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("listen on " + address + ": " + ec.message());
  Accept();
  return OkStatus();
}

uint16_t HttpServer::port() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec).port();
}

void HttpServer::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (!ec) {
      std::make_shared<Session>(std::move(socket), handler_)->Start();
    } else if (ec == asio::error::operation_aborted) {
      return;
    } else {
      LogError("accept: %s", ec.message().c_str());
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space) {
        // Out of fds: back off briefly instead of spinning.
        auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
        t->async_wait([this, t](boost::system::error_code) { Accept(); });
        return;
      }
    }
    Accept();
  });
}

}  // namespace airlock::agent
