// Lifecycle events and webhooks (lifecycle_events.h).
#include "server/lifecycle_events.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>

#include <boost/algorithm/string/classification.hpp>
#include <boost/algorithm/string/split.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "common/clock.h"
#include "common/hex.h"
#include "common/log.h"
#include "egress/policy.h"
#include "envd/proto_json.h"
#include "http/url.h"

namespace airlock::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using nlohmann::json;

namespace {

constexpr size_t kMaxUrl = 2048;
constexpr size_t kMaxName = 256;
constexpr size_t kMaxSecret = 512;

// 16 bytes in the 8-4-4-4-12 hex form of a UUID.
std::string UuidText(std::string_view bytes16) {
  std::string h = HexEncode(bytes16.substr(0, 16));
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" + h.substr(20);
}

std::string Uuid4() {
  std::string b = RandomBytes(16);
  b[6] = static_cast<char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<char>((b[8] & 0x3f) | 0x80);
  return UuidText(b);
}

// A UUID-shaped id of one run of a sandbox (its id and when it started):
// E2B's sandboxExecutionId changes when a sandbox is resumed.
std::string ExecutionId(const std::string& sandbox, int64_t started_ms) {
  std::string what = sandbox + "/" + std::to_string(started_ms);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(what.data(), what.size(), md, &n, EVP_sha256(), nullptr);
  return UuidText(std::string_view(reinterpret_cast<const char*>(md), n));
}

bool KnownType(std::string_view t) {
  return std::find(kLifecycleEventTypes.begin(), kLifecycleEventTypes.end(), t) != kLifecycleEventTypes.end();
}

json WebhookJson(const WebhookRecord& w) {
  return {{"id", w.id},          {"teamID", w.team},  {"name", w.name},     {"createdAt", FormatRfc3339Ms(w.created_at_ms)},
          {"enabled", w.enabled}, {"url", w.url},     {"events", w.events}};
}

}  // namespace

std::string WebhookSignature(std::string_view secret, std::string_view body) {
  std::string what(secret);
  what.append(body);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(what.data(), what.size(), md, &n, EVP_sha256(), nullptr);
  std::string sig = envd::Base64Encode(std::string_view(reinterpret_cast<const char*>(md), n));
  while (!sig.empty() && sig.back() == '=') sig.pop_back();
  return sig;
}

StatusOr<WebhookUrl> ParseWebhookUrl(std::string_view url) {
  if (url.empty() || url.size() > kMaxUrl) return InvalidArgument("url must be 1 to 2048 characters");
  for (unsigned char ch : url) {
    if (ch <= 0x20 || ch >= 0x7f) return InvalidArgument("url must be printable ASCII without spaces");
  }
  WebhookUrl u;
  std::string_view rest;
  if (url.rfind("https://", 0) == 0) {
    u.tls = true;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return InvalidArgument("url must be an http:// or https:// URL");
  }
  size_t end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  if (end != std::string_view::npos) {
    std::string_view tail = rest.substr(end);
    if (size_t hash = tail.find('#'); hash != std::string_view::npos) tail = tail.substr(0, hash);
    u.target = tail.empty() || tail[0] != '/' ? "/" + std::string(tail) : std::string(tail);
  }
  if (authority.find('@') != std::string_view::npos) return InvalidArgument("url must not carry credentials");
  u.port = u.tls ? 443 : 80;
  // The host ("[v6]" or a name/IPv4) and what follows it (":port" or nothing).
  std::string_view host = authority, after;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgument("url has an unterminated IPv6 address");
    host = authority.substr(1, close - 1);
    after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') return InvalidArgument("url has a malformed host");
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    after = authority.substr(colon);
  }
  if (!after.empty()) {
    std::string port(after.substr(1));
    char* e = nullptr;
    long p = std::strtol(port.c_str(), &e, 10);
    if (port.empty() || *e || p < 1 || p > 65535) return InvalidArgument("url has an invalid port");
    u.port = static_cast<uint16_t>(p);
  }
  if (host.empty() || host.size() > 253) return InvalidArgument("url has no host");
  u.host = std::string(host);
  for (auto& ch : u.host) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return u;
}

