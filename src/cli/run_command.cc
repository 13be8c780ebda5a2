#include "cli/run_command.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli/termination_watcher.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/log.h"

namespace airlock::cli {

namespace {

// A failed write (our stdout went away, e.g. a closed pipe) drops the output; we keep running.
void WriteAll(int fd, std::string_view bytes) { (void)WriteAllRaw(fd, bytes.data(), bytes.size()); }

}  // namespace

StatusOr<Transfer> ParseTransfer(const std::string& spec, const char* flag) {
  auto colon = spec.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
    return InvalidArgument(std::string(flag) + " expects SRC:DST, got '" + spec + "'");
  }
  return Transfer{spec.substr(0, colon), spec.substr(colon + 1)};
}

int RunInSandbox(Manager& manager, const RunOptions& o) {
  ::signal(SIGPIPE, SIG_IGN);
  // Ctrl-C destroys the sandbox; the stream then ends and we exit 128+signal.
  std::mutex mu;
  std::shared_ptr<Sandbox> sandbox;
  TerminationWatcher watcher([&](int) {
    std::lock_guard<std::mutex> l(mu);
    if (sandbox) (void)manager.Destroy(sandbox->id());
  });
  auto finish = [&](int code) { return watcher.signal() ? 128 + watcher.signal() : code; };

  auto t0 = std::chrono::steady_clock::now();
  auto created = manager.Create(o.create);
  if (!created.ok()) {
    std::fprintf(stderr, "airlock: create sandbox: %s\n", created.status().message().c_str());
    return finish(125);
  }
  {
    std::lock_guard<std::mutex> l(mu);
    sandbox = *created;
  }
  if (watcher.signal()) return finish(0);
  double create_ms = MsSince(t0);
  const EnvdClient& agent = sandbox->agent();

  auto t1 = std::chrono::steady_clock::now();
  for (const auto& up : o.uploads) {
    Status s = agent.UploadFile(up.from, up.to, o.user);
    if (!s.ok()) {
      std::fprintf(stderr, "airlock: %s\n", s.message().c_str());
      std::lock_guard<std::mutex> l(mu);
      (void)manager.Destroy(sandbox->id());
      return finish(125);
    }
  }
  double upload_ms = MsSince(t1);

  ExecRequest req;
  req.cmd = o.argv.front();
  req.args.assign(o.argv.begin() + 1, o.argv.end());
  req.envs = o.env;
  if (!o.cwd.empty()) req.cwd = o.cwd;
  req.user = o.user;
  req.stdin = o.forward_stdin;
  if (o.timeout_s > 0) req.timeout = std::chrono::seconds(o.timeout_s);

  std::thread stdin_thread;
  ExecCallbacks cb;
  cb.on_stdout = [](std::string_view b) { WriteAll(STDOUT_FILENO, b); };
  cb.on_stderr = [](std::string_view b) { WriteAll(STDERR_FILENO, b); };
  cb.on_start = [&](uint32_t pid) {
    if (!o.forward_stdin) return;
    // Forward our stdin in chunks, then close the guest's stdin at EOF.
    stdin_thread = std::thread([&agent, pid] {
      char buf[64 * 1024];
      while (true) {
        ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (!agent.SendStdin(pid, std::string_view(buf, n)).ok()) return;
      }
      (void)agent.CloseStdin(pid);
    });
  };
  auto t2 = std::chrono::steady_clock::now();
  auto result = agent.Exec(req, cb);
  double exec_ms = MsSince(t2);
  if (stdin_thread.joinable()) {
    // The command ended; a reader blocked on our stdin would hold us up.
    stdin_thread.detach();
  }
  int code = 0;
  if (!result.ok()) {
    if (!watcher.signal()) std::fprintf(stderr, "airlock: run: %s\n", result.status().message().c_str());
    code = 125;
  } else {
    code = result->ShellCode();
  }

  auto t3 = std::chrono::steady_clock::now();
  if (result.ok() && !watcher.signal()) {
    for (const auto& down : o.downloads) {
      Status s = agent.Download(down.from, down.to);
      if (!s.ok()) {
        std::fprintf(stderr, "airlock: download %s: %s\n", down.from.c_str(), s.message().c_str());
        if (code == 0) code = 125;
      }
    }
  }
  double download_ms = MsSince(t3);
  auto t4 = std::chrono::steady_clock::now();
  Status destroyed;
  {
    // After a Ctrl-C the watcher is tearing the sandbox down (holding `mu`):
    // wait for it, or exiting now would leave the network and run dir behind.
    std::lock_guard<std::mutex> l(mu);
    destroyed = manager.Destroy(sandbox->id());
  }
  if (!destroyed.ok() && !watcher.signal()) std::fprintf(stderr, "airlock: destroy: %s\n", destroyed.message().c_str());
  double destroy_ms = MsSince(t4);
  if (o.timings) {
    const auto& t = sandbox->timings();
    std::fprintf(stderr,
                 "airlock: timings ms: create=%.1f (network=%.1f vmm=%.1f agent_ready=%.1f) upload=%.1f "
                 "exec=%.1f download=%.1f destroy=%.1f total=%.1f\n",
                 create_ms, t.network_ms, t.vmm_start_ms, t.agent_ready_ms, upload_ms, exec_ms, download_ms, destroy_ms,
                 MsSince(t0));
    // Each bring-up step by its name (core/bring_up.h).
    std::string steps;
    for (const auto& s : t.steps) {
      char one[96];
      std::snprintf(one, sizeof one, "%s%s=%.1f", steps.empty() ? "" : ", ", s.step.c_str(), s.ms);
      steps += one;
    }
    std::fprintf(stderr, "airlock: bring-up steps ms: %s\n", steps.c_str());
  }
  return finish(code);
}

}  // namespace airlock::cli
