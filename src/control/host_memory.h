// What the host's memory looks like to admission (docs/limits.md "Host
// memory"): /proc/meminfo (MemTotal, MemAvailable) and what one VMM holds,
// from /proc/PID/smaps_rollup. Every read goes through MemoryProbe, the one
// seam that unit tests replace with fixed numbers.
//
// What a VMM "holds" is Private_Clean + Private_Dirty of its smaps_rollup:
// the pages mapped by that process alone. For a sandbox mapping its
// template's RAM file copy-on-write this is what it wrote (anonymous CoW
// pages), QEMU's heap and TCG translation buffer, plus template pages that
// no other process maps at the moment. It is the marginal cost of the
// sandbox (what leaves with it), unlike PSS, which also charges each VMM a
// share of the template's page cache, so that every sandbox's figure moves
// whenever another of the same template starts or ends. Shared pages (the
// template cache, QEMU's binary) exist once per host and are seen through
// MemAvailable instead. Swapped-out pages are not counted (they hold no RAM).
//
// Units: MiB throughout (kB from /proc divided by 1024, rounded down).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string_view>

#include "common/status.h"

namespace airlock::control {

struct HostMemInfo {
  int64_t total_mib = 0;       // MemTotal; 0 when unknown
  int64_t available_mib = -1;  // MemAvailable; -1 when unknown
};

// One VMM's smaps_rollup, the fields admission may use.
struct VmmMemory {
  int64_t private_clean_kib = 0, private_dirty_kib = 0, pss_kib = 0, rss_kib = 0;
  // Private_Clean + Private_Dirty, in MiB: what admission counts.
  int64_t held_mib() const { return (private_clean_kib + private_dirty_kib) / 1024; }
};

// Parses /proc/meminfo text; fields that are missing keep their defaults.
HostMemInfo ParseMemInfo(std::string_view text);
// Parses /proc/PID/smaps_rollup text. InvalidArgument when it has no
// Rss/Private lines (not a smaps_rollup).
StatusOr<VmmMemory> ParseSmapsRollup(std::string_view text);

class MemoryProbe {
 public:
  virtual ~MemoryProbe() = default;
  virtual HostMemInfo ReadMemInfo() = 0;
  // NotFound when the process is gone; the errno of the read otherwise.
  virtual StatusOr<VmmMemory> ReadVmm(pid_t pid) = 0;
  // Writes /proc/PID/oom_score_adj (-1000..1000).
  virtual Status SetOomScoreAdj(pid_t pid, int adj) = 0;
};

// The real one (/proc).
std::unique_ptr<MemoryProbe> ProcMemoryProbe();

}  // namespace airlock::control
