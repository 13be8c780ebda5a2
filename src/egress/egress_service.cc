#include "egress/egress_service.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <future>
#include <random>
#include <sstream>

#include "common/log.h"
#include "egress/dns_message.h"
#include "egress/egress_internal.h"
#include "egress/nflog_reader.h"
#include "egress/proxy_conn.h"

namespace airlock::egress {

namespace {

StatusOr<udp::endpoint> ParseUpstream(std::string s) {
  if (s.empty()) {
    std::ifstream f("/etc/resolv.conf");
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      std::string k, v;
      if (ls >> k >> v && k == "nameserver" && ParseIpv4(v)) {
        s = v;
        break;
      }
    }
    if (s.empty()) return FailedPrecondition("egress: no upstream resolver (no IPv4 nameserver in /etc/resolv.conf)");
  }
  uint16_t port = 53;
  if (auto c = s.find(':'); c != std::string::npos) {
    int p = std::atoi(s.c_str() + c + 1);
    if (p <= 0 || p > 65535) return InvalidArgument("egress: bad upstream resolver port in '" + s + "'");
    port = static_cast<uint16_t>(p);
    s.resize(c);
  }
  auto ip = ParseIpv4(s);
  if (!ip) return InvalidArgument("egress: upstream resolver '" + s + "' is not an IPv4 address");
  return udp::endpoint(asio::ip::address_v4(*ip), port);
}

StatusOr<std::unique_ptr<asio::ssl::context>> NewUpstreamTlsContext(const std::string& ca_file) {
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  boost::system::error_code ec;
  ctx->set_default_verify_paths(ec);
  if (ec) return Internal("egress: system trust store: " + ec.message());
  if (!ca_file.empty()) {
    ctx->load_verify_file(ca_file, ec);
    if (ec) return InvalidArgument("egress: upstream CA file " + ca_file + ": " + ec.message());
  }
  ctx->set_verify_mode(asio::ssl::verify_peer);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx->native_handle(), kAlpn, sizeof(kAlpn));
  return ctx;
}

uint16_t RandomId() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return static_cast<uint16_t>(rng());
}

}  // namespace

template <typename F>
auto EgressService::Impl::OnLoop(F&& fn) -> decltype(fn()) {
  using R = decltype(fn());
  std::packaged_task<R()> task(std::forward<F>(fn));
  auto fut = task.get_future();
  asio::post(io, [&task]() { task(); });
  return fut.get();
}

void EgressService::Impl::Emit(SandboxEgress& sb, nlohmann::json record) {
  record["time"] = NowRfc3339Ms();
  record["timestampMs"] =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  record["sandboxID"] = sb.id;
  {
    std::lock_guard<std::mutex> lock(records_mu);
    auto now = Clock::now();
    if (now - sb.second_start >= std::chrono::seconds(1)) {
      if (sb.suppressed > 0) {
        nlohmann::json s = {{"time", record["time"]},     {"sandboxID", sb.id},
                            {"protocol", "audit"},        {"decision", "deny"},
                            {"rule", "rate-limit"},       {"reason", "records suppressed (rate limit)"},
                            {"suppressed", sb.suppressed}};
        sb.records.push_back(s);
        if (config.audit_sink) config.audit_sink(s);
        sb.suppressed = 0;
      }
      sb.second_start = now;
      sb.records_this_second = 0;
    }
    if (++sb.records_this_second > kMaxRecordsPerSecond) {
      ++sb.suppressed;
      return;
    }
    sb.records.push_back(record);
    while (sb.records.size() > config.records_per_sandbox) sb.records.pop_front();
  }
  if (config.audit_sink) config.audit_sink(record);
}

