#include "egress/proxy_conn.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "egress/l7_parse.h"

namespace airlock::egress {

std::string ViaOf(const std::optional<UpstreamProxy>& proxy) {
  if (!proxy) return "";
  return std::string(proxy->kind == UpstreamProxy::Kind::kSocks5 ? "socks5 " : "http-connect ") + proxy->address;
}

ProxyConn::ProxyConn(EgressService::Impl& svc, std::shared_ptr<SandboxEgress> sb, tcp::socket client, bool tls)
    : svc_(svc),
      sb_(std::move(sb)),
      client_(std::move(client)),
      upstream_(svc.io),
      timer_(svc.io),
      up_timer_(svc.io),
      down_timer_(svc.io),
      tls_(tls),
      port_(tls ? 443 : 80) {}

void ProxyConn::Start() {
  timer_.expires_after(svc_.config.first_bytes_timeout);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec && !self->allowed_ && !self->finished_) self->Deny("default-deny", "no request within the deadline");
  });
  ReadFirstBytes();
}

void ProxyConn::ReadFirstBytes() {
  size_t old = first_.size();
  first_.resize(old + 4096);
  client_.async_read_some(asio::buffer(first_.data() + old, 4096),
                          [self = shared_from_this(), old](const boost::system::error_code& ec, size_t n) {
                            if (self->finished_) return;
                            self->first_.resize(old + n);
                            if (ec) {
                              self->Deny("default-deny", "client closed before a complete request");
                              return;
                            }
                            L7Result r = self->tls_ ? ParseClientHello(self->first_.data(), self->first_.size())
                                                    : ParseHttpRequestHead(self->first_.data(), self->first_.size());
                            if (r.kind == L7Result::Kind::kNeedMore) {
                              if (self->first_.size() > kMaxL7Head + 16384) {
                                self->Deny("default-deny", "request head too large");
                                return;
                              }
                              self->ReadFirstBytes();
                              return;
                            }
                            if (r.kind == L7Result::Kind::kInvalid) {
                              self->Deny("default-deny", r.error);
                              return;
                            }
                            self->host_ = r.host;
                            self->Decide();
                          });
}

void ProxyConn::Decide() {
  const EgressPolicy& policy = *sb_->policy;
  if (ParseIpv4(host_)) {
    Deny("default-deny", "address literal: names only (connect by name, resolved through the sandbox's DNS)");
    return;
  }
  Decision d = policy.CheckNamePort(host_, port_);
  if (!d.allowed) {
    Deny(d.rule, d.reason);
    return;
  }
  rule_ = d.rule;
  size_t host_skipped = 0;
  candidates_ = svc_.PinnedAddresses(*sb_, host_, port_, &host_skipped);
  if (candidates_.empty() && host_skipped > 0) {
    Deny("host-address", "the name resolves to an address of this host or of a sandbox");
    return;
  }
  if (candidates_.empty()) {
    Deny(d.rule, "name not resolved through the sandbox's resolver (or its answers are no longer allowed)");
    return;
  }
  ChooseMode();
  decided_ = true;
  if (sb_->policy->upstream_proxy()) {
    ConnectViaProxy();
    return;
  }
  Connect(0);
}

void ProxyConn::ConnectViaProxy() {
  // A copy: the policy may be replaced while the tunnel opens.
  UpstreamProxy proxy = *sb_->policy->upstream_proxy();
  via_ = ViaOf(proxy);
  timer_.expires_after(svc_.config.connect_timeout);  // resolve + connect + handshake
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec && !self->allowed_ && !self->finished_) self->Finish("the egress proxy did not open a tunnel in time");
  });
  asio::co_spawn(
      svc_.io,
      [self = shared_from_this(), proxy]() -> asio::awaitable<void> {
        std::string why;
        try {
          why = co_await self->OpenProxyTunnel(proxy);
        } catch (const std::exception& e) {
          why = std::string("the egress proxy: ") + e.what();
        }
        if (self->finished_) co_return;
        if (!why.empty()) {
          self->Finish(why);
          co_return;
        }
        self->OnUpstreamConnected();
      },
      asio::detached);
}

void ProxyConn::Connect(size_t index) {
  if (finished_) return;
  if (index >= candidates_.size()) {
    Finish("upstream connect failed");
    return;
  }
  ip_ = candidates_[index];
  if (svc_.IsHostAddress(ip_)) {  // became the host's since the decision (an address added meanwhile)
    if (index + 1 < candidates_.size()) {
      Connect(index + 1);
      return;
    }
    Deny("host-address", "the name resolves to an address of this host or of a sandbox");
    return;
  }
  tcp::endpoint ep(asio::ip::address_v4(ip_), port_);
  timer_.expires_after(svc_.config.connect_timeout);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec && !self->allowed_) {
      boost::system::error_code ignore;
      self->upstream_.close(ignore);
    }
  });
  upstream_.async_connect(ep, [self = shared_from_this(), index](const boost::system::error_code& ec) {
    if (self->finished_) return;
    if (ec) {
      boost::system::error_code ignore;
      self->upstream_.close(ignore);
      self->upstream_ = tcp::socket(self->svc_.io);
      self->Connect(index + 1);
      return;
    }
    self->OnUpstreamConnected();
  });
}

