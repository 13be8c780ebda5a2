// Running the external tools the image build needs (apt-get, dpkg-deb,
// depmod, mmdebstrap, mkfs.ext4), with their output kept in a log file.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace airlock::image {

struct CommandOptions {
  std::string cwd;         // default: inherit
  std::string log_path;    // stdout+stderr appended here; default: discarded
  std::string stdin_path;  // default: /dev/null
};

// Options that send stdout+stderr to `log_path`, run in `cwd` if not empty.
inline CommandOptions LogTo(std::string log_path, std::string cwd = "") {
  CommandOptions o;
  o.log_path = std::move(log_path);
  o.cwd = std::move(cwd);
  return o;
}

// Runs argv to completion. On a non-zero exit the error (Internal) holds the
// command line, how it ended and the last ~15 lines of its log.
Status RunCommand(const std::vector<std::string>& argv, const CommandOptions& options = {});

}  // namespace airlock::image
