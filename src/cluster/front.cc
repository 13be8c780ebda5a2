#include "cluster/front.h"

#include "core/template_runtime.h"

#include <poll.h>
#include <strings.h>

#include <future>
#include <set>
#include <tuple>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "http/client.h"
#include "gateway/console_files.h"
#include "gateway/e2b_routing.h"
#include "gateway/idempotency_key.h"
#include "image/hash.h"
#include "gateway/list_query.h"
#include "gateway/reservation.h"

namespace airlock::cluster {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// The headers a fanned-out GET carries on: the caller's credentials.
std::vector<std::pair<std::string, std::string>> CredentialHeaders(const gateway::HttpConn& c) {
  std::vector<std::pair<std::string, std::string>> h;
  for (const char* name : {"X-API-Key", "Authorization"}) {
    if (std::string v = c.Header(name); !v.empty()) h.emplace_back(name, v);
  }
  return h;
}

// The create as its node gets it: the client's end-to-end headers, then
// the front's own (its reservation, X-Forwarded-For), and the body the
// front already read.
std::string CreateRequest(const gateway::HttpConn& c, const std::string& body, const std::string& reservation_token) {
  static const char* kDropped[] = {"connection", "keep-alive",          "transfer-encoding", "content-length",
                                   "te",         "trailer",             "upgrade",           "proxy-connection",
                                   "host",       "proxy-authorization", "expect",            "x-forwarded-for",
                                   "x-airlock-reservation"};
  std::string host = c.Header("Host");
  std::string head = "POST " + c.target() + " HTTP/1.1\r\nHost: " + (host.empty() ? "airlock" : host) + "\r\n";
  for (const auto& [name, value] : c.Headers()) {
    bool dropped = false;
    for (const char* d : kDropped) dropped = dropped || strcasecmp(name.c_str(), d) == 0;
    if (!dropped) head += name + ": " + value + "\r\n";
  }
  head += std::string(gateway::kReservationHeader) + ": " + reservation_token + "\r\n";
  head += "X-Forwarded-For: " + c.peer().substr(0, c.peer().rfind(':')) + "\r\n";
  head += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  return head + body;
}

// A header of a node's answer by its lower-case name ("" when absent).
std::string HeaderOf(const NodeReply& r, std::string_view lower_name) {
  for (const auto& [k, v] : r.headers) {
    if (k.size() == lower_name.size() && strncasecmp(k.data(), lower_name.data(), k.size()) == 0) return v;
  }
  return "";
}

// The most a node's answer to a fanned-out list may hold.
constexpr size_t kMaxFanOutBody = 16u << 20;

// Merges node answers of one list route: arrays are concatenated, objects
// merged key by key (their arrays and objects merged the same way).
void Merge(json& into, const json& from) {
  if (into.is_array() && from.is_array()) {
    for (const auto& v : from) into.push_back(v);
  } else if (into.is_object() && from.is_object()) {
    for (const auto& [k, v] : from.items()) {
      if (into.contains(k)) Merge(into[k], v);
      else into[k] = v;
    }
  }
}

}  // namespace

StatusOr<std::unique_ptr<Front>> Front::Open(FrontConfig config, std::shared_ptr<ClusterRegistry> registry) {
  std::unique_ptr<Front> f(new Front(std::move(config), std::move(registry)));
  RETURN_IF_ERROR(f->Init());
  return f;
}

Status Front::Init() {
  ClusterRegistry* reg = registry_.get();
  keys_ = std::make_unique<gateway::ApiKeyTable>(
      gateway::ApiKeySource{[reg] { return reg->KeyVersion(); }, [reg] { return reg->ApiKeysByHash(); }});
  RETURN_IF_ERROR(keys_->Reload());
  workers_ = std::make_unique<asio::thread_pool>(static_cast<size_t>(std::max(1, config_.workers)));
  gateway::HttpLimits limits = config_.limits;
  if (!limits.log) {
    limits.log = [](http::LogLevel level, const std::string& msg) {
      if (level == http::LogLevel::kError) LOG_ERROR("{}", msg);
      else LOG_DEBUG("{}", msg);
    };
  }
  listener_ = std::make_unique<gateway::HttpListener>(io_, [this](Conn c) { Handle(std::move(c)); }, limits);
  RETURN_IF_ERROR(listener_->Listen(config_.listen));
  key_timer_ = std::make_unique<asio::steady_timer>(io_);
  ScheduleKeyRefresh();
  watcher_ = std::thread([this] { WatchRegistry(); });
  LOG_WARN("airlock front listening on {} (port {})", config_.listen, port());
  return OkStatus();
}

Front::~Front() {
  Stop();
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
  if (workers_) workers_->join();
}

uint16_t Front::port() const { return listener_->port(); }

