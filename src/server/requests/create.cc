#include "server/requests/create.h"

#include <algorithm>
#include <set>

#include <cctype>

#include "common/agent_port.h"
#include "runtime/registry.h"
#include "server/requests/fields.h"
#include "server/requests/network.h"
#include "secrets/spec.h"

namespace airlock::server {

using nlohmann::json;

StatusOr<Lifecycle> ParseLifecycle(const json& body) {
  Lifecycle l;
  ASSIGN_OR_RETURN(auto pause, requests::BoolField(body, "autoPause"));
  ASSIGN_OR_RETURN(auto memory, requests::BoolField(body, "autoPauseMemory"));
  l.auto_pause = pause.value_or(l.auto_pause);
  l.auto_pause_memory = memory.value_or(l.auto_pause_memory);
  if (auto it = body.find("autoResume"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("enabled") || !(*it)["enabled"].is_boolean()) {
      return InvalidArgument("autoResume must be {\"enabled\": bool}");
    }
    l.auto_resume = (*it)["enabled"].get<bool>();
  }
  if (l.auto_resume && (!l.auto_pause || !l.auto_pause_memory)) {
    return InvalidArgument("autoResume needs autoPause with memory kept");
  }
  if (auto it = body.find("lifecycle"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidArgument("lifecycle must be an object");
    for (const auto& [key, value] : it->items()) {
      if (key != "idleTimeout" && key != "idleKeepsProcesses" && !value.is_null()) {
        return InvalidArgument("unknown field 'lifecycle." + key + "'");
      }
    }
    if (auto t = it->find("idleTimeout"); t != it->end() && !t->is_null()) {
      if (!t->is_number_integer() || t->get<int64_t>() < 0 || t->get<int64_t>() > kMaxIdleTimeoutS) {
        return InvalidArgument("lifecycle.idleTimeout must be 0.." + std::to_string(kMaxIdleTimeoutS) +
                               " seconds (0: never sleep)");
      }
      l.idle_timeout_s = static_cast<int>(t->get<int64_t>());
    }
    if (auto k = it->find("idleKeepsProcesses"); k != it->end() && !k->is_null()) {
      if (!k->is_boolean()) return InvalidArgument("lifecycle.idleKeepsProcesses must be a boolean");
      l.idle_keeps_processes = k->get<bool>();
    }
  }
  return l;
}

StatusOr<bool> ParseAllowPublicTraffic(const json& body) {
  auto n = body.find("network");
  if (n == body.end() || !n->is_object()) return true;
  auto a = n->find("allowPublicTraffic");
  if (a == n->end() || a->is_null()) return true;
  if (!a->is_boolean()) return InvalidArgument("network.allowPublicTraffic must be a boolean");
  return a->get<bool>();
}

std::string FillMaskPort(std::string mask, const std::string& port) {
  for (size_t at = 0; (at = mask.find("${PORT}", at)) != std::string::npos; at += port.size())
    mask.replace(at, 7, port);
  return mask;
}

StatusOr<std::string> ParseMaskRequestHost(const json& body) {
  auto n = body.find("network");
  if (n == body.end() || !n->is_object()) return std::string();
  auto m = n->find("maskRequestHost");
  if (m == n->end() || m->is_null()) return std::string();
  if (!m->is_string()) return InvalidArgument("network.maskRequestHost must be a string");
  std::string v = m->get<std::string>();
  if (v.empty() || v.size() > 255) return InvalidArgument("network.maskRequestHost must be 1..255 characters");
  // A host[:port], "${PORT}" anywhere: it becomes a Host header, so nothing
  // that could end the header line or smuggle another one.
  for (char ch : FillMaskPort(v, "1")) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '_' || ch == ':' ||
          ch == '[' || ch == ']')) {
      return InvalidArgument("network.maskRequestHost '" + v +
                             "' is not a host[:port] (letters, digits, . - _ : [ ] and ${PORT} only)");
    }
  }
  return v;
}

