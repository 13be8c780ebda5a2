// The gateway's names for the HTTP library (src/http: http::Conn, Listener,
// Limits, URL and JSON error helpers; see http/conn.h for the connection's
// contract): aliases only, one implementation.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include "http/conn.h"
#include "http/json_error.h"
#include "http/listener.h"
#include "http/socket_options.h"
#include "http/url.h"

namespace airlock::gateway {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using HeaderList = http::HeaderList;
using HttpConn = http::Conn;
using HttpLimits = http::Limits;
using HttpListener = http::Listener;
using http::JsonError;
using http::SetCloexec;
using http::UrlDecode;

}  // namespace airlock::gateway
