// The relay (relay.h).
// A request is forwarded to host:port (a sandbox: <netns ip>:P) over a
// fresh upstream connection ("Connection: close"):
//   - the request head is copied minus hop-by-hop headers; the body is pulled
//     from the client one chunk at a time and written upstream (re-chunked
//     when the client sent it chunked), so uploads are never buffered whole;
//   - the upstream response head is parsed and rewritten (hop-by-hop headers
//     dropped); the body is parsed as it arrives and relayed piece by piece
//     (chunked bodies re-chunked, so every Connect envelope is flushed to the
//     client at once); reading upstream pauses while more than
//     HttpConn::kLowWatermark bytes wait for the client. The response ends
//     by its framing, not by the agent's close, so a reused client connection
//     is answered at once (a killed sandbox never closes its side).
// WebSocket (any request with Connection: upgrade + Upgrade): the upgrade
// headers go upstream; on 101 the client socket is detached from HttpConn and
// bytes are relayed both ways until either side closes; any other answer is
// forwarded as a normal response.
#include "gateway/relay.h"

#include <strings.h>

#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "audit/data_plane_tap.h"
#include "common/log.h"
#include "common/interpreter_access.h"
#include "common/secure_equal.h"
#include "gateway/relay_guard.h"
#include "gateway/stream_table.h"
#include "gateway/upstream_tls.h"

namespace airlock::gateway {

// The E2B proxy's answer for a sandbox that is not (or no longer) there.
void RespondSandboxNotFound(HttpConn& c, const std::string& id) {
  c.Respond(502, "application/json",
            nlohmann::json{{"code", 502}, {"message", "The sandbox was not found"}, {"sandboxId", id}}.dump());
}

namespace {

namespace bhttp = boost::beast::http;  // the upstream side; the client side is airlock::http

constexpr size_t kUpstreamChunk = 64 * 1024;


bool HopByHop(std::string_view name) {
  static const char* kNames[] = {"connection", "keep-alive",        "transfer-encoding", "content-length", "te",
                                 "trailer",    "upgrade",           "proxy-connection",  "proxy-authorization",
                                 "host",       "proxy-authenticate", "expect"};
  for (const char* n : kNames) {
    if (name.size() == std::strlen(n) && strncasecmp(name.data(), n, name.size()) == 0) return true;
  }
  return false;
}


// Bytes relayed both ways after a 101 until either side closes.
struct Tunnel : DataPlaneStream, std::enable_shared_from_this<Tunnel> {
  Tunnel(tcp::socket a, tcp::socket b, std::function<void()> close_bridge)
      : client(std::move(a)), up(std::move(b)), close_bridge(std::move(close_bridge)) {}
  tcp::socket client, up;
  std::function<void()> close_bridge;  // upstream_tls.h, for an httpsPorts port
  std::array<char, 16384> b1, b2;
  void Run(tcp::socket& from, tcp::socket& to, std::array<char, 16384>& buf) {
    from.async_read_some(asio::buffer(buf), [self = shared_from_this(), &from, &to, &buf](
                                                boost::system::error_code ec, size_t n) {
      if (ec) {
        boost::system::error_code ig;
        if (ec == asio::error::eof) to.shutdown(tcp::socket::shutdown_send, ig);
        else self->CloseBoth();
        return;
      }
      asio::async_write(to, asio::buffer(buf.data(), n), [self, &from, &to, &buf](boost::system::error_code e2,
                                                                                  size_t) {
        if (e2) return self->CloseBoth();
        self->Run(from, to, buf);
      });
    });
  }
  void CloseBoth() {
    boost::system::error_code ig;
    client.close(ig);
    up.close(ig);
    if (close_bridge) std::exchange(close_bridge, nullptr)();
  }
  void Drop() override { CloseBoth(); }
};

class ProxyCall : public DataPlaneStream, public std::enable_shared_from_this<ProxyCall> {
 public:
  ProxyCall(std::shared_ptr<HttpConn> c, std::string host, uint16_t port, std::string sandbox_id,
            std::function<void(std::weak_ptr<DataPlaneStream>)> track, std::string host_header,
            ForwardExtras extras = {})
      : extras_(std::move(extras)),
        c_(std::move(c)),
        up_(c_->executor()),
        timer_(c_->executor()),
        host_(std::move(host)),
        port_(port),
        sandbox_id_(std::move(sandbox_id)),
        track_(std::move(track)),
        host_header_(std::move(host_header)) {}

