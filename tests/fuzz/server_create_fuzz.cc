// libFuzzer target for the create request parser (server/requests/create.h):
// any JSON object either parses into a request within the limits or fails
// with InvalidArgument.
#include "server/requests/create.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto body = fuzz::JsonObject(data, size);
  if (!body) return 0;
  server::requests::CreateLimits limits{4, 4096, 16384};
  auto r = server::requests::ParseCreateRequest(*body, limits);
  if (!r.ok()) {
    fuzz::Check(r.status().code() == StatusCode::kInvalidArgument && !r.status().message().empty());
    return 0;
  }
  fuzz::Check(!r->vcpus || (*r->vcpus >= 1 && *r->vcpus <= limits.max_vcpus));
  fuzz::Check(!r->memory_mib || (*r->memory_mib >= 128 && *r->memory_mib <= limits.max_memory_mib));
  fuzz::Check(!r->disk_mib || *r->disk_mib <= limits.max_disk_mib);
  fuzz::Check(!r->timeout_s || *r->timeout_s >= 0);
  fuzz::Check(!r->template_id || !r->template_id->empty());
  fuzz::Check(!r->lifecycle.auto_resume || (r->lifecycle.auto_pause && r->lifecycle.auto_pause_memory));
  fuzz::Check(r->mask_request_host.find_first_of("\r\n ") == std::string::npos);
  for (const auto& [k, v] : r->env_vars) fuzz::Check(v.rfind("${e2b.secrets.", 0) != 0 || v.back() != '}');
  (void)server::requests::CheckTemplateDisk(*r, 1024);
  return 0;
}
