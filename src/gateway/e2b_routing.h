// Which sandbox and guest port a data-plane request names, as E2B's proxy
// reads it (spec §2.1): the E2b-Sandbox-Id / E2b-Sandbox-Port headers on a
// direct Host (localhost, an IP literal, sandbox.<domain>), else a Host
// "<port>-<id>.<domain>" for the one domain serve --domain names. The daemon
// and a cluster's front route by the same rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gateway/http_conn.h"

namespace airlock::gateway {

// A Host that names no sandbox by itself: empty, localhost, an IP literal
// (with or without port, IPv6 in brackets) or sandbox.<anything>.
bool HostIsDirect(std::string host);
// Which sandbox a data-plane request is for, and its guest port (*port,
// default the agent's): E2b-Sandbox-Id (+ E2b-Sandbox-Port) when the Host is
// localhost, an IP or sandbox.<domain>, else a Host "<port>-<id>.<domain>"
// (`domain` empty: no Host form at all). nullopt: a control-plane request.
std::optional<std::string> DataPlaneSandbox(const HttpConn& c, const std::string& domain, uint16_t* port);
// The same from the Host, E2b-Sandbox-Id and E2b-Sandbox-Port values.
std::optional<std::string> DataPlaneSandbox(const std::string& host, const std::string& id,
                                            const std::string& port_header, const std::string& domain,
                                            uint16_t* port);

}  // namespace airlock::gateway
