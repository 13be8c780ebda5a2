#include "control/memory_pressure.h"

#include <tuple>

namespace airlock::control {

PressurePlan PlanPressure(const PressureConfig& config, const PressureInput& in) {
  PressurePlan p;
  if (in.available_mib < 0) return p;
  const int64_t limit = in.was_under ? config.refuse_below_mib + config.recover_margin_mib : config.refuse_below_mib;
  p.under = in.available_mib < limit;
  if (!p.under) return p;
  p.why = "MemAvailable " + std::to_string(in.available_mib) + " MiB < " + std::to_string(limit) + " MiB";
  if (!config.pause_idle || in.available_mib >= config.pause_below_mib || in.pool_parked > 0 || in.pause_in_flight)
    return p;
  const RunningSandbox* pick = nullptr;
  for (const auto& s : in.running) {
    if (in.now_ms - s.last_active_ms < config.min_idle_ms) continue;
    if (!pick || std::tie(s.last_active_ms, pick->held_mib) < std::tie(pick->last_active_ms, s.held_mib)) pick = &s;
  }
  if (pick) {
    p.pause_id = pick->id;
    p.why += ", below " + std::to_string(config.pause_below_mib) + " MiB: pausing the longest idle (" + pick->id +
             ", holding " + std::to_string(pick->held_mib) + " MiB)";
  }
  return p;
}

}  // namespace airlock::control
