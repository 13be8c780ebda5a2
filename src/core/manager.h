// The in-process sandbox manager: the single owner of sandbox state. It
// creates a sandbox as a checklist of steps (network → disk overlay + VMM →
// agent ready), each undone if a later step fails, and destroys it leaving
// nothing behind (VMM, netns, veth, tap, overlay, sockets, run dir).
//
// `airlock run` uses it directly; the daemon (src/server) wraps the same
// class, starting VMMs detached so they outlive a daemon restart and
// re-adopting them on start (Open's `adopt` list).
//
// Every sandbox gets an access token (64 hex chars, or the one given) and its
// sandbox-wide env vars through the agent's POST /init right after the agent
// answers /health; from then on the agent refuses requests without the token.
// Thread-safe: Create/Destroy/Get/List may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <vector>
#include <mutex>
#include <optional>
#include <string>

#include "common/status.h"
#include "core/envd_client.h"
#include "runtime/runtime.h"
#include "core/sandbox_state.h"
#include "egress/egress_service.h"
#include "egress/policy.h"

namespace airlock {

namespace net {
class AddressPool;
class SandboxNetwork;
}  // namespace net

struct ManagerConfig {
  std::string state_dir = "/var/lib/airlock";
  std::string address_pool = "198.18.0.0/15";
  // Host-wide lease directory root shared by every state directory (net::kHostLeaseRoot).
  std::string lease_root = "/run/airlock";
  // Path of the static airlock-agent installed into templates when an image
  // has to be built on first use; empty: next to the running binary.
  std::string agent_binary;
  bool build_image_if_missing = true;
  // Egress (docs/network.md): airlock's resolver + proxy for every sandbox.
  // Off, or when it cannot start: guests reach nothing at all.
  bool egress = true;
  std::string upstream_dns;  // "ip[:port]"; empty: the host's /etc/resolv.conf
  egress::AuditSink egress_audit_sink;  // every egress decision (JSON)
  egress::EgressLimits egress_limits;   // default per-sandbox limits
};

struct CreateOptions {
  std::string template_name = "base";
  int vcpus = 1;          // 1..64
  int memory_mib = 512;   // 128..65536
  // Bound on cold boot to agent-ready (TCG boots take seconds, KVM far less).
  std::chrono::milliseconds ready_timeout{std::chrono::seconds(120)};
  // Sandbox-wide environment of every process (agent /init envVars).
  std::map<std::string, std::string> env_vars;
  // Empty: a random 32-byte token (64 hex chars) is generated.
  std::string access_token;
  // true: the VMM survives this process (daemon); false: it dies with the
  // thread that called Create (airlock run).
  bool detach = false;
  // What the sandbox may reach (default: nothing) and its limits.
  egress::EgressPolicy egress_policy;
  std::optional<egress::EgressLimits> egress_limits;
};

// A sandbox left running by a previous daemon, to be taken over by Open().
struct AdoptRequest {
  std::string id;
  int vmm_pid = -1;
  std::string template_name;
  std::string access_token;
  int vcpus = 1;
  int memory_mib = 512;
};

// Where the time of a create went, in milliseconds.
struct CreateTimings {
  double network_ms = 0;
  double vmm_start_ms = 0;
  double agent_ready_ms = 0;
  double total_ms = 0;
};

class Sandbox {
 public:
  ~Sandbox();
  const std::string& id() const { return id_; }
  SandboxState state() const;
  const EnvdClient& agent() const { return *agent_; }
  const CreateTimings& timings() const { return timings_; }
  pid_t vmm_pid() const;
  const std::string& template_name() const { return template_; }
  const std::string& access_token() const { return access_token_; }
  const std::string& run_dir() const { return run_dir_; }
  int vcpus() const { return vcpus_; }
  int memory_mib() const { return memory_mib_; }
  // The host-reachable address of the sandbox (veth, netns side).
  std::string netns_ip() const;
  // Makes guest TCP `port` reachable at netns_ip():port (idempotent).
  // The agent port (49983) is always reachable.
  Status ExposePort(uint16_t port);

 private:
  friend class Manager;
  Sandbox() = default;
  Status Transition(SandboxState to);
  Status TearDown();  // VMM, then network, then run dir; collects every error

  std::string id_;
  std::string run_dir_;
  std::string template_;
  std::string access_token_;
  int vcpus_ = 1;
  int memory_mib_ = 512;
  std::set<uint16_t> exposed_ports_;
  bool released_ = false;
  egress::EgressService* egress_ = nullptr;  // the Manager's; outlives the sandbox
  mutable std::mutex mu_;
  SandboxState state_ = SandboxState::kCreating;
  std::unique_ptr<net::SandboxNetwork> network_;
  std::unique_ptr<VmInstance> vm_;
  std::unique_ptr<EnvdClient> agent_;
  CreateTimings timings_;
};

class Manager {
 public:
  // Prepares the state dir, picks the runtime (QEMU; KVM if it really works,
  // else TCG) and removes leftovers of sandboxes whose owner died.
  // `adopt`: sandboxes of a previous daemon; each whose VMM still runs (pid
  // alive and its command line names the sandbox's run dir) and whose agent
  // answers is taken over (network via SandboxNetwork::Adopt); the others
  // are cleaned up fully (VMM, netns, run dir, lease). Get(id) tells which.
  static StatusOr<std::unique_ptr<Manager>> Open(ManagerConfig config,
                                                 const std::vector<AdoptRequest>& adopt = {});
  ~Manager();  // destroys every sandbox it still owns (none after ReleaseAll)

  StatusOr<std::shared_ptr<Sandbox>> Create(const CreateOptions& options);
  Status Destroy(const std::string& id);
  void DestroyAll();
  // Forgets every sandbox without stopping it (a daemon shutting down for a
  // restart leaves detached VMMs for the next one to adopt).
  void ReleaseAll();
  std::shared_ptr<Sandbox> Get(const std::string& id);
  std::vector<std::shared_ptr<Sandbox>> List();
  Runtime& runtime() { return *runtime_; }
  // nullptr when egress is off.
  egress::EgressService* egress() { return egress_.get(); }
  // Replaces a sandbox's egress policy live (nft + resolver/proxy).
  Status UpdateEgress(const std::string& id, const egress::EgressPolicy& policy);
  const ManagerConfig& config() const { return config_; }

 private:
  Manager() = default;
  // Takes over one sandbox of a previous daemon; errors mean "clean it up".
  StatusOr<std::shared_ptr<Sandbox>> AdoptOne(const AdoptRequest& r);
  ManagerConfig config_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<net::AddressPool> pool_;
  std::unique_ptr<egress::EgressService> egress_;  // before sandboxes_: outlives them
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
};

// A new random sandbox id: 20 lowercase alphanumerics (E2B's shape).
std::string NewSandboxId();

}  // namespace airlock
