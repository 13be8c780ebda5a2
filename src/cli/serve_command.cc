// `airlock serve` and `airlock apikey`.
#include <csignal>
#include <algorithm>
#include <functional>
#include <boost/program_options.hpp>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli/commands.h"
#include "common/log.h"
#include "core/registry.h"
#include "image/oci_base.h"
#include "runtime/registry.h"
#include "server/server.h"
#include "cluster/cluster_registry.h"
#include "control/sandbox_controller.h"
#include "cluster/cluster_tls.h"
#include "cluster/front.h"
#include "cluster/membership.h"
#include "cluster/artefacts.h"
#include "cluster/template_replica.h"
#include "cluster/secret_replica.h"
#include "secrets/sealed.h"
#include "secrets/secret_store.h"
#include "templates/template_store.h"
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <mutex>
#include "http/client.h"
#include "image/image.h"
#include <unistd.h>
#include <thread>

namespace po = boost::program_options;

namespace airlock::cli {

static_assert(control::SandboxController::kForkChild == cluster::kWithinCapacity,
              "a fork child's record asks the cluster registry for a free slot");

namespace {

struct ClusterFlags {
  std::string role, database, node_name, advertise, node_listen;
  int capacity = 0, best_of_k = 3, lapse_ms = 5000;
  cluster::ClusterTlsFiles tls;  // --cluster-ca, --cluster-cert, --cluster-key
  bool insecure = false;         // --insecure-cluster
  std::string secrets_key;       // --cluster-secrets-key
};

bool WildcardOrLoopback(const std::string& address) {
  auto hp = http::ParseHostPort(address);
  if (!hp.ok()) return true;
  const std::string& h = hp->first;
  return h.empty() || h == "0.0.0.0" || h == "::" || h.rfind("127.", 0) == 0 || h == "::1" || h == "localhost";
}

// serve --role node|front|both (docs/multinode.md).
int ServeCluster(server::ServerConfig cfg, const ClusterFlags& cl) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "airlock serve: %s\n", m.c_str());
    return 2;
  };
  if (cl.role != "node" && cl.role != "front" && cl.role != "both")
    return fail("--role must be single, node, front or both");
  if (cl.database.empty()) return fail("--role " + cl.role + " needs --database postgres://...");
  if (cl.best_of_k < 1 || cl.lapse_ms < 1000) return fail("--best-of >= 1, --heartbeat-lapse >= 1000");
  const bool node_role = cl.role != "front", front_role = cl.role != "node";
  // Fronts and nodes authenticate each other (cluster/cluster_tls.h), unless
  // the operator says in so many words that the network between them is
  // trusted.
  std::shared_ptr<const cluster::ClusterTls> tls;
  if (cl.insecure && cl.tls.any()) return fail("--insecure-cluster and --cluster-ca/--cluster-cert/--cluster-key exclude each other");
  if (!cl.insecure) {
    if (!cl.tls.any()) {
      return fail("--role " + cl.role +
                  " needs the cluster's mutual TLS: --cluster-ca, --cluster-cert and --cluster-key (a dev set: airlock "
                  "cluster certs; docs/multinode.md), or --insecure-cluster for plain HTTP between fronts and nodes");
    }
    auto loaded = cluster::ClusterTls::Load(cl.tls, front_role, node_role);
    if (!loaded.ok()) return fail(loaded.status().message());
    tls = std::move(*loaded);
  }
  if (!cfg.console_listen.empty())
    return fail("--console-listen is for a single daemon: a cluster's console is on its fronts (/console/)");
  std::string secrets_key;
  if (!cl.secrets_key.empty()) {
    if (!node_role) return fail("--cluster-secrets-key is a node's: a front never holds the secrets' key");
    auto key = secrets::LoadKeyFile(cl.secrets_key);
    if (!key.ok()) return fail("--cluster-secrets-key: " + key.status().message());
    secrets_key = std::move(*key);
  } else if (node_role) {
    LOG_WARN("airlock serve: no --cluster-secrets-key: this node's secrets stay its own, and secrets made on "
             "other nodes are not usable here (docs/multinode.md \"Secrets on every node\")");
  }
  if (node_role && !cfg.tls_listen.empty())
    return fail("--tls-listen is for a single daemon: a node's --listen serves the cluster's TLS to fronts");
  std::string node_name = cl.node_name;
  if (tls) {
    if (node_name.empty()) node_name = tls->identity().name;
    if (node_role && node_name != tls->identity().name)
      return fail("--node-name " + node_name + ", but --cluster-cert is " + tls->identity().name + "'s");
  }
  server::ServerConfig ncfg = cfg;
  if (cl.role == "both") {
    if (cl.node_listen.empty()) return fail("--role both needs --node-listen ip:port for the node's own API");
    ncfg.listen = cl.node_listen;
    // The MCP tools act through this process's own front.
    if (ncfg.mcp_api.empty()) ncfg.mcp_api = cfg.listen;
  }
  std::string advertise = cl.advertise;
  if (node_role && advertise.empty()) {
    if (WildcardOrLoopback(ncfg.listen)) return fail("--advertise ip:port is needed when the node listens on " + ncfg.listen);
    advertise = ncfg.listen;
  }
  // The node's custom templates shared with the cluster (template_replica.h):
  // made once the node's template store is open; its artefact server serves
  // the images it holds to other nodes (behind the TLS listener).
  struct ReplicaHold {
    std::mutex mu;
    std::shared_ptr<cluster::TemplateReplica> replica;
    std::shared_ptr<cluster::TemplateReplica> get() {
      std::lock_guard<std::mutex> l(mu);
      return replica;
    }
  };
  auto replica_hold = std::make_shared<ReplicaHold>();
  struct SecretHold {
    std::mutex mu;
    std::shared_ptr<cluster::SecretReplica> replica;
  };
  auto secret_hold = std::make_shared<SecretHold>();
  boost::asio::io_context artefact_io;
  auto artefact_work = boost::asio::make_work_guard(artefact_io);
  std::unique_ptr<cluster::ArtefactServer> artefacts;
  std::thread artefact_thread;
  struct JoinArtefacts {
    boost::asio::io_context& io;
    std::thread& t;
    ~JoinArtefacts() {
      io.stop();
      if (t.joinable()) t.join();
    }
  } join_artefacts{artefact_io, artefact_thread};
  std::shared_ptr<cluster::ClusterRegistry> registry;
  if (node_role && tls) {
    // Fronts reach the node's API only through its TLS listener on --listen;
    // the API itself listens on loopback, behind it. Other nodes reach only
    // the artefact server, on loopback behind the same listener.
    artefacts = std::make_unique<cluster::ArtefactServer>(
        artefact_io,
        [replica_hold](const std::string& digest) -> StatusOr<std::string> {
          auto r = replica_hold->get();
          if (!r) return Unavailable("the node is starting");
          return r->PathOf(digest);
        },
        [&registry, node_name](const std::string& token, const std::string& digest) -> Status {
          if (!registry) return Unavailable("the node is starting");
          return registry->CheckArtefactGrant(node_name, token, digest);
        });
    if (Status st = artefacts->Start("127.0.0.1:0"); !st.ok()) return fail("artefact server: " + st.message());
    artefact_thread = std::thread([&artefact_io] { artefact_io.run(); });
    ncfg.tls_listen = ncfg.listen;
    ncfg.tls_cert = cl.tls.cert;
    ncfg.tls_key = cl.tls.key;
    ncfg.tls_client_auth = tls->FromFrontsAndPeers(artefacts->port());
    ncfg.listen = "127.0.0.1:0";
  }
  if (node_role) {
    auto hp = http::ParseHostPort(advertise);
    boost::system::error_code ec;
    if (!hp.ok() || hp->second == 0 || (boost::asio::ip::make_address(hp->first, ec), ec))
      return fail("--advertise must be an ip:port (fronts connect to it without DNS): " + advertise);
  }
  auto opened = cluster::ClusterRegistry::Open(cl.database, 8);
  if (!opened.ok()) {
    std::fprintf(stderr, "airlock serve: cluster registry: %s\n", opened.status().message().c_str());
    return 1;
  }
  registry = std::move(*opened);
  std::unique_ptr<server::Server> node;
  std::unique_ptr<cluster::NodeMembership> member;
  auto member_ptr = std::make_shared<std::atomic<cluster::NodeMembership*>>(nullptr);
  if (node_role) {
    cluster::ClusterRegistry* reg = registry.get();
    if (node_name.empty()) {
      char host[256] = {0};
      ::gethostname(host, sizeof host - 1);
      node_name = host;
    }
    ncfg.write_cli_key = false;  // keys live in the cluster registry (airlock apikey --db postgres://...)
    ncfg.cluster.keys = server::ApiKeySource{[reg] { return reg->KeyVersion(); }, [reg] { return reg->ApiKeysByHash(); }};
    ncfg.cluster.claim_reservation = [reg, node_name](const std::string& token, const std::string& digest) {
      return reg->ClaimReservation(node_name, token, digest);
    };
    ncfg.cluster.release_reservation = [reg, node_name](int64_t reservation) {
      if (Status st = reg->Release(node_name, reservation); !st.ok())
        LOG_WARN("cluster: releasing reservation {} of a failed create: {} (the heartbeat drops it after the TTL)",
                 reservation, st.message());
    };
    ncfg.cluster.sandbox_added = [member_ptr](const std::string& id, int64_t reservation) -> Status {
      auto* m = member_ptr->load();
      return m ? m->SandboxAdded(id, reservation) : OkStatus();  // before registration: the sync records it
    };
    ncfg.cluster.sandbox_removed = [member_ptr](const std::string& id) {
      if (auto* m = member_ptr->load()) m->SandboxRemoved(id);
    };
    if (!secrets_key.empty()) {
      ncfg.cluster.secrets = [secret_hold, reg, node_name, secrets_key](control::SecretsService& svc) {
        cluster::SecretReplicaConfig sc;
        sc.node = node_name;
        sc.key = secrets_key;
        auto replica = std::make_shared<cluster::SecretReplica>(
            *reg, [&svc]() { return svc.OpenStore(); }, std::move(sc),
            [&svc](const std::string& name, const std::string& value) { svc.Redact(name, value); });
        std::weak_ptr<cluster::SecretReplica> weak = replica;
        {
          std::lock_guard<std::mutex> l(secret_hold->mu);
          secret_hold->replica = replica;
        }
        control::SecretsService::ClusterSource src;
        src.store_opened = [weak](secrets::SecretStore& store) {
          store.SetOnChange([weak](const std::string& name) {
            if (auto r = weak.lock()) r->Changed(name);
          });
          if (auto r = weak.lock()) r->Changed("");  // what this node has (set while it was down, or by the CLI)
        };
        src.refresh = [weak](const std::vector<std::string>& names) -> Status {
          auto r = weak.lock();
          return r ? r->Refresh(names) : OkStatus();
        };
        return src;
      };
    }
    ncfg.cluster.template_image_installed = [replica_hold](const std::string& image) {
      if (auto r = replica_hold->get()) r->Warm(image);
    };
    ncfg.cluster.templates = [replica_hold, reg, node_name, tls, &ncfg,
                              lapse = std::chrono::milliseconds(cl.lapse_ms)](templates::TemplateStore& store,
                                                                                   const std::string& owner) {
      cluster::TemplateReplicaConfig rc;
      rc.node = node_name;
      rc.state_dir = ncfg.manager.state_dir;
      rc.owner = owner;
      rc.lapse = lapse;
      rc.tls = tls;
      auto replica = std::make_shared<cluster::TemplateReplica>(*reg, store, std::move(rc));
      std::weak_ptr<cluster::TemplateReplica> weak = replica;
      store.SetOnChange([weak](const std::string& id) {
        if (auto r = weak.lock()) r->Changed(id);
      });
      {
        std::lock_guard<std::mutex> l(replica_hold->mu);
        replica_hold->replica = replica;
      }
      control::TemplateCatalog::ClusterSource src;
      src.refresh = [weak](const std::string& ref) -> Status {
        auto r = weak.lock();
        return r ? r->Refresh(ref) : OkStatus();
      };
      src.ensure_image = [weak](const std::string& id, const std::string& image) -> Status {
        auto r = weak.lock();
        return r ? r->EnsureImage(id, image) : Unavailable("the node is stopping");
      };
      return src;
    };
    auto srv = server::Server::Open(ncfg);
    if (!srv.ok()) {
      std::fprintf(stderr, "airlock serve: %s\n", srv.status().message().c_str());
      return 1;
    }
    node = std::move(*srv);
    if (auto r = replica_hold->get()) {
      server::Server* sp = node.get();
      r->SetOnFetch([sp](const std::string& outcome, int64_t bytes) { sp->metrics().ClusterArtefactFetched(outcome, bytes); });
      r->Changed("");  // publish what this node's store holds (PublishAll, on the replica's thread)
    }
    cluster::MembershipConfig mc;
    mc.node.name = node_name;
    mc.node.address = advertise;
    int capacity = cl.capacity;
    if (capacity <= 0) {
      long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
      int64_t mib = pages > 0 && page > 0 ? (int64_t{pages} * page) >> 20 : 0;
      capacity = static_cast<int>(std::max<int64_t>(1, mib / std::max(1, ncfg.default_memory_mib)));
    }
    mc.node.capacity = capacity;
    mc.node.version = server::kAirlockVersion;
    server::Server* s = node.get();
    mc.sandboxes = [s] {
      std::vector<std::string> ids;
      for (const auto& sb : s->manager().VisibleList()) ids.push_back(sb->id());
      return ids;
    };
    const std::string state_dir = ncfg.manager.state_dir;
    mc.templates = [state_dir, s] {
      std::vector<std::string> names;
      for (const auto& t : image::KnownTemplates()) {
        if (image::FindImage(state_dir, t).ok()) names.push_back(t);
      }
      for (auto& t : s->CustomTemplateNames()) names.push_back(std::move(t));
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      return names;
    };
    mc.on_beat = [s](const cluster::Beat& b) { s->metrics().ClusterReconciled(b.reserved_was, b.reserved, b.dropped); };
    auto m = cluster::NodeMembership::Start(registry.get(), std::move(mc));
    if (!m.ok()) {
      std::fprintf(stderr, "airlock serve: cluster registration: %s\n", m.status().message().c_str());
      return 1;
    }
    member = std::move(*m);
    member_ptr->store(member.get());
    std::fprintf(stderr, "airlock serve: node %s on %s%s, advertised as %s (capacity %d)\n", member->name().c_str(),
                 (tls ? ncfg.tls_listen : ncfg.listen).c_str(), tls ? " (cluster TLS)" : " (plain HTTP: --insecure-cluster)",
                 advertise.c_str(), capacity);
  }
  std::unique_ptr<cluster::Front> front;
  if (front_role) {
    cluster::FrontConfig fc;
    fc.listen = cfg.listen;
    fc.domain = cfg.domain;
    fc.workers = cfg.workers;
    fc.limits = cfg.limits;
    fc.best_of_k = cl.best_of_k;
    fc.lapse = std::chrono::milliseconds(cl.lapse_ms);
    fc.tls = tls;
    auto f = cluster::Front::Open(fc, registry);
    if (!f.ok()) {
      std::fprintf(stderr, "airlock serve: front: %s\n", f.status().message().c_str());
      return 1;
    }
    front = std::move(*f);
    std::fprintf(stderr, "airlock serve: front listening on port %u\n", front->port());
  }
  if (node && front) {
    std::thread node_thread([&] { node->Run(); });
    front->Run();
    node->Stop();
    node_thread.join();
  } else if (node) {
    node->Run();
  } else {
    front->Run();
  }
  member_ptr->store(nullptr);
  if (member) member->Leave();
  member.reset();
  front.reset();
  {
    std::lock_guard<std::mutex> l(replica_hold->mu);
    replica_hold->replica.reset();  // its thread ends before the template store goes with the node
  }
  {
    std::lock_guard<std::mutex> l(secret_hold->mu);
    secret_hold->replica.reset();  // and before the secrets service does
  }
  node.reset();
  return 0;
}

}  // namespace

