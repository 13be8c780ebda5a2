// The in-process sandbox manager: the single owner of sandbox state. It
// creates a sandbox as a checklist of steps (network → disk overlay + VMM →
// agent ready), each undone if a later step fails, and destroys it leaving
// nothing behind (VMM, netns, veth, tap, overlay, sockets, run dir).
//
// `airlock run` uses it directly; the daemon (later) wraps the same class.
// Thread-safe: Create/Destroy may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "core/envd_client.h"
#include "runtime/runtime.h"
#include "core/sandbox_state.h"

namespace airlock {

namespace net {
class AddressPool;
class SandboxNetwork;
}  // namespace net

struct ManagerConfig {
  std::string state_dir = "/var/lib/airlock";
  std::string address_pool = "198.18.0.0/15";
  // Path of the static airlock-agent installed into templates when an image
  // has to be built on first use; empty: next to the running binary.
  std::string agent_binary;
  bool build_image_if_missing = true;
};

struct CreateOptions {
  std::string template_name = "base";
  int vcpus = 1;          // 1..64
  int memory_mib = 512;   // 128..65536
  // Bound on cold boot to agent-ready (TCG boots take seconds, KVM far less).
  std::chrono::milliseconds ready_timeout{std::chrono::seconds(120)};
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

 private:
  friend class Manager;
  Sandbox() = default;
  Status Transition(SandboxState to);
  Status TearDown();  // VMM, then network, then run dir; collects every error

  std::string id_;
  std::string run_dir_;
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
  static StatusOr<std::unique_ptr<Manager>> Open(ManagerConfig config);
  ~Manager();  // destroys every sandbox it still owns

  StatusOr<std::shared_ptr<Sandbox>> Create(const CreateOptions& options);
  Status Destroy(const std::string& id);
  void DestroyAll();
  Runtime& runtime() { return *runtime_; }
  const ManagerConfig& config() const { return config_; }

 private:
  Manager() = default;
  ManagerConfig config_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<net::AddressPool> pool_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
};

// A new random sandbox id: 20 lowercase alphanumerics (E2B's shape).
std::string NewSandboxId();

}  // namespace airlock
