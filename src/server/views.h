// E2B's JSON shapes of a sandbox, written once (spec e2b-wire.md §1.5.2 and
// §1.5.3): every route that answers with a sandbox builds it here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/registry.h"

namespace airlock::server {

// The envd version every sandbox reports (the SDK checks it against its
// minimums, spec §1.5.2).
inline constexpr const char* kEnvdVersion = "0.6.13";

// `Sandbox` (§1.5.2): the answer of create, connect/resume, each fork and a
// rollback. `template_id` as the API shows it (TemplateApi::ShownTemplateId);
// "runtime" is airlock's extension (docs/server.md "Runtimes").
nlohmann::json SandboxJson(const SandboxRecord& r, const std::string& template_id);

// `ListedSandbox` (§1.5.3), an item of GET /v2/sandboxes; with `detail`, the
// `SandboxDetail` of GET /sandboxes/{id}. `r.template_id` as shown;
// `disk_mib`: the sandbox's disk size.
nlohmann::json ListedSandboxJson(const SandboxRecord& r, int disk_mib, bool detail);

// The sandbox's traffic access token, or null when it has none.
nlohmann::json TrafficTokenJson(const SandboxRecord& r);

}  // namespace airlock::server
