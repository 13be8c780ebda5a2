#include "http/listener.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>

#include "http/socket_options.h"

namespace airlock::http {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct Listener::Acceptor {
  explicit Acceptor(asio::io_context& io) : io(io), acceptor(io) {}
  asio::io_context& io;
  tcp::acceptor acceptor;
};

Listener::Listener(asio::io_context& io, Conn::Handler handler, Limits limits)
    : acceptor_(std::make_unique<Acceptor>(io)), handler_(std::move(handler)), limits_(std::move(limits)) {}

Listener::~Listener() = default;

Status ListenOn(tcp::acceptor& a, const std::string& address, std::string_view empty_host) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("listen address '" + address + "' is not ip:port");
  boost::system::error_code ec;
  std::string host = address.substr(0, colon);
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  auto ip = asio::ip::make_address(host.empty() ? std::string(empty_host) : host, ec);
  if (ec) return InvalidArgument("listen address '" + address + "': " + ec.message());
  char* end = nullptr;
  unsigned long port = std::strtoul(address.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port > 65535) return InvalidArgument("listen address '" + address + "': bad port");
  tcp::endpoint ep(ip, static_cast<uint16_t>(port));
  a.open(ep.protocol(), ec);
  // No socket of ours may leak into a spawned process (a leaked listener
  // would keep the port busy after a restart).
  if (!ec) SetCloexec(a.native_handle());
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("listen on " + address + ": " + ec.message());
  return OkStatus();
}

Status Listener::Listen(const std::string& address, std::string_view empty_host) {
  RETURN_IF_ERROR(ListenOn(acceptor_->acceptor, address, empty_host));
  Accept();
  return OkStatus();
}

uint16_t Listener::port() const {
  boost::system::error_code ec;
  return acceptor_->acceptor.local_endpoint(ec).port();
}

void Listener::Stop() {
  boost::system::error_code ec;
  acceptor_->acceptor.close(ec);
}

void Listener::Accept() {
  acceptor_->acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (!ec) {
      std::make_shared<Conn>(std::move(socket), handler_, limits_)->Start();
    } else if (ec == asio::error::operation_aborted || !acceptor_->acceptor.is_open()) {
      return;
    } else {
      if (limits_.log) limits_.log(LogLevel::kWarning, "accept: " + ec.message());
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space) {
        auto t = std::make_shared<asio::steady_timer>(acceptor_->io, std::chrono::milliseconds(100));
        t->async_wait([this, t](boost::system::error_code) { Accept(); });
        return;
      }
    }
    Accept();
  });
}

}  // namespace airlock::http