StatusOr<std::vector<uint16_t>> ParseHttpsPorts(const json& body) {
  std::vector<uint16_t> out;
  auto n = body.find("network");
  if (n == body.end() || !n->is_object()) return out;
  auto p = n->find("httpsPorts");
  if (p == n->end() || p->is_null()) return out;
  if (!p->is_array()) return InvalidArgument("network.httpsPorts must be an array of ports");
  if (p->size() > kMaxHttpsPorts) {
    return InvalidArgument("network.httpsPorts: at most " + std::to_string(kMaxHttpsPorts) + " ports");
  }
  for (const auto& v : *p) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 65535) {
      return InvalidArgument("network.httpsPorts: each port is an integer 1..65535");
    }
    auto port = static_cast<uint16_t>(v.get<int64_t>());
    if (port == kAgentPort) return InvalidArgument("network.httpsPorts: the envd port (49983) cannot be listed");
    if (std::find(out.begin(), out.end(), port) == out.end()) out.push_back(port);
  }
  return out;
}

namespace requests {

namespace {

Status CheckResources(const CreateRequest& r, const CreateLimits& limits) {
  if (r.vcpus && (*r.vcpus < 1 || *r.vcpus > limits.max_vcpus)) {
    return InvalidArgument("cpuCount " + std::to_string(*r.vcpus) + " is outside 1.." +
                           std::to_string(limits.max_vcpus) + " (the server's --max-cpus)");
  }
  if (r.memory_mib && (*r.memory_mib < 128 || *r.memory_mib > limits.max_memory_mib)) {
    return InvalidArgument("memoryMB " + std::to_string(*r.memory_mib) + " is outside 128.." +
                           std::to_string(limits.max_memory_mib) + " (the server's --max-memory)");
  }
  if (r.disk_mib && *r.disk_mib > limits.max_disk_mib) {
    return InvalidArgument("diskSizeMB " + std::to_string(*r.disk_mib) + " is above the maximum of " +
                           std::to_string(limits.max_disk_mib) + " (the server's --max-disk)");
  }
  return OkStatus();
}

// volumeMounts: [{name, path}], at most kMaxVolumeMounts; each path
// absolute and plain (components of [A-Za-z0-9._-], no "." or "..", no
// trailing '/'), not "/" nor under
// /proc, /sys or /dev, none inside another.
constexpr size_t kMaxVolumeMounts = 8;
StatusOr<std::vector<SandboxVolumeMount>> ParseVolumeMounts(const json& body) {
  std::vector<SandboxVolumeMount> out;
  auto it = body.find("volumeMounts");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_array()) return InvalidArgument("volumeMounts must be an array of {name, path}");
  if (it->size() > kMaxVolumeMounts) {
    return InvalidArgument("volumeMounts: at most " + std::to_string(kMaxVolumeMounts) + " mounts");
  }
  for (const auto& m : *it) {
    if (!m.is_object() || !m.contains("name") || !m["name"].is_string() || !m.contains("path") ||
        !m["path"].is_string()) {
      return InvalidArgument("volumeMounts: each mount is {name, path} (strings)");
    }
    std::string name = m["name"].get<std::string>(), path = m["path"].get<std::string>();
    bool ok = path.size() >= 2 && path.size() <= 255 && path[0] == '/' && path.back() != '/' &&
              path.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-/") ==
                  std::string::npos;
    for (size_t i = 1, start = 1; ok && i <= path.size(); ++i) {
      if (i == path.size() || path[i] == '/') {
        std::string part = path.substr(start, i - start);
        ok = !part.empty() && part != "." && part != "..";
        start = i + 1;
      }
    }
    for (const char* sys : {"/proc", "/sys", "/dev"}) {
      const std::string s = sys;
      if (path == s || path.rfind(s + "/", 0) == 0) ok = false;
    }
    if (!ok) {
      return InvalidArgument("volumeMounts: path '" + path +
                             "' must be an absolute, plain path of [A-Za-z0-9._-] components outside /proc, /sys "
                             "and /dev");
    }
    for (const auto& o : out) {
      if (o.path == path || path.rfind(o.path + "/", 0) == 0 || o.path.rfind(path + "/", 0) == 0) {
        return InvalidArgument("volumeMounts: " + path + " and " + o.path + " overlap");
      }
    }
    out.push_back({name, path, ""});
  }
  return out;
}

}  // namespace

