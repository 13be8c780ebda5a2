// A minimal HTTP/1.1 client for the guest agent (port 49983), for tests that
// boot real VMs without the core's clients (qemu_snapshot_test,
// tests/conformance/): Connection: close, Content-Length or chunked replies,
// socket timeouts on every read and write.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <string>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::test_util {

struct HttpReply {
  int status = 0;
  std::string body;
};

inline StatusOr<HttpReply> AgentHttp(const std::string& ip, const std::string& method, const std::string& target,
                                     const std::string& body = "", const std::string& token = "",
                                     std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
  UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(c.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ::setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(49983);
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  if (::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return ErrnoError("connect " + ip);
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n";
  if (!token.empty()) req += "X-Access-Token: " + token + "\r\n";
  if (method == "POST") {
    req += std::string("Content-Type: ") + (target == "/init" ? "application/json" : "application/octet-stream") +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  if (::send(c.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
    return ErrnoError("send");
  std::string raw;
  char buf[8192];
  ssize_t n;
  // Until the reply is complete (Content-Length, or a chunked body's last
  // chunk), else EOF: then this side closes first, as an HTTP/1.1 client
  // does (a server that waits for the client's FIN, the agent under gVisor,
  // never holds TIME_WAIT).
  auto complete = [&raw]() {
    size_t he = raw.find("\r\n\r\n");
    if (he == std::string::npos) return false;
    std::string head = raw.substr(0, he);
    for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (size_t cl = head.find("content-length:"); cl != std::string::npos)
      return raw.size() - (he + 4) >= std::strtoull(head.c_str() + cl + 15, nullptr, 10);
    if (head.find("transfer-encoding: chunked") != std::string::npos)
      return raw.size() >= 5 && raw.compare(raw.size() - 5, 5, "0\r\n\r\n") == 0;
    return head.rfind("http/1.1 204", 0) == 0 || head.rfind("http/1.1 304", 0) == 0;
  };
  while (!complete() && (n = ::read(c.get(), buf, sizeof buf)) > 0) raw.append(buf, static_cast<size_t>(n));
  auto he = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || he == std::string::npos) return Internal("bad reply: " + raw.substr(0, 200));
  HttpReply r;
  r.status = std::atoi(raw.c_str() + 9);
  std::string head = raw.substr(0, he), rest = raw.substr(he + 4);
  for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    size_t p = 0;
    while (p < rest.size()) {
      size_t e = rest.find("\r\n", p);
      if (e == std::string::npos) break;
      size_t len = std::strtoul(rest.substr(p, e - p).c_str(), nullptr, 16);
      if (len == 0) break;
      r.body += rest.substr(e + 2, len);
      p = e + 2 + len + 2;
    }
  } else {
    r.body = rest;
  }
  return r;
}

}  // namespace airlock::test_util
