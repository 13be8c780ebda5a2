#include "server/server.h"

#include <fcntl.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "common/log.h"
#include "core/template_runtime.h"
#include "http/client.h"
#include "image/image.h"
#include "secrets/egress_broker.h"
#include "server/mcp_service.h"
#include "gateway/relay_guard.h"

namespace airlock::server {

using nlohmann::json;

Server::Server(ServerConfig config) : config_(std::move(config)) {}

StatusOr<std::unique_ptr<Server>> Server::Open(ServerConfig config) {
  std::unique_ptr<Server> s(new Server(std::move(config)));
  RETURN_IF_ERROR(s->Init());
  return s;
}

Server::~Server() {
  Stop();
  // MCP tool calls block on this daemon's own API, which no longer answers:
  // their threads are let go (each drops its answer) rather than waited for.
  if (mcp_) mcp_->Shutdown();
  // A running template build ends (its build sandbox is destroyed) before
  // anything it uses goes.
  if (templates_.api) templates_.api->Stop();
  // No reaper decision once the workers stop taking work.
  if (fleet_.reaper) fleet_.reaper->Stop();
  // A template snapshot waiting on its guest (minutes, under TCG) gives up.
  if (fleet_.manager) fleet_.manager->template_snapshots().Cancel();
  loop_.Join();
  if (fleet_.manager) {
    if (config_.kill_on_exit) {
      fleet_.manager->DestroyAll();  // each end forgets the sandbox's secrets (OnSandboxEnding)
      if (volumes_) volumes_->UnmountAll();  // nothing mounts them any more
    } else {
      fleet_.manager->ReleaseAll();
    }
  }
  // Then the members, in reverse declaration order (server.h, daemon_owners.h).
}

void Server::Run() { loop_.io.run(); }

void Server::Stop() {
  asio::post(loop_.io, [this] {
    front_.Stop();  // the listeners, the key table's refresh
    if (templates_.api) templates_.api->StopSweeps();
    fleet_.StopTimers();  // the metrics sampler, the controller, the memory governor
    if (loop_.signals) loop_.signals->cancel();
    loop_.io.stop();
  });
}

int PoolSizeForHost() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  int64_t gib = pages > 0 && page > 0 ? (int64_t{pages} * page) >> 30 : 0;
  return static_cast<int>(std::clamp<int64_t>(gib / 8, 1, 4));
}

std::vector<std::string> Server::CustomTemplateNames() {
  if (!templates_.api) return {};
  return templates_.api->CustomTemplateNames();
}

void Server::OnSandboxEnding(Sandbox& sb, const SandboxEnd& end) {
  const std::string& id = sb.id();
  fleet_.streams.Drop(id);
  secrets_->Forget(id);
  if (end.outcome == SandboxOutcome::kCreateFailed) return;  // audited as sandbox.create_failed
  // Every end is E2B's "killed" (a kill, the TTL, a death), with its run.
  lifecycle_->Emit("sandbox.lifecycle.killed", sb.Record(), sb.attributes().owner_team,
                   {{"outcome", SandboxOutcomeName(end.outcome)}});
  if (end.outcome == SandboxOutcome::kVmmExited) {
    sb.AddLog("warn", "sandbox died: " + end.Describe());
    audit_.Append({{"action", "sandbox.died"}, {"sandbox", id}, {"outcome", end.Describe()}});
    metrics_.SandboxDied();
  }
  audit_.Append({{"action", "sandbox.ended"},
                 {"sandbox", id},
                 {"outcome", SandboxOutcomeName(end.outcome)},
                 {"detail", end.detail},
                 {"reason", end.Describe()}});
}

void Server::OnSandboxEnded(const std::string& id, const SandboxEnd& end) {
  if (fleet_.sampler) fleet_.sampler->Forget(id);
  if (end.outcome != SandboxOutcome::kCreateFailed) admission_->SandboxGone(id, control::Admission::Clock::now());
  if (config_.cluster.sandbox_removed) {
    asio::post(*loop_.workers, [this, id] { config_.cluster.sandbox_removed(id); });
  }
}

}  // namespace airlock::server