Status CheckCreateFields(const json& body) {
  // E2B's NewSandbox as the newest SDK sends it (2.51: templateID, timeout,
  // metadata, envVars, mcp, iam, allow_internet_access, network, autoPause,
  // autoPauseMemory, autoResume, volumeMounts; `secure` from the 1.x SDKs),
  // plus airlock's own; a null is an absent field, as the SDKs send it.
  static const std::set<std::string, std::less<>> kTopLevel = {
      "templateID", "timeout",   "metadata",  "envVars",         "allow_internet_access", "allowInternetAccess",
      "network",    "autoPause", "autoResume", "autoPauseMemory", "secure",                "mcp",
      "iam",        "volumeMounts", "runtime", "secrets",         "cpuCount",              "memoryMB",
      "diskSizeMB", "lifecycle"};
  static const std::set<std::string, std::less<>> kNetwork = {"allowPublicTraffic", "allowOut",   "denyOut",
                                                               "rules",              "maskRequestHost",
                                                               "egressProxy",        "httpsPorts"};
  auto set = [](const json& j, std::string_view name) {
    auto it = j.find(name);
    return it != j.end() && !it->is_null();
  };
  for (const auto& [key, value] : body.items()) {
    if (!value.is_null() && !kTopLevel.count(key)) return InvalidArgument("unknown field '" + key + "'");
  }
  if (set(body, "secure") && !body["secure"].is_boolean()) return InvalidArgument("secure must be a boolean");
  // Capabilities of E2B's API airlock has not built: refused by name, never dropped.
  if (set(body, "mcp")) return InvalidArgument("mcp: an MCP gateway in the sandbox is not supported by airlock");
  if (set(body, "iam")) return InvalidArgument("iam: workload identity tokens are not supported by airlock");
  if (set(body, "network")) {
    const json& n = body["network"];
    if (!n.is_object()) return InvalidArgument("network must be an object");
    for (const auto& [key, value] : n.items()) {
      if (!value.is_null() && !kNetwork.count(key)) return InvalidArgument("unknown field 'network." + key + "'");
    }
  }
  return OkStatus();
}

StatusOr<CreateRequest> ParseCreateRequest(const json& body, const CreateLimits& limits) {
  RETURN_IF_ERROR(CheckCreateFields(body));
  CreateRequest r;
  if (auto it = body.find("templateID"); it != body.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty()) return InvalidArgument("templateID must be a string");
    r.template_id = it->get<std::string>();
  }
  if (auto it = body.find("runtime"); it != body.end() && !it->is_null()) {
    if (!it->is_string())
      return InvalidArgument("runtime must be a string (available: " + AvailableRuntimesText() + ")");
    RETURN_IF_ERROR(CheckRuntimeName(it->get<std::string>()));
    r.runtime = it->get<std::string>();
  }
  ASSIGN_OR_RETURN(r.timeout_s, SecondsField(body, "timeout"));
  ASSIGN_OR_RETURN(r.metadata, StringMapField(body, "metadata"));
  ASSIGN_OR_RETURN(r.env_vars, StringMapField(body, "envVars"));
  ASSIGN_OR_RETURN(r.egress_policy, PolicyFromCreateBody(body));
  ASSIGN_OR_RETURN(r.lifecycle, ParseLifecycle(body));
  ASSIGN_OR_RETURN(r.allow_public_traffic, ParseAllowPublicTraffic(body));
  ASSIGN_OR_RETURN(r.mask_request_host, ParseMaskRequestHost(body));
  ASSIGN_OR_RETURN(r.https_ports, ParseHttpsPorts(body));
  ASSIGN_OR_RETURN(r.volume_mounts, ParseVolumeMounts(body));
  ASSIGN_OR_RETURN(r.vcpus, IntField(body, "cpuCount"));
  ASSIGN_OR_RETURN(r.memory_mib, IntField(body, "memoryMB"));
  ASSIGN_OR_RETURN(r.disk_mib, IntField(body, "diskSizeMB"));
  RETURN_IF_ERROR(CheckResources(r, limits));
  json spec = body.contains("secrets") ? body["secrets"] : json();
  // E2B's Secret.fill placeholders in envVars name secrets too.
  ASSIGN_OR_RETURN(spec, LiftSecretPlaceholders(&r.env_vars, std::move(spec)));
  if (spec.is_object() && spec.empty()) spec = json();
  ASSIGN_OR_RETURN(r.secrets, ParseSecretsSpec(spec));
  return r;
}

Status CheckTemplateDisk(const CreateRequest& req, int template_disk_mib) {
  if (req.disk_mib && template_disk_mib > 0 && *req.disk_mib > template_disk_mib) {
    return InvalidArgument("diskSizeMB " + std::to_string(*req.disk_mib) + " is above the template's disk (" +
                           std::to_string(template_disk_mib) + " MiB); growing disks is not supported yet");
  }
  return OkStatus();
}

}  // namespace requests
}  // namespace airlock::server
