// The daemon's names for the HTTP library (src/http: http::Conn, Listener,
// Limits, URL and JSON error helpers; see http/conn.h for the connection's
// contract) and for what it shares with a cluster's front (src/gateway: the
// key table, the relay and its guard, the stream table, E2B's routing
// headers, the console's files). Only names live here, so the server's
// handlers keep their spelling; there is one implementation.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include "http/conn.h"
#include "http/json_error.h"
#include "http/listener.h"
#include "http/socket_options.h"
#include "http/url.h"
#include "gateway/api_keys.h"
#include "gateway/console_files.h"
#include "gateway/e2b_routing.h"
#include "gateway/relay.h"
#include "gateway/relay_guard.h"
#include "gateway/stream_table.h"

namespace airlock::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using HeaderList = http::HeaderList;
using HttpConn = http::Conn;
using HttpLimits = http::Limits;
using HttpListener = http::Listener;
using http::JsonError;
using http::SetCloexec;
using http::UrlDecode;

using gateway::ApiKeySource;
using gateway::ApiKeyTable;
using gateway::CheckFileSignature;
using gateway::CheckSignedFileQuery;
using gateway::DataPlaneSandbox;
using gateway::DataPlaneStream;
using gateway::DropsRelayedHeader;
using gateway::FileUrlSignature;
using gateway::ForwardExtras;
using gateway::ForwardRequest;
using gateway::GuardForGuest;
using gateway::GuardHeaders;
using gateway::HostIsDirect;
using gateway::IsServiceWorkerScript;
using gateway::kMaxSignedUrlLifetime;
using gateway::kSignedUrlClockSkew;
using gateway::PresentedApiKey;
using gateway::RegistryKeySource;
using gateway::RelayGuard;
using gateway::RespondSandboxNotFound;
using gateway::ServeConsoleAsset;
using gateway::StreamTable;

}  // namespace airlock::server
