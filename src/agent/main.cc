// airlock-agent: the guest's PID 1 and its envd-compatible API server.
//
//   airlock-agent [--listen IP:PORT] [--init] [--root-prefix DIR]
//                 [--default-user NAME] [--services-dir DIR] [--template-defaults FILE]
//                 [--access-token-file FILE] [--boot-config "airlock.k=v ..."] [--verbose]
#include <sys/prctl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "agent/agent.h"
#include "agent/console_seed.h"
#include "agent/entropy.h"
#include "agent/init.h"
#include "agent/log.h"
#include "common/interpreter_access.h"

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: airlock-agent [--listen IP:PORT] [--init] [--root-prefix DIR]\n"
               "                     [--default-user NAME] [--verbose]\n"
               "  --listen IP:PORT     address to serve on (default 0.0.0.0:49983; port 0 = any)\n"
               "  --init               do PID 1 duties (mounts, hostname, network) even if not PID 1\n"
               "  --root-prefix DIR    read DIR/etc/passwd and DIR/etc/group for users (tests)\n"
               "  --default-user NAME  user when a request names none (default: user)\n"
               "  --services-dir DIR   service declarations to start (default /etc/airlock/services; \"\" = none)\n"
               "  --template-defaults FILE  a custom template's default user and workdir (default\n"
               "                       /etc/airlock/template.json; \"\" = none)\n"
               "  --access-token-file FILE  where the /init access token is written for the code interpreter\n"
               "                       (default as PID 1: /run/airlock/access-token; else none)\n"
               "  --boot-config TEXT   the airlock.* boot keys (hostname, ip, gw, route, dns) instead of\n"
               "                       /proc/cmdline: how a runtime without a guest kernel (gVisor) passes them\n"
               "  --verbose            debug logging\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace airlock::agent;
  AgentOptions opts;
  bool init = getpid() == 1;
  bool pid1 = init;
  std::optional<std::string> boot_config;
  std::optional<std::string> token_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "airlock-agent: %s needs a value\n", flag);
        if (!pid1) std::exit(2);
        return "";
      }
      return argv[++i];
    };
    if (a == "--listen") opts.listen = value("--listen");
    else if (a == "--init") init = true;
    else if (a == "--root-prefix") opts.root_prefix = value("--root-prefix");
    else if (a == "--default-user") opts.default_user = value("--default-user");
    else if (a == "--services-dir") opts.services_dir = value("--services-dir");
    else if (a == "--template-defaults") opts.template_defaults = value("--template-defaults");
    else if (a == "--boot-config") boot_config = value("--boot-config");
    else if (a == "--access-token-file") token_file = value("--access-token-file");
    else if (a == "--verbose") opts.verbose = true;
    else if (a == "--help" || a == "-h") {
      Usage();
      return 0;
    } else {
      std::fprintf(stderr, "airlock-agent: unknown flag '%s'\n", a.c_str());
      Usage();
      if (!pid1) return 2;  // as PID 1 a bad flag must not kill the guest
    }
  }
  // Boot keys as a flag: a runtime without a guest kernel (gVisor).
  if (boot_config) opts.passive_close = std::chrono::seconds(2);
  SetLogVerbose(opts.verbose);
  SetupProcessBasics(pid1);
  if (init) RunPid1Setup(boot_config);
  // Limits for started processes: only in a guest, where the agent owns the
  // whole cgroup tree (never a host's, even with --init).
  if (pid1) opts.cgroup_root = "/sys/fs/cgroup";
  // The token for the code interpreter: in a guest only, never a host's /run.
  opts.access_token_file = token_file ? *token_file : pid1 ? airlock::kGuestAccessTokenFile : "";
  if (!pid1) prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphans of our children come back to us

  while (true) {
    try {
      boost::asio::io_context io(1);
      Agent agent(io, opts);
      airlock::Status st = agent.Start();
      if (!st.ok()) {
        LogError("%s", st.ToString().c_str());
        if (!pid1) return 1;
        std::this_thread::sleep_for(std::chrono::seconds(1));
        continue;  // retry: PID 1 never exits
      }
      LogInfo("listening on %s (port %u)", opts.listen.c_str(), agent.port());
      // As PID 1: fresh entropy from the host over the serial console, before
      // any TCP (console_seed.h). Reading before "ready" is printed, so a
      // host that waits for "ready" never writes to a console nobody reads.
      ConsoleSeedReader seeder(io, [](std::string_view b) { return ReseedEntropy(b); });
      // Under gVisor (boot keys passed as a flag) the Sentry's getrandom is
      // the host's, per read: there is no console to seed over.
      if (pid1 && !boot_config) {
        if (airlock::Status st = seeder.Start(kSeedConsole); !st.ok()) LogError("%s", st.ToString().c_str());
      }
      if (pid1 || init) ConsoleLine("airlock-agent: ready");
      else std::fprintf(stderr, "airlock-agent: ready port=%u\n", agent.port());
      io.run();
      LogError("event loop returned");
    } catch (const std::exception& e) {
      LogError("fatal: %s", e.what());
    }
    if (!pid1) return 1;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}
