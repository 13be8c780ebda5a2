// What `airlock template build` shows while the server builds: the build's
// log entries (shared/spec/e2b-templates.md §A.3.5 BuildLogEntry) as they
// are polled, and each step's state (pending, running, cached, done,
// failed) taken from them: an entry of step "base", "1".."N" or "finalize"
// starts that step ("CACHED ..." marks it cached) and ends the ones before.
//
// On a terminal (tty) the step list and the last output lines are redrawn
// in place at every Update; otherwise each log entry is one plain line
// ("[step] message") as it arrives. Writes to `out` only.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace airlock::cli {

class BuildProgress {
 public:
  // `base`: what the base step does ("FROM e2bdev/base"); `steps`: one
  // label per step, in order ("RUN apt-get update").
  BuildProgress(const std::string& base, const std::vector<std::string>& steps, bool tty, FILE* out);

  // New log entries of the build, in order.
  void OnLogs(const nlohmann::json& entries);
  // The build's status after a poll ("waiting", "building", "ready",
  // "error"); for "error", its reason {message, step}.
  void OnStatus(const std::string& status, const nlohmann::json& reason);
  // Redraws (tty) now.
  void Update();
  // The last redraw, without the output tail (tty).
  void Finish();

  // The messages of the log entries of `step`, the last `max` of them.
  std::vector<std::string> StepLog(const std::string& step, size_t max) const;
  // "2/5 RUN make" for step "2", "base", "finalize".
  std::string Describe(const std::string& step) const;

 private:
  enum class State { kPending, kRunning, kCached, kDone, kFailed };
  struct Row {
    std::string key;    // "base", "1".."N", "finalize"
    std::string label;  // what the step does
    State state = State::kPending;
    std::chrono::steady_clock::time_point started, ended;
  };
  int IndexOf(const std::string& step) const;
  void Start(int index, bool cached);
  void Draw(bool final);
  std::string RowText(const Row& r, int width) const;

  std::vector<Row> rows_;
  bool tty_;
  FILE* out_;
  std::string status_ = "waiting";
  std::vector<std::pair<std::string, std::string>> log_;  // (step, message)
  std::vector<std::string> tail_;                         // the last output lines
  int drawn_lines_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace airlock::cli
