// SHA-256 (FIPS 180-4), self-contained: the agent is a static binary without
// OpenSSL. Used to check signed /files URLs (spec §4.2).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace airlock::agent {

std::array<uint8_t, 32> Sha256(std::string_view data);

}  // namespace airlock::agent