  // The sandbox went away (killed, died, paused): end this exchange now; a
  // response already under way is cut (a truncated body must not look
  // complete), else the client gets E2B's 502 "sandbox was not found".
  void Drop() override {
    if (ended_) return;
    NoteStatus(0);
    if (tap_) tap_->Finish("sandbox " + sandbox_id_ + " went away");
    tap_.reset();
    ended_ = true;
    timer_.cancel();
    CloseUpstream();
    if (!c_->response_started()) RespondSandboxNotFound(*c_, sandbox_id_);
    else c_->Abort();
  }

  // Audit observer of this exchange (exec, file reads/writes); may be null.
  void SetTap(std::shared_ptr<audit::DataPlaneTap> tap) { tap_ = std::move(tap); }

  void Start() {
    if (track_) track_(weak_from_this());
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(host_, ec);
    if (ec) return Fail(502, "sandbox address '" + host_ + "' is invalid");
    c_->SetOnClose([self = shared_from_this()] {
      // An exec whose client left (e.g. the SDK's timeoutMs): keep reading
      // the agent's stream, for the audit only, until its end (≤ kDrain).
      if (self->tap_ && self->tap_->WantsDrain()) return self->StartDrain();
      self->timer_.cancel();  // no further dial
      self->CloseUpstream();
    });
    Dial(asio::ip::tcp::endpoint(addr, port_), 1);
  }

 private:
  // As E2B's proxy (shared/pkg/proxy/pool/client.go): a refused or
  // unreachable dial is tried again, kDialAttempts in all, 100 ms × n apart
  // (1 s in all), so a guest server that is just starting to listen, or a
  // sandbox whose network is coming back from a resume, answers the first
  // request instead of a 502. Each attempt has 10 s to connect.
  static constexpr int kDialAttempts = 5;
  static bool Redialable(const boost::system::error_code& ec) {
    return ec == asio::error::connection_refused || ec == asio::error::host_unreachable ||
           ec == asio::error::network_unreachable;
  }