void PruneResolved(std::map<std::string, Resolved>& resolved, Clock::time_point now, size_t max) {
  if (resolved.size() < max) return;
  std::erase_if(resolved, [now](const auto& kv) { return kv.second.expiry < now; });
  const size_t keep = max - max / 4;
  if (resolved.size() <= keep) return;
  std::vector<std::map<std::string, Resolved>::iterator> by_expiry;
  by_expiry.reserve(resolved.size());
  for (auto it = resolved.begin(); it != resolved.end(); ++it) by_expiry.push_back(it);
  const size_t drop = resolved.size() - keep;
  std::nth_element(by_expiry.begin(), by_expiry.begin() + static_cast<std::ptrdiff_t>(drop), by_expiry.end(),
                   [](const auto& a, const auto& b) { return a->second.expiry < b->second.expiry; });
  for (size_t i = 0; i < drop; ++i) resolved.erase(by_expiry[i]);
}

std::vector<uint32_t> EgressService::Impl::PinnedAddresses(SandboxEgress& sb, const std::string& name, uint16_t port,
                                                           size_t* host_skipped) {
  std::vector<uint32_t> out;
  auto it = sb.resolved.find(name);
  if (it == sb.resolved.end()) return out;
  if (it->second.expiry < Clock::now()) {
    sb.resolved.erase(it);
    return out;
  }
  for (uint32_t ip : it->second.ips) {
    if (IsForbiddenAddress(ip)) continue;
    if (IsHostAddress(ip)) {
      if (host_skipped) ++*host_skipped;
      continue;
    }
    bool denied = false;
    for (const auto& r : sb.policy->deny()) {
      if (r.kind != Rule::Kind::kCidr) continue;
      uint32_t mask = r.prefix == 0 ? 0 : ~uint32_t{0} << (32 - r.prefix);
      if ((ip & mask) == r.net && (!r.port || *r.port == port)) denied = true;
    }
    if (!denied) out.push_back(ip);
  }
  return out;
}

bool EgressService::Impl::IsHostAddress(uint32_t ip, bool count) {
  bool yes = !host || host->IsHostAddress(ip);  // no view of the host: fail closed
  if (yes && count) host_address_refused.fetch_add(1);
  return yes;
}

void EgressService::Impl::WatchHostAddresses() {
  host_events->async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) return;  // closed (shutdown)
    if (host->Refresh() && config.on_host_addresses_changed) {
      std::lock_guard<std::mutex> l(notify_mu);
      notify_pending = host->Addresses();
      notify_cv.notify_one();
    }
    WatchHostAddresses();
  });
}

void EgressService::Impl::RefuseDnsTcp(std::shared_ptr<SandboxEgress> sb, const std::string& reason) {
  dns_tcp_refused.fetch_add(1);
  ++sb->dns_tcp_refused_unreported;
  if (sb->dns_limit_timer_armed) return;
  // The first refusal is recorded at once, the rest of that second in one record.
  auto report = [this, sb, reason]() {
    if (sb->dns_tcp_refused_unreported == 0) return;
    Emit(*sb, {{"protocol", "dns"},
               {"transport", "tcp"},
               {"decision", "deny"},
               {"rule", "limit"},
               {"reason", reason},
               {"refused", sb->dns_tcp_refused_unreported},
               {"destination", {{"name", ""}, {"ip", ""}, {"port", 53}}}});
    sb->dns_tcp_refused_unreported = 0;
  };
  report();
  sb->dns_limit_timer_armed = true;
  sb->dns_limit_timer.expires_after(std::chrono::seconds(1));
  sb->dns_limit_timer.async_wait([sb, report](const boost::system::error_code& ec) {
    sb->dns_limit_timer_armed = false;
    if (!ec && !sb->closed) report();
  });
}

// ---- Resolver ---------------------------------------------------------------

