// A small blocking HTTP/1.1 client for bounded request/response exchanges:
// the Manager's POST /init to an agent, the daemon's GET /metrics, and the
// CLI talking to the daemon. One connection per call ("Connection: close").
//
// Errors: Unavailable (connect/read/write failures, with the peer address),
// DeadlineExceeded (the whole exchange took longer than `timeout`),
// ResourceExhausted (response body above `max_body` bytes). A non-2xx
// status is not an error here: the caller reads HttpReply::status.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "http/socket_options.h"  // SetCloexec, for the callers that hold their own sockets
#include "http/url.h"             // UrlEncodeComponent

namespace airlock::http {

struct HttpCall {
  std::string host;  // IPv4/IPv6 literal or name resolvable without DNS ("localhost")
  uint16_t port = 0;
  std::string method = "GET";
  std::string target = "/";  // path + query, already encoded
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // sent with Content-Length when non-empty or method is POST/PUT
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  size_t max_body = 16u << 20;
  // When set, the body is this file's bytes instead, streamed from disk with
  // its size as Content-Length (uploads larger than memory should hold);
  // NotFound when it cannot be opened.
  std::string body_file;
};

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

StatusOr<HttpReply> HttpDo(const HttpCall& call);

// "host:port" / "[v6]:port" / "http://host:port" → (host, port).
StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(std::string address);

}  // namespace airlock::http