int CmdServe(const std::string& state_dir, const std::string& agent_binary, const std::vector<std::string>& args) {
  // A log write to a closed stdout or stderr (its reader gone) is an EPIPE,
  // never a silent death that would leave the sandboxes' VMMs behind.
  ::signal(SIGPIPE, SIG_IGN);
  server::ServerConfig cfg;
  bool stream_templates = false;
  if (const char* env = std::getenv("AIRLOCK_LISTEN"); env && *env) cfg.listen = env;
  cfg.manager.state_dir = state_dir;
  cfg.manager.agent_binary = agent_binary;
  int header_timeout_s = 30, body_timeout_s = 30;
  bool no_vmm_jail = false;
  std::string runtime_alias;  // --runtime: the older name of --default-runtime
  po::options_description desc("airlock serve [options]");
  desc.add_options()("help,h", "show this help")("listen", po::value(&cfg.listen)->default_value(cfg.listen),
                                                 "ip:port to serve on (env AIRLOCK_LISTEN)")(
      "console-listen", po::value(&cfg.console_listen),
      "ip:port of the web console, its own origin apart from --listen's (default: no console; docs/console.md)")(
      "tls-listen", po::value(&cfg.tls_listen),
      "ip:port of a TLS listener in front of --listen (HTTP/1.1; needs --tls-cert and --tls-key)")(
      "tls-cert", po::value(&cfg.tls_cert), "PEM certificate chain for --tls-listen (e.g. *.DOMAIN and api.DOMAIN)")(
      "tls-key", po::value(&cfg.tls_key), "PEM private key of --tls-cert")(
      "db", po::value(&cfg.db_path), "registry database (default STATE_DIR/airlock.db; cli.key is written beside it)")(
      "default-timeout", po::value(&cfg.default_timeout_s)->default_value(300),
      "sandbox TTL when create gives none (s)")("max-timeout", po::value(&cfg.max_timeout_s)->default_value(86400),
                                                "largest TTL a client may ask for (s)")(
      "workers", po::value(&cfg.workers)->default_value(4), "threads for blocking work (create, destroy)")(
      "cpus", po::value(&cfg.default_vcpus)->default_value(1), "vCPUs per sandbox")(
      "memory", po::value(&cfg.default_memory_mib)->default_value(512), "memory per sandbox (MiB)")(
      "header-timeout", po::value(&header_timeout_s)->default_value(30), "seconds to receive a request header")(
      "body-timeout", po::value(&body_timeout_s)->default_value(30), "seconds a request body may stall")(
      "domain", po::value(&cfg.domain),
      "route Host \"<port>-<sandbox id>.<domain>\" to that guest port (default: no Host routing, "
      "E2b-Sandbox-Id only)")(
      "dns-upstream", po::value(&cfg.manager.upstream_dns),
      "resolver airlock asks for allowed names, ip[:port] (default: the host's /etc/resolv.conf)")(
      "egress-bandwidth", po::value(&cfg.manager.egress_limits.bytes_per_second)->default_value(0),
      "per-sandbox proxied bandwidth, bytes/s (0: unlimited)")(
      "egress-connections", po::value(&cfg.manager.egress_limits.max_connections)->default_value(256),
      "per-sandbox concurrent proxied connections")(
      "dns-tcp-connections", po::value(&cfg.manager.egress_limits.max_dns_tcp_connections)->default_value(16),
      "per-sandbox concurrent resolver (DNS over TCP) connections")(
      "egress-upstream-ca", po::value(&cfg.manager.egress_upstream_ca_file),
      "PEM bundle trusted (besides the system store) for upstream servers of intercepted HTTPS "
      "(hosts with brokered secrets or network.rules)")(
      "egress-proxy-allow", po::value(&cfg.manager.egress_proxy_allow)->composing(),
      "IPv4 CIDR (repeatable) where a sandbox's network.egressProxy may be besides public addresses that are "
      "not the host's: the operator's own proxies (never the sandbox pool or 169.254/16)")(
      "no-template-snapshot", po::bool_switch(&cfg.no_template_snapshot),
      "always cold boot (default: snapshot each template once, create sandboxes by restoring it)")(
      "template-ram-in-stream", po::bool_switch(&stream_templates),
      "FOR COMPARISONS: template snapshots keep the guest RAM in the migration stream, loaded into private memory "
      "by every create (default: a file every sandbox maps copy-on-write)")(
      "pool", po::value(&cfg.pool_size)->default_value(cfg.pool_size),
      "warm pool: sandboxes restored ahead of demand per template shape, handed out by creates "
      "(-1: sized to the host, 1 per 8 GiB of memory, at most 4; 0: off)")(
      "no-vmm-jail", po::bool_switch(&no_vmm_jail),
      "DEBUGGING ONLY: run QEMU as root in the host mount namespace (default: each VMM as its own uid, no "
      "capabilities, in a mount namespace holding only its files)")(
      "vmm-uid-base", po::value(&cfg.manager.vmm_jail.uid_base)->default_value(cfg.manager.vmm_jail.uid_base),
      "first uid of the VMM uid range (host-wide leases under /run/airlock/vmm-uids)")(
      "vmm-uid-count", po::value(&cfg.manager.vmm_jail.uid_count)->default_value(cfg.manager.vmm_jail.uid_count),
      "size of the VMM uid range")(
      "default-runtime", po::value(&cfg.manager.runtime)->default_value(cfg.manager.runtime),
      ("what runs a sandbox whose create names no runtime (body \"runtime\", or a template such as base-gvisor): " +
       AvailableRuntimesText())
          .c_str())("runtime", po::value(&runtime_alias), "the same as --default-runtime (its older name)")(
      "kill-on-exit", po::bool_switch(&cfg.kill_on_exit),
      "destroy every sandbox on SIGINT/SIGTERM (default: leave them for the next daemon to adopt)");
  // Audit, export and limits (docs/audit.md, docs/limits.md).
  int queue_timeout_s = 20;
  auto& ad = cfg.admission;
  bool no_memory_admission = false;
  int memory_sample_ms = static_cast<int>(cfg.memory_sample_interval.count());
  int pause_min_idle_s = static_cast<int>(cfg.pressure.min_idle_ms / 1000);
  std::vector<std::string> team_max_lifetime;
  desc.add_options()("audit-dir", po::value(&cfg.audit_dir),
                     "audit trail directory (default: beside the database, audit/)")(
      "otlp-endpoint", po::value(&cfg.otlp.endpoint),
      "export audit records as OTLP/HTTP JSON logs, e.g. http://127.0.0.1:4318/v1/logs")(
      "max-cpus", po::value(&cfg.max_vcpus)->default_value(cfg.max_vcpus), "largest cpuCount a create may ask for")(
      "max-memory", po::value(&cfg.max_memory_mib)->default_value(cfg.max_memory_mib),
      "largest memoryMB a create may ask for")("max-disk",
                                               po::value(&cfg.max_disk_mib)->default_value(cfg.max_disk_mib),
                                               "largest diskSizeMB a create may ask for")(
      "max-lifetime", po::value(&cfg.lifetime.default_s)->default_value(0),
      "kill sandboxes this many seconds after create, whatever their TTL or its extensions (0: off)")(
      "team-max-lifetime", po::value(&team_max_lifetime)->composing(),
      "TEAM=SECONDS (repeatable): --max-lifetime for the sandboxes of that team (the team of the API key that "
      "created them; `airlock apikey ls`), shorter or longer than the default; 0: no cap for that team")(
      "max-sandboxes", po::value(&ad.max_sandboxes)->default_value(ad.max_sandboxes),
      "live sandboxes, all keys (0: no cap)")(
      "max-sandboxes-per-key", po::value(&ad.max_sandboxes_per_key)->default_value(ad.max_sandboxes_per_key),
      "live sandboxes per API key (0: no cap)")("creates-per-second",
                                                po::value(&ad.creates_per_second)->default_value(ad.creates_per_second),
                                                "global create rate (0: no cap)")(
      "create-burst", po::value(&ad.create_burst)->default_value(ad.create_burst), "global create burst")(
      "creates-per-second-per-key",
      po::value(&ad.creates_per_second_per_key)->default_value(ad.creates_per_second_per_key),
      "create rate per API key (0: no cap)")(
      "create-burst-per-key", po::value(&ad.create_burst_per_key)->default_value(ad.create_burst_per_key),
      "create burst per API key")("max-creates-in-flight",
                                  po::value(&ad.max_creates_in_flight)->default_value(ad.max_creates_in_flight),
                                  "sandboxes booting at once (0: no cap)")(
      "queue-timeout", po::value(&queue_timeout_s)->default_value(queue_timeout_s),
      "seconds a create may wait for a slot before 429 + Retry-After")(
      "memory-overcommit-ratio", po::value(&ad.memory_overcommit_ratio)->default_value(ad.memory_overcommit_ratio),
      "nominal cap: refuse creates once the memoryMB of all sandboxes exceeds this x host memory (0: off; the "
      "held-memory rule below is the default)")("host-memory",
                                                po::value(&ad.host_memory_mib)->default_value(ad.host_memory_mib),
                                                "MiB of host memory admission budgets against (0: MemTotal)")(
      "memory-host-reserve", po::value(&ad.memory_host_reserve_mib)->default_value(ad.memory_host_reserve_mib),
      "MiB of host memory never promised to sandboxes: a create is refused (503) when what sandboxes hold + their "
      "growth reserve + its memoryMB exceeds host memory minus this")(
      "memory-growth-reserve", po::value(&ad.memory_growth_reserve)->default_value(ad.memory_growth_reserve),
      "a measured sandbox counts at least this fraction of its memoryMB (room to grow); an unmeasured one all of it")(
      "no-memory-admission", po::bool_switch(&no_memory_admission),
      "do not admit by what sandboxes hold (the pressure refusals of --memory-pressure and --memory-overcommit-ratio, "
      "if set, stay)")("memory-pressure",
                       po::value(&cfg.pressure.refuse_below_mib)->default_value(cfg.pressure.refuse_below_mib),
                       "MiB of MemAvailable below which the host is under memory pressure: creates are refused and the "
                       "warm pool shrinks (until 256 MiB above it)")(
      "pause-idle-under-pressure", po::bool_switch(&cfg.pressure.pause_idle),
      "under memory pressure with MemAvailable below --pressure-pause-below and no parked sandbox left, pause the "
      "longest-idle sandbox (memory kept; it resumes on connect), one at a time")(
      "pressure-pause-below", po::value(&cfg.pressure.pause_below_mib)->default_value(cfg.pressure.pause_below_mib),
      "MiB of MemAvailable below which --pause-idle-under-pressure pauses")(
      "pressure-pause-min-idle", po::value(&pause_min_idle_s)->default_value(pause_min_idle_s),
      "seconds without a data-plane request or connect before --pause-idle-under-pressure may pause a sandbox")(
      "memory-sample-interval", po::value(&memory_sample_ms)->default_value(memory_sample_ms),
      "ms between readings of MemAvailable and every VMM's smaps_rollup (0: off: sandboxes count their memoryMB, no "
      "pressure policy)")(
      "max-exposed-ports",
      po::value(&cfg.manager.port_exposure.max_ports)->default_value(cfg.manager.port_exposure.max_ports),
      "distinct guest ports (besides the agent's) the data plane may reach, per sandbox")(
      "exposed-ports-per-second",
      po::value(&cfg.manager.port_exposure.new_per_second)->default_value(cfg.manager.port_exposure.new_per_second),
      "new guest ports exposed per second and sandbox, after a burst of 16")(
      "disk-reserve", po::value(&cfg.disk_reserve_mib)->default_value(cfg.disk_reserve_mib),
      "MiB of free disk kept for the registry and audit trail; creates beyond it get 507")(
      "disk-per-create", po::value(&cfg.disk_per_create_mib)->default_value(cfg.disk_per_create_mib),
      "MiB of free disk a create needs besides the reserve")(
      "webhook-allow-private", po::bool_switch(&cfg.webhook_allow_private),
      "lifecycle webhooks may be delivered to private, loopback and link-local addresses (off: public IPv4 only)")(
      "webhook-retry-delay", po::value(&cfg.webhook_retry_delay_ms)->default_value(cfg.webhook_retry_delay_ms),
      "milliseconds between a failed webhook delivery and its retry (3 retries)");
  // Custom template builds (docs/templates.md).
  desc.add_options()("build-allow", po::value(&cfg.build_allow)->multitoken(),
                     "what template build sandboxes may reach (domains, *.domain, CIDR[:port]; repeatable; default: "
                     "the package mirrors of this host's apt sources and npm configuration)")(
      "max-builds", po::value(&cfg.max_builds)->default_value(cfg.max_builds),
      "template builds running at once (more wait, status \"waiting\")")(
      "build-timeout", po::value(&cfg.build_timeout_s)->default_value(cfg.build_timeout_s),
      "seconds one template build may run")(
      "max-upload", po::value(&cfg.max_upload_mib)->default_value(cfg.max_upload_mib),
      "largest COPY archive a template build may upload (MiB)")(
      "upload-ttl", po::value(&cfg.upload_ttl_s)->default_value(cfg.upload_ttl_s),
      "seconds an uploaded COPY archive is kept after its last upload or files link, unless a build in flight "
      "uses it (0: forever)")(
      "team-disk-budget", po::value(&cfg.team_disk_budget_mib)->default_value(cfg.team_disk_budget_mib),
      "MiB of disk one team may hold: uploads, template layers and images, checkpoints, paused and named "
      "snapshots; writing more is 507 (-1: a quarter of the state dir's filesystem; 0: off)")(
      "idle-timeout", po::value(&cfg.idle_timeout_s)->default_value(cfg.idle_timeout_s),
      "pause a sandbox (memory kept) after this many seconds without a data-plane request or open stream, "
      "unless its create says otherwise (lifecycle.idleTimeout); its next request wakes it (0: never)")(
      "volume-size-mib", po::value(&cfg.volume_size_mib)->default_value(cfg.volume_size_mib),
      "size of a volume whose create names no sizeMB (MiB; its filesystem's size, so its limit)")(
      "team-volume-budget-mib", po::value(&cfg.team_volume_budget_mib)->default_value(cfg.team_volume_budget_mib),
      "the sum of the sizes of one team's volumes; a create over it is 507 (MiB; -1: a quarter of the state "
      "dir's filesystem; 0: no budget)")(
      "max-volumes-per-team", po::value(&cfg.max_volumes_per_team)->default_value(cfg.max_volumes_per_team),
      "how many volumes one team may have; one more is 507 (0: no cap)")(
      "max-image-unpack", po::value(&cfg.max_image_unpack_mib)->default_value(cfg.max_image_unpack_mib),
      "the most a fromImage base's layers may expand to on this host (MiB), checked before unpacking")(
      "public-url", po::value(&cfg.public_url),
      "base URL clients reach this server at, for upload links (default: the Host they used)")(
      "insecure-registry", po::value(&cfg.insecure_registries)->multitoken(),
      "HOST[:PORT] of a registry fromImage may pull from over plain HTTP or without TLS verification "
      "(repeatable)")(
      "registry-allow", po::value(&cfg.registry_allow)->multitoken(),
      "HOST[:PORT] (no port: any) of a registry fromImage may pull from whatever it resolves to, loopback and "
      "private addresses included (repeatable; any other registry only from public addresses)");
  // Many nodes (docs/multinode.md).
  ClusterFlags cl;
  desc.add_options()("role", po::value(&cl.role)->default_value("single"),
                     "single (one machine, SQLite only), node (runs sandboxes for a cluster), front (the cluster's "
                     "stateless API: placement and routing), or both (a front on --listen, a node on --node-listen)")(
      "database", po::value(&cl.database), "the cluster registry: a PostgreSQL URL (postgres://...); roles node, front, both")(
      "node-name", po::value(&cl.node_name), "this node's name in the cluster (default: the host name)")(
      "advertise", po::value(&cl.advertise),
      "ip:port fronts reach this node's API at (default: --listen, unless that is a wildcard or loopback address)")(
      "node-listen", po::value(&cl.node_listen), "role both: ip:port of the node's own API")(
      "capacity", po::value(&cl.capacity)->default_value(0),
      "sandboxes (running or paused) this node takes at most (0: host memory / --memory)")(
      "mcp-api", po::value(&cfg.mcp_api), "host:port of the API the MCP tools call (a cluster node: a front)")(
      "mcp-threads", po::value(&cfg.mcp_threads)->default_value(cfg.mcp_threads),
      "threads that run MCP tool calls (at least 3)")(
      "mcp-calls-per-team", po::value(&cfg.mcp_calls_per_team)->default_value(cfg.mcp_calls_per_team),
      "MCP calls one team may hold at once, running or waiting; more get 429 (0: the most below half of "
      "--mcp-threads; never half or more)")(
      "best-of", po::value(&cl.best_of_k)->default_value(3), "front: candidates sampled per placement (best-of-K)")(
      "heartbeat-lapse", po::value(&cl.lapse_ms)->default_value(5000),
      "front: ms without a node heartbeat before it gets no new sandbox and is marked lost")(
      "cluster-ca", po::value(&cl.tls.ca),
      "PEM: the cluster CA, the only one fronts and nodes trust each other's certificates from")(
      "cluster-cert", po::value(&cl.tls.cert),
      "PEM: this member's certificate, naming its roles and name (airlock cluster certs; the node name comes from "
      "it)")("cluster-key", po::value(&cl.tls.key), "PEM: the private key of --cluster-cert")(
      "insecure-cluster", po::bool_switch(&cl.insecure),
      "plain HTTP between fronts and nodes, no certificates (a network nobody else can reach or read)")(
      "cluster-secrets-key", po::value(&cl.secrets_key),
      "node: the file of the key (32 bytes, mode 0600) every node seals and opens the cluster's secrets with "
      "(airlock cluster certs writes secrets.key); without it a node's secrets stay its own");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
    cfg.build_allow_set = vm.count("build-allow") > 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "airlock serve: %s\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  for (auto* list : {&cfg.insecure_registries, &cfg.registry_allow}) {
    for (auto& r : *list) {
      std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return std::tolower(c); });
      if (Status st = image::ValidateRegistryHost(r); !st.ok()) {
        std::fprintf(stderr, "airlock serve: --%s: %s\n",
                     list == &cfg.registry_allow ? "registry-allow" : "insecure-registry", st.message().c_str());
        return 2;
      }
    }
  }
  cfg.manager.vmm_jail.enabled = !no_vmm_jail;
  cfg.manager.template_shared_memory = !stream_templates;
  if (vm.count("runtime")) {
    if (!vm["default-runtime"].defaulted() && runtime_alias != cfg.manager.runtime) {
      std::fprintf(stderr, "airlock serve: --runtime %s and --default-runtime %s disagree (they are one flag)\n",
                   runtime_alias.c_str(), cfg.manager.runtime.c_str());
      return 2;
    }
    cfg.manager.runtime = runtime_alias;
  }
  if (Status st = CheckRuntimeName(cfg.manager.runtime); !st.ok()) {
    std::fprintf(stderr, "airlock serve: --default-runtime: %s\n", st.message().c_str());
    return 2;
  }
  if (cfg.max_timeout_s < 1 || cfg.default_timeout_s < 1 || header_timeout_s < 1 || body_timeout_s < 1) {
    std::fprintf(stderr, "airlock serve: timeouts must be positive\n");
    return 2;
  }
  cfg.default_timeout_s = std::min(cfg.default_timeout_s, cfg.max_timeout_s);
  if (cfg.upload_ttl_s < 0 || cfg.team_disk_budget_mib < -1 || cfg.idle_timeout_s < 0) {
    std::fprintf(stderr, "airlock serve: --upload-ttl must be >= 0 and --team-disk-budget >= -1\n");
    return 2;
  }
  if (cfg.lifetime.default_s < 0) {
    std::fprintf(stderr, "airlock serve: --max-lifetime must be >= 0\n");
    return 2;
  }
  if (auto caps = server::ParseTeamMaxLifetimes(team_max_lifetime); caps.ok()) {
    cfg.lifetime.per_team = std::move(*caps);
  } else {
    std::fprintf(stderr, "airlock serve: %s\n", caps.status().message().c_str());
    return 2;
  }
  if (cfg.disk_reserve_mib < 0 || cfg.disk_per_create_mib < 0) {
    std::fprintf(stderr, "airlock serve: --disk-reserve and --disk-per-create must be >= 0\n");
    return 2;
  }
  if (queue_timeout_s < 0 || cfg.max_vcpus < 1 || cfg.max_memory_mib < 128 || ad.memory_overcommit_ratio < 0 ||
      cfg.manager.port_exposure.max_ports < 0 || cfg.manager.port_exposure.max_ports > 4096 ||
      cfg.manager.port_exposure.new_per_second <= 0) {
    std::fprintf(stderr,
                 "airlock serve: --queue-timeout >= 0, --max-cpus >= 1, --max-memory >= 128, ratio >= 0, "
                 "0 <= --max-exposed-ports <= 4096, --exposed-ports-per-second > 0\n");
    return 2;
  }
  if (ad.host_memory_mib < 0 || ad.memory_host_reserve_mib < 0 || ad.memory_growth_reserve < 0 ||
      ad.memory_growth_reserve > 1 || cfg.pressure.refuse_below_mib < 0 || cfg.pressure.pause_below_mib < 0 ||
      memory_sample_ms < 0 || pause_min_idle_s < 0) {
    std::fprintf(stderr,
                 "airlock serve: --host-memory, --memory-host-reserve, --memory-pressure, "
                 "--pressure-pause-below, --memory-sample-interval, --pressure-pause-min-idle >= 0; 0 <= "
                 "--memory-growth-reserve <= 1\n");
    return 2;
  }
  ad.held_memory = !no_memory_admission;
  cfg.memory_sample_interval = std::chrono::milliseconds(memory_sample_ms);
  cfg.pressure.min_idle_ms = int64_t{pause_min_idle_s} * 1000;
  ad.queue_timeout = std::chrono::seconds(queue_timeout_s);
  cfg.default_vcpus = std::min(cfg.default_vcpus, cfg.max_vcpus);
  cfg.default_memory_mib = std::min(cfg.default_memory_mib, cfg.max_memory_mib);
  cfg.limits.header_timeout = std::chrono::seconds(header_timeout_s);
  cfg.limits.body_idle_timeout = std::chrono::seconds(body_timeout_s);
  if (cl.role != "single") return ServeCluster(cfg, cl);
  auto srv = server::Server::Open(cfg);
  if (!srv.ok()) {
    std::fprintf(stderr, "airlock serve: %s\n", srv.status().message().c_str());
    return 1;
  }
  std::fprintf(stderr, "airlock serve: listening on port %u (state dir %s)\n", (*srv)->port(), state_dir.c_str());
  (*srv)->Run();
  return 0;
}

