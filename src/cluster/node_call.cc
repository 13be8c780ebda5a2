#include "cluster/node_call.h"

#include <strings.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstring>
#include <memory>
#include <optional>

#include "gateway/upstream_tls.h"
#include "http/socket_options.h"

namespace airlock::cluster {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

// Framing and per-hop headers: the front frames its own answer.
bool PerHop(std::string_view name) {
  static const char* kNames[] = {"connection", "keep-alive", "transfer-encoding", "content-length",  "content-type",
                                 "te",         "trailer",    "upgrade",           "proxy-connection"};
  for (const char* n : kNames) {
    if (name.size() == std::strlen(n) && strncasecmp(name.data(), n, name.size()) == 0) return true;
  }
  return false;
}

class NodeCall : public std::enable_shared_from_this<NodeCall> {
 public:
  NodeCall(asio::any_io_executor ex, std::string request, size_t max_body, std::function<void(NodeReply)> done,
           std::shared_ptr<const gateway::UpstreamTls> tls)
      : sock_(ex), timer_(ex), request_(std::move(request)), done_(std::move(done)), tls_(std::move(tls)) {
    parser_.emplace();
    parser_->header_limit(64 * 1024);
    parser_->body_limit(max_body);
  }

  void Start(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(host, ec);
    if (ec) return Finish(NodeReply::Outcome::kNotDelivered, "invalid address " + host);
    sock_.open(addr.is_v4() ? tcp::v4() : tcp::v6(), ec);
    if (ec) return Finish(NodeReply::Outcome::kNotDelivered, "socket: " + ec.message());
    http::SetCloexec(sock_.native_handle());
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return;
      self->timed_out_ = true;
      boost::system::error_code ignored;
      self->sock_.close(ignored);
      if (self->close_tls_) self->close_tls_();
    });
    sock_.async_connect(tcp::endpoint(addr, port), [self = shared_from_this()](boost::system::error_code ec) {
      if (ec) {
        return self->Finish(NodeReply::Outcome::kNotDelivered,
                            self->timed_out_ ? "connect timed out" : "connect: " + ec.message());
      }
      boost::system::error_code ignored;
      self->sock_.set_option(tcp::no_delay(true), ignored);
      if (!self->tls_) return self->Send();
      // Mutual TLS first: a failed handshake or a peer that is not this
      // node sent nothing, so the create was not delivered.
      self->close_tls_ = gateway::BridgeToTls(
          std::move(self->sock_),
          [self](StatusOr<tcp::socket> s) {
            if (!s.ok()) return self->Finish(NodeReply::Outcome::kNotDelivered, s.status().message());
            self->sock_ = std::move(*s);
            if (!self->done_) return;  // timed out meanwhile
            self->Send();
          },
          self->tls_);
    });
  }

 private:
  void Send() {
    asio::async_write(sock_, asio::buffer(request_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (ec) return self->Finish(NodeReply::Outcome::kNoAnswer, "write: " + ec.message());
      bhttp::async_read(self->sock_, self->buf_, *self->parser_,
                        [self](boost::system::error_code ec, size_t) { self->Read(ec); });
    });
  }

  void Read(boost::system::error_code ec) {
    if (ec) {
      return Finish(NodeReply::Outcome::kNoAnswer,
                    timed_out_ ? "no answer in time" : "closed before a whole answer: " + ec.message());
    }
    const auto& res = parser_->get();
    NodeReply r;
    r.outcome = NodeReply::Outcome::kAnswered;
    r.status = static_cast<int>(res.result_int());
    for (const auto& f : res) {
      std::string_view name(f.name_string().data(), f.name_string().size());
      std::string value(f.value());
      if (strncasecmp(name.data(), "content-type", name.size()) == 0 && name.size() == 12) r.content_type = value;
      if (!PerHop(name)) r.headers.emplace_back(std::string(name), std::move(value));
    }
    r.body = res.body();
    Finish(std::move(r));
  }

  void Finish(NodeReply::Outcome outcome, std::string error) {
    NodeReply r;
    r.outcome = outcome;
    r.error = std::move(error);
    Finish(std::move(r));
  }

  // Never from inside CallNode: always a handler of its own.
  void Finish(NodeReply r) {
    if (!done_) return;
    timer_.cancel();
    boost::system::error_code ignored;
    sock_.close(ignored);
    if (close_tls_) close_tls_();
    asio::post(timer_.get_executor(), [done = std::move(done_), r = std::move(r)]() mutable { done(std::move(r)); });
    done_ = nullptr;
  }

  tcp::socket sock_;
  asio::steady_timer timer_;
  std::string request_;
  std::function<void(NodeReply)> done_;
  boost::beast::flat_buffer buf_;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser_;
  bool timed_out_ = false;
  std::shared_ptr<const gateway::UpstreamTls> tls_;
  std::function<void()> close_tls_;  // the TLS bridge's closer, once started
};

}  // namespace

void CallNode(asio::any_io_executor ex, const std::string& host, uint16_t port, std::string request,
              std::chrono::milliseconds timeout, size_t max_body, std::function<void(NodeReply)> done,
              std::shared_ptr<const gateway::UpstreamTls> tls) {
  auto call = std::make_shared<NodeCall>(ex, std::move(request), max_body, std::move(done), std::move(tls));
  call->Start(host, port, timeout);
}

}  // namespace airlock::cluster