void Front::Run() {
  asio::signal_set signals(io_, SIGINT, SIGTERM);
  signals.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) {
      LOG_WARN("signal {} received, stopping", sig);
      Stop();
    }
  });
  io_.run();
}

void Front::Stop() {
  asio::post(io_, [this] {
    if (listener_) listener_->Stop();
    if (key_timer_) key_timer_->cancel();
    io_.stop();
  });
}

void Front::ScheduleKeyRefresh() {
  key_timer_->expires_after(std::chrono::seconds(1));
  key_timer_->async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    asio::post(*workers_, [this] {
      if (Status st = keys_->RefreshIfStale(); !st.ok()) LOG_WARN("front: api keys: {}", st.message());
    });
    ScheduleKeyRefresh();
  });
}

// LISTEN airlock_sandbox (a moved, lost or removed sandbox drops out of the
// cache) and, every sweep_interval, mark the nodes whose heartbeat lapsed.
// Without the LISTEN connection the cache is not used at all.
void Front::WatchRegistry() {
  std::unique_ptr<PgConn> listen;
  auto last_sweep = std::chrono::steady_clock::now() - config_.sweep_interval;
  uint64_t sweeps = 0;
  while (!stopping_) {
    if (!listen) {
      auto c = PgConn::Connect(registry_->url());
      if (c.ok() && (*c)->Exec("LISTEN airlock_sandbox").ok()) {
        listen = std::move(*c);
        std::lock_guard<std::mutex> l(cache_mu_);
        cache_.clear();
        cache_valid_ = true;
      }
    }
    if (listen) {
      pollfd p{listen->socket(), POLLIN, 0};
      ::poll(&p, 1, 200);
      auto notes = listen->TakeNotifications();
      std::lock_guard<std::mutex> l(cache_mu_);
      if (!notes.ok()) {
        LOG_WARN("front: registry notifications: {}; routing without the cache until reconnected",
                 notes.status().message());
        cache_.clear();
        cache_valid_ = false;
        listen.reset();
      } else {
        for (const auto& n : *notes) cache_.erase(n.payload);
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (std::chrono::steady_clock::now() - last_sweep >= config_.sweep_interval) {
      last_sweep = std::chrono::steady_clock::now();
      if (++sweeps % 60 == 0) (void)registry_->ForgetOldIdempotencyRoutes();
      // The creates this front still waits for keep their slots.
      std::vector<int64_t> waiting;
      {
        std::lock_guard<std::mutex> l(in_flight_mu_);
        waiting.assign(in_flight_.begin(), in_flight_.end());
      }
      if (Status st = registry_->RenewLeases(waiting); !st.ok())
        LOG_WARN("front: renewing {} reservation lease(s): {}", waiting.size(), st.message());
      auto lapsed = registry_->MarkLapsed(config_.lapse);
      if (lapsed.ok()) {
        for (const auto& name : *lapsed)
          LOG_WARN("front: node {} missed its heartbeat for {} ms: marked lost, with its sandboxes", name,
                   config_.lapse.count());
      }
    }
  }
}

StatusOr<std::optional<SandboxLocation>> Front::Locate(const std::string& id) {
  {
    std::lock_guard<std::mutex> l(cache_mu_);
    if (cache_valid_) {
      if (auto it = cache_.find(id); it != cache_.end()) return std::optional<SandboxLocation>(it->second);
    }
  }
  ASSIGN_OR_RETURN(auto loc, registry_->Locate(id));
  if (loc) {
    std::lock_guard<std::mutex> l(cache_mu_);
    if (cache_valid_ && cache_.size() < 100000) cache_[id] = *loc;
  }
  return loc;
}

void Front::Handle(Conn c) {
  // Only a front may say it holds a slot: a client's own copy of the header
  // would shadow the front's (the node reads the first).
  bool reservation_header = false;
  for (const auto& [name, value] : c->Headers())
    reservation_header = reservation_header || strcasecmp(name.c_str(), gateway::kReservationHeader) == 0;
  if (reservation_header) {
    return c->RespondError(400, std::string(gateway::kReservationHeader) + " is set by fronts only");
  }
  uint16_t port = 0;
  if (auto id = gateway::DataPlaneSandbox(*c, config_.domain, &port)) return ToSandboxNode(std::move(c), *id, true);
  const std::string& path = c->path();
  if (path == "/health") return c->Respond(200, "application/json", "{\"status\":\"ok\"}");
  // As on a node: Prometheus scrapes without a key.
  if (path == "/metrics" && c->method() == http::Method::kGet) return MetricsRoute(std::move(c));
  if (path == "/console" || path.rfind("/console/", 0) == 0) return ServeConsole(std::move(c));
  if (path == "/files" && c->Query("signature")) {
    return c->RespondError(400, "a signed file URL reaches its sandbox through a front only in the "
                                "<port>-<id>.<domain> host form (serve --domain)");
  }
  const bool mcp = path == "/mcp";
  std::string presented = gateway::PresentedApiKey(*c, mcp);
  if (auto key = keys_->Find(presented)) return Authenticated(std::move(c), *key, presented);
  if (presented.empty()) return c->RespondError(401, mcp ? "missing API key (X-API-Key or Authorization: Bearer)"
                                                         : "missing X-API-Key");
  // A key made a moment ago: read the registry's keys again first.
  asio::post(*workers_, [this, c, presented] {
    Status st = keys_->RefreshIfStale();
    asio::post(c->executor(), [this, c, presented, st] {
      if (auto key = keys_->Find(presented)) return Authenticated(c, *key, presented);
      if (!st.ok()) return c->RespondError(503, "the cluster registry is unreachable: " + st.message());
      c->RespondError(401, "invalid API key");
    });
  });
}

void Front::Authenticated(Conn c, const ApiKeyRecord& key, const std::string& presented) {
  Route(std::move(c), key, presented);
}

void Front::Route(Conn c, const ApiKeyRecord& key, const std::string& presented) {
  std::vector<std::string> seg = http::PathSegments(c->path());
  const http::Method verb = c->method();
  if (seg.empty()) return c->RespondError(404, "no such route");
  if (seg[0] == "mcp") return ToMcpNode(std::move(c), presented);
  if (seg[0] == "nodes") return NodesRoute(std::move(c), key, seg);
  std::vector<std::string> rest = seg;
  if (rest[0] == "v1" || rest[0] == "v2" || rest[0] == "v3") rest.erase(rest.begin());
  if (rest.empty()) return c->RespondError(404, "no such route");
  // The template node serves the template and secret routes; every node
  // has the same templates and secrets (template_replica.h, secret_replica.h).
  if (rest[0] == "templates" || rest[0] == "builds" || rest[0] == "secrets") return ToTemplateNode(std::move(c));
  if (rest[0] == "snapshots" && verb == http::Method::kGet) return FanOut(std::move(c));
  if (rest[0] == "sandboxes") {
    if (rest.size() == 1 && verb == http::Method::kPost) return Create(std::move(c), key.team);
    if (rest.size() == 1 && verb == http::Method::kGet) return FanOut(std::move(c));
    if (rest.size() == 2 && rest[1] == "metrics" && verb == http::Method::kGet) return FanOut(std::move(c));
    if (rest.size() >= 2) return ToSandboxNode(std::move(c), rest[1], false);
  }
  if (seg.size() == 1 && seg[0] == "host" && verb == http::Method::kGet) return HostRoute(std::move(c));
  if (seg.size() == 1 && seg[0] == "audit" && verb == http::Method::kGet) return AuditRoute(std::move(c));
  if (seg.size() == 2 && seg[0] == "audit" && seg[1] == "verify" && verb == http::Method::kGet)
    return AuditVerifyRoute(std::move(c));
  c->RespondError(404, "no such route");
}

void Front::Forward(Conn c, const std::string& address, const std::string& node, gateway::ForwardExtras extras) {
  auto hp = http::ParseHostPort(address);
  if (!hp.ok()) return c->RespondError(502, "node " + node + " has an invalid address " + address);
  extras.upstream_name = "node " + node + " (" + address + ")";
  if (config_.tls) extras.upstream_verified = config_.tls->ToNode(node);
  extras.headers.emplace_back("X-Forwarded-For", c->peer().substr(0, c->peer().rfind(':')));
  gateway::ForwardRequest(c, hp->first, hp->second, c->Header("Host"), std::move(extras));
}

void Front::ToSandboxNode(Conn c, const std::string& id, bool data_plane) {
  asio::post(*workers_, [this, c, id, data_plane] {
    auto loc = Locate(id);
    asio::post(c->executor(), [this, c, id, data_plane, loc] {
      if (!loc.ok()) return c->RespondError(503, "the cluster registry is unreachable: " + loc.status().message());
      if (!*loc) {
        if (data_plane) {
          return c->Respond(502, "application/json",
                            json{{"code", 502}, {"message", "The sandbox was not found"}, {"sandboxId", id}}.dump());
        }
        return c->RespondError(404, "sandbox " + id + " not found");
      }
      const SandboxLocation& l = **loc;
      if (l.lost) {
        const std::string msg = "sandbox " + id + " was lost with node " + l.node + " (no heartbeat; at " +
                                FormatRfc3339Ms(l.lost_at_ms) + ")";
        if (data_plane) {
          return c->Respond(502, "application/json",
                            json{{"code", 502}, {"message", "The sandbox was not found"}, {"sandboxId", id},
                                 {"detail", msg}}
                                .dump());
        }
        return c->Respond(404, "application/json",
                          json{{"code", 404}, {"message", msg}, {"outcome", "lost"}, {"node", l.node},
                               {"endedAt", FormatRfc3339Ms(l.lost_at_ms)}}
                              .dump());
      }
      Forward(c, l.address, l.node);
    });
  });
}

void Front::Create(Conn c, const std::string& team) {
  // A create with an Idempotency-Key goes to the node its first call went
  // to, where the key is remembered (server/idempotency.h). A malformed key
  // is placed like any create; its node answers it with 400.
  std::string idem = c->Header("Idempotency-Key");
  if (!gateway::ValidIdempotencyKey(idem)) idem.clear();
  c->ReadBodyToString(config_.max_json_body, [this, c, team, idem](StatusOr<std::string> body) {
    if (!body.ok()) return c->RespondError(body.status().code() == StatusCode::kResourceExhausted ? 413 : 400,
                                           body.status().message());
    std::string template_name = "base";
    json j = body->empty() ? json::object() : json::parse(*body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return c->RespondError(400, "the request body is not a JSON object");
    if (auto t = j.find("templateID"); t != j.end() && t->is_string()) template_name = t->get<std::string>();
    // Placement prefers the nodes that list the template (they hold it); a
    // custom template may go to any other node, which fetches its image
    // (template_replica.h), over the cluster's mutual TLS (an
    // --insecure-cluster has none: there a custom template starts only where
    // it is). Nodes list a custom template's id and aliases.
    const bool custom = !IsBuiltInTemplateName(template_name) && config_.tls != nullptr;
    if (custom) {
      if (auto slash = template_name.find('/'); slash != std::string::npos) template_name.erase(0, slash + 1);
      if (auto colon = template_name.find(':'); colon != std::string::npos) template_name.erase(colon);
    }
    // The reservation is bound to this create (gateway/reservation.h).
    std::string digest = gateway::CreateDigest(j);
    std::string text = std::move(*body);
    asio::post(*workers_, [this, c, template_name, custom, text, digest, team, idem] {
      std::string first_node;
      if (!idem.empty()) {
        auto n = registry_->IdempotencyNode(team, idem);
        if (!n.ok()) {
          return asio::post(c->executor(), [c, st = n.status()] {
            c->RespondErrorWithCode(503, "the cluster registry is unreachable: " + st.message(), "internal_server_error");
          });
        }
        first_node = *n;
      }
      auto placed = registry_->Place(template_name, config_.best_of_k, config_.lapse, digest, first_node, custom);
      if (placed.ok() && !idem.empty() && first_node.empty()) {
        // The first call with this key: its node is where retries go. A
        // concurrent one through another front that recorded first wins.
        auto recorded = registry_->RecordIdempotencyNode(team, idem, placed->node);
        if (recorded.ok() && *recorded != placed->node) {
          (void)registry_->Release(placed->node, placed->reservation);
          placed = registry_->Place(template_name, config_.best_of_k, config_.lapse, digest, *recorded, custom);
        }
      }
      asio::post(c->executor(), [this, c, placed, text] {
        if (!placed.ok()) {
          // E2B's error_code (its API's Error schema, as for a node's own refusal).
          if (placed.status().code() == StatusCode::kResourceExhausted) {
            return c->RespondErrorWithCode(503, placed.status().message(), "sandbox_capacity_unavailable",
                                           {{"Retry-After", "1"}});
          }
          return c->RespondErrorWithCode(503, "the cluster registry is unreachable: " + placed.status().message(),
                                         "internal_server_error");
        }
        const Placement p = *placed;
        auto hp = http::ParseHostPort(p.address);
        if (!hp.ok()) {
          ReleaseSlot(p, "its address is invalid");  // never in flight
          return c->RespondError(502, "node " + p.node + " has an invalid address " + p.address);
        }
        LOG_INFO("front: create placed on node {} ({} refused first, reservation {})", p.node, p.tried,
                 p.reservation);
        {
          std::lock_guard<std::mutex> l(in_flight_mu_);
          in_flight_.insert(p.reservation);
        }
        // Not tied to the client's connection: the node's answer decides
        // what becomes of the slot, even when the client has gone.
        CallNode(c->executor(), hp->first, hp->second, CreateRequest(*c, text, p.token),
                 config_.create_timeout, config_.max_json_body,
                 [this, c, p](NodeReply reply) { CreateAnswered(c, p, std::move(reply)); },
                 config_.tls ? config_.tls->ToNode(p.node) : nullptr);
        c->WatchForDisconnect();
      });
    });
  });
}

void Front::CreateAnswered(Conn c, const Placement& p, NodeReply reply) {
  using Outcome = NodeReply::Outcome;
  {
    std::lock_guard<std::mutex> l(in_flight_mu_);
    in_flight_.erase(p.reservation);
  }
  const std::string node = "node " + p.node + " (" + p.address + ")";
  switch (reply.outcome) {
    case Outcome::kAnswered:
      // A refusal frees the slot; a sandbox made keeps it (the node's record
      // used the reservation). An Idempotency-Key's replay made nothing: the
      // node answered from its first call and never claimed this reservation.
      if (reply.status >= 400) ReleaseSlot(p, "the node answered " + std::to_string(reply.status));
      else if (HeaderOf(reply, "idempotent-replayed") == "true") ReleaseSlot(p, "the node replayed an earlier answer");
      break;
    case Outcome::kNotDelivered:
      ReleaseSlot(p, "the node never got the create: " + reply.error);
      break;
    case Outcome::kNoAnswer:
      // The node may be making the sandbox: its record uses the slot, or
      // the reservation is dropped: unclaimed, when its lease (no longer
      // renewed) runs out; claimed, after kReservationTtl.
      LOG_WARN("front: a create on {} got no answer ({}): its slot stays reserved until the node records the "
               "sandbox, or {} s pass if the node never claimed it ({} s if it did)",
               node, reply.error, std::chrono::duration_cast<std::chrono::seconds>(kReservationLease).count(),
               std::chrono::duration_cast<std::chrono::seconds>(kReservationTtl).count());
      break;
  }
  if (c->closed()) {
    LOG_INFO("front: the client of a create on {} left before the answer ({}{})", node, reply.status,
             reply.outcome == Outcome::kAnswered ? "" : ", " + reply.error);
    return;
  }
  switch (reply.outcome) {
    case Outcome::kAnswered:
      return c->Respond(reply.status, reply.content_type, std::move(reply.body), reply.headers);
    case Outcome::kNotDelivered:
      return c->RespondErrorWithCode(502, node + " unreachable: " + reply.error, "sandbox_create_failed");
    case Outcome::kNoAnswer:
      return c->RespondErrorWithCode(502, node + " gave no answer to the create: " + reply.error,
                                     "sandbox_create_failed");
  }
}

void Front::ReleaseSlot(const Placement& p, const std::string& why) {
  asio::post(*workers_, [this, p, why] {
    if (Status st = registry_->Release(p.node, p.reservation); !st.ok()) {
      LOG_WARN("front: releasing reservation {} of node {} ({}): {}; it is dropped after the reservation TTL",
               p.reservation, p.node, why, st.message());
    }
  });
}

std::vector<std::pair<std::string, NodeReply>> Front::AskLiveNodes(const std::vector<NodeInfo>& nodes,
                                                                  const std::string& target,
                                                                  const std::vector<std::pair<std::string, std::string>>& headers,
                                                                  std::vector<std::string>* missing) {
  // Every live node at once: the answer waits for the slowest, not the sum.
  // Each is a NodeCall on the io thread (over the cluster's TLS), waited
  // for here.
  std::vector<std::pair<std::string, std::future<NodeReply>>> asked;
  for (const auto& n : nodes) {
    if (!n.live) continue;
    auto hp = http::ParseHostPort(n.address);
    if (!hp.ok()) continue;
    std::string request = "GET " + target + " HTTP/1.1\r\nHost: " + n.address + "\r\n";
    for (const auto& [k, v] : headers) request += k + ": " + v + "\r\n";
    request += "Connection: close\r\n\r\n";
    auto answer = std::make_shared<std::promise<NodeReply>>();
    asked.emplace_back(n.name, answer->get_future());
    CallNode(io_.get_executor(), hp->first, hp->second, std::move(request), std::chrono::seconds(10), kMaxFanOutBody,
             [answer](NodeReply r) { answer->set_value(std::move(r)); },
             config_.tls ? config_.tls->ToNode(n.name) : nullptr);
  }
  std::vector<std::pair<std::string, NodeReply>> out;
  for (auto& [name, answer] : asked) {
    // The call ends itself in 10 s; the io thread may stop first (the front is going).
    if (answer.wait_for(std::chrono::seconds(15)) != std::future_status::ready) {
      missing->push_back(name);
      continue;
    }
    NodeReply r = answer.get();
    if (r.outcome != NodeReply::Outcome::kAnswered) {
      if (!r.error.empty()) LOG_WARN("front: node {} did not answer GET {}: {}", name, target, r.error);
      missing->push_back(name);
      continue;
    }
    out.emplace_back(name, std::move(r));
  }
  return out;
}

void Front::FanOut(Conn c) {
  // A sandbox list pages by E2B's keyset token (<created_ms>_<id>, the same
  // on every node): each node gets the caller's limit and token, and the
  // merge keeps the first `limit` in the nodes' order, with the token of
  // the last one kept when anything is left.
  std::optional<gateway::ListSandboxesRequest> paging;
  {
    std::vector<std::string> seg = http::PathSegments(c->path());
    if (!seg.empty() && (seg[0] == "v1" || seg[0] == "v2")) seg.erase(seg.begin());
    if (seg.size() == 1 && seg[0] == "sandboxes") {
      auto q = gateway::ParseListSandboxes([&c](const std::string& name) { return c->Query(name); });
      if (!q.ok()) return c->RespondError(400, q.status().message());
      paging = *q;
    }
  }
  const bool metrics = c->path().find("metrics") != std::string::npos;
  Gather(c, true, [paging, metrics](std::vector<std::pair<std::string, NodeReply>>& answers,
                                    std::vector<std::string>& missing, gateway::HeaderList& headers) {
    std::optional<json> merged;
    bool more = false;
    int64_t total_running = 0;
    for (auto& [name, r] : answers) {
      if (!HeaderOf(r, "x-next-token").empty()) more = true;
      if (std::string t = HeaderOf(r, "x-total-running"); !t.empty()) total_running += std::atoll(t.c_str());
      json j = json::parse(r.body, nullptr, false);
      if (j.is_discarded()) {
        missing.push_back(name);
        continue;
      }
      if (!merged) merged = std::move(j);
      else Merge(*merged, j);
    }
    if (!merged) merged = metrics ? json::object() : json::array();
    std::string next_token;
    if (paging && merged->is_array()) {
      auto key = [](const json& s) {
        auto us = ParseRfc3339Us(s.value("startedAt", ""));
        return std::make_pair(us.ok() ? *us / 1000 : int64_t{0}, s.value("sandboxID", ""));
      };
      std::vector<json> rows(merged->begin(), merged->end());
      std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) {
        return paging->ascending ? key(a) < key(b) : key(b) < key(a);
      });
      const size_t limit = static_cast<size_t>(paging->limit);
      if (rows.size() > limit) {
        rows.resize(limit);
        more = true;
      }
      if (more && !rows.empty()) {
        auto k = key(rows.back());
        next_token = std::to_string(k.first) + "_" + k.second;
      }
      merged = json(rows);
    }
    if (!next_token.empty()) headers.emplace_back("X-Next-Token", next_token);
    if (paging) headers.emplace_back("X-Total-Running", std::to_string(total_running));
    return merged->dump();
  });
}

bool Front::Fresh(const NodeInfo& n) const { return n.live && n.heartbeat_age_ms < config_.lapse.count(); }

void Front::ToTemplateNode(Conn c) {
  asio::post(*workers_, [this, c] {
    auto nodes = registry_->Nodes();
    asio::post(c->executor(), [this, c, nodes] {
      if (!nodes.ok()) return c->RespondError(503, "the cluster registry is unreachable: " + nodes.status().message());
      for (const auto& n : *nodes) {
        if (Fresh(n)) return Forward(c, n.address, n.name);
      }
      c->RespondError(503, "no live node to serve templates or secrets");
    });
  });
}

void Front::ToMcpNode(Conn c, const std::string& presented) {
  asio::post(*workers_, [this, c, presented] {
    auto nodes = registry_->Nodes();
    asio::post(c->executor(), [this, c, nodes, presented] {
      if (!nodes.ok()) return c->RespondError(503, "the cluster registry is unreachable: " + nodes.status().message());
      // Rendezvous hashing: a key's MCP sessions stay on one node while it lives.
      const NodeInfo* best = nullptr;
      std::string best_score;
      for (const auto& n : *nodes) {
        if (!Fresh(n)) continue;
        std::string score = image::Sha256Hex(presented + "\n" + n.name);
        if (!best || score > best_score) best = &n, best_score = score;
      }
      if (!best) return c->RespondError(503, "no live node to serve MCP");
      Forward(c, best->address, best->name);
    });
  });
}

void Front::NodesRoute(Conn c, const ApiKeyRecord& key, const std::vector<std::string>& seg) {
  if (!key.admin) return c->RespondError(403, "the cluster's nodes are shown to admin keys only");
  const http::Method verb = c->method();
  if (seg.size() == 1 && verb == http::Method::kGet) {
    return asio::post(*workers_, [this, c] {
      auto nodes = registry_->Nodes();
      json arr = json::array();
      if (nodes.ok()) {
        for (const auto& n : *nodes) {
          arr.push_back({{"name", n.name},
                         {"address", n.address},
                         {"capacity", n.capacity},
                         {"reserved", n.reserved},
                         {"draining", n.draining},
                         {"live", Fresh(n)},
                         {"heartbeatAgeMs", n.heartbeat_age_ms},
                         {"bootID", n.boot_id},
                         {"version", n.version},
                         {"templates", n.templates}});
        }
      }
      asio::post(c->executor(), [c, nodes, out = arr.dump()] {
        if (!nodes.ok()) return c->RespondError(503, "the cluster registry is unreachable: " + nodes.status().message());
        c->Respond(200, "application/json", out);
      });
    });
  }
  if (seg.size() == 3 && seg[2] == "drain" && (verb == http::Method::kPost || verb == http::Method::kDelete)) {
    const bool drain = verb == http::Method::kPost;
    return asio::post(*workers_, [this, c, name = seg[1], drain] {
      Status st = registry_->SetDraining(name, drain);
      asio::post(c->executor(), [c, st, name, drain] {
        if (st.code() == StatusCode::kNotFound) return c->RespondError(404, st.message());
        if (!st.ok()) return c->RespondError(503, st.message());
        c->Respond(200, "application/json", json{{"name", name}, {"draining", drain}}.dump());
      });
    });
  }
  c->RespondError(404, "no such route");
}

void Front::ServeConsole(Conn c) { gateway::ServeConsoleAsset(*c); }

// ---- every node's own views, gathered (GET /host, /metrics, /audit, /audit/verify)

void Front::Gather(Conn c, bool with_credentials, Combine combine, std::string content_type) {
  std::string target = c->target();
  auto headers = with_credentials ? CredentialHeaders(*c) : std::vector<std::pair<std::string, std::string>>{};
  asio::post(*workers_, [this, c, target, headers, combine = std::move(combine), content_type] {
    auto nodes = registry_->Nodes();
    if (!nodes.ok()) {
      return asio::post(c->executor(), [c, st = nodes.status()] {
        c->RespondError(503, "the cluster registry is unreachable: " + st.message());
      });
    }
    std::vector<std::string> missing;
    auto answers = AskLiveNodes(*nodes, target, headers, &missing);
    for (const auto& [name, r] : answers) {
      // The same key and query everywhere: one node's refusal is everyone's.
      if (r.status != 200) {
        return asio::post(c->executor(), [c, r = r] { c->Respond(r.status, "application/json", r.body); });
      }
    }
    gateway::HeaderList extra;
    std::string out = combine(answers, missing, extra);
    std::string unreachable;
    for (const auto& m : missing) unreachable += (unreachable.empty() ? "" : ",") + m;
    asio::post(c->executor(), [c, out = std::move(out), extra = std::move(extra), unreachable, content_type]() mutable {
      // Nodes that did not answer: the answer lacks what they hold.
      if (!unreachable.empty()) extra.emplace_back("X-Airlock-Unreachable-Nodes", unreachable);
      c->Respond(200, content_type, out, extra);
    });
  });
}

namespace {

// The numbers of a node's host view added into `total`: counts and sizes
// add up; a level or a per-node setting keeps the highest.
void AddHostView(json& total, const json& from) {
  static const std::set<std::string> kHighest = {"pressure", "maxPerKey", "sizePerTemplate"};
  if (!from.is_object()) return;
  for (const auto& [k, v] : from.items()) {
    if (v.is_object()) {
      if (!total.contains(k) || !total[k].is_object()) total[k] = json::object();
      AddHostView(total[k], v);
    } else if (v.is_number_integer()) {
      const int64_t have = total.contains(k) && total[k].is_number_integer() ? total[k].get<int64_t>() : 0;
      total[k] = kHighest.count(k) ? std::max(have, v.get<int64_t>()) : have + v.get<int64_t>();
    } else if (v.is_number()) {
      const double have = total.contains(k) && total[k].is_number() ? total[k].get<double>() : 0;
      total[k] = kHighest.count(k) ? std::max(have, v.get<double>()) : have + v.get<double>();
    }
  }
}

// `line` (one sample of the Prometheus text format) with node="<name>" as
// its first label.
std::string WithNodeLabel(const std::string& line, const std::string& node) {
  const size_t brace = line.find('{'), space = line.find(' ');
  if (space == std::string::npos) return "";
  if (brace != std::string::npos && brace < space) {
    const bool empty = brace + 1 < line.size() && line[brace + 1] == '}';
    return line.substr(0, brace + 1) + "node=\"" + node + "\"" + (empty ? "" : ",") + line.substr(brace + 1);
  }
  return line.substr(0, space) + "{node=\"" + node + "\"}" + line.substr(space);
}

}  // namespace

void Front::HostRoute(Conn c) {
  Gather(c, true, [](std::vector<std::pair<std::string, NodeReply>>& answers, std::vector<std::string>& missing,
         gateway::HeaderList&) {
    json nodes = json::object(), total = json::object();
    for (const auto& [name, r] : answers) {
      json j = json::parse(r.body, nullptr, false);
      if (j.is_discarded()) continue;
      AddHostView(total, j);
      nodes[name] = std::move(j);
    }
    return json{{"nodes", nodes}, {"total", total}, {"unreachable", missing}}.dump();
  });
}

void Front::MetricsRoute(Conn c) {
  // Each node's exposition with node="<name>" on every sample, its families
  // merged: one HELP and TYPE per family, then every node's samples (the
  // text format wants a family's samples together). Sums are the query's
  // (sum without (node) (...)).
  Gather(
      c, false,
      [](std::vector<std::pair<std::string, NodeReply>>& answers, std::vector<std::string>& missing,
         gateway::HeaderList&) {
        std::vector<std::string> order;
        std::map<std::string, std::pair<std::string, std::vector<std::string>>> families;  // name -> (head, samples)
        for (const auto& [name, r] : answers) {
          std::string family;
          size_t p = 0;
          while (p < r.body.size()) {
            size_t e = r.body.find('\n', p);
            if (e == std::string::npos) e = r.body.size();
            std::string line = r.body.substr(p, e - p);
            p = e + 1;
            if (line.empty()) continue;
            if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
              std::string rest = line.substr(7);
              family = rest.substr(0, rest.find(' '));
              auto [it, added] = families.try_emplace(family);
              if (added) order.push_back(family);
              // The first node's HELP and TYPE stand for all.
              if (it->second.first.find(line.substr(0, 7)) == std::string::npos) it->second.first += line + "\n";
              continue;
            }
            if (line[0] == '#') continue;
            if (family.empty()) {
              family = line.substr(0, std::min(line.find('{'), line.find(' ')));
              if (families.try_emplace(family).second) order.push_back(family);
            }
            if (std::string labelled = WithNodeLabel(line, name); !labelled.empty())
              families[family].second.push_back(std::move(labelled));
          }
        }
        std::string out;
        for (const auto& f : order) {
          out += families[f].first;
          for (const auto& sample : families[f].second) out += sample + "\n";
        }
        out += "# HELP airlock_front_nodes_unreachable Live nodes that did not answer this scrape.\n"
               "# TYPE airlock_front_nodes_unreachable gauge\n"
               "airlock_front_nodes_unreachable " +
               std::to_string(missing.size()) + "\n";
        return out;
      },
      "text/plain; version=0.0.4");
}