void EgressService::Impl::HandleQuery(std::shared_ptr<SandboxEgress> sb, const uint8_t* data, size_t size,
                                      const char* transport, std::function<void(std::vector<uint8_t>)> reply) {
  auto q = dns::ParseQuery(data, size);
  if (!q.ok()) {
    Emit(*sb, {{"protocol", "dns"},
               {"decision", "deny"},
               {"rule", "default-deny"},
               {"reason", q.status().message()},
               {"transport", transport}});
    reply(dns::BuildFormErr(data, size));
    return;
  }
  nlohmann::json rec = {{"protocol", "dns"},
                        {"transport", transport},
                        {"destination", {{"name", q->name}, {"ip", ""}, {"port", 53}}},
                        {"queryType", q->qtype}};
  Decision d = sb->policy->CheckName(q->name);
  if (!d.allowed) {
    rec["decision"] = "deny";
    rec["rule"] = d.rule;
    rec["reason"] = d.reason + " (NXDOMAIN, not asked upstream)";
    Emit(*sb, rec);
    reply(dns::BuildResponse(*q, dns::kRcodeNxDomain, {}));
    return;
  }
  rec["decision"] = "allow";
  rec["rule"] = d.rule;
  if (q->qtype != dns::kTypeA) {
    rec["reason"] = "only A records are served (no IPv6)";
    Emit(*sb, rec);
    reply(dns::BuildResponse(*q, dns::kRcodeNoError, {}));
    return;
  }
  if (sb->upstream_pending >= 64) {
    rec["decision"] = "deny";
    rec["reason"] = "too many queries in flight";
    Emit(*sb, rec);
    reply(dns::BuildResponse(*q, dns::kRcodeServFail, {}));
    return;
  }
  // Fresh upstream query: only the name crosses.
  ++sb->upstream_pending;
  AskUpstreamA(q->name, [this, sb, q = *q, rec, reply](uint8_t rcode, std::vector<dns::ARecord> a,
                                                       const std::string& reason) mutable {
    --sb->upstream_pending;
    if (sb->closed) return;
    std::vector<dns::ARecord> kept;
    nlohmann::json ips = nlohmann::json::array();
    uint32_t ttl = 3600;
    size_t host_dropped = 0;
    for (const auto& r : a) {
      if (IsForbiddenAddress(r.ip) || !sb->policy->CheckName(q.name).allowed) continue;
      if (IsHostAddress(r.ip)) {
        ++host_dropped;
        continue;
      }
      kept.push_back({r.ip, std::min<uint32_t>(r.ttl, 300)});
      ips.push_back(Ipv4ToString(r.ip));
      ttl = std::min(ttl, r.ttl);
    }
    if (!kept.empty()) {
      if (sb->resolved.size() >= kMaxResolvedNames && !sb->resolved.count(q.name))
        PruneResolved(sb->resolved, Clock::now());
      Resolved& res = sb->resolved[q.name];
      res.ips.clear();
      for (const auto& k : kept) res.ips.push_back(k.ip);
      // Remembered a while beyond the TTL: clients cache answers longer.
      res.expiry = Clock::now() + std::chrono::seconds(std::max<uint32_t>(ttl, 60) + 600);
    }
    rec["destination"]["ip"] = ips.empty() ? "" : ips[0].get<std::string>();
    rec["answers"] = ips;
    if (kept.size() < a.size()) rec["reason"] = "answers in forbidden ranges dropped";
    if (host_dropped > 0) {
      rec["reason"] = "answers that are addresses of this host or of a sandbox dropped";
      rec["hostAddressesDropped"] = host_dropped;
      if (kept.empty()) {
        rec["decision"] = "deny";
        rec["rule"] = "host-address";
        rec["reason"] = "every answer is an address of this host or of a sandbox (dropped)";
      }
    }
    if (!reason.empty()) rec["reason"] = reason;
    Emit(*sb, rec);
    reply(dns::BuildResponse(q, rcode, kept));
  });
}

