// A cluster create's reservation, as a front hands it to the node it placed
// the create on (docs/multinode.md "Placement"; cluster/cluster_registry.h
// ClaimReservation): the header carries the reservation's random token, and
// the registry row holds the digest of the create it was made for, so a
// token works once, on that node, for that create.
//
// CreateDigest: SHA-256 hex of the create's JSON body as nlohmann::json
// serialises it after parsing (keys sorted, no whitespace; an empty body is
// {}), so the front and the node hash the same object whatever its bytes'
// spacing or key order.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace airlock::gateway {

inline constexpr char kReservationHeader[] = "X-Airlock-Reservation";

std::string CreateDigest(const nlohmann::json& body);

}  // namespace airlock::gateway
