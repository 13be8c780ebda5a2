// TLS in front of the API listener (tls_front.h).
#include "gateway/tls_front.h"

#include <openssl/ssl.h>

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "common/log.h"
#include "http/listener.h"

namespace airlock::gateway {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Failed handshakes and refused clients: the first 10 of every 10 s are
// logged, the rest counted and reported with the next line (a flood must not
// become a flood of log lines).
class RefusalLog {
 public:
  void Note(const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    auto now = std::chrono::steady_clock::now();
    if (now - window_ >= std::chrono::seconds(10)) {
      window_ = now;
      logged_ = 0;
    }
    if (logged_ >= 10) {
      ++suppressed_;
      return;
    }
    ++logged_;
    if (suppressed_ > 0) {
      LOG_WARN("tls: {} (and {} more refused before it, not logged)", what, suppressed_);
      suppressed_ = 0;
    } else {
      LOG_WARN("tls: {}", what);
    }
  }

 private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point window_{};
  int logged_ = 0;
  uint64_t suppressed_ = 0;
};

namespace {

constexpr auto kTlsHandshakeTimeout = std::chrono::seconds(10);

// Connections one address may have in their handshake at once (a cluster
// node's listener): more are closed at accept, so idle connections from one
// host cannot take every slot from the fronts (a front opens one per relay:
// a burst of creates stays well below this).
constexpr int kMaxHandshakesPerAddress = 128;

// ALPN: the first of `arg`'s protocols (wire format: the peers' protocol,
// when set, then http/1.1) that the client offers; no protocol otherwise.
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
               void* arg) {
  const auto* ours = static_cast<const std::string*>(arg);
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, reinterpret_cast<const unsigned char*>(ours->data()),
                            static_cast<unsigned>(ours->size()), in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

// One client: TLS on one side, the API listener on the other.
class TlsTunnel : public std::enable_shared_from_this<TlsTunnel> {
 public:
  TlsTunnel(tcp::socket client, asio::ssl::context& ctx, std::shared_ptr<std::atomic<int>> open,
            std::shared_ptr<const TlsClientAuth> client_auth, std::shared_ptr<RefusalLog> refusals,
            std::function<void()> handshake_over)
      : tls_(std::move(client), ctx),
        backend_(tls_.get_executor()),
        timer_(tls_.get_executor()),
        open_(std::move(open)),
        client_auth_(std::move(client_auth)),
        refusals_(std::move(refusals)),
        handshake_over_(std::move(handshake_over)) {
    ++*open_;
  }
  ~TlsTunnel() {
    --*open_;
    if (handshake_over_) handshake_over_();
  }

  // `peers`: where TlsClientAuth's peers go (unused without peer_check).
  void Start(const tcp::endpoint& backend, const tcp::endpoint& peers) {
    auto self = shared_from_this();
    timer_.expires_after(kTlsHandshakeTimeout);
    timer_.async_wait([self](boost::system::error_code ec) {
      if (!ec) self->Close();
    });
    tls_.async_handshake(asio::ssl::stream_base::server, [self, backend, peers](boost::system::error_code ec) {
      if (self->handshake_over_) std::exchange(self->handshake_over_, nullptr)();
      if (ec) {
        if (self->client_auth_) self->refusals_->Note("a handshake failed: " + ec.message());
        return self->Close();
      }
      auto to = backend;
      if (self->client_auth_) {
        Status st = self->Route(backend, peers, to);
        if (!st.ok()) {
          boost::system::error_code ignored;
          auto peer = self->tls_.lowest_layer().remote_endpoint(ignored);
          self->refusals_->Note("refused a client from " + peer.address().to_string() + ": " + st.message());
          return self->Close();
        }
      }
      self->backend_.async_connect(to, [self, to](boost::system::error_code ec) {
        self->timer_.cancel();
        if (ec) {
          LOG_WARN("tls: the backend on port {} refused a connection: {}", to.port(), ec.message());
          return self->Close();
        }
        boost::system::error_code ignored;
        self->backend_.set_option(tcp::no_delay(true), ignored);
        self->ClientToBackend();
        self->BackendToClient();
      });
    });
  }

 private:
  // Which backend a client with a certificate reaches (tls_front.h).
  Status Route(const tcp::endpoint& backend, const tcp::endpoint& peers, tcp::endpoint& to) {
    const TlsClientAuth& a = *client_auth_;
    SSL* ssl = tls_.native_handle();
    if (a.peer_check && !a.peer_alpn.empty()) {
      const unsigned char* alpn = nullptr;
      unsigned len = 0;
      SSL_get0_alpn_selected(ssl, &alpn, &len);
      if (alpn && std::string_view(reinterpret_cast<const char*>(alpn), len) == a.peer_alpn) {
        RETURN_IF_ERROR(a.peer_check(ssl));
        to = peers;
        return OkStatus();
      }
    }
    Status st = a.check(ssl);
    if (st.ok() || !a.peer_check) return st;
    Status peer = a.peer_check(ssl);
    if (!peer.ok()) return PermissionDenied(st.message() + "; as a peer: " + peer.message());
    to = peers;
    return OkStatus();
  }

  void ClientToBackend() {
    auto self = shared_from_this();
    tls_.async_read_some(asio::buffer(up_), [self](boost::system::error_code ec, size_t n) {
      if (ec) return self->HalfCloseBackend();
      asio::async_write(self->backend_, asio::buffer(self->up_, n), [self](boost::system::error_code ec, size_t) {
        if (ec) return self->Close();
        self->ClientToBackend();
      });
    });
  }
  void BackendToClient() {
    auto self = shared_from_this();
    backend_.async_read_some(asio::buffer(down_), [self](boost::system::error_code ec, size_t n) {
      if (ec) return self->CloseTls();  // the API closed: so does the TLS side, with close_notify
      asio::async_write(self->tls_, asio::buffer(self->down_, n), [self](boost::system::error_code ec, size_t) {
        if (ec) return self->Close();
        self->BackendToClient();
      });
    });
  }
  void HalfCloseBackend() {
    boost::system::error_code ec;
    backend_.shutdown(tcp::socket::shutdown_send, ec);  // the answer may still come back
  }
  // close_notify, then the sockets (bounded by the timer).
  void CloseTls() {
    if (closed_) return;
    auto self = shared_from_this();
    timer_.expires_after(std::chrono::seconds(2));
    timer_.async_wait([self](boost::system::error_code ec) {
      if (!ec) self->Close();
    });
    tls_.async_shutdown([self](boost::system::error_code) { self->Close(); });
  }
  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    timer_.cancel();
    backend_.close(ec);
    tls_.lowest_layer().close(ec);
  }

  asio::ssl::stream<tcp::socket> tls_;
  tcp::socket backend_;
  asio::steady_timer timer_;
  std::shared_ptr<std::atomic<int>> open_;  // shared with the front: a tunnel may outlive it
  std::shared_ptr<const TlsClientAuth> client_auth_;
  std::shared_ptr<RefusalLog> refusals_;
  std::function<void()> handshake_over_;  // once: the handshake ended (or never will)
  std::array<char, 64 * 1024> up_{}, down_{};
  bool closed_ = false;
};

}  // namespace

