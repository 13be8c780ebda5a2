// InstallRedactingLogger: wraps the sinks of spdlog's default logger so that
// every formatted line passes through a Redactor before it is written.
#pragma once

#include <memory>

namespace airlock::secrets {

class Redactor;
void InstallRedactingLogger(std::shared_ptr<const Redactor> redactor);

}  // namespace airlock::secrets