namespace {
// Is `v4` (host byte order) an address of one of this host's interfaces
// (its public address too: a service bound to 0.0.0.0 answers there)?
bool IsHostAddress(uint32_t v4) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return true;  // unknown: refuse
  bool found = false;
  for (ifaddrs* a = all; a && !found; a = a->ifa_next) {
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET)
      found = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr) == v4;
  }
  freeifaddrs(all);
  return found;
}
}  // namespace

bool WebhookTargetAllowed(std::string_view address, bool allow_private) {
  if (allow_private) return true;
  auto v4 = egress::ParseIpv4(address);
  return v4 && !egress::IsForbiddenAddress(*v4) && !IsHostAddress(*v4);
}

StatusOr<EventsQuery> ParseEventsQuery(std::string_view raw_query) {
  EventsQuery q;
  auto integer = [](const std::string& name, const std::string& v, long lo, long hi) -> StatusOr<int> {
    char* e = nullptr;
    long n = std::strtol(v.c_str(), &e, 10);
    if (v.empty() || *e || n < lo || n > hi)
      return InvalidArgument(name + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    return static_cast<int>(n);
  };
  // Repeated parameters (types=a&types=b) are not a map: walk the pairs.
  std::vector<std::string> pairs;
  boost::split(pairs, raw_query, boost::is_any_of("&"));
  for (const std::string& pair_text : pairs) {
    std::string_view pair = pair_text;
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    std::string name = http::UrlDecode(pair.substr(0, eq), true);
    std::string value = eq == std::string_view::npos ? "" : http::UrlDecode(pair.substr(eq + 1), true);
    if (name == "offset") {
      ASSIGN_OR_RETURN(q.offset, integer("offset", value, 0, 1000000));
    } else if (name == "limit") {
      ASSIGN_OR_RETURN(q.limit, integer("limit", value, 1, 100));
    } else if (name == "orderAsc") {
      if (value != "true" && value != "false") return InvalidArgument("orderAsc must be true or false");
      q.ascending = value == "true";
    } else if (name == "types") {
      std::vector<std::string> types;
      boost::split(types, value, boost::is_any_of(","));
      for (const std::string& t : types) {
        if (t.empty()) continue;
        if (!KnownType(t)) return InvalidArgument("types: unknown event type '" + t.substr(0, 64) + "'");
        if (std::find(q.types.begin(), q.types.end(), t) == q.types.end()) q.types.push_back(t);
      }
    }
  }
  return q;
}

LifecycleEvents::LifecycleEvents(Registry& registry, audit::AuditSink audit, Options options)
    : registry_(registry), audit_(std::move(audit)), options_(options) {
  store_work_ = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(store_io_.get_executor());
  store_thread_ = std::thread([this] { store_io_.run(); });
}

LifecycleEvents::~LifecycleEvents() {
  // The events already emitted are stored (the killed events of a
  // --kill-on-exit stop among them); deliveries not yet made are dropped.
  store_work_.reset();
  if (store_thread_.joinable()) store_thread_.join();
  stopping_ = true;
  deliveries_.stop();
  deliveries_.join();
}

void LifecycleEvents::Emit(std::string_view type, const SandboxRecord& r, const std::string& team, json event_data) {
  const int64_t now = NowUnixMs();
  json data = json::object();
  data["sandbox_metadata"] = r.metadata;
  if (type == "sandbox.lifecycle.killed" || type == "sandbox.lifecycle.paused") {
    data["execution"] = {{"started_at", FormatRfc3339Ms(r.created_at_ms)},
                         {"vcpu_count", r.vcpus},
                         {"memory_mb", r.memory_mib},
                         {"execution_time", std::max<int64_t>(0, now - r.created_at_ms)}};
  }
  if (event_data.is_object()) data.update(event_data);
  json ev = {{"version", "v2"},
             {"id", Uuid4()},
             {"type", std::string(type)},
             {"eventData", std::move(data)},
             {"sandboxBuildId", ""},
             {"sandboxExecutionId", ExecutionId(r.id, r.created_at_ms)},
             {"sandboxId", r.id},
             {"sandboxTeamId", team},
             {"sandboxTemplateId", r.template_id},
             {"timestamp", FormatRfc3339Ms(now)}};
  std::string body = ev.dump(-1, ' ', false, json::error_handler_t::replace);
  asio::post(store_io_, [this, team, sandbox = r.id, type = std::string(type), id = ev["id"].get<std::string>(),
                         body = std::move(body), now] {
    Status st = registry_.AppendLifecycleEvent(team, sandbox, type, body, now, kKeepPerTeam);
    if (!st.ok()) LOG_WARN("lifecycle event {} of sandbox {}: {}", type, sandbox, st.ToString());
    Dispatch(team, type, id, body);
  });
}

void LifecycleEvents::Dispatch(const std::string& team, const std::string& type, const std::string& event_id,
                               const std::string& body) {
  auto hooks = registry_.ListWebhooks(team);
  if (!hooks.ok()) {
    LOG_WARN("webhooks of team {}: {}", team, hooks.status().ToString());
    return;
  }
  auto shared_body = std::make_shared<const std::string>(body);
  for (auto& w : *hooks) {
    if (!w.enabled || std::find(w.events.begin(), w.events.end(), type) == w.events.end()) continue;
    // Bounded: receivers that hang cannot grow the queue without end.
    if (queued_.load() >= kMaxQueued) {
      if (audit_) {
        audit_({{"action", "webhook.delivery"}, {"team", w.team}, {"webhook", w.id}, {"event", event_id},
                {"type", type}, {"attempt", 0}, {"ok", false},
                {"error", "dropped: " + std::to_string(kMaxQueued) + " deliveries are waiting"}});
      }
      continue;
    }
    auto hook = std::make_shared<const WebhookRecord>(std::move(w));
    ++queued_;
    asio::post(deliveries_, [this, hook, shared_body, event_id, type] { Attempt(hook, shared_body, event_id, type, 1); });
  }
}

void LifecycleEvents::Attempt(std::shared_ptr<const WebhookRecord> w, std::shared_ptr<const std::string> body,
                              std::string event_id, std::string type, int attempt) {
  if (stopping_) return;
  struct Dequeue {  // one queued delivery less when this attempt is over (a retry queues again)
    std::atomic<int>& n;
    ~Dequeue() { --n; }
  } dequeue{queued_};
  const std::string delivery_id = Uuid4();
  auto status = Post(*w, *body, delivery_id);
  const bool ok = status.ok() && *status >= 200 && *status < 300;
  json rec = {{"action", "webhook.delivery"}, {"team", w->team},   {"webhook", w->id},        {"event", event_id},
              {"type", type},                 {"delivery", delivery_id}, {"attempt", attempt}, {"ok", ok}};
  if (status.ok()) rec["status"] = *status;
  if (!status.ok()) rec["error"] = status.status().message();
  if (audit_) audit_(rec);
  if (ok || attempt >= kAttempts || stopping_) return;
  ++queued_;
  auto timer = std::make_shared<asio::steady_timer>(deliveries_.get_executor(), options_.retry_delay);
  timer->async_wait([this, timer, w, body, event_id, type, attempt](boost::system::error_code ec) {
    if (!ec) return Attempt(w, body, event_id, type, attempt + 1);
    --queued_;
  });
}

StatusOr<int> LifecycleEvents::Post(const WebhookRecord& w, const std::string& body, const std::string& delivery_id) {
  ASSIGN_OR_RETURN(WebhookUrl u, ParseWebhookUrl(w.url));
  // Resolve once, vet every address, connect to a vetted one only.
  std::vector<asio::ip::tcp::endpoint> targets;
  {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(u.host.c_str(), std::to_string(u.port).c_str(), &hints, &res);
    if (rc != 0) return Unavailable("resolve " + u.host + ": " + gai_strerror(rc));
    for (addrinfo* a = res; a; a = a->ai_next) {
      char ip[INET6_ADDRSTRLEN] = {0};
      if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof ip, nullptr, 0, NI_NUMERICHOST) != 0) continue;
      if (!WebhookTargetAllowed(ip, options_.allow_private_targets)) {
        freeaddrinfo(res);
        return PermissionDenied(u.host + " resolves to " + ip +
                                ", an address webhooks may not reach (serve --webhook-allow-private)");
      }
      boost::system::error_code ec;
      auto addr = asio::ip::make_address(ip, ec);
      if (!ec) targets.emplace_back(addr, u.port);
    }
    freeaddrinfo(res);
  }
  if (targets.empty()) return Unavailable("resolve " + u.host + ": no address");
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, u.target, 11};
  const bool default_port = u.port == (u.tls ? 443 : 80);
  const bool v6 = u.host.find(':') != std::string::npos;
  req.set(bhttp::field::host, (v6 ? "[" + u.host + "]" : u.host) + (default_port ? "" : ":" + std::to_string(u.port)));
  req.set(bhttp::field::user_agent, "airlock-webhooks");
  req.set(bhttp::field::content_type, "application/json");
  req.set("e2b-webhook-id", w.id);
  req.set("e2b-delivery-id", delivery_id);
  req.set("e2b-signature-version", "v1");
  req.set("e2b-signature", WebhookSignature(w.secret, body));
  req.body() = body;
  req.prepare_payload();
  asio::io_context ioc;
  beast::flat_buffer buf;
  bhttp::response_parser<bhttp::empty_body> parser;  // the status decides; the body is not read
  beast::error_code result = asio::error::timed_out;
  auto exchange = [&](auto& stream, auto& lowest, auto&& handshake) {
    lowest.expires_after(options_.timeout);
    lowest.async_connect(targets, [&](beast::error_code ec, const asio::ip::tcp::endpoint&) {
      if (ec) return void(result = ec);
      handshake([&](beast::error_code ec) {
        if (ec) return void(result = ec);
        bhttp::async_write(stream, req, [&](beast::error_code ec, size_t) {
          if (ec) return void(result = ec);
          bhttp::async_read_header(stream, buf, parser, [&](beast::error_code ec, size_t) { result = ec; });
        });
      });
    });
    ioc.run();
  };
  if (!u.tls) {
    beast::tcp_stream stream(ioc);
    exchange(stream, stream, [](auto&& next) { next(beast::error_code{}); });
  } else {
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    ctx.set_default_verify_paths();
    ctx.set_verify_mode(asio::ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
    if (!SSL_set_tlsext_host_name(stream.native_handle(), u.host.c_str())) return Internal("TLS SNI");
    stream.set_verify_callback(asio::ssl::host_name_verification(u.host));
    exchange(stream, beast::get_lowest_layer(stream), [&](auto&& next) {
      stream.async_handshake(asio::ssl::stream_base::client, std::forward<decltype(next)>(next));
    });
  }
  if (result) return Unavailable("POST " + u.host + ": " + result.message());
  return static_cast<int>(parser.get().result_int());
}