struct TlsFront::Impl : std::enable_shared_from_this<TlsFront::Impl> {
  Impl(asio::io_context& io, tcp::endpoint backend)
      : acceptor(io), ctx(asio::ssl::context::tls_server), backend(std::move(backend)) {}
  void Accept() {
    auto self = shared_from_this();
    acceptor.async_accept([self](boost::system::error_code ec, tcp::socket socket) {
      if (!self->acceptor.is_open()) return;
      if (!ec) {
        boost::system::error_code pec;
        const auto addr = socket.remote_endpoint(pec).address();
        bool refuse = pec || self->open->load() >= kMaxConnections;
        std::function<void()> over;
        if (!refuse && self->client_auth) {
          std::lock_guard<std::mutex> l(self->mu);
          int& n = self->handshaking[addr];
          refuse = n >= kMaxHandshakesPerAddress;
          if (refuse) {
            if (n == 0) self->handshaking.erase(addr);
          } else {
            ++n;
            over = [impl = std::weak_ptr<Impl>(self), addr] {
              if (auto i = impl.lock()) {
                std::lock_guard<std::mutex> l(i->mu);
                if (auto it = i->handshaking.find(addr); it != i->handshaking.end() && --it->second <= 0)
                  i->handshaking.erase(it);
              }
            };
          }
          if (refuse) self->refusals->Note("too many handshakes at once from " + addr.to_string());
        }
        if (refuse) {
          boost::system::error_code ignored;
          socket.close(ignored);
        } else {
          std::make_shared<TlsTunnel>(std::move(socket), self->ctx, self->open, self->client_auth, self->refusals,
                                      std::move(over))
              ->Start(self->backend, self->peers);
        }
      } else if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
                 ec == asio::error::no_memory) {
        // Out of descriptors: accepting again at once would spin; the
        // connections wait in the backlog meanwhile.
        LOG_WARN("tls: accept: {} (retrying in 100 ms)", ec.message());
        auto t = std::make_shared<asio::steady_timer>(self->acceptor.get_executor(), std::chrono::milliseconds(100));
        return t->async_wait([self, t](boost::system::error_code) { self->Accept(); });
      }
      self->Accept();
    });
  }
  tcp::acceptor acceptor;
  asio::ssl::context ctx;
  tcp::endpoint backend;
  tcp::endpoint peers;  // TlsClientAuth::peer_backend_port on loopback
  std::string alpn;     // SelectAlpn's protocols, wire format
  std::shared_ptr<std::atomic<int>> open = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<const TlsClientAuth> client_auth;
  std::shared_ptr<RefusalLog> refusals = std::make_shared<RefusalLog>();
  std::mutex mu;
  std::map<asio::ip::address, int> handshaking;  // guarded by mu: per address, client-auth listeners only
};