void EgressService::Impl::AskUpstreamA(const std::string& name, UpstreamAnswer done) {
  struct Pending {
    Pending(asio::io_context& io) : sock(io), timer(io) {}
    udp::socket sock;
    asio::steady_timer timer;
    std::array<uint8_t, dns::kMaxMessage> buf;
    udp::endpoint from;
    std::vector<uint8_t> query;
    bool done = false;
  };
  auto p = std::make_shared<Pending>(io);
  uint16_t id = RandomId();
  p->query = dns::BuildQuery(id, name, dns::kTypeA);
  boost::system::error_code ec;
  p->sock.open(udp::v4(), ec);
  if (ec) return done(dns::kRcodeServFail, {}, "upstream socket: " + ec.message());
  auto finish = [p, done = std::move(done)](uint8_t rcode, std::vector<dns::ARecord> a,
                                            const std::string& reason) mutable {
    if (p->done) return;
    p->done = true;
    boost::system::error_code ignore;
    p->timer.cancel();
    p->sock.close(ignore);
    done(rcode, std::move(a), reason);
  };
  p->timer.expires_after(config.upstream_timeout);
  p->timer.async_wait([finish](const boost::system::error_code& e) mutable {
    if (!e) finish(dns::kRcodeServFail, {}, "upstream timeout");
  });
  p->sock.async_send_to(
      asio::buffer(p->query), upstream,
      [this, p, id, name, finish](const boost::system::error_code& e, size_t) mutable {
        if (e) {
          finish(dns::kRcodeServFail, {}, "upstream send: " + e.message());
          return;
        }
        auto recv = std::make_shared<std::function<void()>>();
        *recv = [this, p, id, name, finish, recv]() mutable {
          p->sock.async_receive_from(
              asio::buffer(p->buf), p->from,
              [this, p, id, name, finish, recv](const boost::system::error_code& e2, size_t n) mutable {
                if (p->done) return;
                if (e2) {
                  finish(dns::kRcodeServFail, {}, "upstream receive: " + e2.message());
                  return;
                }
                if (p->from != upstream) {  // not from our resolver: ignore
                  (*recv)();
                  return;
                }
                auto ans = dns::ParseResponse(p->buf.data(), n, id, name, dns::kTypeA);
                if (!ans.ok()) {
                  (*recv)();  // spoofed or malformed: keep waiting
                  return;
                }
                uint8_t rc = ans->rcode == dns::kRcodeNxDomain ? dns::kRcodeNxDomain
                             : ans->rcode == 0                 ? dns::kRcodeNoError
                                                               : dns::kRcodeServFail;
                *recv = nullptr;
                finish(rc, ans->a, "");
              });
        };
        (*recv)();
      });
}

void EgressService::Impl::StartDnsUdp(std::shared_ptr<SandboxEgress> sb) {
  struct Rx {
    std::array<uint8_t, dns::kMaxMessage> buf;
    udp::endpoint from;
  };
  auto rx = std::make_shared<Rx>();
  sb->dns_udp.async_receive_from(asio::buffer(rx->buf), rx->from,
                                 [this, sb, rx](const boost::system::error_code& ec, size_t n) {
                                   if (sb->closed || ec == asio::error::operation_aborted) return;
                                   if (!ec && rx->from.address() == asio::ip::address(sb->netns_ip)) {
                                     udp::endpoint to = rx->from;
                                     HandleQuery(sb, rx->buf.data(), n, "udp", [sb, to](std::vector<uint8_t> out) {
                                       if (out.empty() || sb->closed) return;
                                       boost::system::error_code ignore;
                                       sb->dns_udp.send_to(asio::buffer(out), to, 0, ignore);
                                     });
                                   }
                                   StartDnsUdp(sb);
                                 });
}

