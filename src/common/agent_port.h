// The guest agent's TCP port (envd's, spec §2.1): the one spelling of 49983
// on the host side (core, net, server, CLI). Header-only.
#pragma once

#include <cstdint>

namespace airlock {

inline constexpr uint16_t kAgentPort = 49983;

}  // namespace airlock
