// http::Listener: accepts TCP connections on one address and runs an
// http::Conn with the given handler and limits on each, on `io`'s thread.
// The listening socket is FD_CLOEXEC and SO_REUSEADDR; running out of fds
// backs off 100 ms instead of spinning.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>

#include "common/status.h"
#include "http/conn.h"

namespace boost::asio {
class io_context;
}

namespace airlock::http {

// Opens, binds and listens `acceptor` on "ip:port" or "[v6]:port" (an empty
// ip is `empty_host`), FD_CLOEXEC and SO_REUSEADDR: Listener::Listen's, also
// for listeners that speak something else on top (gateway/tls_front.h).
// Errors as Listen's.
Status ListenOn(boost::asio::ip::tcp::acceptor& acceptor, const std::string& address,
                std::string_view empty_host = "127.0.0.1");

class Listener {
 public:
  Listener(boost::asio::io_context& io, Conn::Handler handler, Limits limits);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // "ip:port" or "[v6]:port"; port 0 picks a free one (see port()); an empty
  // ip is `empty_host`. Errors: invalid_argument (address), unavailable
  // (socket, bind, listen; with the address and the error).
  Status Listen(const std::string& address, std::string_view empty_host = "127.0.0.1");
  uint16_t port() const;
  void Stop();

 private:
  struct Acceptor;
  void Accept();
  std::unique_ptr<Acceptor> acceptor_;
  Conn::Handler handler_;
  Limits limits_;
};

}  // namespace airlock::http
