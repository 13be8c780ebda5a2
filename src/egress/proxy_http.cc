// The request-aware relays of ProxyConn (proxy_conn.h): plain HTTP checked
// request by request, and TLS interception for hosts with network.rules or
// brokered secrets. Loop thread only, as the rest of ProxyConn.
#include "egress/proxy_conn.h"  // first: <utility> before Asio's awaitable.hpp (Boost 1.74)

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <type_traits>

#include "egress/l7_parse.h"

namespace airlock::egress {

namespace http = boost::beast::http;
namespace ssl = asio::ssl;
using asio::use_awaitable;

namespace {

bool ValidHeaderValue(std::string_view v) {
  return v.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

// ALPN on the guest side: HTTP/1.1 only (the relay parses HTTP/1.x). A
// client that offers no http/1.1 gets no ALPN answer.
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
               void*) {
  static const unsigned char kOurs[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* sel = nullptr;
  if (SSL_select_next_proto(&sel, outlen, kOurs, sizeof(kOurs), in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

StatusOr<std::unique_ptr<ssl::context>> GuestContext(const LeafCertificate& leaf) {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->use_certificate_chain(asio::buffer(leaf.cert_pem), ec);
  if (!ec) ctx->use_private_key(asio::buffer(leaf.key_pem), ssl::context::pem, ec);
  if (ec) return Internal("interception certificate: " + ec.message());
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  SSL_CTX_set_alpn_select_cb(ctx->native_handle(), SelectAlpn, nullptr);
  return ctx;
}

// The guest is done sending: pass the half-close on, so upstream closes
// once it has answered. Over TLS this is a TCP FIN without close_notify (a
// close_notify would need a read on the stream the response pump reads).
template <class S>
void ShutdownSend(S& s) {
  boost::system::error_code ignore;
  if constexpr (std::is_same_v<S, tcp::socket>) {
    s.shutdown(tcp::socket::shutdown_send, ignore);
  } else {
    s.next_layer().shutdown(tcp::socket::shutdown_send, ignore);
  }
}

}  // namespace

void ProxyConn::ChooseMode() {
  if (!tls_) {
    mode_ = Mode::kHttp;
    return;
  }
  mode_ = Mode::kRaw;
  RequestBroker* broker = svc_.config.request_broker.get();
  bool rules = sb_->policy->HeaderRulesFor(host_) != nullptr;
  bool secrets = broker && broker->Intercepts(sb_->id, host_);
  if (!rules && !secrets) return;
  if (!broker) {
    note_ = "network.rules not applied: no sandbox CA in this daemon";
    return;
  }
  auto leaf = broker->LeafFor(sb_->id, host_);
  if (!leaf.ok()) {
    note_ = "not intercepted: " + leaf.status().message();
    return;
  }
  auto ctx = GuestContext(*leaf);
  if (!ctx.ok()) {
    note_ = "not intercepted: " + ctx.status().message();
    return;
  }
  guest_ctx_ = std::move(ctx).value();
  mode_ = Mode::kIntercept;
  // An upstream that echoes a request (headers, body, a reflected error)
  // must not hand the guest a value it was never given.
  scrub_ = StreamScrubber(broker->ResponseForms(sb_->id));
}

asio::awaitable<void> ProxyConn::Throttle(size_t n, asio::steady_timer& timer) {
  auto wait = sb_->bucket.Take(n);
  if (wait == Clock::duration::zero()) co_return;
  timer.expires_after(wait);
  co_await timer.async_wait(use_awaitable);
}

bool ProxyConn::TransformHeaders(HeaderList* headers, std::string* why) {
  if (const HostHeaderRules* rules = sb_->policy->HeaderRulesFor(host_)) {
    for (const auto& t : rules->transforms) {
      for (const auto& [name, value] : t.headers) {
        std::erase_if(*headers, [&](const auto& h) { return boost::beast::iequals(h.first, name); });
        headers->emplace_back(name, value);
      }
    }
    rules_applied_ = rules->pattern;
  }
  if (!scrub_.empty()) {
    // Responses must be searchable for brokered values: no content coding
    // (gzip hides a value from the mask), no transfer coding but chunked,
    // no compressed WebSocket frames.
    std::erase_if(*headers, [](const auto& h) {
      return boost::beast::iequals(h.first, "Accept-Encoding") || boost::beast::iequals(h.first, "TE") ||
             boost::beast::iequals(h.first, "Sec-WebSocket-Extensions");
    });
    headers->emplace_back("Accept-Encoding", "identity");
  }
  // Brokered values only go out inside TLS that the proxy itself verified.
  if (mode_ == Mode::kIntercept && svc_.config.request_broker) {
    for (auto& name : svc_.config.request_broker->Substitute(sb_->id, host_, headers)) secrets_used_.insert(name);
    for (const auto& h : *headers) {
      if (!ValidHeaderValue(h.second)) {
        *why = "a brokered value is not a valid header value (CR, LF or NUL); request not sent";
        return false;
      }
    }
  }
  return true;
}

template <class From, class To>
asio::awaitable<void> ProxyConn::PumpBytes(From& from, To& to, Direction& d, bool to_guest) {
  for (;;) {
    boost::system::error_code ec;
    size_t n = co_await from.async_read_some(asio::buffer(d.buf), asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return;
    if (ec) {
      if (to_guest) {
        bool clean = ec == asio::error::eof || ec == ssl::error::stream_truncated;
        Finish(clean ? "" : "connection error: " + ec.message());
      } else {
        ShutdownSend(to);
      }
      co_return;
    }
    *d.counter += n;
    co_await Throttle(n, to_guest ? down_timer_ : up_timer_);
    co_await asio::async_write(to, asio::buffer(d.buf.data(), n), use_awaitable);
  }
}

// Responses on an intercepted connection of a sandbox with brokered values.
// Each response head is parsed (Beast) and its values masked; its body is
// read as it comes (chunked framing undone, so a value split across chunks
// or reads is still found), masked, and written to the guest framed as
// upstream framed it. Masks keep the length (stream_scrubber.h), so
// Content-Length and the chunk sizes the guest sees stay true with no
// buffering of the body. A HEAD's response has no body; 1xx responses come
// before their final one; after a 101 the bytes are masked as a stream.
// A response whose body has a content coding (gzip, ...) or a transfer
// coding other than chunked cannot be searched: the connection is closed
// before its head reaches the guest (requests ask for identity).
template <class Upstream, class Guest>
asio::awaitable<void> ProxyConn::RelayResponses(Upstream& up, Guest& guest) {
  auto clean_end = [](const boost::system::error_code& ec) {
    return ec == asio::error::eof || ec == ssl::error::stream_truncated || ec == http::error::end_of_stream;
  };
  for (;;) {
    // Wait for the response's first bytes: its request is queued by then
    // (it was sent upstream after head_requests_ took it).
    if (resp_buf_.size() == 0) {
      boost::system::error_code ec;
      size_t n = co_await up.async_read_some(resp_buf_.prepare(4096), asio::redirect_error(use_awaitable, ec));
      if (finished_) co_return;
      if (ec) {
        Finish(clean_end(ec) ? "" : "connection error: " + ec.message());
        co_return;
      }
      resp_buf_.commit(n);
    }
    http::response_parser<http::buffer_body> p;
    p.header_limit(64 * 1024);
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    p.skip(!head_requests_.empty() && head_requests_.front());
    boost::system::error_code ec;
    size_t n = co_await http::async_read_header(up, resp_buf_, p, asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return;
    if (ec) {
      Finish("response head: " + ec.message());
      co_return;
    }
    bytes_in_ += n;
    co_await Throttle(n, down_timer_);
    auto& res = p.get();
    const unsigned status = res.result_int();
    const bool interim = status >= 100 && status < 200 && status != 101;
    if (!interim && !head_requests_.empty()) head_requests_.pop_front();
    if (!p.is_done()) {
      auto ce = res[http::field::content_encoding];
      auto te = res[http::field::transfer_encoding];
      if ((!ce.empty() && !boost::beast::iequals(ce, "identity")) ||
          (!te.empty() && !boost::beast::iequals(te, "chunked"))) {
        Finish("response " + std::to_string(status) + " in a coding (" + std::string(ce.empty() ? te : ce) +
               ") that cannot be searched for brokered values; not relayed");
        co_return;
      }
    }
    HeaderList fields;
    for (const auto& f : res)
      fields.emplace_back(std::string(f.name_string()), scrub_.ScrubAll(std::string(f.value())));
    for (auto it = res.begin(); it != res.end();) it = res.erase(it);
    for (const auto& [name, value] : fields) res.insert(name, value);
    res.reason(scrub_.ScrubAll(std::string(res.reason())));
    res.body().data = nullptr;
    res.body().size = 0;
    res.body().more = !p.is_done();
    http::serializer<false, http::buffer_body> sr{res};
    co_await http::async_write_header(guest, sr, use_awaitable);
    while (!p.is_done()) {
      res.body().data = resp_body_buf_.data();
      res.body().size = resp_body_buf_.size();
      n = co_await http::async_read_some(up, resp_buf_, p, asio::redirect_error(use_awaitable, ec));
      if (finished_) co_return;
      if (ec == http::error::need_buffer) ec = {};
      // A body that runs to the end of the connection ends at a TLS close
      // without close_notify too.
      if (ec == ssl::error::stream_truncated && p.need_eof()) p.put_eof(ec);
      if (ec) {
        Finish("response body: " + ec.message());
        co_return;
      }
      const size_t got = resp_body_buf_.size() - res.body().size;
      bytes_in_ += n;
      co_await Throttle(n, down_timer_);
      std::string out = scrub_.Feed(std::string_view(resp_body_buf_.data(), got));
      if (p.is_done()) out += scrub_.Flush();
      res.body().data = out.empty() ? nullptr : out.data();  // nothing yet: no empty chunk, which would end the body
      res.body().size = out.size();
      res.body().more = !p.is_done();
      boost::beast::error_code wec;
      co_await http::async_write(guest, sr, asio::redirect_error(use_awaitable, wec));
      if (finished_) co_return;
      if (wec == http::error::need_buffer) wec = {};
      if (wec) {
        Finish("guest write failed: " + wec.message());
        co_return;
      }
    }
    if (status == 101) {
      co_await PumpMasked(up, guest);
      co_return;
    }
  }
}

template <class Upstream, class Guest>
asio::awaitable<void> ProxyConn::PumpMasked(Upstream& up, Guest& guest) {
  for (;;) {
    std::string out;
    if (resp_buf_.size() > 0) {
      out = scrub_.Feed(std::string_view(static_cast<const char*>(resp_buf_.cdata().data()), resp_buf_.size()));
      resp_buf_.consume(resp_buf_.size());
    } else {
      boost::system::error_code ec;
      size_t n = co_await up.async_read_some(asio::buffer(resp_body_buf_), asio::redirect_error(use_awaitable, ec));
      if (finished_) co_return;
      if (ec) {
        out = scrub_.Flush();
        if (!out.empty()) co_await asio::async_write(guest, asio::buffer(out), use_awaitable);
        bool clean = ec == asio::error::eof || ec == ssl::error::stream_truncated;
        Finish(clean ? "" : "connection error: " + ec.message());
        co_return;
      }
      bytes_in_ += n;
      co_await Throttle(n, down_timer_);
      out = scrub_.Feed(std::string_view(resp_body_buf_.data(), n));
    }
    if (!out.empty()) co_await asio::async_write(guest, asio::buffer(out), use_awaitable);
    if (finished_) co_return;
  }
}

template <class Guest, class Upstream>
asio::awaitable<void> ProxyConn::RelayRequests(Guest& guest, Upstream& up) {
  auto refuse = [this](const std::string& why) {
    allowed_ = false;
    rule_ = "default-deny";
    Finish("request " + std::to_string(requests_ + 1) + ": " + why);
  };
  for (;;) {
    // A complete request head, checked by the same parser as the first one.
    L7Result head;
    for (;;) {
      auto bytes = req_buf_.cdata();
      head = ParseHttpRequestHead(static_cast<const uint8_t*>(bytes.data()), bytes.size());
      if (head.kind != L7Result::Kind::kNeedMore) break;
      if (bytes.size() > kMaxL7Head) {
        head.kind = L7Result::Kind::kInvalid;
        head.error = "request head too large";
        break;
      }
      boost::system::error_code ec;
      size_t n = co_await guest.async_read_some(req_buf_.prepare(4096), asio::redirect_error(use_awaitable, ec));
      if (finished_) co_return;
      if (ec) {
        if (bytes.size() == 0) {  // between requests: the guest is done sending
          ShutdownSend(up);
          co_return;
        }
        head.kind = L7Result::Kind::kInvalid;
        head.error = "client closed in the middle of a request head";
        break;
      }
      req_buf_.commit(n);
    }
    if (head.kind == L7Result::Kind::kInvalid) co_return refuse(head.error);
    if (head.host != host_)
      co_return refuse("Host '" + head.host.substr(0, 253) + "' is not the connection's host '" + host_ + "'");

    // Beast parses the same head for framing (Content-Length / chunked).
    http::request_parser<http::buffer_body> p;
    p.header_limit(static_cast<std::uint32_t>(kMaxL7Head + 1));
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    p.eager(false);
    boost::beast::error_code pec;
    size_t used = p.put(asio::buffer(req_buf_.cdata().data(), head.consumed), pec);
    if (pec || used != head.consumed || !p.is_header_done())
      co_return refuse("request head not understood (" + (pec ? pec.message() : std::string("incomplete")) + ")");
    req_buf_.consume(used);
    bytes_out_ += used;

    auto& req = p.get();
    HeaderList headers;
    for (const auto& f : req) headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    std::string why;
    if (!TransformHeaders(&headers, &why)) co_return refuse(why);
    if (!scrub_.empty()) head_requests_.push_back(req.method() == http::verb::head);
    for (auto it = req.begin(); it != req.end();) it = req.erase(it);
    for (const auto& [name, value] : headers) req.insert(name, value);
    const bool upgrade = req.find(http::field::upgrade) != req.end();

    http::serializer<true, http::buffer_body> sr{req};
    co_await http::async_write_header(up, sr, use_awaitable);
    do {
      if (!p.is_done()) {
        req.body().data = body_buf_.data();
        req.body().size = body_buf_.size();
        boost::beast::error_code ec;
        co_await http::async_read(guest, req_buf_, p, asio::redirect_error(use_awaitable, ec));
        if (finished_) co_return;
        if (ec == http::error::need_buffer) ec = {};
        if (ec) co_return refuse("request body: " + ec.message());
        size_t got = body_buf_.size() - req.body().size;
        req.body().data = body_buf_.data();
        req.body().size = got;
        req.body().more = !p.is_done();
        bytes_out_ += got;
        co_await Throttle(got, up_timer_);
      } else {
        req.body().data = nullptr;
        req.body().size = 0;
        req.body().more = false;
      }
      boost::beast::error_code wec;
      co_await http::async_write(up, sr, asio::redirect_error(use_awaitable, wec));
      if (finished_) co_return;
      if (wec == http::error::need_buffer) wec = {};
      if (wec) {
        Finish("upstream write failed: " + wec.message());
        co_return;
      }
    } while (!sr.is_done());
    ++requests_;

    if (upgrade) {  // WebSocket and other upgrades: bytes from here on
      if (req_buf_.size()) {
        bytes_out_ += req_buf_.size();
        co_await asio::async_write(up, req_buf_.cdata(), use_awaitable);
        req_buf_.consume(req_buf_.size());
      }
      co_await PumpBytes(guest, up, up_, false);
      co_return;
    }
  }
}

asio::awaitable<void> ProxyConn::RunHttp() {
  auto self = shared_from_this();
  up_.counter = &bytes_out_;
  down_.counter = &bytes_in_;
  try {
    if (mode_ == Mode::kHttp) {
      auto dst = req_buf_.prepare(first_.size());
      std::memcpy(dst.data(), first_.data(), first_.size());
      req_buf_.commit(first_.size());
      first_.clear();
      asio::co_spawn(
          svc_.io,
          [self]() -> asio::awaitable<void> {
            try {
              co_await self->PumpBytes(self->upstream_, self->client_, self->down_, true);
            } catch (const std::exception& e) {
              self->Finish(std::string("connection error: ") + e.what());
            }
          },
          asio::detached);
      co_await RelayRequests(client_, upstream_);
      co_return;
    }

    // Intercept: the guest's TLS ends here, with the ClientHello already read.
    auto handshaken = std::make_shared<bool>(false);
    timer_.expires_after(svc_.config.first_bytes_timeout);
    timer_.async_wait([self, handshaken](const boost::system::error_code& ec) {
      if (!ec && !*handshaken) self->Finish("TLS handshake timed out");
    });
    guest_tls_ = std::make_unique<ssl::stream<tcp::socket&>>(client_, *guest_ctx_);
    boost::system::error_code ec;
    co_await guest_tls_->async_handshake(ssl::stream_base::server, asio::buffer(first_),
                                         asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return;
    if (ec) {
      // Typically: the guest does not trust its sandbox CA (not installed, or
      // a client with its own pinned store).
      Finish("TLS with the guest failed (does it trust its sandbox CA?): " + ec.message());
      co_return;
    }
    first_.clear();
    up_tls_ = std::make_unique<ssl::stream<tcp::socket&>>(upstream_, *svc_.tls_client);
    SSL* s = up_tls_->native_handle();
    SSL_set_tlsext_host_name(s, host_.c_str());
    SSL_set1_host(s, host_.c_str());
    co_await up_tls_->async_handshake(ssl::stream_base::client, asio::redirect_error(use_awaitable, ec));
    if (finished_) co_return;
    if (ec) {
      long v = SSL_get_verify_result(s);
      Finish("upstream TLS failed: " + ec.message() +
             (v != X509_V_OK ? std::string(" (") + X509_verify_cert_error_string(v) + ")" : std::string()));
      co_return;
    }
    *handshaken = true;
    timer_.cancel();
    asio::co_spawn(
        svc_.io,
        [self]() -> asio::awaitable<void> {
          try {
            if (self->scrub_.empty())
              co_await self->PumpBytes(*self->up_tls_, *self->guest_tls_, self->down_, true);
            else
              co_await self->RelayResponses(*self->up_tls_, *self->guest_tls_);
          } catch (const std::exception& e) {
            self->Finish(std::string("connection error: ") + e.what());
          }
        },
        asio::detached);
    co_await RelayRequests(*guest_tls_, *up_tls_);
  } catch (const std::exception& e) {
    Finish(std::string("connection error: ") + e.what());
  }
}

}  // namespace airlock::egress
