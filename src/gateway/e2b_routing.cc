#include "gateway/e2b_routing.h"

#include <strings.h>

#include <boost/asio/ip/address.hpp>
#include <cstdlib>

#include "common/agent_port.h"

namespace airlock::gateway {

bool HostIsDirect(std::string host) {
  if (host.empty()) return true;
  if (host.front() == '[') {
    size_t close = host.find(']');
    host = host.substr(1, close == std::string::npos ? std::string::npos : close - 1);
  } else if (size_t colon = host.rfind(':'); colon != std::string::npos && host.find(':') == colon) {
    host = host.substr(0, colon);
  }
  if (host == "localhost" || host.rfind("sandbox.", 0) == 0) return true;
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

std::optional<std::string> DataPlaneSandbox(const HttpConn& c, const std::string& domain, uint16_t* port) {
  return DataPlaneSandbox(c.Header("Host"), c.Header("E2b-Sandbox-Id"), c.Header("E2b-Sandbox-Port"), domain, port);
}

std::optional<std::string> DataPlaneSandbox(const std::string& host, const std::string& id,
                                             const std::string& port_header, const std::string& domain,
                                             uint16_t* port) {
  *port = kAgentPort;
  if (!id.empty() && HostIsDirect(host)) {
    if (!port_header.empty()) {
      char* end = nullptr;
      unsigned long v = std::strtoul(port_header.c_str(), &end, 10);
      if (*end != '\0' || v == 0 || v > 65535) return std::nullopt;
      *port = static_cast<uint16_t>(v);
    }
    return id;
  }
  // "<port>-<id>.<domain>", only for the domain serve --domain names:
  // without one no Host names a sandbox (a Host is the client's to choose,
  // and "49999-<id>.anything" must not reach a guest; issue 32).
  size_t dash = host.find('-'), dot = host.find('.');
  if (domain.empty() || dot == std::string::npos) return std::nullopt;
  {
    std::string rest = host.substr(dot + 1);
    if (size_t colon = rest.rfind(':'); colon != std::string::npos) rest.resize(colon);
    if (strcasecmp(rest.c_str(), domain.c_str()) != 0) return std::nullopt;
  }
  if (dash != std::string::npos && dash < dot && dash > 0) {
    std::string p = host.substr(0, dash);
    char* end = nullptr;
    unsigned long v = std::strtoul(p.c_str(), &end, 10);
    if (*end == '\0' && v > 0 && v <= 65535) {
      *port = static_cast<uint16_t>(v);
      return host.substr(dash + 1, dot - dash - 1);
    }
  }
  return std::nullopt;
}

}  // namespace airlock::gateway
