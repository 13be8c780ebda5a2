// PullRule and PullProxy (pull_proxy.h): where skopeo may connect.
#include "image/pull_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/log.h"
#include "egress/policy.h"

namespace airlock::image {
namespace {
// Named: the image library may be built as one unity file.
namespace pull {

constexpr size_t kMaxHead = 16 << 10;     // a request head (line + headers)
constexpr int kHeadTimeoutMs = 30000;     // to send it
constexpr int kConnectTimeoutMs = 30000;  // to each address of a target
constexpr char kProxyUser[] = "airlock";

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "host[:port]" / "[v6]:port" -> host, port (0 when absent); false when malformed.
bool SplitHostPort(std::string_view hp, std::string& host, uint16_t& port) {
  std::string_view h = hp, p;
  if (!hp.empty() && hp[0] == '[') {
    size_t close = hp.find(']');
    if (close == std::string_view::npos) return false;
    h = hp.substr(1, close - 1);
    if (close + 1 < hp.size()) {
      if (hp[close + 1] != ':') return false;
      p = hp.substr(close + 2);
    }
  } else if (size_t c = hp.rfind(':'); c != std::string_view::npos) {
    if (hp.find(':') != c) return false;  // a bare IPv6 literal
    h = hp.substr(0, c);
    p = hp.substr(c + 1);
  }
  if (h.empty()) return false;
  port = 0;
  if (!hp.empty() && (hp.back() == ':')) return false;
  if (!p.empty()) {
    if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string_view::npos) return false;
    unsigned v = std::stoul(std::string(p));
    if (v == 0 || v > 65535) return false;
    port = static_cast<uint16_t>(v);
  }
  host = Lower(h);
  if (!host.empty() && host.back() == '.') host.pop_back();
  return !host.empty();
}

bool IsLocalhostName(const std::string& host) { return host == "localhost" || host.ends_with(".localhost"); }

bool SameAddress(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(b).sin_addr.s_addr;
  if (a.ss_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr, 16) == 0;
  return false;
}

std::string AddressText(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  else if (a.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  return buf;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Base64 of `s` (the Proxy-Authorization the client must send).
std::string Base64(std::string_view s) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < s.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(s[i]) << 16;
    if (i + 1 < s.size()) v |= static_cast<uint8_t>(s[i + 1]) << 8;
    if (i + 2 < s.size()) v |= static_cast<uint8_t>(s[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < s.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < s.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

StatusOr<UniqueFd> ListenLoopback(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoError("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return ErrnoError("bind 127.0.0.1:" + std::to_string(port) + " in the pull's netns");
  if (::listen(fd.get(), 64) != 0) return ErrnoError("listen");
  return fd;
}

}  // namespace pull
}  // namespace

// --- PullRule

PullRule::PullRule(std::vector<std::string> registry_allow, std::vector<sockaddr_storage> host_addresses)
    : allow_(std::move(registry_allow)), host_(std::move(host_addresses)) {
  for (auto& a : allow_) a = pull::Lower(a);
}

PullRule PullRule::ForThisHost(std::vector<std::string> registry_allow) {
  std::vector<sockaddr_storage> own;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
      sockaddr_storage s{};
      std::memcpy(&s, i->ifa_addr, i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
      own.push_back(s);
    }
    ::freeifaddrs(list);
  } else {
    LOG_WARN("oci pull: getifaddrs: {}", std::strerror(errno));
  }
  return PullRule(std::move(registry_allow), std::move(own));
}

bool PullRule::Allowed(std::string_view host, uint16_t port) const {
  std::string h = pull::Lower(host);
  if (!h.empty() && h.back() == '.') h.pop_back();
  for (const auto& entry : allow_) {
    std::string eh;
    uint16_t ep = 0;
    if (!pull::SplitHostPort(entry, eh, ep) || eh != h) continue;
    if (ep == 0 || ep == port) return true;
  }
  return false;
}

bool PullRule::PublicAddress(const sockaddr_storage& addr) const {
  if (addr.ss_family == AF_INET) {
    uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in&>(addr).sin_addr.s_addr);
    if (egress::IsForbiddenAddress(ip)) return false;
  } else if (addr.ss_family == AF_INET6) {
    const uint8_t* b = reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr.s6_addr;
    if ((b[0] & 0xE0) != 0x20) return false;                                         // not 2000::/3
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00) return false;  // Teredo 2001::/32
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) return false;  // documentation
    if (b[0] == 0x20 && b[1] == 0x02) return false;                                  // 6to4
  } else {
    return false;
  }
  for (const auto& own : host_)
    if (pull::SameAddress(own, addr)) return false;
  return true;
}

bool PullRule::StaticallyAllowed(std::string_view registry) const {
  if (registry.empty()) return true;  // Docker Hub: a DNS name
  std::string host;
  uint16_t port = 0;
  if (!pull::SplitHostPort(registry, host, port)) return false;
  if (Allowed(host, port)) return true;
  if (pull::IsLocalhostName(host)) return false;
  if (auto ip = egress::ParseIpv4(host)) {
    sockaddr_storage s{};
    auto& in = reinterpret_cast<sockaddr_in&>(s);
    in.sin_family = AF_INET;
    in.sin_addr.s_addr = htonl(*ip);
    return PublicAddress(s);
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    sockaddr_storage s{};
    auto& in = reinterpret_cast<sockaddr_in6&>(s);
    in.sin6_family = AF_INET6;
    in.sin6_addr = v6;
    return PublicAddress(s);
  }
  // A name made of digits and dots only (127.1, 2130706433) is an address
  // to some resolvers: judged by the proxy like any name.
  return true;
}

// --- PullProxy

StatusOr<std::unique_ptr<PullProxy>> PullProxy::Start(PullRule rule) {
  std::unique_ptr<PullProxy> p(new PullProxy(std::move(rule)));
  uint8_t rnd[16];
  if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd)) return ErrnoError("getrandom");
  static constexpr char kHex[] = "0123456789abcdef";
  for (uint8_t b : rnd) {
    p->password_ += kHex[b >> 4];
    p->password_ += kHex[b & 15];
  }
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  p->stop_read_ = UniqueFd(pipefd[0]);
  p->stop_write_ = UniqueFd(pipefd[1]);

  // The forwarders: allowed registries on the host's loopback.
  std::vector<uint16_t> forwards;
  for (const auto& entry : p->rule_.allow()) {
    std::string host;
    uint16_t port = 0;
    if (!pull::SplitHostPort(entry, host, port)) continue;
    auto ip = egress::ParseIpv4(host);
    if (!pull::IsLocalhostName(host) && !(ip && (*ip >> 24) == 127)) continue;
    for (uint16_t fp : port ? std::vector<uint16_t>{port} : std::vector<uint16_t>{443, 80})
      if (std::find(forwards.begin(), forwards.end(), fp) == forwards.end()) forwards.push_back(fp);
  }

  // A new netns on a short-lived thread (the caller's thread stays where
  // it is); sockets made there stay in it.
  Status st = OkStatus();
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  std::thread maker([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      st = ErrnoError("unshare(CLONE_NEWNET) for the pull's network namespace");
      return;
    }
    UniqueFd ns(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!ns) {
      st = ErrnoError("open /proc/thread-self/ns/net");
      return;
    }
    UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (!s || ::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) {
      st = ErrnoError("SIOCGIFFLAGS lo");
      return;
    }
    ifr.ifr_flags |= IFF_UP;
    if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) {
      st = ErrnoError("SIOCSIFFLAGS lo up");
      return;
    }
    for (uint16_t fp : forwards) {
      auto l = pull::ListenLoopback(fp);
      if (!l.ok()) {
        st = l.status();
        return;
      }
      p->listeners_.push_back(Listener{std::move(*l), fp});
    }
    auto l = pull::ListenLoopback(0);
    if (!l.ok()) {
      st = l.status();
      return;
    }
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (::getsockname(l->get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      st = ErrnoError("getsockname");
      return;
    }
    p->port_ = ntohs(a.sin_port);
    p->listeners_.push_back(Listener{std::move(*l), 0});
    p->netns_ = std::move(ns);
  });
  maker.join();
  if (!st.ok()) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return st;
  }
  p->acceptor_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return p;
}

