#include "gateway/reservation.h"

#include "image/hash.h"

namespace airlock::gateway {

std::string CreateDigest(const nlohmann::json& body) {
  return image::Sha256Hex(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace airlock::gateway
