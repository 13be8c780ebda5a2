// `airlock doctor`: what this host has and lacks for running sandboxes, with
// the fix for each missing part. Exit 0 when everything needed is present.
#pragma once

#include <string>

namespace airlock::cli {

int RunDoctor(const std::string& state_dir);

}  // namespace airlock::cli
