// The control API's one route table: every route of `serve`'s API listener
// behind the API key (E2B's REST API, spec e2b-wire.md §1 and
// e2b-templates.md §A.3, plus airlock's own), with its audit action name and
// the handler that answers it. Server::RouteControl matches a request once;
// the audit record, the sandbox owner check and the dispatch read the same
// row, so a route cannot be served yet audited as unknown.
//
// Patterns are matched segment by segment: a literal, or "{name}" for any one
// non-empty segment. Rows are tried in order and the first match wins, so a
// literal row ("/templates/tags") sits above the parameter row it would also
// match ("/templates/{ref}"). Segments are those of the percent-decoded path
// (HttpConn::path), except for rows with `raw_segments`: the templates API
// splits the raw target first and decodes each segment, so a template name
// may carry "%2F" (spec §A.2).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/conn.h"

namespace airlock::server {

// Which Server handler answers (control_plane.cc RouteControl's switch).
enum class RouteId {
  kListSnapshots,
  kRequestTemplateBuild,
  kListTemplates,
  kAssignTemplateTags,
  kDeleteTemplateTags,
  kAliasExists,
  kFilesLink,
  kStartTemplateBuild,
  kTemplateBuildStatus,
  kListTemplateTags,
  kPublishTemplate,
  kPublishTemplateV2,
  kGetTemplate,
  kDeleteTemplate,
  kAuditTrail,
  kAuditVerify,
  kHostView,
  kLatestMetrics,
  kSecrets,
  kVolumes,
  kCreateSandbox,
  kListSandboxes,
  kListSandboxesV2,
  kGetSandbox,
  kKillSandbox,
  kCreateCheckpoint,
  kListCheckpoints,
  kDeleteCheckpoint,
  kRollback,
  kSetTimeout,
  kRefresh,
  kConnect,
  kMetrics,
  kLogs,
  kLogsV2,
  kUpdateNetwork,
  kPause,
  kFork,
  kSandboxAudit,
  kCreateSnapshot,
  kListEvents,
  kSandboxEvents,
  kListWebhooks,
  kCreateWebhook,
  kGetWebhook,
  kUpdateWebhook,
  kDeleteWebhook,
};

struct Route {
  http::Method method;
  std::string_view pattern;  // "/sandboxes/{id}/timeout"
  std::string_view action;   // the audit record's "action": "sandbox.timeout"
  RouteId id;
  // The first parameter is a sandbox id the caller must own: another team's
  // is answered 404 exactly as a sandbox that does not exist.
  bool sandbox = false;
  bool raw_segments = false;  // see the header comment (the templates API)
};

// Every route, in match order.
std::span<const Route> ControlRoutes();

// The action of a request no row serves (404 or 405).
inline constexpr std::string_view kUnknownRouteAction = "api.unknown_route";

struct RouteMatch {
  const Route* route = nullptr;     // null: no row for this method and path
  std::vector<std::string> params;  // the "{…}" segments, in order
  // No row matched, but one has this path with another method: 405, not 404.
  bool other_method = false;
  std::string_view action() const { return route ? route->action : kUnknownRouteAction; }
};

// `path`: percent-decoded, no query (HttpConn::path); `target`: the raw
// request target (HttpConn::target), for raw_segments rows.
RouteMatch MatchControlRoute(http::Method method, std::string_view path, std::string_view target);

}  // namespace airlock::server
