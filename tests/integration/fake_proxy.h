// A customer's upstream proxy for the egress tests (network.egressProxy),
// written here and run inside the fake internet's namespace (fake_internet.h):
// SOCKS5 (RFC 1928, with RFC 1929 username/password when `user` is set) or
// HTTP CONNECT (Basic Proxy-Authorization when `user` is set) on `ip:port`.
// It resolves names itself (the fake internet's table below: remote DNS, as
// E2B asks of a SOCKS5 proxy), dials the target and relays bytes both ways.
// Every tunnel asked for is logged as "<kind> <host>:<port> auth=<ok|bad|none>";
// a refused one ends the connection with the protocol's refusal.
// Kind::kHostile answers like neither: to a SOCKS5 greeting (first byte 5)
// it accepts, then answers the CONNECT with a reply whose domain length
// promises 255 bytes and closes after 3; to anything else, a 20 KiB HTTP
// head that never ends. Logged as "hostile socks5" / "hostile http".
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace airlock::test_util {

class FakeProxy {
 public:
  enum class Kind { kSocks5, kHttpConnect, kHostile };
  // Starts listening in network namespace `netns` (a name under /run/netns).
  FakeProxy(Kind kind, const std::string& netns, const std::string& ip, int port, std::string user = "",
            std::string pass = "")
      : st_(std::make_shared<State>()) {
    st_->kind = kind;
    st_->user = std::move(user);
    st_->pass = std::move(pass);
    std::atomic<int> ready{0};
    thread_ = std::thread([st = st_, netns, ip, port, &ready] {
      int nsfd = ::open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
      if (nsfd < 0 || ::setns(nsfd, CLONE_NEWNET) != 0) {
        ready = -1;
        return;
      }
      ::close(nsfd);
      int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
      if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(l, 64) != 0) {
        ready = -1;
        return;
      }
      st->listen_fd = l;
      ready = 1;
      for (;;) {
        int c = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;  // closed by the destructor
        std::thread([st, c] { Serve(st, c); }).detach();
      }
    });
    while (ready == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ok_ = ready == 1;
  }
  ~FakeProxy() {
    if (st_->listen_fd >= 0) ::shutdown(st_->listen_fd, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (st_->listen_fd >= 0) ::close(st_->listen_fd);
  }
  bool ok() const { return ok_; }
  std::vector<std::string> Log() const {
    std::lock_guard<std::mutex> l(st_->mu);
    return st_->log;
  }

 private:
  struct State {
    Kind kind;
    std::string user, pass;
    int listen_fd = -1;
    std::mutex mu;
    std::vector<std::string> log;
  };

  static bool ReadN(int fd, void* buf, size_t n) {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      ssize_t r = ::read(fd, p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  static void WriteAll(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t w = ::write(fd, s.data() + off, s.size() - off);
      if (w <= 0) return;
      off += static_cast<size_t>(w);
    }
  }
  static int Dial(const std::string& host, int port) {
    static const std::map<std::string, std::string> kNames = {
        {"allowed.test", "203.0.113.10"}, {"denied.test", "203.0.113.20"}, {"other.test", "203.0.113.30"}};
    auto it = kNames.find(host);
    if (it == kNames.end()) return -1;
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, it->second.c_str(), &a.sin_addr);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(s);
      return -1;
    }
    return s;
  }
  static void Relay(int a, int b) {
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    bool open[2] = {true, true};
    char buf[16384];
    while (open[0] || open[1]) {
      if (::poll(p, 2, 30000) <= 0) break;
      for (int i = 0; i < 2; ++i) {
        if (!open[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          open[i] = false;
          p[i].fd = -1;
          ::shutdown(i == 0 ? b : a, SHUT_WR);
          continue;
        }
        WriteAll(i == 0 ? b : a, std::string(buf, static_cast<size_t>(n)));
      }
    }
  }
  static void Serve(std::shared_ptr<State> st, int c) {
    std::string host, auth = "none";
    int port = 0, up = -1;
    if (st->kind == Kind::kHostile) {
      char first = 0;
      if (::read(c, &first, 1) != 1) return (void)::close(c);
      if (first == 5) {
        char rest[8];
        (void)::read(c, rest, sizeof rest);  // the methods
        WriteAll(c, std::string("\x05\x00", 2));
        char req[512];
        (void)::read(c, req, sizeof req);  // the CONNECT
        WriteAll(c, std::string("\x05\x00\x00\x03\xff" "abc", 8));
        Note(st, "hostile socks5");
      } else {
        WriteAll(c, "HTTP/1.1 200 OK\r\nX-Long: " + std::string(20000, 'x'));
        Note(st, "hostile http");
      }
      ::shutdown(c, SHUT_WR);
      char drain[4096];
      while (::read(c, drain, sizeof drain) > 0) {
      }
      return (void)::close(c);
    }
    if (st->kind == Kind::kSocks5) {
      unsigned char g[2];
      if (!ReadN(c, g, 2) || g[0] != 5) return (void)::close(c);
      std::string methods(g[1], '\0');
      if (!ReadN(c, methods.data(), methods.size())) return (void)::close(c);
      const char want = st->user.empty() ? 0 : 2;
      if (methods.find(want) == std::string::npos) {
        WriteAll(c, std::string("\x05\xff", 2));
        return (void)::close(c);
      }
      WriteAll(c, std::string{5, want});
      if (want == 2) {
        unsigned char v[2];
        if (!ReadN(c, v, 2)) return (void)::close(c);
        std::string u(v[1], '\0');
        unsigned char pl;
        if (!ReadN(c, u.data(), u.size()) || !ReadN(c, &pl, 1)) return (void)::close(c);
        std::string pw(pl, '\0');
        if (!ReadN(c, pw.data(), pw.size())) return (void)::close(c);
        auth = u == st->user && pw == st->pass ? "ok" : "bad";
        WriteAll(c, std::string{1, static_cast<char>(auth == "ok" ? 0 : 1)});
        if (auth != "ok") {
          Note(st, "socks5 ? auth=bad");
          return (void)::close(c);
        }
      }
      unsigned char req[5];
      if (!ReadN(c, req, 5) || req[1] != 1 || req[3] != 3) return (void)::close(c);
      host.assign(req[4], '\0');
      unsigned char pb[2];
      if (!ReadN(c, host.data(), host.size()) || !ReadN(c, pb, 2)) return (void)::close(c);
      port = pb[0] << 8 | pb[1];
      Note(st, "socks5 " + host + ":" + std::to_string(port) + " auth=" + auth);
      up = Dial(host, port);
      // Reply: succeeded (0) or host unreachable (4), bound 0.0.0.0:0.
      WriteAll(c, std::string{5, static_cast<char>(up >= 0 ? 0 : 4), 0, 1, 0, 0, 0, 0, 0, 0});
    } else {
      std::string head;
      char ch;
      while (head.find("\r\n\r\n") == std::string::npos && head.size() < 16384 && ::read(c, &ch, 1) == 1) head += ch;
      size_t sp = head.find(' '), sp2 = head.find(' ', sp + 1);
      if (head.rfind("CONNECT ", 0) != 0 || sp2 == std::string::npos) return (void)::close(c);
      std::string target = head.substr(sp + 1, sp2 - sp - 1);
      host = target.substr(0, target.rfind(':'));
      port = std::atoi(target.substr(target.rfind(':') + 1).c_str());
      if (!st->user.empty()) {
        std::string plain = st->user + ":" + st->pass;
        std::string b64(4 * ((plain.size() + 2) / 3) + 1, '\0');
        b64.resize(static_cast<size_t>(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                                                       reinterpret_cast<const unsigned char*>(plain.data()),
                                                       static_cast<int>(plain.size()))));
        auth = head.find("Proxy-Authorization: Basic " + b64 + "\r\n") != std::string::npos ? "ok" : "bad";
      }
      Note(st, "http-connect " + host + ":" + std::to_string(port) + " auth=" + auth);
      if (auth == "bad") {
        WriteAll(c, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n");
        return (void)::close(c);
      }
      up = Dial(host, port);
      WriteAll(c, up >= 0 ? "HTTP/1.1 200 Connection established\r\n\r\n" : "HTTP/1.1 502 Bad Gateway\r\n\r\n");
    }
    if (up >= 0) {
      Relay(c, up);
      ::close(up);
    }
    ::close(c);
  }
  static void Note(const std::shared_ptr<State>& st, std::string line) {
    std::lock_guard<std::mutex> l(st->mu);
    st->log.push_back(std::move(line));
  }

  std::shared_ptr<State> st_;
  std::thread thread_;
  bool ok_ = false;
};

}  // namespace airlock::test_util