Status LifecycleEvents::ApplyWebhookFields(const json& body, bool create, WebhookRecord* w) const {
  auto str = [&](const char* name, size_t max, std::string* out) -> Status {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) {
      return OkStatus();
    }
    if (!it->is_string() || it->get<std::string>().size() > max)
      return InvalidArgument(std::string(name) + " must be a string of at most " + std::to_string(max) + " bytes");
    *out = it->get<std::string>();
    return OkStatus();
  };
  for (const auto& [key, value] : body.items()) {
    if (key != "name" && key != "url" && key != "enabled" && key != "events" && key != "signatureSecret" &&
        !value.is_null())
      return InvalidArgument("unknown field '" + key + "'");
  }
  RETURN_IF_ERROR(str("name", kMaxName, &w->name));
  std::string url = w->url;
  RETURN_IF_ERROR(str("url", kMaxUrl, &url));
  if (create && url.empty()) return InvalidArgument("url is required");
  ASSIGN_OR_RETURN(WebhookUrl parsed, ParseWebhookUrl(url));
  // An IP literal is vetted now; a name at each delivery (what it resolves to then).
  boost::system::error_code ec;
  (void)asio::ip::make_address(parsed.host, ec);
  if ((!ec || parsed.host == "localhost") &&
      !WebhookTargetAllowed(parsed.host == "localhost" ? "127.0.0.1" : parsed.host, options_.allow_private_targets)) {
    return InvalidArgument("url: " + parsed.host +
                           " is an address webhooks may not reach (private, loopback, link-local or the host's; "
                           "the operator may allow it: serve --webhook-allow-private)");
  }
  w->url = url;
  if (auto it = body.find("enabled"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidArgument("enabled must be a boolean");
    w->enabled = it->get<bool>();
  }
  if (auto it = body.find("events"); it != body.end() && !it->is_null()) {
    if (!it->is_array() || it->empty()) return InvalidArgument("events must be a non-empty array of event types");
    std::vector<std::string> events;
    for (const auto& e : *it) {
      if (!e.is_string() || !KnownType(e.get<std::string>()))
        return InvalidArgument("events: unknown event type " + e.dump().substr(0, 64));
      if (std::find(events.begin(), events.end(), e.get<std::string>()) == events.end())
        events.push_back(e.get<std::string>());
    }
    w->events = std::move(events);
  } else if (create) {
    w->events.assign(kLifecycleEventTypes.begin(), kLifecycleEventTypes.end());
  }
  RETURN_IF_ERROR(str("signatureSecret", kMaxSecret, &w->secret));
  if (w->secret.empty()) return InvalidArgument("signatureSecret is required (it signs every delivery)");
  return OkStatus();
}

