#include "tests/integration/fake_internet.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/subprocess.h"
#include "egress/dns_message.h"
#include "egress/policy.h"
#include "image/hash.h"

namespace airlock::test_util {
namespace {

Status Ok(const StatusOr<std::string>& r) { return r.ok() ? OkStatus() : r.status(); }

const std::map<std::string, std::string>& Zone() {
  static const std::map<std::string, std::string> z = {
      {"allowed.test", "203.0.113.10"}, {"denied.test", "203.0.113.20"},   {"other.test", "203.0.113.30"},
      {"meta.test", "169.254.169.254"}, {"selfhost.test", "203.0.113.77"}, {"uplink.test", "192.0.2.2"}};
  return z;
}

UniqueFd Listen(int type, const std::string& ip, int port) {
  UniqueFd s(::socket(AF_INET, type | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return UniqueFd();
  if (type == SOCK_STREAM && ::listen(s.get(), 128) != 0) return UniqueFd();
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<FakeInternet>> FakeInternet::Start(const std::string& work_dir) {
  std::unique_ptr<FakeInternet> f(new FakeInternet());
  f->dir_ = work_dir;
  std::string pid = std::to_string(::getpid());
  f->dns_ = "alt-d" + pid;
  f->ins_ = "alt-i" + pid;
  f->uplink_ = "altu" + pid;
  RETURN_IF_ERROR(f->Setup());
  return f;
}

Status FakeInternet::Setup() {
  root_ns_.Reset(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  // Certificates (test CA → server cert for the fake names).
  const std::string d = dir_;
  {
    std::ofstream ext(d + "/ext.cnf");
    ext << "subjectAltName=DNS:allowed.test,DNS:denied.test,DNS:other.test\n";
  }
  RETURN_IF_ERROR(
      Ok(RunChecked({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", d + "/ca.key", "-out", d + "/ca.pem", "-days", "2", "-subj", "/CN=airlock test CA"})));
  RETURN_IF_ERROR(
      Ok(RunChecked({"openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                     d + "/srv.key", "-out", d + "/srv.csr", "-subj", "/CN=allowed.test"})));
  RETURN_IF_ERROR(
      Ok(RunChecked({"openssl", "x509", "-req", "-in", d + "/srv.csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key",
                     "-CAcreateserial", "-out", d + "/srv.pem", "-days", "2", "-extfile", d + "/ext.cnf"})));
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx || SSL_CTX_use_certificate_file(ctx, (d + "/srv.pem").c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, (d + "/srv.key").c_str(), SSL_FILETYPE_PEM) != 1)
    return Internal("fake internet: TLS context");
  ssl_ctx_ = ctx;
  // Namespaces and links.
  RETURN_IF_ERROR(Ok(RunChecked({"ip", "netns", "add", dns_})));
  RETURN_IF_ERROR(Ok(RunChecked({"ip", "netns", "add", ins_})));
  RETURN_IF_ERROR(Ok(RunChecked({"ip", "link", "add", uplink_, "netns", dns_, "type", "veth", "peer", "name",
                                 "alti" + std::to_string(::getpid()), "netns", ins_})));
  auto in = [&](const std::string& ns, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "-n", ns});
    return Ok(RunChecked(argv));
  };
  const std::string iveth = "alti" + std::to_string(::getpid());
  RETURN_IF_ERROR(in(dns_, {"link", "set", "lo", "up"}));
  RETURN_IF_ERROR(in(dns_, {"addr", "add", "192.0.2.2/24", "dev", uplink_}));
  RETURN_IF_ERROR(in(dns_, {"link", "set", uplink_, "up"}));
  RETURN_IF_ERROR(in(dns_, {"route", "add", "default", "via", "192.0.2.1"}));
  RETURN_IF_ERROR(in(ins_, {"link", "set", "lo", "up"}));
  RETURN_IF_ERROR(in(ins_, {"addr", "add", "192.0.2.1/24", "dev", iveth}));
  RETURN_IF_ERROR(in(ins_, {"link", "set", iveth, "up"}));
  // The hosts' addresses live on lo (no dummy module needed).
  for (const char* a : {"203.0.113.10/32", "203.0.113.20/32", "203.0.113.30/32", "203.0.113.53/32"})
    RETURN_IF_ERROR(in(ins_, {"addr", "add", a, "dev", "lo"}));
  daemon_ns_fd_.Reset(::open(("/run/netns/" + dns_).c_str(), O_RDONLY | O_CLOEXEC));
  inet_ns_fd_.Reset(::open(("/run/netns/" + ins_).c_str(), O_RDONLY | O_CLOEXEC));
  if (!daemon_ns_fd_ || !inet_ns_fd_) return ErrnoError("open fake internet netns");
  // Servers: sockets are created in the internet netns by a helper thread.
  Status st;
  std::thread([&] {
    if (::setns(inet_ns_fd_.get(), CLONE_NEWNET) != 0) {
      st = ErrnoError("setns internet");
      return;
    }
    auto add = [&](int type, const std::string& ip, int port) {
      UniqueFd s = Listen(type, ip, port);
      if (!s && st.ok()) st = ErrnoError("listen " + ip + ":" + std::to_string(port));
      listeners_.push_back(std::move(s));
      return listeners_.back().get();
    };
    int du = add(SOCK_DGRAM, "203.0.113.53", 53);
    int dt = add(SOCK_STREAM, "203.0.113.53", 53);
    int sink = add(SOCK_DGRAM, "203.0.113.10", 9999);
    if (!st.ok()) return;
    threads_.emplace_back([this, du] {
      (void)du;
      ServeDnsUdp();
    });
    threads_.emplace_back([this] { ServeDnsTcp(); });
    threads_.emplace_back([this] { ServeUdpSink(); });
    (void)dt;
    (void)sink;
    for (const auto& [ip, port, tls] : std::vector<std::tuple<std::string, int, bool>>{{"203.0.113.10", 80, false},
                                                                                       {"203.0.113.20", 80, false},
                                                                                       {"203.0.113.30", 80, false},
                                                                                       {"203.0.113.30", 8080, false},
                                                                                       {"203.0.113.10", 443, true},
                                                                                       {"203.0.113.20", 443, true},
                                                                                       {"203.0.113.30", 443, true}}) {
      int fd = add(SOCK_STREAM, ip, port);
      threads_.emplace_back([this, fd, ipp = ip + ":" + std::to_string(port), tls = tls] { ServeTcp(fd, ipp, tls); });
    }
  }).join();
  return st;
}

FakeInternet::~FakeInternet() {
  stop_ = true;
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  listeners_.clear();
  Leave();
  if (ssl_ctx_) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
  daemon_ns_fd_.Reset();
  inet_ns_fd_.Reset();
  (void)Run({"ip", "netns", "del", ins_});
  (void)Run({"ip", "netns", "del", dns_});
}

Status FakeInternet::Enter() {
  if (::setns(daemon_ns_fd_.get(), CLONE_NEWNET) != 0) return ErrnoError("setns " + dns_);
  return OkStatus();
}

void FakeInternet::Leave() {
  if (root_ns_) (void)::setns(root_ns_.get(), CLONE_NEWNET);
}

std::vector<std::string> FakeInternet::DnsLog() {
  std::lock_guard<std::mutex> l(mu_);
  return dns_log_;
}

int FakeInternet::Accepted(const std::string& ip_port) {
  std::lock_guard<std::mutex> l(mu_);
  return accepted_[ip_port];
}

int FakeInternet::UdpReceived() {
  std::lock_guard<std::mutex> l(mu_);
  return udp_received_;
}

std::string FakeInternet::Answer(const std::string& name) {
  auto it = Zone().find(name);
  return it == Zone().end() ? "" : it->second;
}

void FakeInternet::ServeDnsUdp() {
  int fd = listeners_[0].get();
  while (!stop_) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    uint8_t buf[4096];
    sockaddr_in from{};
    socklen_t fl = sizeof(from);
    ssize_t n = ::recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n <= 0) continue;
    auto q = egress::dns::ParseQuery(buf, static_cast<size_t>(n));
    if (!q.ok()) continue;
    {
      std::lock_guard<std::mutex> l(mu_);
      dns_log_.push_back(q->name);
    }
    std::string ip = Answer(q->name);
    std::vector<egress::dns::ARecord> a;
    if (!ip.empty() && q->qtype == egress::dns::kTypeA) a.push_back({*egress::ParseIpv4(ip), 30});
    auto out = egress::dns::BuildResponse(*q, ip.empty() ? egress::dns::kRcodeNxDomain : 0, a);
    ::sendto(fd, out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&from), fl);
  }
}

void FakeInternet::ServeDnsTcp() {
  int fd = listeners_[1].get();
  while (!stop_) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    UniqueFd c(::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) continue;
    std::lock_guard<std::mutex> l(mu_);
    dns_log_.push_back("<tcp connection>");
  }
}

void FakeInternet::ServeUdpSink() {
  int fd = listeners_[2].get();
  while (!stop_) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    char buf[2048];
    if (::recv(fd, buf, sizeof(buf), 0) >= 0) {
      std::lock_guard<std::mutex> l(mu_);
      ++udp_received_;
    }
  }
}

void FakeInternet::ServeTcp(int listen_fd, std::string ip_port, bool tls) {
  std::vector<std::thread> conns;
  while (!stop_) {
    pollfd p{listen_fd, POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    {
      std::lock_guard<std::mutex> l(mu_);
      accepted_[ip_port]++;
    }
    conns.emplace_back([this, c, ip_port, tls] { HandleConn(c, ip_port, tls); });
  }
  for (auto& t : conns) t.join();
}

std::vector<std::string> FakeInternet::FilesServed() {
  std::lock_guard<std::mutex> l(mu_);
  return files_served_;
}

void FakeInternet::HandleConn(int fd, std::string ip_port, bool tls) {
  UniqueFd owned(fd);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  SSL* ssl = nullptr;
  std::string sni = "-";
  if (tls) {
    ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) != 1) {
      SSL_free(ssl);
      return;
    }
    if (const char* s = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name)) sni = s;
  }
  auto rd = [&](char* b, int n) { return ssl ? SSL_read(ssl, b, n) : static_cast<int>(::read(fd, b, n)); };
  auto wr = [&](const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      int w = ssl ? SSL_write(ssl, s.data() + off, static_cast<int>(s.size() - off))
                  : static_cast<int>(::write(fd, s.data() + off, s.size() - off));
      if (w <= 0) return false;
      off += static_cast<size_t>(w);
    }
    return true;
  };
  std::string req;
  char buf[4096];
  const std::string ip = ip_port.substr(0, ip_port.find(':'));
  if (ip_port.ends_with(":8080")) {  // raw TCP: greet
    wr("hello from " + ip_port + "\n");
  } else {
    // Requests until one without "Connection: keep-alive" (opt-in, so raw
    // test clients that read to EOF get their EOF).
    for (bool keep_alive = true; keep_alive;) {
      size_t end;
      while ((end = req.find("\r\n\r\n")) == std::string::npos && req.size() < 16384) {
        int n = rd(buf, sizeof(buf));
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      if (end == std::string::npos) break;
      std::string head = req.substr(0, end + 2);
      req.erase(0, end + 4);
      auto header = [&](const std::string& name) -> std::optional<std::string> {
        std::string lower_head = head;
        for (auto& c : lower_head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string key = "\r\n" + name + ":";
        for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        auto hp = lower_head.find(key);
        if (hp == std::string::npos) return std::nullopt;
        size_t vs = hp + key.size(), ve = head.find("\r\n", vs);
        std::string v = head.substr(vs, ve - vs);
        while (!v.empty() && v.front() == ' ') v.erase(0, 1);
        return v;
      };
      keep_alive = header("Connection").value_or("") == "keep-alive";
      // A body (Content-Length only): read, hashed into the answer.
      std::string req_body;
      if (auto cl = header("Content-Length")) {
        size_t want = std::strtoull(cl->c_str(), nullptr, 10);
        while (req.size() < want && want <= (64u << 20)) {
          int n = rd(buf, sizeof(buf));
          if (n <= 0) break;
          req.append(buf, static_cast<size_t>(n));
        }
        req_body = req.substr(0, std::min(want, req.size()));
        req.erase(0, req_body.size());
      }
      std::string host = header("Host").value_or("-"), path = "/";
      if (auto sp = head.find(' '); sp != std::string::npos)
        path = head.substr(sp + 1, head.find(' ', sp + 1) - sp - 1);
      std::string body = "server=" + ip + " host=" + host + " sni=" + sni + " path=" + path + "\n";
      if (path == "/hold") {
        for (int i = 0; i < 100 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      } else if (path.rfind("/doh?name=", 0) == 0) {
        body = Answer(path.substr(10)) + "\n";
      } else if (path.rfind("/hdr?name=", 0) == 0) {
        // The SHA-256 of one request header's value: the test learns what
        // upstream received without the value crossing back to the guest.
        auto v = header(path.substr(10));
        body = v ? "sha256=" + image::Sha256Hex(*v) + "\n" : "absent\n";
      } else if (path == "/body") {
        body = "len=" + std::to_string(req_body.size()) + " sha256=" + image::Sha256Hex(req_body) + "\n";
      } else if (path.rfind("/pkg/", 0) == 0 && !files_dir_.empty()) {
        std::string rel = path.substr(5);
        if (size_t q = rel.find('?'); q != std::string::npos) rel.resize(q);
        if (rel.empty() || rel.back() == '/') rel += "index.html";
        {
          std::lock_guard<std::mutex> l(mu_);
          files_served_.push_back(rel);
        }
        std::string data;
        bool found = false;
        if (rel.find("..") == std::string::npos) {
          std::ifstream f(files_dir_ + "/" + rel, std::ios::binary);
          if (f && !std::filesystem::is_directory(files_dir_ + "/" + rel)) {
            std::stringstream ss;
            ss << f.rdbuf();
            data = ss.str();
            found = true;
          }
        }
        std::string status = found ? "200 OK" : "404 Not Found";
        if (!found) data = "not found\n";
        const std::string type = rel.ends_with(".html") ? "text/html" : "application/octet-stream";
        if (!wr("HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
                std::to_string(data.size()) + (keep_alive ? "\r\nConnection: keep-alive" : "\r\nConnection: close") +
                "\r\n\r\n" + (head.rfind("HEAD ", 0) == 0 ? std::string() : data)))
          break;
        continue;
      } else if (path.rfind("/echo", 0) == 0) {
        // The request echoed back (an upstream that reflects what it got):
        // head and body as text, then the same in base64; its Authorization
        // also as response header X-Echo-Authorization. ?chunk=N: chunked,
        // N bytes a chunk, one write each. A HEAD gets the head only.
        std::string echoed = head + "\r\n" + req_body;
        std::string b64(4 * ((echoed.size() + 2) / 3) + 1, '\0');
        b64.resize(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                                   reinterpret_cast<const unsigned char*>(echoed.data()),
                                   static_cast<int>(echoed.size())));
        std::string out = echoed + "b64=" + b64 + "\n";
        size_t chunk = 0;
        if (auto q = path.find("?chunk="); q != std::string::npos)
          chunk = std::strtoull(path.c_str() + q + 7, nullptr, 10);
        std::string rhead = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Echo-Authorization: " +
                            header("Authorization").value_or("-") +
                            (keep_alive ? "\r\nConnection: keep-alive" : "\r\nConnection: close") +
                            (chunk ? std::string("\r\nTransfer-Encoding: chunked")
                                   : "\r\nContent-Length: " + std::to_string(out.size())) +
                            "\r\n\r\n";
        bool ok = wr(rhead);
        if (head.rfind("HEAD ", 0) != 0) {
          if (!chunk) {
            ok = ok && wr(out);
          } else {
            for (size_t i = 0; ok && i < out.size(); i += chunk) {
              std::string piece = out.substr(i, chunk);
              char size[32];
              std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
              ok = wr(size + piece + "\r\n");
            }
            ok = ok && wr("0\r\n\r\n");
          }
        }
        if (!ok) break;
        continue;
      } else if (path.rfind("/bytes?n=", 0) == 0) {
        size_t n = std::stoull(path.substr(9));
        std::string rhead =
            "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(n) + "\r\nConnection: close\r\n\r\n";
        wr(rhead);
        std::string chunk(65536, 'x');
        while (n > 0 && !stop_) {
          size_t k = std::min(n, chunk.size());
          if (!wr(chunk.substr(0, k))) break;
          n -= k;
        }
        if (ssl) SSL_free(ssl);
        return;
      }
      if (!wr("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
              (keep_alive ? "\r\nConnection: keep-alive" : "\r\nConnection: close") + "\r\n\r\n" + body))
        break;
    }
  }
  if (ssl) {
    SSL_shutdown(ssl);
    SSL_free(ssl);
  }
}

}  // namespace airlock::test_util
