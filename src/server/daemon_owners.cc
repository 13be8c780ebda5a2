#include "server/daemon_owners.h"

namespace airlock::server {

Status RegistryHold::Open(const std::string& db) {
  ASSIGN_OR_RETURN(lock_, StateLock::Acquire(db + ".lock", StateLock::Mode::kExclusive, "registry"));
  ASSIGN_OR_RETURN(registry_, Registry::Open(db));
  db_path_ = db;
  db_dir_ = db.find('/') == std::string::npos ? "." : db.substr(0, db.rfind('/'));
  return OkStatus();
}

void Loop::Join() {
  if (workers) workers->join();
  if (lookups) lookups->join();
}

void Fleet::StopTimers() {
  if (sampler) sampler->Stop();
  if (controller) controller->Stop();
  if (memory) memory->Stop();
}

void Front::Stop() {
  if (listener) listener->Stop();
  if (console_listener) console_listener->Stop();
  if (tls) tls->Stop();
  if (api_keys) api_keys->StopRefresh();
}

}  // namespace airlock::server
