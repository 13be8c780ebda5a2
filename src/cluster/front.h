// A cluster's front (serve --role front, docs/multinode.md): the one address
// agents use. It keeps no state of its own: everything it knows is in the
// cluster registry (PostgreSQL) or in a cache the registry invalidates.
//
//   POST /sandboxes            placement (best-of-K, ClusterRegistry::Place; a
//                              create with an Idempotency-Key: the node of
//                              its first call),
//                              then the create goes to that node with
//                              X-Airlock-Reservation (node_call.h); the slot is
//                              freed only when the node refused the create or
//                              never got it, never because the client hung up
//   /sandboxes/{id}/...        routed to the sandbox's node (a lost one: 404
//                              with outcome "lost")
//   data plane                 E2b-Sandbox-Id or "<port>-<id>.<domain>": relayed
//                              to the node, which relays to the guest (streams,
//                              WebSocket and chunked bodies pass through both hops)
//   GET /sandboxes, /v2/sandboxes, /sandboxes/metrics, /snapshots
//                              asked of every live node, merged
//   /templates..., /v2|v3/templates..., /builds...
//                              the template node: the live node first by name
//   /mcp                       one node per API key (rendezvous hash), whose MCP
//                              tools call a front (serve --mcp-api)
//   GET /nodes, POST|DELETE /nodes/{name}/drain   (admin keys) the registry's nodes; drain
//   /console/                  the web console's files
// Keys are checked here and again by the node (both read the registry's keys).
//
// Threads: one io thread for every connection and relay; registry calls
// on a worker pool; one thread LISTENs for sandbox changes (cache
// invalidation) and marks nodes whose heartbeat lapsed.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "cluster/cluster_registry.h"
#include "cluster/cluster_tls.h"
#include "cluster/node_call.h"
#include "gateway/api_keys.h"
#include "gateway/http_conn.h"
#include "gateway/relay.h"

namespace airlock::cluster {

struct FrontConfig {
  std::string listen = "127.0.0.1:3000";
  std::string domain;  // "<port>-<id>.<domain>" hosts (serve --domain); empty: any
  int workers = 4;
  gateway::HttpLimits limits;
  int best_of_k = 3;
  // A node whose heartbeat is older than this gets no new sandbox, and is
  // marked lost (its sandboxes too) at the next sweep.
  std::chrono::milliseconds lapse{5000};
  std::chrono::milliseconds sweep_interval{1000};
  size_t max_json_body = 1 << 20;
  // How long a create waits for its node's answer (the node's admission
  // queue and bring-up), whether or not its client is still there. Shorter
  // than kReservationTtl: a reservation outlives the front's wait.
  std::chrono::milliseconds create_timeout{std::chrono::minutes(2)};
  // Mutual TLS to the nodes (cluster_tls.h); null: plain HTTP, only with
  // serve --insecure-cluster.
  std::shared_ptr<const ClusterTls> tls;
};

class Front {
 public:
  static StatusOr<std::unique_ptr<Front>> Open(FrontConfig config, std::shared_ptr<ClusterRegistry> registry);
  ~Front();
  uint16_t port() const;
  void Run();   // until Stop() or SIGINT/SIGTERM
  void Stop();  // thread-safe

 private:
  using Conn = std::shared_ptr<gateway::HttpConn>;
  Front(FrontConfig config, std::shared_ptr<ClusterRegistry> registry)
      : config_(std::move(config)), registry_(std::move(registry)) {}
  Status Init();
  void Handle(Conn c);
  void Authenticated(Conn c, const ApiKeyRecord& key, const std::string& presented);
  void Route(Conn c, const ApiKeyRecord& key, const std::string& presented);
  void ToSandboxNode(Conn c, const std::string& id, bool data_plane);
  void Create(Conn c, const std::string& team);
  void CreateAnswered(Conn c, const Placement& p, NodeReply reply);
  void ReleaseSlot(const Placement& p, const std::string& why);
  void FanOut(Conn c);
  void ToTemplateNode(Conn c);
  void ToMcpNode(Conn c, const std::string& presented);
  void NodesRoute(Conn c, const ApiKeyRecord& key, const std::vector<std::string>& seg);
  void ServeConsole(Conn c);
  // GET target of every live node (on a worker thread): their answers, and
  // the names of those that did not answer in `missing`.
  std::vector<std::pair<std::string, NodeReply>> AskLiveNodes(
      const std::vector<NodeInfo>& nodes, const std::string& target,
      const std::vector<std::pair<std::string, std::string>>& headers, std::vector<std::string>* missing);
  // The request's GET of every live node, combined into one 200 (any node's
  // refusal is passed on; X-Airlock-Unreachable-Nodes names the silent).
  // `combine` answers the body; it may name more nodes missing (an answer
  // it could not read) and add headers.
  using Combine = std::function<std::string(std::vector<std::pair<std::string, NodeReply>>& answers,
                                            std::vector<std::string>& missing, gateway::HeaderList& headers)>;
  void Gather(Conn c, bool with_credentials, Combine combine, std::string content_type = "application/json");
  void HostRoute(Conn c);         // {"nodes": {name: host view}, "total": summed, "unreachable": [...]}
  void MetricsRoute(Conn c);      // every node's samples with node="<name>"
  void AuditRoute(Conn c);        // every node's records with "node", merged by time
  void AuditVerifyRoute(Conn c);  // every node's verification of its own chain
  // Live and its heartbeat within the lapse: what placement, the template
  // node and MCP may use.
  bool Fresh(const NodeInfo& n) const;
  void Forward(Conn c, const std::string& address, const std::string& node, gateway::ForwardExtras extras = {});
  // Sandbox -> location, cached until the registry announces a change.
  StatusOr<std::optional<SandboxLocation>> Locate(const std::string& id);
  void WatchRegistry();  // its own thread

  FrontConfig config_;
  std::shared_ptr<ClusterRegistry> registry_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::thread_pool> workers_;
  std::unique_ptr<gateway::HttpListener> listener_;
  std::unique_ptr<gateway::ApiKeyTable> keys_;
  std::unique_ptr<boost::asio::steady_timer> key_timer_;
  void ScheduleKeyRefresh();
  std::mutex cache_mu_;
  std::map<std::string, SandboxLocation> cache_;  // guarded by cache_mu_
  bool cache_valid_ = false;                      // guarded by cache_mu_: the LISTEN connection is up
  // Reservations of creates this front waits for (their leases are renewed
  // every sweep: ClusterRegistry::RenewLeases).
  std::mutex in_flight_mu_;
  std::set<int64_t> in_flight_;  // guarded by in_flight_mu_
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

}  // namespace airlock::cluster
