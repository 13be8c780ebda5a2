// The memory-pressure policy of the daemon (docs/limits.md "Memory
// pressure"): one decision per sampler reading, from MemAvailable, what
// the running sandboxes hold and when each was last used. A pure function;
// control/memory_governor.h carries it out.
//
// The order, mildest first:
//  1. under pressure (MemAvailable < refuse_below_mib; it ends only above
//     refuse_below_mib + recover_margin_mib, so it does not flap): creates
//     are refused (503, reason "pressure") and the warm pool gives back one
//     parked sandbox a round and refills nothing;
//  2. only when pause_idle (serve --pause-idle-under-pressure) and
//     MemAvailable < pause_below_mib and the pool is empty: the longest-idle
//     running sandbox (oldest last use; ties: the one holding most) that has
//     been idle at least min_idle_ms is paused with its memory kept
//     (Manager::Pause; it resumes on connect as usual, and connect counts as
//     use, so a resumed sandbox is not paused again at once). One pause at a
//     time: the next reading, after it finished, decides again.
//  3. the kernel's OOM killer, if it ever comes to that, picks a parked VMM
//     first, then a sandbox's VMM, never the daemon first (oom_score_adj,
//     kPooledVmmOomScoreAdj / kVmmOomScoreAdj; the daemon keeps 0).
// Units: MiB; times Unix ms.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace airlock::control {

inline constexpr int kVmmOomScoreAdj = 500;
inline constexpr int kPooledVmmOomScoreAdj = 800;

struct PressureConfig {
  int64_t refuse_below_mib = 2048;  // serve --memory-pressure
  int64_t recover_margin_mib = 256;
  bool pause_idle = false;         // serve --pause-idle-under-pressure
  int64_t pause_below_mib = 1024;  // serve --pressure-pause-below
  int64_t min_idle_ms = 30000;     // serve --pressure-pause-min-idle (seconds there)
};

struct RunningSandbox {
  std::string id;
  int64_t last_active_ms = 0;  // last data-plane use (or its start)
  int64_t held_mib = 0;
};

struct PressureInput {
  int64_t now_ms = 0;
  int64_t available_mib = -1;  // MemAvailable; -1 unknown: no pressure decided
  bool was_under = false;      // the previous reading's verdict
  int pool_parked = 0;
  bool pause_in_flight = false;
  std::vector<RunningSandbox> running;
};

struct PressurePlan {
  bool under = false;    // refuse creates, shrink the pool
  std::string pause_id;  // pause this one (empty: none)
  std::string why;       // for the log: the numbers
};

PressurePlan PlanPressure(const PressureConfig& config, const PressureInput& in);

}  // namespace airlock::control