StatusOr<json> LifecycleEvents::ListEvents(const std::string& team, const std::string& sandbox, const EventsQuery& q) {
  ASSIGN_OR_RETURN(auto rows, registry_.ListLifecycleEvents(team, sandbox, q.types, q.ascending, q.offset, q.limit));
  json out = json::array();
  for (const auto& row : rows) {
    json ev = json::parse(row, nullptr, false);
    if (!ev.is_discarded()) out.push_back(std::move(ev));
  }
  return out;
}

StatusOr<json> LifecycleEvents::CreateWebhook(const std::string& team, const json& body) {
  if (!body.is_object()) return InvalidArgument("the body must be a JSON object");
  ASSIGN_OR_RETURN(auto existing, registry_.ListWebhooks(team));
  if (existing.size() >= kMaxWebhooksPerTeam)
    return ResourceExhausted("a team has at most " + std::to_string(kMaxWebhooksPerTeam) + " webhooks");
  WebhookRecord w;
  w.id = Uuid4();
  w.team = team;
  w.created_at_ms = NowUnixMs();
  RETURN_IF_ERROR(ApplyWebhookFields(body, true, &w));
  RETURN_IF_ERROR(registry_.PutWebhook(w));
  return WebhookJson(w);
}

StatusOr<json> LifecycleEvents::UpdateWebhook(const std::string& team, const std::string& id, const json& body) {
  if (!body.is_object()) return InvalidArgument("the body must be a JSON object");
  ASSIGN_OR_RETURN(WebhookRecord w, registry_.GetWebhook(team, id));
  RETURN_IF_ERROR(ApplyWebhookFields(body, false, &w));
  RETURN_IF_ERROR(registry_.PutWebhook(w));
  return WebhookJson(w);
}

StatusOr<json> LifecycleEvents::GetWebhook(const std::string& team, const std::string& id) {
  ASSIGN_OR_RETURN(WebhookRecord w, registry_.GetWebhook(team, id));
  return WebhookJson(w);
}

StatusOr<json> LifecycleEvents::ListWebhooks(const std::string& team) {
  ASSIGN_OR_RETURN(auto all, registry_.ListWebhooks(team));
  json out = json::array();
  for (const auto& w : all) out.push_back(WebhookJson(w));
  return out;
}

Status LifecycleEvents::DeleteWebhook(const std::string& team, const std::string& id) {
  return registry_.DeleteWebhook(team, id);
}

}  // namespace airlock::server