void EgressService::Impl::StartDnsTcp(std::shared_ptr<SandboxEgress> sb) {
  sb->dns_tcp.async_accept([this, sb](const boost::system::error_code& ec, tcp::socket s) {
    if (sb->closed || ec == asio::error::operation_aborted) return;
    if (!ec) {
      boost::system::error_code e;
      auto peer = s.remote_endpoint(e);
      if (!e && peer.address() == asio::ip::address(sb->netns_ip) &&
          sb->dns_tcp_open >= sb->limits.max_dns_tcp_connections) {
        // Counted and recorded before the close the guest sees.
        RefuseDnsTcp(sb, "resolver TCP connection limit (" + std::to_string(sb->limits.max_dns_tcp_connections) +
                             " per sandbox) reached");
        s.close(e);
      } else if (!e && peer.address() == asio::ip::address(sb->netns_ip) &&
                 dns_tcp_open_total >= config.max_dns_tcp_total) {
        RefuseDnsTcp(sb, "resolver TCP connection limit (" + std::to_string(config.max_dns_tcp_total) +
                             " for all sandboxes) reached");
        s.close(e);
      } else if (!e && peer.address() == asio::ip::address(sb->netns_ip)) {
        // One slot per connection, given back when the last handler holding
        // the socket lets go (closed, answered, timed out, sandbox removed).
        ++sb->dns_tcp_open;
        ++dns_tcp_open_total;
        std::shared_ptr<tcp::socket> sock(new tcp::socket(std::move(s)), [this, sb](tcp::socket* p) {
          delete p;
          --sb->dns_tcp_open;
          --dns_tcp_open_total;
        });
        auto buf = std::make_shared<std::vector<uint8_t>>(2);
        auto timer = std::make_shared<asio::steady_timer>(io, config.dns_tcp_timeout);
        std::weak_ptr<tcp::socket> weak = sock;
        timer->async_wait([weak](const boost::system::error_code& te) {
          boost::system::error_code ignore;
          if (auto sock = weak.lock(); sock && !te) sock->close(ignore);
        });
        asio::async_read(
            *sock, asio::buffer(*buf), [this, sb, sock, buf, timer](const boost::system::error_code& e1, size_t) {
              if (e1) return;
              size_t len = ((*buf)[0] << 8) | (*buf)[1];
              if (len < 12 || len > dns::kMaxMessage) {
                boost::system::error_code ignore;
                sock->close(ignore);
                return;
              }
              buf->resize(len);
              asio::async_read(
                  *sock, asio::buffer(*buf), [this, sb, sock, buf, timer](const boost::system::error_code& e2, size_t) {
                    if (e2) return;
                    HandleQuery(sb, buf->data(), buf->size(), "tcp", [sock, timer](std::vector<uint8_t> out) {
                      timer->cancel();
                      if (out.empty()) return;
                      auto msg = std::make_shared<std::vector<uint8_t>>(out.size() + 2);
                      (*msg)[0] = static_cast<uint8_t>(out.size() >> 8);
                      (*msg)[1] = static_cast<uint8_t>(out.size());
                      std::copy(out.begin(), out.end(), msg->begin() + 2);
                      asio::async_write(*sock, asio::buffer(*msg),
                                        [sock, msg](const boost::system::error_code&, size_t) {
                                          boost::system::error_code ignore;
                                          sock->shutdown(tcp::socket::shutdown_both, ignore);
                                          sock->close(ignore);
                                        });
                    });
                  });
            });
      }
    }
    StartDnsTcp(sb);
  });
}

// ---- Proxy accept -----------------------------------------------------------

void EgressService::Impl::StartAccept(std::shared_ptr<SandboxEgress> sb, bool tls) {
  tcp::acceptor& a = tls ? sb->tls : sb->http;
  a.async_accept([this, sb, tls](const boost::system::error_code& ec, tcp::socket s) {
    if (sb->closed || ec == asio::error::operation_aborted) return;
    if (!ec) {
      boost::system::error_code e;
      auto peer = s.remote_endpoint(e);
      if (e || peer.address() != asio::ip::address(sb->netns_ip)) {
        s.close(e);
      } else if (static_cast<int>(sb->conns.size()) >= sb->limits.max_connections) {
        Emit(*sb, {{"protocol", tls ? "tls" : "http"},
                   {"decision", "deny"},
                   {"rule", "limit"},
                   {"reason", "connection limit (" + std::to_string(sb->limits.max_connections) + ") reached"},
                   {"destination", {{"name", ""}, {"ip", ""}, {"port", tls ? 443 : 80}}}});
        s.close(e);
      } else {
        auto c = std::make_shared<ProxyConn>(*this, sb, std::move(s), tls);
        sb->conns.insert(c);
        c->Start();
      }
    }
    StartAccept(sb, tls);
  });
}

