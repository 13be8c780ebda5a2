// `airlock run`: create a sandbox, copy files in, run one command with its
// stdout/stderr streamed live and kept apart, copy artefacts out, destroy the
// sandbox, and exit with the command's exit code (128+N for signal N).
#pragma once

#include <string>
#include <vector>

#include "core/manager.h"

namespace airlock::cli {

struct Transfer {
  std::string from;
  std::string to;
};

struct RunOptions {
  CreateOptions create;
  std::vector<Transfer> uploads;    // host → guest
  std::vector<Transfer> downloads;  // guest → host
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;
  std::string user;
  bool forward_stdin = false;
  int timeout_s = 0;  // 0: no limit on the command's lifetime
  bool timings = false;
};

// Parses "A:B" (splitting at the first ':'); InvalidArgument otherwise.
StatusOr<Transfer> ParseTransfer(const std::string& spec, const char* flag);

// Returns the process exit code to use.
int RunInSandbox(Manager& manager, const RunOptions& options);

}  // namespace airlock::cli
