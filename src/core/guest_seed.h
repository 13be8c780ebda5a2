// Fresh entropy into a guest before its first TCP handshake (docs/snapshots.md
// "Fresh before the first TCP"): a guest restored from a snapshot shares the
// kernel CRNG state of every other copy, and Linux draws its TCP secrets
// (net_secret, ts_secret) once per boot at the first TCP use, such as the
// host's own readiness probe. So before anything of the host speaks TCP to
// the guest, the bring-up writes a line of fresh host entropy to the guest's
// serial console; the agent mixes it in, reseeds the CRNG and answers with
// the line's nonce (the protocol: agent/console_seed.h).
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"
#include "runtime/runtime.h"

namespace airlock {

// The agent's line once it listens (agent/main.cc), after its console reader started.
inline constexpr char kAgentReadyMarker[] = "airlock-agent: ready";

struct GuestSeedOptions {
  // The guest booted rather than restored: its console input is read only
  // once the agent printed kAgentReadyMarker, so wait for that first.
  bool booted = false;
  // Until when a booted guest may take to print kAgentReadyMarker; no wait
  // of this call lasts beyond it.
  std::chrono::steady_clock::time_point ready_deadline = std::chrono::steady_clock::time_point::max();
  // How long the agent may take to answer, from the first write of the line.
  std::chrono::milliseconds answer_timeout{std::chrono::seconds(10)};
  // How long one try waits for the answer before the line is written again
  // (a UART reset during boot, or a line cut short, loses it).
  std::chrono::milliseconds retry_every{1000};
};

// Writes "airlock-seed <nonce: 16 hex> <32 random bytes, base64>" to `vm`'s console
// and waits for "airlock-agent: seeded <nonce>". Everything the guest sends
// is only searched for those markers (bounded: the VMM's console tail).
// DeadlineExceeded when either wait runs out (with the console's tail); Unavailable
// when the VMM exits or the agent says the reseed failed; Unimplemented
// when the runtime has no console input (the caller decides).
Status SeedGuestBeforeNetwork(VmInstance& vm, const GuestSeedOptions& options);

}  // namespace airlock
