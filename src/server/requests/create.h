// POST /sandboxes, /v2/sandboxes (spec §1.5.1 NewSandbox, plus airlock's
// "secrets" and "runtime" extensions: docs/secrets.md, docs/server.md
// "Runtimes") → CreateRequest, or InvalidArgument naming the first bad field
// (answered 400):
//
//   templateID   non-empty string              (default: the CLI's "base")
//   runtime      one of AvailableRuntimes()    (default: the template name's,
//                                               "base-gvisor", else serve
//                                               --default-runtime)
//   timeout      integer seconds >= 0          (default: serve --timeout)
//   metadata     {string: string}
//   envVars      {string: string}; a value "${e2b.secrets.NAME}" names a
//                secret (E2B's Secret.fill) and moves to `secrets`
//   allow_internet_access / allowInternetAccess, network.allowOut/denyOut/
//                rules              egress policy (egress/policy_json.h)
//   autoPause, autoPauseMemory, autoResume {"enabled"}   lifecycle
//   network.allowPublicTraffic bool (default true)
//   network.maskRequestHost    host[:port] with ${PORT}, 1..255 characters
//   cpuCount 1..max_vcpus, memoryMB 128..max_memory_mib,
//   diskSizeMB <= max_disk_mib   (CreateLimits: the serve flags the
//                                 message names)
//   secrets      {NAME: {scope, hosts, env}}   (secrets/spec.h)
//   secure       bool (read and ignored: every sandbox has an access token)
//
// Any other field, and any field airlock has not built (mcp, iam, a
// non-empty volumeMounts), is refused by name (CheckCreateFields): a field
// silently dropped would be a feature silently missing. A null is absent.
//
// The request is immutable once parsed. What needs the host (the template's
// disk size, who owns a named-snapshot template) is checked by the handler.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/sandbox_attributes.h"
#include "common/status.h"
#include "egress/policy.h"
#include "secrets/secret_store.h"
#include "secrets/spec.h"

namespace airlock::server {

// The "secrets" field's parser is the secrets module's (secrets/spec.h).
using secrets::LiftSecretPlaceholders;
using secrets::ParseSecretsSpec;

// Spec §1.5.1 lifecycle fields of a create body: autoPause (bool),
// autoPauseMemory (bool), autoResume ({"enabled": bool}); InvalidArgument
// naming the field. autoResume needs autoPause with memory.
struct Lifecycle {
  bool auto_pause = false;
  bool auto_pause_memory = true;
  bool auto_resume = false;
  // airlock's "lifecycle": {"idleTimeout": s, "idleKeepsProcesses": bool}
  // (docs/snapshots.md "Sleep when idle"); nullopt: the server's default.
  std::optional<int> idle_timeout_s;
  bool idle_keeps_processes = false;
};
// The longest idle interval a create may ask for (a week).
inline constexpr int kMaxIdleTimeoutS = 7 * 24 * 3600;
StatusOr<Lifecycle> ParseLifecycle(const nlohmann::json& body);
// E2B's network.allowPublicTraffic of a create body (default true);
// InvalidArgument when it is not a boolean.
StatusOr<bool> ParseAllowPublicTraffic(const nlohmann::json& body);
// E2B's network.maskRequestHost (default ""): a host[:port] with "${PORT}"
// for the request's port; InvalidArgument for anything else.
StatusOr<std::string> ParseMaskRequestHost(const nlohmann::json& body);
// network.httpsPorts (E2B): guest ports reached over TLS; integers
// 1..65535, not 49983, at most kMaxHttpsPorts, duplicates dropped.
inline constexpr size_t kMaxHttpsPorts = 64;
StatusOr<std::vector<uint16_t>> ParseHttpsPorts(const nlohmann::json& body);
// The mask with every "${PORT}" replaced by `port`.
std::string FillMaskPort(std::string mask, const std::string& port);

namespace requests {

// The daemon's maxima a create may ask for (serve --max-cpus, --max-memory,
// --max-disk).
struct CreateLimits {
  int max_vcpus = 4;
  int max_memory_mib = 4096;
  int max_disk_mib = 16384;
};

Status CheckCreateFields(const nlohmann::json& body);

struct CreateRequest {
  // Not a field of the body: set by the route on a cluster node when a
  // front's reservation came with it (gateway::CreateDigest of the body).
  std::string reservation_digest;
  std::optional<std::string> template_id;
  std::optional<std::string> runtime;  // checked by CheckRuntimeName
  std::optional<int64_t> timeout_s;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> env_vars;  // without the lifted secret placeholders
  egress::EgressPolicy egress_policy;
  Lifecycle lifecycle;
  bool allow_public_traffic = true;
  std::string mask_request_host;
  std::vector<uint16_t> https_ports;
  // volumeMounts [{name, path}]: volume_id empty until the server resolves
  // the name in the caller's team (docs/volumes.md).
  std::vector<SandboxVolumeMount> volume_mounts;
  std::optional<int> vcpus, memory_mib, disk_mib;
  std::vector<secrets::Binding> secrets;  // from "secrets" and the envVars placeholders
};

StatusOr<CreateRequest> ParseCreateRequest(const nlohmann::json& body, const CreateLimits& limits);
// diskSizeMB against the template's disk (growing disks is not supported);
// template_disk_mib 0: unknown, not checked.
Status CheckTemplateDisk(const CreateRequest& req, int template_disk_mib);

}  // namespace requests
}  // namespace airlock::server
