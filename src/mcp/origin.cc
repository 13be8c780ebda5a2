#include "mcp/origin.h"

#include <arpa/inet.h>

#include <cctype>

namespace airlock::mcp {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsLoopback(const std::string& ip) {
  in_addr v4{};
  if (inet_pton(AF_INET, ip.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, ip.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

std::optional<std::string> AllowedOrigins::Normalise(std::string_view origin, bool url) {
  size_t sep = origin.find("://");
  if (sep == std::string_view::npos) return std::nullopt;
  const std::string scheme = Lower(origin.substr(0, sep));
  if (scheme != "http" && scheme != "https") return std::nullopt;
  std::string_view rest = origin.substr(sep + 3);
  size_t end = rest.find_first_of("/?#");
  if (end != std::string_view::npos) {
    if (!url) return std::nullopt;
    rest = rest.substr(0, end);
  }
  if (rest.empty() || rest.find('@') != std::string_view::npos) return std::nullopt;
  std::string host;
  std::string_view port_text;
  if (rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    std::string inner(rest.substr(1, close - 1));
    in6_addr v6{};
    if (inet_pton(AF_INET6, inner.c_str(), &v6) != 1) return std::nullopt;
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &v6, text, sizeof text);
    host = std::string("[") + text + "]";
    rest = rest.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port_text = rest.substr(1);
      if (port_text.empty()) return std::nullopt;
    }
  } else {
    size_t colon = rest.find(':');
    host = Lower(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = rest.substr(colon + 1);
      if (port_text.empty()) return std::nullopt;
    }
    if (host.empty()) return std::nullopt;
    for (char c : host)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') return std::nullopt;
  }
  unsigned port = scheme == "https" ? 443 : 80;
  if (!port_text.empty()) {
    if (port_text.size() > 5) return std::nullopt;
    port = 0;
    for (char c : port_text) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
      port = port * 10 + static_cast<unsigned>(c - '0');
    }
    if (port == 0 || port > 65535) return std::nullopt;
  }
  return scheme + "://" + host + ":" + std::to_string(port);
}

AllowedOrigins AllowedOrigins::For(std::string_view listen_host, uint16_t port, std::string_view public_url) {
  AllowedOrigins a;
  std::string ip(listen_host);
  if (ip.size() >= 2 && ip.front() == '[' && ip.back() == ']') ip = ip.substr(1, ip.size() - 2);
  auto add = [&](const std::string& host) {
    const bool v6 = host.find(':') != std::string::npos;
    if (auto o = Normalise("http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port)))
      a.origins_.insert(*o);
  };
  if (ip.empty() || ip == "0.0.0.0" || ip == "::" || IsLoopback(ip) || Lower(ip) == "localhost") {
    for (const char* h : {"localhost", "127.0.0.1", "::1"}) add(h);
    if (IsLoopback(ip)) add(ip);
  } else {
    add(ip);
  }
  if (!public_url.empty()) {
    if (auto o = Normalise(public_url, /*url=*/true)) a.origins_.insert(*o);
  }
  return a;
}

bool AllowedOrigins::Allows(std::string_view origin) const {
  auto o = Normalise(origin);
  return o && origins_.count(*o) > 0;
}

}  // namespace airlock::mcp