void EgressService::Impl::CloseSandbox(SandboxEgress& sb) {
  sb.closed = true;
  boost::system::error_code ignore;
  sb.dns_udp.close(ignore);
  sb.dns_tcp.close(ignore);
  sb.http.close(ignore);
  sb.tls.close(ignore);
  if (sb.nflog) sb.nflog->Close();
  auto conns = sb.conns;
  for (auto& c : conns) c->Abort("sandbox removed");
  sb.conns.clear();
}

void EgressService::Impl::EnforcePolicy(SandboxEgress& sb) {
  for (auto it = sb.resolved.begin(); it != sb.resolved.end();) {
    if (!sb.policy->CheckName(it->first).allowed)
      it = sb.resolved.erase(it);
    else
      ++it;
  }
  // network.egressProxy: a connection runs on only while it goes the way
  // the policy says now (through the same proxy, or directly when there is
  // none): adding, changing or removing the proxy closes the others.
  const std::string via_now = ViaOf(sb.policy->upstream_proxy());
  auto conns = sb.conns;
  for (auto& c : conns) {
    if (c->host().empty()) continue;
    bool ok = sb.policy->CheckNamePort(c->host(), c->port()).allowed;
    if (ok && c->decided() && c->via() != via_now) {
      c->Abort("closed: the egress proxy changed");
      continue;
    }
    // A direct connection's address must still be pinned; a tunnelled one's
    // upstream is the proxy (the proxy resolved the name).
    if (ok && c->upstream_ip() && c->via().empty()) {
      auto pinned = PinnedAddresses(sb, c->host(), c->port());
      ok = std::find(pinned.begin(), pinned.end(), c->upstream_ip()) != pinned.end();
    }
    if (!ok) c->Abort("closed: no longer allowed after a policy update");
  }
}

// ---- Public API -------------------------------------------------------------

EgressService::EgressService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<EgressService>> EgressService::Start(EgressConfig config) {
  auto impl = std::make_unique<Impl>(std::move(config));
  ASSIGN_OR_RETURN(impl->upstream, ParseUpstream(impl->config.upstream_dns));
  ASSIGN_OR_RETURN(impl->tls_client, NewUpstreamTlsContext(impl->config.upstream_ca_file));
  std::vector<Cidr> extra;
  if (!impl->config.sandbox_pool.empty()) {
    auto r = ParseRule(impl->config.sandbox_pool);
    if (!r.ok() || r->kind != Rule::Kind::kCidr || r->port)
      return InvalidArgument("egress: sandbox pool '" + impl->config.sandbox_pool + "' is not an IPv4 CIDR");
    extra.push_back({r->net, r->prefix});
    impl->pool = Cidr{r->net, r->prefix};
  }
  for (const auto& text : impl->config.proxy_allow) {
    auto r = ParseRule(text);
    if (!r.ok() || r->kind != Rule::Kind::kCidr || r->port)
      return InvalidArgument("egress: --egress-proxy-allow '" + text + "' is not an IPv4 CIDR");
    impl->proxy_allow.push_back({r->net, r->prefix});
  }
  // The daemon's namespace: this thread's (the loop thread is born in it).
  auto host = HostAddresses::Open(std::move(extra));
  if (!host.ok()) return host.status().WithContext("egress: the host's addresses");
  impl->host = std::move(*host);
  int events = ::dup(impl->host->fd());
  if (events < 0) return ErrnoError("egress: dup netlink socket");
  impl->host_events = std::make_unique<asio::posix::stream_descriptor>(impl->io, events);
  impl->WatchHostAddresses();
  if (impl->config.on_host_addresses_changed) {
    impl->notify_thread = std::thread([raw = impl.get()]() {
      std::unique_lock<std::mutex> l(raw->notify_mu);
      while (true) {
        raw->notify_cv.wait(l, [raw] { return raw->notify_stop || raw->notify_pending; });
        if (raw->notify_stop) return;
        auto list = std::move(*raw->notify_pending);
        raw->notify_pending.reset();
        l.unlock();
        raw->config.on_host_addresses_changed(list);
        l.lock();
      }
    });
  }
  impl->work = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(impl->io.get_executor());
  Impl* raw = impl.get();
  impl->thread = std::thread([raw]() {
    // Signals are for the process's own handlers (airlock run's Ctrl-C
    // watcher, the daemon's), never for this thread: a SIGINT delivered here
    // would kill the process with every sandbox left behind.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    raw->io.run();
  });
  LOG_INFO("egress: resolver upstream {}:{}", raw->upstream.address().to_string(), raw->upstream.port());
  return std::unique_ptr<EgressService>(new EgressService(std::move(impl)));
}

