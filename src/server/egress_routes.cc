#include "server/egress_routes.h"

#include "common/log.h"
#include "egress/policy_json.h"
#include "server/http_status.h"
#include "server/server.h"

namespace airlock::server {

using json = nlohmann::json;

void AddEgressFields(egress::EgressService* egress, const std::string& id, json& detail) {
  if (!egress) return;
  auto p = egress->Policy(id);
  if (!p.ok()) return;
  json j = json::parse(p->ToJson());
  detail["allowInternetAccess"] = j["allowInternetAccess"];
  detail["network"]["allowOut"] = j["allowOut"];  // beside what the view put there (httpsPorts)
  detail["network"]["denyOut"] = j["denyOut"];
  if (j.contains("rules")) detail["network"]["rules"] = j["rules"];  // header values shown as "[hidden]"
  // E2B's SandboxEgressProxyInfo has no password; the username is left out
  // too: neither credential is ever returned.
  if (j.contains("egressProxy")) detail["network"]["egressProxy"] = {{"address", j["egressProxy"]["address"]}};
}

json EgressLogEntry(const json& r) {
  json fields = json::object();
  for (auto it = r.begin(); it != r.end(); ++it) {
    if (it.key() == "destination" && it->is_object()) {
      for (auto d = it->begin(); d != it->end(); ++d)
        fields["destination." + d.key()] = d->is_string() ? d->get<std::string>() : d->dump();
      continue;
    }
    fields[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
  }
  std::string name, ip;
  int port = 0;
  if (auto d = r.find("destination"); d != r.end() && d->is_object()) {
    name = d->value("name", "");
    ip = d->value("ip", "");
    port = d->value("port", 0);
  }
  if (name.empty() && port && ip.find(':') != std::string::npos) ip = "[" + ip + "]";  // IPv6 (L3 audit)
  std::string msg = "egress " + r.value("decision", "?") + " " + r.value("protocol", "?") + " " +
                    (name.empty() ? ip : name) + (port ? ":" + std::to_string(port) : "") +
                    " rule=" + r.value("rule", "");
  if (r.contains("reason")) msg += " (" + r.value("reason", "") + ")";
  if (r.contains("bytesOut")) msg += " out=" + r["bytesOut"].dump() + "B in=" + r["bytesIn"].dump() + "B";
  return {{"timestamp", r.value("time", "")},
          {"level", r.value("decision", "") == "deny" ? "warn" : "info"},
          {"message", msg},
          {"fields", fields}};
}

std::vector<std::pair<int64_t, json>> SandboxApi::EgressLogEntries(const std::string& id) {
  std::vector<std::pair<int64_t, json>> out;
  auto* eg = manager_->egress();
  if (!eg) return out;
  auto recs = eg->Records(id);
  if (!recs.ok()) return out;
  for (const auto& r : *recs) out.emplace_back(r.value("timestampMs", int64_t{0}), EgressLogEntry(r));
  return out;
}

void SandboxApi::UpdateNetwork(std::shared_ptr<HttpConn> c, const std::string& id) {
  if (!Visible(id)) return RespondNoSandbox(c, id);
  ReadJson(c, [this, c, id](json body) {
    auto* eg = manager_->egress();
    if (!eg) return c->RespondError(503, "egress is off in this airlock");
    auto current = eg->Policy(id);
    if (!current.ok()) return c->RespondError(404, "sandbox " + id + " not found");
    // E2B SandboxNetworkUpdateConfig: the body replaces the configuration,
    // an omitted allowOut / denyOut / rules is cleared. An omitted
    // allow_internet_access keeps its value (airlock's default is deny, so
    // "omitted" must not silently open or close the internet).
    auto req = requests::ParseNetworkUpdate(body, current->internet());
    if (!req.ok()) return c->RespondError(400, req.status().message());
    asio::post(*workers_, [this, c, id, p = req->policy] {
      Status st = secrets_->CoverRuleHosts(id, p);
      if (st.ok()) st = manager_->UpdateEgress(id, p);
      if (st.ok()) LOG_INFO("sandbox={} egress policy updated: {}", id, p.ToJson());
      asio::post(c->executor(), [c, st] {
        if (!st.ok()) return c->RespondError(HttpStatusFor(st), st.message());
        c->Respond(204, "", "");
      });
    });
  });
}

}  // namespace airlock::server
