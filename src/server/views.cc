#include "server/views.h"

#include "common/clock.h"

namespace airlock::server {

using nlohmann::json;

json TrafficTokenJson(const SandboxRecord& r) {
  return r.traffic_token.empty() ? json(nullptr) : json(r.traffic_token);
}

json SandboxJson(const SandboxRecord& r, const std::string& template_id) {
  return json{{"sandboxID", r.id},
              {"templateID", template_id},
              {"runtime", r.runtime},
              {"clientID", "airlock"},
              {"envdVersion", kEnvdVersion},
              {"envdAccessToken", r.access_token},
              {"trafficAccessToken", TrafficTokenJson(r)},
              {"domain", nullptr}};
}

namespace {
// E2B's SandboxVolumeMount: [{name, path}].
json VolumeMountsJson(const SandboxRecord& r) {
  json out = json::array();
  for (const auto& m : r.volume_mounts) out.push_back({{"name", m.name}, {"path", m.path}});
  return out;
}
}  // namespace

json ListedSandboxJson(const SandboxRecord& r, int disk_mib, bool detail) {
  json j{{"sandboxID", r.id},
         {"templateID", r.template_id},
         {"runtime", r.runtime},
         {"clientID", "airlock"},
         {"startedAt", FormatRfc3339Ms(r.created_at_ms)},
         {"endAt", FormatRfc3339Ms(r.ends_at_ms)},
         {"state", r.state == "paused" ? "paused" : "running"},
         {"cpuCount", r.vcpus},
         {"memoryMB", r.memory_mib},
         {"diskSizeMB", disk_mib},
         {"envdVersion", kEnvdVersion},
         {"metadata", r.metadata},
         {"volumeMounts", VolumeMountsJson(r)}};
  if (detail) {
    j["envdAccessToken"] = r.access_token;
    j["domain"] = nullptr;
    j["allowInternetAccess"] = false;
    j["lifecycle"] = {{"onTimeout", r.auto_pause ? "pause" : "kill"}, {"autoResume", r.auto_resume}};
    if (r.idle_timeout_s > 0) {
      j["lifecycle"]["idleTimeout"] = r.idle_timeout_s;
      j["lifecycle"]["idleKeepsProcesses"] = r.idle_keeps_processes;
    }
    if (!r.https_ports.empty()) j["network"]["httpsPorts"] = r.https_ports;
  }
  return j;
}

}  // namespace airlock::server