TlsFront::TlsFront(asio::io_context& io, std::string backend_host, uint16_t backend_port) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(backend_host, ec);
  if (ec || addr.is_unspecified()) addr = asio::ip::make_address("127.0.0.1");
  impl_ = std::make_shared<Impl>(io, tcp::endpoint(addr, backend_port));
}

TlsFront::~TlsFront() { Stop(); }

Status TlsFront::Start(const std::string& listen, const std::string& cert_file, const std::string& key_file,
                       std::shared_ptr<const TlsClientAuth> client_auth) {
  boost::system::error_code ec;
  auto& ctx = impl_->ctx;
  ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                  asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  ctx.use_certificate_chain_file(cert_file, ec);
  if (ec) return InvalidArgument("certificate " + cert_file + ": " + ec.message());
  ctx.use_private_key_file(key_file, asio::ssl::context::pem, ec);
  if (ec) return InvalidArgument("key " + key_file + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1)
    return InvalidArgument("key " + key_file + " does not match certificate " + cert_file);
  static const char kHttp11[] = "\x08http/1.1";
  impl_->alpn.clear();
  if (client_auth && client_auth->peer_check) {
    if (client_auth->peer_backend_port == 0) return InvalidArgument("a peer route needs peer_backend_port");
    if (client_auth->peer_alpn.size() > 255) return InvalidArgument("peer_alpn is over 255 bytes");
    impl_->peers = tcp::endpoint(asio::ip::make_address("127.0.0.1"), client_auth->peer_backend_port);
    if (!client_auth->peer_alpn.empty()) {
      impl_->alpn.push_back(static_cast<char>(client_auth->peer_alpn.size()));
      impl_->alpn += client_auth->peer_alpn;
    }
  }
  impl_->alpn += kHttp11;
  SSL_CTX_set_alpn_select_cb(ctx.native_handle(), SelectAlpn, &impl_->alpn);
  if (client_auth) {
    if (!client_auth->check) return InvalidArgument("a client-certificate listener needs a check");
    ctx.load_verify_file(client_auth->ca_file, ec);
    if (ec) return InvalidArgument("--cluster-ca " + client_auth->ca_file + ": " + ec.message());
    ctx.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
    SSL_CTX_set_session_cache_mode(ctx.native_handle(), SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx.native_handle(), SSL_OP_NO_TICKET);
    impl_->client_auth = std::move(client_auth);
  }
  RETURN_IF_ERROR(http::ListenOn(impl_->acceptor, listen));
  impl_->Accept();
  return OkStatus();
}

uint16_t TlsFront::port() const {
  boost::system::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

void TlsFront::Stop() {
  boost::system::error_code ec;
  if (impl_) impl_->acceptor.close(ec);
}

}  // namespace airlock::gateway
