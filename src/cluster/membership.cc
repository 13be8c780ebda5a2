#include "cluster/membership.h"

#include <algorithm>

#include "common/log.h"
#include "core/registry.h"  // RandomHex

namespace airlock::cluster {

StatusOr<std::unique_ptr<NodeMembership>> NodeMembership::Start(ClusterRegistry* registry, MembershipConfig config) {
  if (config.node.boot_id.empty()) config.node.boot_id = RandomHex(8);
  std::unique_ptr<NodeMembership> m(new NodeMembership(registry, std::move(config)));
  RETURN_IF_ERROR(m->Register());
  m->thread_ = std::thread([p = m.get()] { p->Loop(); });
  return m;
}

NodeMembership::~NodeMembership() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void NodeMembership::Leave() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (Status st = registry_->Leave(config_.node.name, config_.node.boot_id); !st.ok())
    LOG_WARN("cluster: node {} leaving: {} (it lapses instead)", config_.node.name, st.message());
}

Status NodeMembership::Register() {
  std::vector<std::string> ids = config_.sandboxes ? config_.sandboxes() : std::vector<std::string>{};
  NodeInfo n = config_.node;
  n.templates = config_.templates ? config_.templates() : std::vector<std::string>{};
  RETURN_IF_ERROR(registry_->RegisterNode(n, ids));
  std::lock_guard<std::mutex> l(mu_);
  known_ = std::set<std::string>(ids.begin(), ids.end());
  templates_ = n.templates;
  LOG_WARN("cluster: node {} registered at {} (capacity {}, {} sandbox(es), boot {})", n.name, n.address, n.capacity,
           ids.size(), n.boot_id);
  return OkStatus();
}

Status NodeMembership::SandboxAdded(const std::string& id, int64_t reservation) {
  RETURN_IF_ERROR(registry_->AddSandbox(id, config_.node.name, reservation));
  std::lock_guard<std::mutex> l(mu_);
  known_.insert(id);
  return OkStatus();
}

void NodeMembership::SandboxRemoved(const std::string& id) {
  if (Status st = registry_->RemoveSandbox(id, config_.node.name); !st.ok()) {
    LOG_WARN("cluster: removing sandbox {} from the registry: {} (the next sync retries)", id, st.message());
    return;
  }
  std::lock_guard<std::mutex> l(mu_);
  known_.erase(id);
}

void NodeMembership::Sync(bool templates) {
  std::vector<std::string> have = config_.sandboxes ? config_.sandboxes() : std::vector<std::string>{};
  std::set<std::string> now(have.begin(), have.end()), known;
  {
    std::lock_guard<std::mutex> l(mu_);
    known = known_;
  }
  for (const auto& id : now) {
    if (!known.count(id)) (void)SandboxAdded(id, /*reservation=*/0);
  }
  for (const auto& id : known) {
    if (!now.count(id)) SandboxRemoved(id);
  }
  if (templates && config_.templates) {
    auto t = config_.templates();
    if (t != templates_) {
      if (registry_->SetTemplates(config_.node.name, t).ok()) templates_ = std::move(t);
    }
  }
}

void NodeMembership::Loop() {
  int beat = 0;
  bool registered = true;
  std::unique_lock<std::mutex> l(mu_);
  while (!cv_.wait_for(l, config_.heartbeat, [this] { return stop_; })) {
    l.unlock();
    if (!registered) {
      Status st = Register();
      registered = st.ok();
      if (!st.ok()) LOG_WARN("cluster: registering node {}: {}", config_.node.name, st.message());
    } else {
      // The rows first (what this node runs), then the beat, whose
      // reconciliation counts them.
      Sync(++beat % std::max(1, config_.sync_every) == 0);
      auto hb = registry_->Heartbeat(config_.node.name, config_.node.boot_id, config_.reservation_ttl);
      if (!hb.ok()) {
        LOG_WARN("cluster: heartbeat of node {}: {}", config_.node.name, hb.status().message());
      } else if (!hb->registered) {
        // Marked lapsed (or taken over): the registry forgot this node's
        // sandboxes; register again with what it really has.
        LOG_WARN("cluster: node {} was dropped by the registry; registering again", config_.node.name);
        registered = Register().ok();
      } else {
        if (hb->dropped > 0)
          LOG_WARN("cluster: node {}: {} reservation(s) dropped: their front stopped renewing them before this node "
                   "got their create (a front that died), or their TTL ran out",
                   config_.node.name, hb->dropped);
        if (hb->reserved != hb->reserved_was)
          LOG_WARN("cluster: node {}: reserved was {}, corrected to {} (its sandboxes plus the creates in flight)",
                   config_.node.name, hb->reserved_was, hb->reserved);
        if (config_.on_beat) config_.on_beat(*hb);
      }
    }
    l.lock();
  }
}

}  // namespace airlock::cluster