EgressService::~EgressService() {
  impl_->OnLoop([this]() {
    for (auto& [id, sb] : impl_->sandboxes) impl_->CloseSandbox(*sb);
    impl_->sandboxes.clear();
    return 0;
  });
  impl_->work.reset();
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  StopHostAddressNotifications();
}

void EgressService::StopHostAddressNotifications() {
  {
    std::lock_guard<std::mutex> l(impl_->notify_mu);
    impl_->notify_stop = true;
    impl_->notify_cv.notify_one();
  }
  if (impl_->notify_thread.joinable() && impl_->notify_thread.get_id() != std::this_thread::get_id())
    impl_->notify_thread.join();
}

const EgressConfig& EgressService::config() const { return impl_->config; }

EgressCounters EgressService::Counters() const {
  return {impl_->dns_tcp_refused.load(), impl_->host_address_refused.load(), impl_->dns_tcp_open_total.load()};
}

std::vector<uint32_t> EgressService::HostAddressList() const { return impl_->host->Addresses(); }

bool EgressService::IsHostAddress(uint32_t ip) { return impl_->IsHostAddress(ip, false); }

Status EgressService::AddSandbox(const std::string& id, const std::string& host_ip, const std::string& netns_ip,
                                 EgressPolicy policy, std::optional<EgressLimits> limits, const std::string& netns) {
  auto hip = ParseIpv4(host_ip), nip = ParseIpv4(netns_ip);
  if (!hip || !nip) return InvalidArgument("egress: bad sandbox addresses " + host_ip + " / " + netns_ip);
  std::shared_ptr<NflogReader> nflog;
  std::string nflog_error;
  if (!netns.empty()) {
    auto r = NflogReader::Open(netns);
    if (r.ok())
      nflog = std::move(*r);
    else
      nflog_error = r.status().ToString();
    if (!r.ok()) LOG_WARN("egress: sandbox={} no L3 audit records: {}", id, nflog_error);
  }
  return impl_->OnLoop([&]() -> Status {
    if (impl_->sandboxes.count(id)) return AlreadyExists("egress: sandbox " + id + " already added");
    auto sb = std::make_shared<SandboxEgress>(impl_->io);
    sb->id = id;
    sb->host_ip = asio::ip::address_v4(*hip);
    sb->netns_ip = asio::ip::address_v4(*nip);
    sb->policy = std::make_shared<const EgressPolicy>(std::move(policy));
    sb->limits = limits.value_or(impl_->config.default_limits);
    sb->bucket.SetRate(sb->limits.bytes_per_second);
    boost::system::error_code ec;
    auto bind_tcp = [&](tcp::acceptor& a, uint16_t port, const char* what) -> Status {
      tcp::endpoint ep(sb->host_ip, port);
      a.open(ep.protocol(), ec);
      if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) a.bind(ep, ec);
      if (!ec) a.listen(256, ec);
      if (ec)
        return Internal(std::string("egress: ") + what + " listen on " + host_ip + ":" + std::to_string(port) + ": " +
                        ec.message());
      return OkStatus();
    };
    udp::endpoint uep(sb->host_ip, impl_->config.dns_port);
    sb->dns_udp.open(udp::v4(), ec);
    if (!ec) sb->dns_udp.bind(uep, ec);
    if (ec) return Internal("egress: resolver bind " + host_ip + ": " + ec.message());
    RETURN_IF_ERROR(bind_tcp(sb->dns_tcp, impl_->config.dns_port, "resolver"));
    RETURN_IF_ERROR(bind_tcp(sb->http, impl_->config.http_port, "http proxy"));
    RETURN_IF_ERROR(bind_tcp(sb->tls, impl_->config.tls_port, "tls proxy"));
    impl_->sandboxes[id] = sb;
    {
      std::lock_guard<std::mutex> lock(impl_->records_mu);
      impl_->by_id[id] = sb;
    }
    impl_->StartDnsUdp(sb);
    impl_->StartDnsTcp(sb);
    impl_->StartAccept(sb, false);
    impl_->StartAccept(sb, true);
    if (nflog) impl_->StartNflog(sb, std::move(nflog));
    if (!nflog_error.empty())
      impl_->Emit(*sb, {{"protocol", "audit"},
                        {"decision", "deny"},
                        {"rule", "l3-audit-unavailable"},
                        {"reason", "packets dropped in the sandbox netns are not recorded: " + nflog_error}});
    LOG_INFO("egress: sandbox={} policy={}", id, sb->policy->ToJson());
    return OkStatus();
  });
}

