#include "cli/termination_watcher.h"

#include <signal.h>

#include <cstdio>
#include <cstring>

namespace airlock::cli {

namespace {
sigset_t TerminationSignals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  return sigs;
}
}  // namespace

void BlockTerminationSignals() {
  sigset_t sigs = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
}

TerminationWatcher::TerminationWatcher(std::function<void(int sig)> on_signal) {
  sigset_t sigs = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  thread_ = std::thread([this, sigs, on_signal = std::move(on_signal)] {
    while (!done_) {
      timespec ts{0, 100 * 1000 * 1000};
      int sig = sigtimedwait(&sigs, nullptr, &ts);
      if (sig <= 0) continue;
      signal_ = sig;
      std::fprintf(stderr, "airlock: %s, destroying the sandbox\n", sigdescr_np(sig));
      on_signal(sig);
      return;
    }
  });
}

TerminationWatcher::~TerminationWatcher() {
  done_ = true;
  thread_.join();
}

}  // namespace airlock::cli
