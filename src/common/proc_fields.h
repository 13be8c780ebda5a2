// The "Key:   1234 kB" lines of /proc files (meminfo, PID/smaps_rollup,
// PID/status; proc(5)): one parser for the daemon's admission
// (control/host_memory.h), the benchmarks and the tests.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace airlock {

// Each line "Key: <number>[ kB]" → number (kB for the fields that have a
// unit). Lines without a colon or a number are skipped.
std::map<std::string, uint64_t, std::less<>> ParseProcKib(std::string_view text);

// /proc/PID/smaps_rollup as ParseProcKib fields ("Rss", "Pss", "Pss_Anon",
// "Pss_Shmem", "Private_Dirty", ...); empty when the process is gone.
std::map<std::string, uint64_t, std::less<>> ReadSmapsRollupKib(pid_t pid);

// This boot's id (/proc/sys/kernel/random/boot_id, without the newline): what
// host probes cached on disk are keyed by, so a reboot probes again.
std::string KernelBootId();

}  // namespace airlock
