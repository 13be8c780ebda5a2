// E2B's sandbox lifecycle events and webhooks (docs/server.md "Lifecycle
// events and webhooks"; E2B's docs: sandbox/lifecycle-events-api,
// sandbox/lifecycle-events-webhooks).
//
// Events: `sandbox.lifecycle.{created,updated,killed,paused,resumed,
// checkpointed}`, each kept per team in the registry (the newest
// kKeepPerTeam) as E2B's event JSON (version "v2"):
//   {"version","id","type","eventData","sandboxBuildId","sandboxExecutionId",
//    "sandboxId","sandboxTeamId","sandboxTemplateId","timestamp"}
// eventData: {"sandbox_metadata"} always, {"execution": {"started_at",
// "vcpu_count","memory_mb","execution_time" (ms)}} on killed and paused,
// {"set_timeout": RFC 3339} on updated.
//
// Webhooks: per team; each event of a type it lists is POSTed to its URL
// with the event JSON as the body and the headers e2b-webhook-id,
// e2b-delivery-id, e2b-signature-version ("v1") and e2b-signature: the
// SHA-256 of the webhook's secret followed by the body, base64 without
// padding (Sign). A delivery fails on a connect error, a timeout (10 s) or a
// non-2xx answer and is tried again, kAttempts in all, `retry_delay` apart
// (E2B: 3 retries, 10 s apart); every attempt is audited
// (`webhook.delivery`). A URL whose host is, or resolves to, an address a
// guest may never reach (private, loopback, link-local, CGNAT, the host's
// own ranges: egress::IsForbiddenAddress; every IPv6 address) is refused,
// at registration for an IP literal and at each delivery for a name (the
// vetted address is the one connected to), unless the operator allows
// private targets (serve --webhook-allow-private); so is an address of
// one of the host's own interfaces. At most kMaxQueued deliveries wait at
// once (past it one is dropped, audited). The secret is never
// returned nor logged.
//
// Threads: Emit and the API calls from any thread; storing and delivering
// run on this object's own threads, so no caller waits on a receiver.
#pragma once

#include <array>
#include <atomic>
#include <thread>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include "audit/audit_log.h"
#include "common/status.h"
#include "core/registry.h"

namespace airlock::server {

inline constexpr std::array<std::string_view, 6> kLifecycleEventTypes = {
    "sandbox.lifecycle.created", "sandbox.lifecycle.updated", "sandbox.lifecycle.killed",
    "sandbox.lifecycle.paused",  "sandbox.lifecycle.resumed", "sandbox.lifecycle.checkpointed"};

// base64(SHA-256(secret + body)) without '=' padding: E2B's e2b-signature.
std::string WebhookSignature(std::string_view secret, std::string_view body);

// A webhook URL taken apart: http or https, host, port, target.
struct WebhookUrl {
  bool tls = false;
  std::string host;  // without brackets
  uint16_t port = 0;
  std::string target = "/";
};
// InvalidArgument naming what is wrong (scheme, host, port, userinfo, length).
StatusOr<WebhookUrl> ParseWebhookUrl(std::string_view url);
// May a delivery go to `address` (an IP literal)? Only a public IPv4
// address unless `allow_private`.
bool WebhookTargetAllowed(std::string_view address, bool allow_private);

// GET /events/sandboxes query: offset (>= 0, default 0), limit (1..100,
// default 10), orderAsc (true|false, default false), types (repeated or
// comma-separated, each one of kLifecycleEventTypes). InvalidArgument
// naming the parameter.
struct EventsQuery {
  int offset = 0;
  int limit = 10;
  bool ascending = false;
  std::vector<std::string> types;
};
StatusOr<EventsQuery> ParseEventsQuery(std::string_view raw_query);

class LifecycleEvents {
 public:
  static constexpr int kAttempts = 4;  // the first and 3 retries, as E2B
  static constexpr int kKeepPerTeam = 10000;
  static constexpr size_t kMaxWebhooksPerTeam = 32;
  // Deliveries waiting (or being retried) at once, all teams; past it a
  // delivery is dropped and audited as such.
  static constexpr int kMaxQueued = 1000;
  struct Options {
    bool allow_private_targets = false;
    std::chrono::milliseconds retry_delay{std::chrono::seconds(10)};
    std::chrono::milliseconds timeout{std::chrono::seconds(10)};
  };

  LifecycleEvents(Registry& registry, audit::AuditSink audit, Options options);
  ~LifecycleEvents();  // stops delivering (attempts in flight end with their timeout)

  // Records an event of sandbox `r` (team `team`) and delivers it to the
  // team's webhooks that list its type. `event_data`: merged into
  // eventData beside sandbox_metadata.
  void Emit(std::string_view type, const SandboxRecord& r, const std::string& team,
            nlohmann::json event_data = nlohmann::json::object());

  // The API (blocking SQLite: call from a worker). Events: JSON arrays.
  StatusOr<nlohmann::json> ListEvents(const std::string& team, const std::string& sandbox, const EventsQuery& q);
  // Webhooks: E2B's WebhookConfig JSON {"id","teamID","name","createdAt",
  // "enabled","url","events"}; InvalidArgument naming a bad field, NotFound.
  StatusOr<nlohmann::json> CreateWebhook(const std::string& team, const nlohmann::json& body);
  StatusOr<nlohmann::json> UpdateWebhook(const std::string& team, const std::string& id, const nlohmann::json& body);
  StatusOr<nlohmann::json> GetWebhook(const std::string& team, const std::string& id);
  StatusOr<nlohmann::json> ListWebhooks(const std::string& team);
  Status DeleteWebhook(const std::string& team, const std::string& id);

 private:
  // Fields of a create (all required but name) or an update (any).
  Status ApplyWebhookFields(const nlohmann::json& body, bool create, WebhookRecord* w) const;
  void Dispatch(const std::string& team, const std::string& type, const std::string& event_id,
                const std::string& body);
  void Attempt(std::shared_ptr<const WebhookRecord> w, std::shared_ptr<const std::string> body, std::string event_id,
               std::string type, int attempt);
  // One POST; OK for a 2xx answer.
  StatusOr<int> Post(const WebhookRecord& w, const std::string& body, const std::string& delivery_id);

  Registry& registry_;
  audit::AuditSink audit_;
  Options options_;
  boost::asio::io_context store_io_;  // storing and fanning out, in order
  std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> store_work_;
  std::thread store_thread_;
  boost::asio::thread_pool deliveries_{2};
  std::atomic<bool> stopping_{false};
  std::atomic<int> queued_{0};
};

}  // namespace airlock::server
