#include "cli/run_via_daemon.h"

#include "cli/termination_watcher.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/daemon_client.h"

namespace airlock::cli {

using nlohmann::json;

std::optional<int> RunViaDaemon(const std::string& state_dir, const RunOptions& o) {
  if (const char* env = std::getenv("AIRLOCK_NO_DAEMON"); env && *env) return std::nullopt;
  if (o.forward_stdin || o.create.vcpus != 1 || o.create.memory_mib != 512) return std::nullopt;
  DaemonTarget t = ResolveDaemon(state_dir, "");
  if (t.api_key.empty() || !DaemonAnswers(t)) return std::nullopt;

  auto t0 = std::chrono::steady_clock::now();
  int ttl = o.timeout_s > 0 ? o.timeout_s + 600 : 3600;  // reaped by the daemon if we die
  json egress = json::parse(o.create.egress_policy.ToJson());
  json extra = {{"allow_internet_access", egress["allowInternetAccess"]},
                {"network", {{"allowOut", egress["allowOut"]}, {"denyOut", egress["denyOut"]}}}};
  auto sb = DaemonCreate(t, o.create.template_name, ttl, {}, extra);
  if (!sb.ok()) {
    std::fprintf(stderr, "airlock run: create via daemon %s:%u: %s\n", t.host.c_str(), t.port,
                 sb.status().message().c_str());
    return 125;
  }
  double create_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Ctrl-C: kill the sandbox through the daemon, exit 128+sig.
  TerminationWatcher watcher([&](int sig) {
    (void)DaemonApi(t, "DELETE", "/sandboxes/" + sb->id);
    std::_Exit(128 + sig);
  });
  auto finish = [&](int code) {
    (void)DaemonApi(t, "DELETE", "/sandboxes/" + sb->id);
    return code;
  };
  for (const auto& u : o.uploads) {
    if (Status st = DaemonUpload(t, *sb, u.from, u.to); !st.ok()) {
      std::fprintf(stderr, "airlock run: %s\n", st.message().c_str());
      return finish(125);
    }
  }
  DaemonExecSpec spec;
  spec.argv = o.argv;
  spec.envs = o.env;
  spec.cwd = o.cwd;
  spec.user = o.user;
  spec.timeout_s = o.timeout_s;
  auto t1 = std::chrono::steady_clock::now();
  auto code = DaemonExec(t, *sb, spec);
  double exec_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  if (!code.ok()) {
    std::fprintf(stderr, "airlock run: %s\n", code.status().message().c_str());
    return finish(125);
  }
  for (const auto& d : o.downloads) {
    if (Status st = DaemonDownload(t, *sb, d.from, d.to); !st.ok()) {
      std::fprintf(stderr, "airlock run: download %s: %s\n", d.from.c_str(), st.message().c_str());
      return finish(*code == 0 ? 125 : *code);
    }
  }
  if (o.timings) {
    std::fprintf(stderr, "airlock: timings ms (via daemon %s:%u): create=%.1f exec=%.1f\n", t.host.c_str(), t.port,
                 create_ms, exec_ms);
  }
  return finish(*code);
}

}  // namespace airlock::cli
