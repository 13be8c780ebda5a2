// The blocking HTTP client moved to src/http (http/client.h). This header
// keeps its names visible in namespace airlock for the call sites in core,
// cli, audit and the tests, so they need not change.
#pragma once

#include "http/client.h"

namespace airlock {

using http::HttpCall;
using http::HttpDo;
using http::HttpReply;
using http::ParseHostPort;
using http::UrlEncodeComponent;

}  // namespace airlock
