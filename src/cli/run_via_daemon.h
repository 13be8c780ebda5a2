// The daemon path of `airlock run`: when a daemon answers (--server /
// AIRLOCK_SERVER, key from AIRLOCK_API_KEY or <state_dir>/cli.key), the
// sandbox is created, used and killed through its API instead of an
// embedded Manager. Falls back (nullopt) when no daemon answers, when
// AIRLOCK_NO_DAEMON is set, or for options the API path does not carry
// (--interactive, --cpus/--memory other than the defaults, directory
// downloads are refused with an error).
#pragma once

#include <optional>
#include <string>

#include "cli/run_command.h"

namespace airlock::cli {

// The exit code to use, or nullopt: run with the embedded Manager.
std::optional<int> RunViaDaemon(const std::string& state_dir, const RunOptions& options);

}  // namespace airlock::cli
