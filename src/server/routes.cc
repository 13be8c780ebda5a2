#include "server/routes.h"

#include <array>

#include "http/url.h"

namespace airlock::server {
namespace {

using M = http::Method;
using R = RouteId;

// Order matters only where a literal and a parameter compete for one
// segment: the literal row comes first.
constexpr std::array kRoutes = {
    // Named snapshots (snapshot_routes.cc).
    Route{M::kGet, "/snapshots", "snapshot.list", R::kListSnapshots},
    // Templates API (template_api.cc, TemplateApi::Route; e2b-templates.md §A.3).
    Route{M::kPost, "/v3/templates", "template.build.request", R::kRequestTemplateBuild, false, true},
    Route{M::kPost, "/v2/templates", "template.build.request", R::kRequestTemplateBuild, false, true},
    Route{M::kGet, "/templates", "template.list", R::kListTemplates, false, true},
    Route{M::kGet, "/v2/templates", "template.list", R::kListTemplates, false, true},
    Route{M::kPost, "/templates/tags", "template.tags.assign", R::kAssignTemplateTags, false, true},
    Route{M::kDelete, "/templates/tags", "template.tags.delete", R::kDeleteTemplateTags, false, true},
    Route{M::kGet, "/templates/aliases/{alias}", "template.alias.get", R::kAliasExists, false, true},
    Route{M::kGet, "/templates/{ref}/files/{hash}", "template.files.link", R::kFilesLink, false, true},
    Route{M::kPost, "/v2/templates/{ref}/builds/{build}", "template.build.start", R::kStartTemplateBuild, false, true},
    Route{M::kGet, "/templates/{ref}/builds/{build}/status", "template.build.status", R::kTemplateBuildStatus, false,
          true},
    Route{M::kGet, "/templates/{ref}/tags", "template.tags.list", R::kListTemplateTags, false, true},
    Route{M::kPatch, "/templates/{ref}", "template.publish", R::kPublishTemplate, false, true},
    Route{M::kPatch, "/v2/templates/{ref}", "template.publish", R::kPublishTemplateV2, false, true},
    Route{M::kGet, "/templates/{ref}", "template.get", R::kGetTemplate, false, true},
    Route{M::kDelete, "/templates/{ref}", "template.delete", R::kDeleteTemplate, false, true},
    // Audit, host, metrics (audit_hooks.cc, limits_hooks.cc).
    Route{M::kGet, "/audit", "audit.query", R::kAuditTrail},
    Route{M::kGet, "/audit/verify", "audit.verify", R::kAuditVerify},
    Route{M::kGet, "/host", "host.get", R::kHostView},
    Route{M::kGet, "/sandboxes/metrics", "sandbox.metrics_batch", R::kLatestMetrics},
    // Secrets (secrets_api.cc).
    Route{M::kGet, "/secrets", "secret.list", R::kSecrets},
    Route{M::kPost, "/secrets", "secret.create", R::kSecrets},
    Route{M::kGet, "/secrets/{name}", "secret.get", R::kSecrets},
    Route{M::kPost, "/secrets/{name}", "secret.update", R::kSecrets},
    Route{M::kDelete, "/secrets/{name}", "secret.delete", R::kSecrets},
    // Volumes (volumes_api.cc); their content API is /volumecontent/ (router.cc).
    Route{M::kGet, "/volumes", "volume.list", R::kVolumes},
    Route{M::kPost, "/volumes", "volume.create", R::kVolumes},
    Route{M::kGet, "/volumes/{id}", "volume.get", R::kVolumes},
    Route{M::kDelete, "/volumes/{id}", "volume.delete", R::kVolumes},
    // Sandboxes (sandbox_api.cc, snapshot_routes.cc, checkpoint_routes.cc).
    // E2B's lifecycle events and webhooks (events_api.h); per team, so no
    // sandbox ownership check: another team's sandbox has no events.
    Route{M::kGet, "/events/sandboxes", "events.list", R::kListEvents},
    Route{M::kGet, "/events/sandboxes/{id}", "events.sandbox", R::kSandboxEvents},
    Route{M::kGet, "/events/webhooks", "webhook.list", R::kListWebhooks},
    Route{M::kPost, "/events/webhooks", "webhook.create", R::kCreateWebhook},
    Route{M::kGet, "/events/webhooks/{id}", "webhook.get", R::kGetWebhook},
    Route{M::kPatch, "/events/webhooks/{id}", "webhook.update", R::kUpdateWebhook},
    Route{M::kDelete, "/events/webhooks/{id}", "webhook.delete", R::kDeleteWebhook},
    Route{M::kPost, "/sandboxes", "sandbox.create", R::kCreateSandbox},
    Route{M::kPost, "/v2/sandboxes", "sandbox.create", R::kCreateSandbox},
    Route{M::kGet, "/sandboxes", "sandbox.list", R::kListSandboxes},
    Route{M::kGet, "/v2/sandboxes", "sandbox.list", R::kListSandboxesV2},
    Route{M::kGet, "/sandboxes/{id}", "sandbox.get", R::kGetSandbox, true},
    Route{M::kDelete, "/sandboxes/{id}", "sandbox.kill", R::kKillSandbox, true},
    Route{M::kPost, "/sandboxes/{id}/checkpoints", "sandbox.checkpoint", R::kCreateCheckpoint, true},
    Route{M::kGet, "/sandboxes/{id}/checkpoints", "sandbox.checkpoints", R::kListCheckpoints, true},
    Route{M::kDelete, "/sandboxes/{id}/checkpoints/{checkpoint}", "sandbox.checkpoint.delete", R::kDeleteCheckpoint,
          true},
    Route{M::kPost, "/sandboxes/{id}/rollback", "sandbox.rollback", R::kRollback, true},
    Route{M::kPost, "/sandboxes/{id}/timeout", "sandbox.timeout", R::kSetTimeout, true},
    Route{M::kPost, "/v2/sandboxes/{id}/timeout", "sandbox.timeout", R::kSetTimeout, true},
    Route{M::kPost, "/sandboxes/{id}/refreshes", "sandbox.refresh", R::kRefresh, true},
    Route{M::kPost, "/sandboxes/{id}/connect", "sandbox.connect", R::kConnect, true},
    Route{M::kPost, "/v2/sandboxes/{id}/connect", "sandbox.connect", R::kConnect, true},
    Route{M::kPost, "/sandboxes/{id}/resume", "sandbox.resume", R::kConnect, true},
    Route{M::kPost, "/v2/sandboxes/{id}/resume", "sandbox.resume", R::kConnect, true},
    Route{M::kGet, "/sandboxes/{id}/metrics", "sandbox.metrics", R::kMetrics, true},
    Route{M::kGet, "/v2/sandboxes/{id}/metrics", "sandbox.metrics", R::kMetrics, true},
    Route{M::kGet, "/sandboxes/{id}/logs", "sandbox.logs", R::kLogs, true},
    Route{M::kGet, "/v2/sandboxes/{id}/logs", "sandbox.logs", R::kLogsV2, true},
    Route{M::kPut, "/sandboxes/{id}/network", "sandbox.network", R::kUpdateNetwork, true},
    Route{M::kPost, "/sandboxes/{id}/pause", "sandbox.pause", R::kPause, true},
    Route{M::kPost, "/v2/sandboxes/{id}/pause", "sandbox.pause", R::kPause, true},
    Route{M::kPost, "/sandboxes/{id}/fork", "sandbox.fork", R::kFork, true},
    Route{M::kPost, "/v2/sandboxes/{id}/fork", "sandbox.fork", R::kFork, true},
    Route{M::kGet, "/sandboxes/{id}/audit", "sandbox.audit", R::kSandboxAudit, true},
    Route{M::kGet, "/v2/sandboxes/{id}/audit", "sandbox.audit", R::kSandboxAudit, true},
    Route{M::kPost, "/sandboxes/{id}/snapshots", "sandbox.snapshots", R::kCreateSnapshot, true},
    Route{M::kPost, "/v2/sandboxes/{id}/snapshots", "sandbox.snapshots", R::kCreateSnapshot, true},
};

// Each row's pattern split into segments, once, in kRoutes' order.
const std::vector<std::vector<std::string>>& PatternSegments() {
  static const auto* all = [] {
    auto* v = new std::vector<std::vector<std::string>>();
    for (const Route& r : kRoutes) v->push_back(http::PathSegments(r.pattern));
    return v;
  }();
  return *all;
}

// Matches `segments` against a pattern's segments; the parameters into `params`.
bool Matches(const std::vector<std::string>& want, const std::vector<std::string>& segments,
             std::vector<std::string>* params) {
  if (want.size() != segments.size()) return false;
  std::vector<std::string> got;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].front() == '{' && want[i].back() == '}') {
      got.push_back(segments[i]);
    } else if (want[i] != segments[i]) {
      return false;
    }
  }
  *params = std::move(got);
  return true;
}

}  // namespace

std::span<const Route> ControlRoutes() { return kRoutes; }

RouteMatch MatchControlRoute(http::Method method, std::string_view path, std::string_view target) {
  const std::vector<std::string> decoded = http::PathSegments(path);
  std::vector<std::string> raw = http::PathSegments(target.substr(0, target.find('?')));
  for (auto& s : raw) s = http::UrlDecode(s, /*plus_is_space=*/false);
  RouteMatch m;
  std::vector<std::string> params;
  for (size_t i = 0; i < kRoutes.size(); ++i) {
    const Route& r = kRoutes[i];
    if (!Matches(PatternSegments()[i], r.raw_segments ? raw : decoded, &params)) continue;
    if (r.method != method) {
      m.other_method = true;
      continue;
    }
    m.route = &r;
    m.params = std::move(params);
    m.other_method = false;
    return m;
  }
  return m;
}

}  // namespace airlock::server