namespace {

// Where `airlock apikey` keeps keys: the daemon's registry (SQLite), or a
// cluster's (--db postgres://..., docs/multinode.md). The same records.
struct KeyBackend {
  std::function<StatusOr<std::pair<ApiKeyRecord, std::string>>(const std::string&, const std::string&, bool)> create;
  std::function<StatusOr<std::vector<ApiKeyRecord>>()> list;
  std::function<Status(const std::string&)> remove;
  std::string where;  // for the create message
};

template <typename Store>
KeyBackend KeysIn(std::shared_ptr<Store> store, std::string where) {
  return {[store](const std::string& n, const std::string& t, bool a) { return store->CreateApiKey(n, t, a); },
          [store] { return store->ListApiKeys(); },
          [store](const std::string& id) { return store->RemoveApiKey(id); }, std::move(where)};
}

}  // namespace

int CmdApiKey(const std::string& state_dir, const std::vector<std::string>& args_in) {
  const char* usage =
      "usage: airlock apikey [--db PATH|postgres://...] create --name NAME [--team TEAM] [--admin]\n"
      "       airlock apikey [--db PATH|postgres://...] ls | rm ID|NAME\n"
      "A key acts only on its team's sandboxes, snapshots and granted secrets; the team\n"
      "defaults to one of its own (the key's id). --admin: sees and acts on every team's.\n"
      "A postgres:// --db is a cluster's registry (serve --role node|front, docs/multinode.md).\n";
  std::string db = state_dir + "/airlock.db";
  std::vector<std::string> args = TakeDbFlag(args_in, &db);
  if (args.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  KeyBackend keys;
  if (db.rfind("postgres://", 0) == 0 || db.rfind("postgresql://", 0) == 0) {
    auto reg = cluster::ClusterRegistry::Open(db, 1);
    if (!reg.ok()) {
      std::fprintf(stderr, "airlock apikey: cluster registry: %s\n", reg.status().message().c_str());
      return 1;
    }
    keys = KeysIn(std::shared_ptr<cluster::ClusterRegistry>(std::move(*reg)), " in the cluster registry");
  } else {
    auto reg = Registry::Open(db);
    if (!reg.ok()) {
      std::fprintf(stderr, "airlock apikey: %s\n", reg.status().message().c_str());
      return 1;
    }
    keys = KeysIn(std::shared_ptr<Registry>(std::move(*reg)), "");
  }
  if (args[0] == "create") {
    std::string name, team;
    bool admin = false;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--name" && i + 1 < args.size())
        name = args[++i];
      else if (args[i].rfind("--name=", 0) == 0)
        name = args[i].substr(7);
      else if (args[i] == "--team" && i + 1 < args.size())
        team = args[++i];
      else if (args[i].rfind("--team=", 0) == 0)
        team = args[i].substr(7);
      else if (args[i] == "--admin")
        admin = true;
      else {
        std::fprintf(stderr, "airlock apikey create: unknown argument '%s'\n%s", args[i].c_str(), usage);
        return 2;
      }
    }
    if (name.empty()) {
      std::fputs(usage, stderr);
      return 2;
    }
    auto k = keys.create(name, team, admin);
    if (!k.ok()) {
      std::fprintf(stderr, "airlock apikey create: %s\n", k.status().message().c_str());
      return k.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::printf("%s\n", k->second.c_str());
    std::fprintf(stderr, "key %s (%s, team %s%s) created%s; it is shown only once\n", k->first.id.c_str(),
                 name.c_str(), k->first.team.c_str(), admin ? ", admin" : "", keys.where.c_str());
    return 0;
  }
  if (args[0] == "ls") {
    auto list = keys.list();
    if (!list.ok()) {
      std::fprintf(stderr, "airlock apikey ls: %s\n", list.status().message().c_str());
      return 1;
    }
    std::printf("%-10s %-20s %-20s %-6s %-12s %s\n", "ID", "NAME", "TEAM", "ADMIN", "PREFIX", "CREATED");
    for (const auto& k : *list) {
      std::printf("%-10s %-20s %-20s %-6s %-12s %s\n", k.id.c_str(), k.name.c_str(), k.team.c_str(),
                  k.admin ? "yes" : "no", (k.prefix + "...").c_str(), FormatRfc3339Ms(k.created_at_ms).c_str());
    }
    return 0;
  }
  if (args[0] == "rm" && args.size() == 2) {
    if (Status st = keys.remove(args[1]); !st.ok()) {
      std::fprintf(stderr, "airlock apikey rm: %s\n", st.message().c_str());
      return 1;
    }
    return 0;
  }
  std::fputs(usage, stderr);
  return 2;
}

}  // namespace airlock::cli
