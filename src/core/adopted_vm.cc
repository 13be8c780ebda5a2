#include "core/adopted_vm.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

namespace airlock {

bool ProcessMatches(pid_t pid, const std::string& needle) {
  if (pid <= 0 || needle.empty()) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  if (!f) return false;
  std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return cmdline.find(needle) != std::string::npos;
}

AdoptedVm::~AdoptedVm() {
  if (!released_) (void)Destroy();
}

Status AdoptedVm::Destroy() {
  if (destroyed_ || released_) return OkStatus();
  if (ProcessMatches(pid_, run_dir_)) {
    if (::kill(pid_, SIGKILL) != 0 && errno != ESRCH) return ErrnoError("kill vmm pid " + std::to_string(pid_));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (ProcessMatches(pid_, run_dir_) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // cgroup leaves the QEMU runtime makes (v2, then v1); absent is fine.
  for (const char* root : {"/sys/fs/cgroup/airlock/", "/sys/fs/cgroup/memory/airlock/", "/sys/fs/cgroup/pids/airlock/"}) {
    (void)::rmdir((std::string(root) + id_).c_str());
  }
  destroyed_ = true;
  return OkStatus();
}

}  // namespace airlock
