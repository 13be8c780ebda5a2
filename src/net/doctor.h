// Host checks for `airlock doctor` about networking: ip netns, nft, the tun
// device. Each check is self-contained and leaves nothing behind.
#pragma once

#include "common/doctor_check.h"

#include <string>
#include <vector>

namespace airlock::net {

std::vector<DoctorCheck> NetworkDoctorChecks();

}  // namespace airlock::net