void ProxyConn::OnUpstreamConnected() {
  allowed_ = true;
  timer_.cancel();
  boost::system::error_code ignore;
  upstream_.set_option(tcp::no_delay(true), ignore);
  auto self = shared_from_this();
  if (mode_ != Mode::kRaw) {
    asio::co_spawn(svc_.io, [self]() { return self->RunHttp(); }, asio::detached);
    return;
  }
  // Forward what was read to decide, then relay.
  auto data = std::make_shared<std::vector<uint8_t>>(std::move(first_));
  bytes_out_ += data->size();
  asio::async_write(upstream_, asio::buffer(*data), [self, data](const boost::system::error_code& ec2, size_t) {
    if (self->finished_) return;
    if (ec2) {
      self->Finish("upstream write failed");
      return;
    }
    self->Relay();
  });
}

void ProxyConn::Relay() {
  up_.from = &client_;
  up_.to = &upstream_;
  up_.counter = &bytes_out_;
  down_.from = &upstream_;
  down_.to = &client_;
  down_.counter = &bytes_in_;
  Pump(up_);
  Pump(down_);
}

void ProxyConn::Pump(Direction& d) {
  d.from->async_read_some(asio::buffer(d.buf), [self = shared_from_this(), &d](const boost::system::error_code& ec,
                                                                               size_t n) {
    if (self->finished_) return;
    if (ec) {
      d.done = true;
      boost::system::error_code ignore;
      if (ec == asio::error::eof) {
        d.to->shutdown(tcp::socket::shutdown_send, ignore);
      } else {
        self->Finish("connection error: " + ec.message());
        return;
      }
      if (self->up_.done && self->down_.done) self->Finish("");
      return;
    }
    *d.counter += n;
    auto write = [self, &d, n]() {
      if (self->finished_) return;
      asio::async_write(*d.to, asio::buffer(d.buf.data(), n), [self, &d](const boost::system::error_code& ec2, size_t) {
        if (self->finished_) return;
        if (ec2) {
          self->Finish("connection error: " + ec2.message());
          return;
        }
        self->Pump(d);
      });
    };
    auto wait = self->sb_->bucket.Take(n);
    if (wait == Clock::duration::zero()) {
      write();
    } else {
      asio::steady_timer& t = (&d == &self->up_) ? self->up_timer_ : self->down_timer_;
      t.expires_after(wait);
      t.async_wait([write](const boost::system::error_code& e) {
        if (!e) write();
      });
    }
  });
}

void ProxyConn::Deny(const std::string& rule, const std::string& reason) {
  if (finished_) return;
  allowed_ = false;
  rule_ = rule;
  if (!tls_) {
    // A plain HTTP client gets a readable refusal.
    std::string body = "airlock: egress to " + (host_.empty() ? std::string("this destination") : host_) + " denied (" +
                       reason + ")\n";
    auto msg = std::make_shared<std::string>("HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: " +
                                             std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    boost::system::error_code ignore;
    asio::write(client_, asio::buffer(*msg), ignore);  // small; the socket buffer takes it
  }
  Finish(reason);
}

void ProxyConn::Abort(const std::string& reason) { Finish(reason); }

void ProxyConn::Finish(const std::string& reason) {
  if (finished_) return;
  finished_ = true;
  boost::system::error_code ignore;
  timer_.cancel();
  up_timer_.cancel();
  down_timer_.cancel();
  client_.close(ignore);
  upstream_.close(ignore);
  nlohmann::json r;
  r["protocol"] = tls_ ? "tls" : "http";
  r["decision"] = allowed_ ? "allow" : "deny";
  r["rule"] = rule_;
  if (!reason.empty()) r["reason"] = reason;
  r["destination"] = {{"name", host_}, {"ip", ip_ ? Ipv4ToString(ip_) : ""}, {"port", port_}};
  r["bytesOut"] = bytes_out_;
  r["bytesIn"] = bytes_in_;
  r["durationMs"] = std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  if (mode_ != Mode::kRaw && allowed_) r["requests"] = requests_;
  if (mode_ == Mode::kIntercept) r["intercepted"] = true;
  if (!rules_applied_.empty()) r["headerRules"] = rules_applied_;
  if (!secrets_used_.empty()) r["secrets"] = secrets_used_;
  if (!note_.empty()) r["note"] = note_;
  if (!via_.empty()) r["via"] = via_;  // destination.ip is then the proxy's
  svc_.Emit(*sb_, std::move(r));
  sb_->conns.erase(shared_from_this());
}

}  // namespace airlock::egress
