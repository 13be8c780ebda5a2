#include "gateway/upstream_tls.h"

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <memory>

namespace airlock::gateway {

namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

ssl::context& ClientContext() {
  static ssl::context* ctx = [] {
    auto* c = new ssl::context(ssl::context::tls_client);
    c->set_verify_mode(ssl::verify_none);  // as E2B: a guest's self-signed certificate works
    SSL_CTX_set_min_proto_version(c->native_handle(), TLS1_2_VERSION);
    static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(c->native_handle(), kAlpn, sizeof(kAlpn));
    return c;
  }();
  return *ctx;
}

struct Bridge : std::enable_shared_from_this<Bridge> {
  Bridge(tcp::socket guest, std::shared_ptr<const UpstreamTls> v)
      : verified(std::move(v)),
        tls(std::move(guest), verified ? *verified->ctx : ClientContext()),
        inner(tls.get_executor()),
        timer(tls.get_executor()) {}
  std::shared_ptr<const UpstreamTls> verified;  // before tls: its context outlives the stream
  ssl::stream<tcp::socket> tls;
  asio::local::stream_protocol::socket inner;
  asio::steady_timer timer;
  std::array<char, 16384> down{}, up{};
  bool closed = false;

  void Close() {
    if (closed) return;
    closed = true;
    boost::system::error_code ig;
    timer.cancel();
    tls.next_layer().close(ig);
    inner.close(ig);
  }
  bool down_done = false, up_done = false;
  // guest (TLS) → inner
  void PumpDown() {
    tls.async_read_some(asio::buffer(down), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      if (self->closed) return;
      if (ec) {
        boost::system::error_code ig;
        self->inner.shutdown(asio::socket_base::shutdown_send, ig);  // the relay reads to EOF
        self->down_done = true;
        if (self->up_done) self->Close();
        return;
      }
      asio::async_write(self->inner, asio::buffer(self->down.data(), n), [self](boost::system::error_code ec2, size_t) {
        if (ec2) return self->Close();
        self->PumpDown();
      });
    });
  }
  // inner → guest (TLS)
  void PumpUp() {
    inner.async_read_some(asio::buffer(up), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      if (self->closed) return;
      if (ec != asio::error::eof && ec) return self->Close();
      if (ec) {
        // The relay is done sending (a WebSocket client's FIN): a TCP FIN to
        // the guest (no close_notify: that would need the TLS stream the
        // other pump reads), its answer still flows back.
        boost::system::error_code ig;
        self->tls.next_layer().shutdown(tcp::socket::shutdown_send, ig);
        self->up_done = true;
        if (self->down_done) self->Close();
        return;
      }
      asio::async_write(self->tls, asio::buffer(self->up.data(), n), [self](boost::system::error_code ec2, size_t) {
        if (ec2) return self->Close();
        self->PumpUp();
      });
    });
  }
};

}  // namespace

std::function<void()> BridgeToTls(tcp::socket guest, std::function<void(StatusOr<tcp::socket>)> done,
                                  std::shared_ptr<const UpstreamTls> verified) {
  auto b = std::make_shared<Bridge>(std::move(guest), std::move(verified));
  b->timer.expires_after(kHandshakeTimeout);
  b->timer.async_wait([b](boost::system::error_code ec) {
    if (!ec) {
      boost::system::error_code ig;
      b->tls.next_layer().close(ig);  // the handshake fails with operation_aborted
    }
  });
  b->tls.async_handshake(ssl::stream_base::client, [b, done = std::move(done)](boost::system::error_code ec) {
    b->timer.cancel();
    if (ec) {
      b->Close();
      if (b->verified) return done(Unavailable(b->verified->what + " handshake failed: " + ec.message()));
      return done(
          Unavailable("TLS to the guest port failed (network.httpsPorts: does it serve TLS?): " + ec.message()));
    }
    if (b->verified) {
      Status st = b->verified->check(b->tls.native_handle());
      if (!st.ok()) {
        b->Close();
        return done(Unavailable(b->verified->what + ": " + st.message()));
      }
    }
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      b->Close();
      return done(Internal("socketpair for the TLS bridge failed"));
    }
    if (b->closed) {  // closed by the relay during the handshake
      ::close(fds[0]);
      ::close(fds[1]);
      return done(Unavailable("the relay ended during the TLS handshake"));
    }
    boost::system::error_code aec;
    b->inner.assign(asio::local::stream_protocol(), fds[1], aec);
    if (aec) ::close(fds[1]);
    tcp::socket outer(b->tls.get_executor());
    if (!aec) outer.assign(tcp::v4(), fds[0], aec);  // reads and writes only: the family is not checked
    if (aec) {
      if (!outer.is_open()) ::close(fds[0]);
      b->Close();
      return done(Internal("TLS bridge: " + aec.message()));
    }
    b->PumpDown();
    b->PumpUp();
    done(std::move(outer));
  });
  return [b] { b->Close(); };
}

}  // namespace airlock::gateway
