// The egress proxy's view of the broker (egress/request_broker.h): which
// hosts to intercept, the leaf certificates of the sandbox's CA, and the
// placeholder swap, all answered from a secrets::Broker.
#pragma once

#include <memory>

#include "egress/request_broker.h"
#include "secrets/broker.h"

namespace airlock::secrets {

std::shared_ptr<egress::RequestBroker> NewEgressBroker(std::shared_ptr<Broker> broker);

}  // namespace airlock::secrets
