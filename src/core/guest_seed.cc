#include "core/guest_seed.h"

#include <thread>

#include "core/registry.h"
#include "envd/proto_json.h"

namespace airlock {
namespace {

// 256 bits: a full CRNG reseed. Short, because under TCG every 8 bytes of
// UART input are a guest interrupt; /init mixes in 64 more bytes later.
constexpr size_t kSeedBytes = 32;
constexpr size_t kNonceBytes = 8;  // only has to differ from the VMM's earlier requests
constexpr auto kSeedPoll = std::chrono::milliseconds(5);

Status SeedTimedOut(VmInstance& vm, const std::string& what) {
  std::string tail = vm.ConsoleTail();
  return DeadlineExceeded(what + (tail.empty() ? "" : "; console:\n" + tail));
}

}  // namespace

Status SeedGuestBeforeNetwork(VmInstance& vm, const GuestSeedOptions& o) {
  auto gone = [&vm]() -> Status {
    return Unavailable("the VMM exited before its agent was seeded; console:\n" + vm.ConsoleTail());
  };
  if (o.booted) {
    while (!vm.ConsoleContains(kAgentReadyMarker)) {
      if (!vm.alive()) return gone();
      if (std::chrono::steady_clock::now() >= o.ready_deadline)
        return SeedTimedOut(
            vm, "the agent did not become ready in time (no '" + std::string(kAgentReadyMarker) + "' on its console)");
      std::this_thread::sleep_for(kSeedPoll);
    }
  }
  const std::string nonce = RandomHex(kNonceBytes);
  // A leading newline ends whatever partial line the console input holds.
  const std::string line = "\nairlock-seed " + nonce + " " + envd::Base64Encode(RandomBytes(kSeedBytes));
  const std::string done = "airlock-agent: seeded " + nonce;
  const std::string failed = "airlock-agent: seed failed " + nonce;
  const auto deadline = std::min(o.ready_deadline, std::chrono::steady_clock::now() + o.answer_timeout);
  while (true) {
    Status w = vm.WriteConsoleLine(line);
    if (w.code() == StatusCode::kUnimplemented) return w;
    // Unavailable (the input is full): try again at the next round.
    const auto round_end = std::min(deadline, std::chrono::steady_clock::now() + o.retry_every);
    while (std::chrono::steady_clock::now() < round_end) {
      if (vm.ConsoleContains(done)) return OkStatus();
      if (vm.ConsoleContains(failed)) return Unavailable("the agent could not reseed; console:\n" + vm.ConsoleTail());
      if (!vm.alive()) return gone();
      std::this_thread::sleep_for(kSeedPoll);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return SeedTimedOut(vm, "the agent did not answer the entropy seed on its console");
    }
  }
}

}  // namespace airlock