Status EgressService::UpdatePolicy(const std::string& id, EgressPolicy policy) {
  return impl_->OnLoop([&]() -> Status {
    auto it = impl_->sandboxes.find(id);
    if (it == impl_->sandboxes.end()) return NotFound("egress: no sandbox " + id);
    {
      // Policy() reads it from other threads under records_mu.
      std::lock_guard<std::mutex> lock(impl_->records_mu);
      it->second->policy = std::make_shared<const EgressPolicy>(std::move(policy));
    }
    impl_->EnforcePolicy(*it->second);
    impl_->Emit(*it->second, {{"protocol", "policy"},
                              {"decision", "allow"},
                              {"rule", "update"},
                              {"reason", "egress policy replaced: " + it->second->policy->ToJson()}});
    return OkStatus();
  });
}

StatusOr<EgressPolicy> EgressService::Policy(const std::string& id) {
  // Not through the loop: the API's event loop asks this for every GET of a
  // sandbox, and the loop thread may be busy for tens of ms (a burst of
  // creates adding their proxies). The policy is immutable once made; the
  // pointer is replaced under records_mu (UpdatePolicy).
  std::shared_ptr<const EgressPolicy> policy;
  {
    std::lock_guard<std::mutex> lock(impl_->records_mu);
    auto it = impl_->by_id.find(id);
    if (it == impl_->by_id.end()) return NotFound("egress: no sandbox " + id);
    policy = it->second->policy;
  }
  return *policy;
}

Status EgressService::SetLimits(const std::string& id, EgressLimits limits) {
  return impl_->OnLoop([&]() -> Status {
    auto it = impl_->sandboxes.find(id);
    if (it == impl_->sandboxes.end()) return NotFound("egress: no sandbox " + id);
    it->second->limits = limits;
    it->second->bucket.SetRate(limits.bytes_per_second);
    return OkStatus();
  });
}

void EgressService::RemoveSandbox(const std::string& id) {
  impl_->OnLoop([&]() {
    auto it = impl_->sandboxes.find(id);
    if (it != impl_->sandboxes.end()) {
      impl_->CloseSandbox(*it->second);
      impl_->sandboxes.erase(it);
    }
    return 0;
  });
  std::lock_guard<std::mutex> lock(impl_->records_mu);
  impl_->by_id.erase(id);
}

StatusOr<std::vector<nlohmann::json>> EgressService::Records(const std::string& id) {
  std::lock_guard<std::mutex> lock(impl_->records_mu);
  auto it = impl_->by_id.find(id);
  if (it == impl_->by_id.end()) return NotFound("egress: no sandbox " + id);
  return std::vector<nlohmann::json>(it->second->records.begin(), it->second->records.end());
}

}  // namespace airlock::egress