  void Dial(const tcp::endpoint& to, int attempt) {
    boost::system::error_code ec;
    timer_.expires_after(std::chrono::seconds(10));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec && !self->connected_) self->CloseUpstream();
    });
    up_.open(to.protocol(), ec);
    if (ec) return Fail(502, "socket: " + ec.message());
    SetCloexec(up_.native_handle());
    up_.async_connect(to, [self = shared_from_this(), to, attempt](boost::system::error_code ec) {
      self->timer_.cancel();
      if (self->ended_) return;
      if (ec && attempt < kDialAttempts && Redialable(ec)) {
        self->CloseUpstream();
        self->timer_.expires_after(std::chrono::milliseconds(100 * attempt));
        return self->timer_.async_wait([self, to, attempt](boost::system::error_code ec) {
          if (!ec && !self->ended_) self->Dial(to, attempt + 1);
        });
      }
      if (ec) {
        return self->Fail(502, (self->extras_.upstream_name.empty() ? "sandbox port " + std::to_string(self->port_)
                                                                     : self->extras_.upstream_name) +
                                   " unreachable: " + ec.message());
      }
      self->connected_ = true;
      self->up_.set_option(tcp::no_delay(true), ec);
      if (!self->extras_.upstream_tls && !self->extras_.upstream_verified) return self->SendHead();
      self->close_bridge_ = BridgeToTls(
          std::move(self->up_),
          [self](StatusOr<tcp::socket> s) {
            if (!s.ok()) {
              return self->Fail(502, (self->extras_.upstream_name.empty()
                                          ? "sandbox port " + std::to_string(self->port_)
                                          : self->extras_.upstream_name) +
                                         ": " + s.status().message());
            }
            self->up_ = std::move(*s);
            if (self->ended_) return self->CloseUpstream();
            self->SendHead();
          },
          self->extras_.upstream_verified);
    });
  }

 private:
  // The upstream's status once known, 0 when it gave none (ForwardExtras::on_status).
  void NoteStatus(int status) {
    if (!extras_.on_status) return;
    auto fn = std::move(extras_.on_status);
    extras_.on_status = nullptr;
    fn(status);
  }

  void Fail(int status, const std::string& msg) {
    if (ended_) return;
    NoteStatus(0);
    ended_ = true;
    if (tap_) tap_->Finish(msg);
    CloseUpstream();
    if (!c_->response_started()) c_->RespondError(status, msg);
    else c_->Abort();
  }

  void StartDrain() {
    draining_ = true;
    timer_.expires_after(std::chrono::seconds(10));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->CloseUpstream();
    });
  }

  void CloseUpstream() {
    boost::system::error_code ec;
    up_.close(ec);
    if (close_bridge_) std::exchange(close_bridge_, nullptr)();
  }

  void SendHead() {
    std::string head = c_->method_string() + " " + c_->target() + " HTTP/1.1\r\n";
    head += "Host: " + (host_header_.empty() ? host_ + ":" + std::to_string(port_) : host_header_) + "\r\n";
    for (const auto& [name, value] : c_->Headers()) {
      if (HopByHop(name)) continue;
      head += name;
      head += ": ";
      head += value;
      head += "\r\n";
    }
    for (const auto& [name, value] : extras_.headers) head += name + ": " + value + "\r\n";
    chunked_ = c_->chunked_request() && !extras_.body;
    if (extras_.body) head += "Content-Length: " + std::to_string(extras_.body->size()) + "\r\n";
    else if (chunked_) head += "Transfer-Encoding: chunked\r\n";
    else if (auto len = c_->content_length()) head += "Content-Length: " + std::to_string(*len) + "\r\n";
    std::string conn = c_->Header("Connection"), upgrade = c_->Header("Upgrade");
    for (auto& ch : conn) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    upgrade_ = !upgrade.empty() && conn.find("upgrade") != std::string::npos && c_->body_done();
    if (upgrade_) head += "Connection: Upgrade\r\nUpgrade: " + upgrade + "\r\n\r\n";
    else head += "Connection: close\r\n\r\n";
    if (extras_.body) head += *extras_.body;  // read already by the caller
    auto buf = std::make_shared<std::string>(std::move(head));
    asio::async_write(up_, asio::buffer(*buf), [self = shared_from_this(), buf](boost::system::error_code ec, size_t) {
      if (self->ended_) return;
      if (ec) return self->Fail(502, "write to sandbox: " + ec.message());
      self->ReadResponseHead();
      if (self->upgrade_) return;  // no body; the socket may be detached on 101
      if (self->c_->body_done() || self->extras_.body) {
        self->c_->WatchForDisconnect();
      } else {
        self->PumpBody();
      }
    });
  }

  // client body → upstream, one chunk in flight.
  void PumpBody() {
    c_->ReadBodyChunk([self = shared_from_this()](Status st, std::string_view chunk, bool done) {
      if (!st.ok()) {
        LOG_DEBUG("proxy: client body: {}", st.message());
        if (self->ended_) return;
        self->ended_ = true;
        if (st.code() == StatusCode::kDeadlineExceeded && !self->c_->response_started()) {
          self->CloseUpstream();
          return self->c_->RespondError(408, st.message());
        }
        self->CloseUpstream();
        return self->c_->Abort();
      }
      if (self->tap_ && !chunk.empty()) self->tap_->OnRequestBody(chunk);
      auto out = std::make_shared<std::string>();
      if (!chunk.empty()) {
        if (self->chunked_) {
          char hdr[24];
          int n = std::snprintf(hdr, sizeof hdr, "%zx\r\n", chunk.size());
          out->append(hdr, static_cast<size_t>(n));
          out->append(chunk);
          out->append("\r\n");
        } else {
          out->append(chunk);
        }
      }
      if (done && self->chunked_) out->append("0\r\n\r\n");
      if (self->ended_) return;
      if (out->empty()) {
        if (done) self->c_->WatchForDisconnect();
        else self->PumpBody();
        return;
      }
      asio::async_write(self->up_, asio::buffer(*out),
                        [self, out, done](boost::system::error_code ec, size_t) {
                          if (ec || self->ended_) return;  // the agent stopped reading; its response decides
                          if (done) self->c_->WatchForDisconnect();
                          else self->PumpBody();
                        });
    });
  }

  void ReadResponseHead() {
    parser_.emplace();
    parser_->header_limit(64 * 1024);
    // The body is relayed piece by piece, never held: no size limit (Beast's
    // default of 8 MiB refused every larger download at the head).
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    if (c_->method() == http::Method::kHead) parser_->skip(true);
    bhttp::async_read_header(up_, rbuf_, *parser_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (self->ended_) return;
      if (ec) return self->Fail(502, "sandbox closed the connection before answering: " + ec.message());
      int status = static_cast<int>(self->parser_->get().result_int());
      // An interim answer (100 Continue): HttpConn gave the client its own.
      if (status >= 100 && status < 200 && !(self->upgrade_ && status == 101)) return self->ReadResponseHead();
      self->ForwardHead();
    });
  }

  // The response's end is known from its framing (Content-Length, chunked,
  // or no body), never from the agent closing: a client that reuses its
  // connection must get the next answer even when the agent is slow to
  // close, or is gone (a killed sandbox never sends FIN). Chunked bodies are
  // re-chunked as they arrive (every Connect envelope reaches the client at
  // once); a body that ends only at EOF is relayed, then the client's
  // connection closes.
  void ForwardHead() {
    const auto& res = parser_->get();
    int status = static_cast<int>(res.result_int());
    NoteStatus(status);
    if (upgrade_ && status == 101) return StartTunnel();
    chunked_response_ = parser_->chunked();
    bool framed = chunked_response_ || parser_->content_length().has_value() || parser_->is_done();
    keep_alive_ = c_->keep_alive() && framed;
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " + std::string(res.reason()) + "\r\n";
    // A guest's answer is never a page of the daemon's origin (relay_guard.h).
    const RelayGuard guard = sandbox_id_.empty() ? extras_.guard : GuardForGuest(port_, c_->path());
    std::string guest_type;
    for (const auto& f : res) {
      std::string_view name(f.name_string().data(), f.name_string().size());
      if (name.size() == 10 && strncasecmp(name.data(), "connection", 10) == 0) continue;
      if (name.size() == 10 && strncasecmp(name.data(), "keep-alive", 10) == 0) continue;
      if (name.size() == 7 && strncasecmp(name.data(), "trailer", 7) == 0) continue;
      if (DropsRelayedHeader(guard, name)) {
        if (name.size() == 12 && strncasecmp(name.data(), "content-type", 12) == 0)
          guest_type.assign(f.value().data(), f.value().size());
        continue;
      }
      head.append(name.data(), name.size());
      head += ": ";
      head.append(f.value().data(), f.value().size());
      head += "\r\n";
    }
    for (const auto& [name, value] : GuardHeaders(guard, c_->method(), guest_type)) head += name + ": " + value + "\r\n";
    if (!keep_alive_ || !c_->body_done()) head += "Connection: close\r\n";
    head += "\r\n";
    c_->SendRaw(std::move(head));
    if (tap_) tap_->OnResponseHead(status, chunked_response_);
    chunk_.resize(kUpstreamChunk);
    if (parser_->is_done()) return FinishResponse();
    PumpResponse();
  }

  // Client bytes for one decoded body piece (framed as the head said).
  void Relay(std::string_view piece) {
    if (piece.empty()) return;
    std::string out;
    if (chunked_response_) {
      char hdr[24];
      int n = std::snprintf(hdr, sizeof hdr, "%zx\r\n", piece.size());
      out.reserve(piece.size() + static_cast<size_t>(n) + 2);
      out.append(hdr, static_cast<size_t>(n));
      out.append(piece);
      out.append("\r\n");
    } else {
      out.assign(piece);
    }
    if (tap_) tap_->OnResponseBytes(out);
    if (!draining_) c_->SendRaw(std::move(out));
  }

  void FinishResponse() {
    ended_ = true;
    if (chunked_response_) {
      if (tap_) tap_->OnResponseBytes("0\r\n\r\n");
      if (!draining_) c_->SendRaw("0\r\n\r\n");
    }
    if (tap_) tap_->Finish();
    CloseUpstream();
    timer_.cancel();
    if (!draining_) c_->FinishRaw(keep_alive_);
  }

  // upstream body (decoded) → client, flushed as it comes.
  void PumpResponse() {
    if (ended_) return;
    if (c_->closed() && !draining_) {
      ended_ = true;
      return CloseUpstream();
    }
    if (!draining_ && c_->pending_bytes() >= HttpConn::kLowWatermark) {
      c_->SetOnDrain([self = shared_from_this()] {
        self->c_->SetOnDrain(nullptr);
        asio::post(self->c_->executor(), [self] { self->PumpResponse(); });
      });
      return;
    }
    auto& body = parser_->get().body();
    body.data = chunk_.data();
    body.size = chunk_.size();
    bhttp::async_read_some(up_, rbuf_, *parser_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (self->ended_) return;
      if (ec == bhttp::error::need_buffer) ec = {};
      size_t got = self->chunk_.size() - self->parser_->get().body().size;
      self->Relay(std::string_view(self->chunk_.data(), got));
      if (!ec && self->parser_->is_done()) return self->FinishResponse();
      if (ec) {
        self->ended_ = true;
        if (self->tap_) self->tap_->Finish("upstream read: " + ec.message());
        self->CloseUpstream();
        return self->c_->Abort();  // a truncated body must not look complete
      }
      self->PumpResponse();
    });
  }

  // 101 Switching Protocols: relay raw bytes both ways.
  void StartTunnel() {
    ended_ = true;  // the socket leaves HttpConn; the Tunnel is tracked instead
    const auto& res = parser_->get();
    std::string head = "HTTP/1.1 101 " + std::string(res.reason()) + "\r\n";
    for (const auto& f : res) {
      head.append(f.name_string().data(), f.name_string().size());
      head += ": ";
      head.append(f.value().data(), f.value().size());
      head += "\r\n";
    }
    head += "\r\n";
    if (rbuf_.size() > 0) {
      auto d = rbuf_.data();
      head.append(static_cast<const char*>(d.data()), d.size());
      rbuf_.consume(rbuf_.size());
    }
    auto [client, extra] = c_->DetachSocket();
    auto pipe = std::make_shared<Tunnel>(std::move(client), std::move(up_), std::move(close_bridge_));
    if (track_) track_(pipe);
    auto first_up = std::make_shared<std::string>(std::move(extra));
    auto first_down = std::make_shared<std::string>(std::move(head));
    asio::async_write(pipe->client, asio::buffer(*first_down), [pipe, first_down, first_up](
                                                                   boost::system::error_code ec, size_t) {
      if (ec) return pipe->CloseBoth();
      asio::async_write(pipe->up, asio::buffer(*first_up), [pipe, first_up](boost::system::error_code e2, size_t) {
        if (e2) return pipe->CloseBoth();
        pipe->Run(pipe->client, pipe->up, pipe->b1);
        pipe->Run(pipe->up, pipe->client, pipe->b2);
      });
    });
  }

  ForwardExtras extras_;
  std::shared_ptr<HttpConn> c_;
  bool upgrade_ = false;
  tcp::socket up_;
  std::function<void()> close_bridge_;  // an httpsPorts port's TLS bridge (upstream_tls.h)
  asio::steady_timer timer_;
  std::string host_;
  uint16_t port_;
  bool connected_ = false;
  bool chunked_ = false;
  bool keep_alive_ = true;
  boost::beast::flat_buffer rbuf_;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser_;
  bool chunked_response_ = false;
  std::vector<char> chunk_;
  std::shared_ptr<audit::DataPlaneTap> tap_;
  bool draining_ = false;
  std::string sandbox_id_;
  std::function<void(std::weak_ptr<DataPlaneStream>)> track_;
  std::string host_header_;
  bool ended_ = false;  // the response is finished or cut: c_ may serve another request
};

}  // namespace

void ForwardRequest(std::shared_ptr<HttpConn> c, const std::string& host, uint16_t port, std::string host_header,
                    ForwardExtras extras, std::function<void(std::weak_ptr<DataPlaneStream>)> track) {
  std::string sandbox_id = std::move(extras.sandbox_id);
  std::shared_ptr<audit::DataPlaneTap> tap = std::move(extras.tap);
  auto call = std::make_shared<ProxyCall>(std::move(c), host, port, std::move(sandbox_id), std::move(track),
                                          std::move(host_header), std::move(extras));
  if (tap) call->SetTap(std::move(tap));
  call->Start();
}

}  // namespace airlock::gateway
