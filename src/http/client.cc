#include "http/client.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdlib>

namespace airlock::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

StatusOr<HttpReply> HttpDo(const HttpCall& call) {
  std::string peer = call.host + ":" + std::to_string(call.port);
  try {
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.expires_after(call.timeout);
    tcp::resolver resolver(io);
    beast::error_code ec;
    auto results = resolver.resolve(call.host, std::to_string(call.port), tcp::resolver::numeric_service, ec);
    if (ec) return Unavailable("resolve " + peer + ": " + ec.message());
    // Every step is asynchronous under one deadline (the stream's expiry is a
    // time point): Asio's blocking connect/read wait without limit on a
    // guest that is gone (no FIN, no RST from a deleted netns; a socket
    // timeout only makes its blocking read poll again), which once held a
    // metrics worker, and so the daemon's shutdown, forever.
    auto run = [&io] {
      io.run();
      io.restart();
    };
    auto timed_out = [&] { return ec == beast::error::timeout || ec == asio::error::timed_out; };
    stream.async_connect(results, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    run();
    if (timed_out()) return DeadlineExceeded("connect " + peer + ": timed out");
    if (ec) return Unavailable("connect " + peer + ": " + ec.message());
    auto send = [&](auto& req) {
      req.set(bhttp::field::host, peer);
      req.set(bhttp::field::connection, "close");
      for (const auto& [k, v] : call.headers) req.set(k, v);
      bhttp::async_write(stream, req, [&](beast::error_code e, size_t) { ec = e; });
      run();
    };
    if (!call.body_file.empty()) {
      bhttp::request<bhttp::file_body> req{bhttp::string_to_verb(call.method), call.target, 11};
      req.body().open(call.body_file.c_str(), beast::file_mode::scan, ec);
      if (ec) return NotFound("open " + call.body_file + ": " + ec.message());
      req.prepare_payload();
      send(req);
    } else {
      bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(call.method), call.target, 11};
      req.body() = call.body;
      if (!call.body.empty() || call.method == "POST" || call.method == "PUT") req.prepare_payload();
      send(req);
    }
    if (timed_out()) return DeadlineExceeded("HTTP " + call.method + " " + peer + ": timed out");
    if (ec) return Unavailable("write to " + peer + ": " + ec.message());
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(call.max_body);
    bhttp::async_read(stream, buf, parser, [&](beast::error_code e, size_t) { ec = e; });
    run();
    if (ec == bhttp::error::body_limit) {
      return ResourceExhausted("response from " + peer + " exceeds " + std::to_string(call.max_body) + " bytes");
    }
    if (timed_out()) return DeadlineExceeded("HTTP " + call.method + " " + peer + ": timed out");
    if (ec) return Unavailable("read from " + peer + ": " + ec.message());
    auto& res = parser.get();
    HttpReply reply;
    reply.status = static_cast<int>(res.result_int());
    for (const auto& f : res) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      reply.headers[name] = std::string(f.value());
    }
    reply.body = std::move(res.body());
    return reply;
  } catch (const std::exception& e) {
    return Unavailable("HTTP " + call.method + " " + peer + ": " + e.what());
  }
}

StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(std::string address) {
  if (address.rfind("http://", 0) == 0) address = address.substr(7);
  while (!address.empty() && address.back() == '/') address.pop_back();
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 >= address.size()) {
    return InvalidArgument("address '" + address + "' is not host:port");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "127.0.0.1";
  char* end = nullptr;
  unsigned long port = std::strtoul(address.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port == 0 || port > 65535) return InvalidArgument("address '" + address + "': bad port");
  return std::make_pair(host, static_cast<uint16_t>(port));
}

}  // namespace airlock::http
