// The web console's files (built into the binary, src/console), served the
// same way by the daemon's console listener and a cluster's front.
#pragma once

#include "gateway/http_conn.h"

namespace airlock::gateway {

// GET /console/<file>: the web console's built-in files.
void ServeConsoleAsset(HttpConn& c);

}  // namespace airlock::gateway
