#include "common/checklist.h"

#include "common/log.h"

namespace airlock {

Status Checklist::Do(const std::string& name, const Step& run, Step undo) {
  Status st = run();
  if (st.ok()) {
    names_.push_back(name);
    undos_.push_back(std::move(undo));
    return st;
  }
  Status all = UndoAll();
  if (!all.ok()) LOG_WARN("rollback incomplete after step={} error={}", name, all.ToString());
  return st.WithContext(name);
}

Status Checklist::UndoAll() {
  Status first;
  while (!undos_.empty()) {
    Step u = std::move(undos_.back());
    std::string name = std::move(names_.back());
    undos_.pop_back();
    names_.pop_back();
    if (!u) continue;
    Status st = u();
    if (!st.ok()) {
      LOG_WARN("undo failed step={} error={}", name, st.ToString());
      if (first.ok()) first = st.WithContext("undo " + name);
    }
  }
  return first;
}

}  // namespace airlock
