// Checklist: setup as a list of small named steps, each with its undo. A
// failing step undoes the steps before it (newest first) and returns the
// failing step's error prefixed with its name; UndoAll() tears everything
// down in reverse order (best effort: every undo runs, the first error is
// returned). Undos must be idempotent ("already gone" is success).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace airlock {

class Checklist {
 public:
  using Step = std::function<Status()>;
  Checklist() = default;
  Checklist(Checklist&&) = default;
  Checklist& operator=(Checklist&&) = default;

  // Runs `run`; on success records `undo` (may be empty). On failure runs
  // UndoAll() of the earlier steps; the failing step's own undo is NOT run
  // (it may have failed because the object already existed and belongs to
  // someone else), so a step must clean up its own partial work.
  Status Do(const std::string& name, const Step& run, Step undo);
  Status UndoAll();
  const std::vector<std::string>& done() const { return names_; }

 private:
  std::vector<std::string> names_;
  std::vector<Step> undos_;
};

}  // namespace airlock