PullProxy::~PullProxy() {
  if (stop_write_) {
    char c = 1;
    (void)!::write(stop_write_.get(), &c, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> conns;
  {
    std::lock_guard<std::mutex> g(mu_);
    conns.swap(conns_);
  }
  for (auto& t : conns) t.join();
}

std::string PullProxy::url() const {
  return "http://" + std::string(pull::kProxyUser) + ":" + password_ + "@127.0.0.1:" + std::to_string(port_);
}

std::vector<std::string> PullProxy::Events() const {
  std::lock_guard<std::mutex> g(mu_);
  return events_;
}

void PullProxy::Note(std::string line) {
  std::lock_guard<std::mutex> g(mu_);
  if (events_.size() < 64) events_.push_back(std::move(line));
}

void PullProxy::AcceptLoop() {
  std::vector<pollfd> fds;
  for (const auto& l : listeners_) fds.push_back({l.fd.get(), POLLIN, 0});
  fds.push_back({stop_read_.get(), POLLIN, 0});
  while (true) {
    for (auto& f : fds) f.revents = 0;
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      LOG_WARN("oci pull proxy: poll: {}", std::strerror(errno));
      return;
    }
    if (fds.back().revents) return;
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      UniqueFd c(::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      const uint16_t fp = listeners_[i].forward_port;
      std::lock_guard<std::mutex> g(mu_);
      conns_.emplace_back([this, fp, c = std::make_shared<UniqueFd>(std::move(c))]() mutable {
        if (fp) {
          Forward(std::move(*c), fp);
        } else {
          Serve(std::move(*c));
        }
      });
    }
  }
}

StatusOr<UniqueFd> PullProxy::Dial(const std::string& host, uint16_t port) {
  const bool allowed = rule_.Allowed(host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
    return Unavailable("resolving " + host + ": " + ::gai_strerror(rc));
  std::vector<sockaddr_storage> addrs;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    sockaddr_storage s{};
    std::memcpy(&s, ai->ai_addr, ai->ai_addrlen);
    addrs.push_back(s);
  }
  ::freeaddrinfo(res);
  if (addrs.empty()) return Unavailable("resolving " + host + ": no address");
  if (!allowed) {
    for (const auto& a : addrs)
      if (!rule_.PublicAddress(a))
        return PermissionDenied(host + " resolves to " + pull::AddressText(a) +
                                ", not a public address (serve --registry-allow names the registries that may be)");
  }
  std::string last = "no address";
  for (const auto& a : addrs) {
    UniqueFd fd(::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return ErrnoError("socket");
    socklen_t len = a.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pf[2] = {{fd.get(), POLLOUT, 0}, {stop_read_.get(), POLLIN, 0}};
      int n = ::poll(pf, 2, pull::kConnectTimeoutMs);
      if (n > 0 && pf[1].revents) return Unavailable("stopping");
      int err = ETIMEDOUT;
      socklen_t el = sizeof err;
      if (n > 0) ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      int flags = ::fcntl(fd.get(), F_GETFL);
      ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
      return fd;
    }
    last = pull::AddressText(a) + ": " + std::strerror(errno);
  }
  return Unavailable("connecting to " + host + ":" + service + ": " + last);
}

void PullProxy::Relay(int a, int b, bool end_on_b_eof) {
  char buf[64 << 10];
  bool a_open = true, b_open = true;
  while (a_open || b_open) {
    pollfd pf[3] = {{a, static_cast<short>(a_open ? POLLIN : 0), 0},
                    {b, static_cast<short>(b_open ? POLLIN : 0), 0},
                    {stop_read_.get(), POLLIN, 0}};
    if (::poll(pf, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (pf[2].revents) return;
    for (int side = 0; side < 2; ++side) {
      if (!pf[side].revents) continue;
      const int from = side == 0 ? a : b, to = side == 0 ? b : a;
      ssize_t n = ::recv(from, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (side == 1 && end_on_b_eof) return;
        ::shutdown(to, SHUT_WR);
        (side == 0 ? a_open : b_open) = false;
        if (n < 0) return;
        continue;
      }
      if (!pull::SendAll(to, std::string_view(buf, static_cast<size_t>(n)))) return;
    }
  }
}

void PullProxy::Forward(UniqueFd client, uint16_t port) {
  sockaddr_storage s{};
  auto& in = reinterpret_cast<sockaddr_in&>(s);
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  in.sin_port = htons(port);
  UniqueFd up(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!up || ::connect(up.get(), reinterpret_cast<sockaddr*>(&in), sizeof in) != 0) {
    Note("forwarding to the host's 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(errno));
    return;
  }
  Relay(client.get(), up.get(), false);
}

void PullProxy::Serve(UniqueFd client) {
  // The request head.
  std::string head;
  char buf[4096];
  size_t end = std::string::npos;
  while ((end = head.find("\r\n\r\n")) == std::string::npos) {
    if (head.size() > pull::kMaxHead) return;
    pollfd pf[2] = {{client.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    if (::poll(pf, 2, pull::kHeadTimeoutMs) <= 0 || pf[1].revents) return;
    ssize_t n = ::recv(client.get(), buf, sizeof buf, 0);
    if (n <= 0) return;
    head.append(buf, static_cast<size_t>(n));
  }
  std::string rest = head.substr(end + 4);
  head.resize(end + 2);
  auto reply = [&](std::string_view status) {
    pull::SendAll(client.get(), std::string("HTTP/1.1 ") + std::string(status) +
                                    "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  };
  const size_t line_end = head.find("\r\n");
  const std::string line = head.substr(0, line_end);
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) return reply("400 Bad Request");
  const std::string method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                    version = line.substr(sp2 + 1);
  // The headers: the password checked, the proxy's own dropped.
  bool authorized = false;
  std::string forwarded;
  for (size_t pos = line_end + 2; pos < head.size();) {
    size_t nl = head.find("\r\n", pos);
    std::string h = head.substr(pos, nl - pos);
    pos = nl + 2;
    size_t colon = h.find(':');
    std::string name = pull::Lower(h.substr(0, colon == std::string::npos ? h.size() : colon));
    if (name == "proxy-authorization") {
      std::string v = colon == std::string::npos ? "" : h.substr(colon + 1);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
      authorized = v == "Basic " + pull::Base64(std::string(pull::kProxyUser) + ":" + password_);
      continue;
    }
    if (name == "proxy-connection" || name == "connection" || name == "keep-alive") continue;
    forwarded += h + "\r\n";
  }
  if (!authorized) return reply("407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"pull\"");

  std::string host, path;
  uint16_t port = 0;
  const bool connect = method == "CONNECT";
  if (connect) {
    if (!pull::SplitHostPort(target, host, port) || port == 0) return reply("400 Bad Request");
  } else {
    // Absolute form, plain HTTP only: "http://host[:port]/path".
    if (pull::Lower(target.substr(0, 7)) != "http://") return reply("400 Bad Request");
    size_t slash = target.find('/', 7);
    std::string authority = target.substr(7, slash == std::string::npos ? std::string::npos : slash - 7);
    path = slash == std::string::npos ? "/" : target.substr(slash);
    if (authority.find('@') != std::string::npos || !pull::SplitHostPort(authority, host, port))
      return reply("400 Bad Request");
    if (port == 0) port = 80;
  }
  auto up = Dial(host, port);
  if (!up.ok()) {
    Note((up.status().code() == StatusCode::kPermissionDenied ? "refused " : "unreachable ") + host + ":" +
         std::to_string(port) + ": " + up.status().message());
    return reply("502 Bad Gateway");
  }
  if (connect) {
    if (!pull::SendAll(client.get(), "HTTP/1.1 200 Connection established\r\n\r\n")) return;
    if (!rest.empty() && !pull::SendAll(up->get(), rest)) return;
    Relay(client.get(), up->get(), false);
    return;
  }
  const std::string request = method + " " + path + " " + version + "\r\n" + forwarded + "Connection: close\r\n\r\n";
  if (!pull::SendAll(up->get(), request) || (!rest.empty() && !pull::SendAll(up->get(), rest))) return;
  Relay(client.get(), up->get(), /*end_on_b_eof=*/true);
}

}  // namespace airlock::image
