// airlock-interpreter's settings, parsed once from the command line (main.cc)
// and read-only afterwards.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "common/interpreter_access.h"

namespace airlock::interpreter {

struct Options {
  std::string listen = "0.0.0.0:49999";
  std::string kernels = "/usr/local/lib/airlock/interpreter/kernels.json";
  std::string user = "user";
  std::string cwd = "/home/user";
  std::string envd = "http://127.0.0.1:49983";
  std::string runtime_dir = "/run/airlock-interpreter";
  // The sandbox's access token, as the agent writes it at each /init
  // (common/interpreter_access.h), read on every request. A missing file: no
  // token yet (open, as the agent before /init). "" = never checked.
  std::string access_token_file = kGuestAccessTokenFile;
  size_t max_output_bytes = 64u << 20;
  // Where "airlock-interpreter: ready" is written once the default python
  // kernel is ready (the guest's /dev/console: the host takes the template
  // snapshot on that line, image::kInterpreterReadyMarker). Empty: nowhere.
  std::string console;
  // Not flags: fixed policy, kept here so tests may shorten them.
  std::chrono::milliseconds keepalive{std::chrono::seconds(5)};
  std::chrono::milliseconds start_timeout{std::chrono::seconds(120)};  // TCG guests start python slowly
  std::chrono::milliseconds stop_grace{std::chrono::seconds(3)};       // shutdown_request → SIGKILL
  std::chrono::milliseconds reinterrupt{std::chrono::seconds(2)};      // SIGINT again while still busy
  size_t max_request_body = 32u << 20;
};

}  // namespace airlock::interpreter