void Front::AuditRoute(Conn c) {
  size_t limit = 500;
  if (auto l = c->Query("limit")) limit = static_cast<size_t>(std::clamp<long long>(std::atoll(l->c_str()), 1, 10000));
  Gather(c, true, [limit](std::vector<std::pair<std::string, NodeReply>>& answers, std::vector<std::string>&,
                          gateway::HeaderList&) {
    // Each node's newest matches (its own filter and tenancy), tagged with
    // the node, merged oldest first; the newest `limit` of them.
    std::vector<json> all;
    for (const auto& [name, r] : answers) {
      json j = json::parse(r.body, nullptr, false);
      if (!j.is_array()) continue;
      for (auto& rec : j) {
        if (!rec.is_object()) continue;
        rec["node"] = name;
        all.push_back(std::move(rec));
      }
    }
    std::stable_sort(all.begin(), all.end(), [](const json& a, const json& b) {
      return std::make_tuple(a.value("ts", ""), a.value("node", ""), a.value("seq", int64_t{0})) <
             std::make_tuple(b.value("ts", ""), b.value("node", ""), b.value("seq", int64_t{0}));
    });
    if (all.size() > limit) all.erase(all.begin(), all.end() - static_cast<std::ptrdiff_t>(limit));
    return json(std::move(all)).dump(-1, ' ', false, json::error_handler_t::replace);
  });
}

void Front::AuditVerifyRoute(Conn c) {
  Gather(c, true, [](std::vector<std::pair<std::string, NodeReply>>& answers, std::vector<std::string>& missing,
         gateway::HeaderList&) {
    // Each node's hash chain is its own, verified by that node; the cluster
    // is ok when every live node answered ok.
    json nodes = json::object();
    bool ok = missing.empty(), tampered = false;
    for (const auto& [name, r] : answers) {
      json j = json::parse(r.body, nullptr, false);
      if (!j.is_object()) {
        ok = false;
        continue;
      }
      ok = ok && j.value("ok", false);
      tampered = tampered || j.value("tampered", false);
      nodes[name] = std::move(j);
    }
    return json{{"ok", ok}, {"tampered", tampered}, {"nodes", nodes}, {"unreachable", missing}}.dump();
  });
}

}  // namespace airlock::cluster
