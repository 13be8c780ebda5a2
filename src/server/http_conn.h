// The daemon's names for the HTTP library (src/http: http::Conn, Listener,
// Limits, URL and JSON error helpers; see http/conn.h for the connection's
// contract) and for what it shares with a cluster's front (src/gateway: the
// key table, the relay and its guard, the stream table, E2B's routing
// headers, the console's files). Only names live here, so the server's
// handlers keep their spelling; there is one implementation.
#pragma once

#include "gateway/api_keys.h"
#include "gateway/console_files.h"
#include "gateway/e2b_routing.h"
#include "gateway/http_conn.h"
#include "gateway/relay.h"
#include "gateway/relay_guard.h"
#include "gateway/stream_table.h"

namespace airlock::server {

namespace asio = boost::asio;
using gateway::HeaderList;
using gateway::HttpConn;
using gateway::HttpLimits;
using gateway::HttpListener;
using gateway::JsonError;
using gateway::SetCloexec;
using gateway::tcp;
using gateway::UrlDecode;

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
