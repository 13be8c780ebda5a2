#include "core/runtime_set.h"

#include <filesystem>

#include "common/log.h"
#include "runtime/registry.h"

namespace airlock {

StatusOr<std::unique_ptr<RuntimeSet>> RuntimeSet::Open(std::string default_name, RuntimeOptions options,
                                                       Opener opener) {
  std::unique_ptr<RuntimeSet> set(new RuntimeSet());
  set->default_name_ = default_name.empty() ? std::string(kDefaultRuntime) : std::move(default_name);
  set->options_ = std::move(options);
  set->opener_ = opener ? std::move(opener) : Opener(OpenRuntime);
  ASSIGN_OR_RETURN(set->default_, set->Named(set->default_name_));
  return set;
}

StatusOr<Runtime*> RuntimeSet::Named(std::string_view name) const {
  if (name.empty()) name = default_name_;
  auto find = [&]() -> Runtime* {
    std::lock_guard<std::mutex> l(mu_);
    auto it = runtimes_.find(name);
    return it == runtimes_.end() ? nullptr : it->second.get();
  };
  if (Runtime* rt = find()) return rt;
  std::lock_guard<std::mutex> opening(open_mu_);
  if (Runtime* rt = find()) return rt;  // opened while this one waited
  auto opened = opener_(name, options_);
  if (!opened.ok()) {
    // An unknown name's error already names it and the choices.
    if (opened.status().code() == StatusCode::kInvalidArgument) return opened.status();
    return opened.status().WithContext("runtime " + std::string(name));
  }
  Runtime* rt = opened->get();
  LOG_INFO("runtime {} opened ({})", name, rt->accelerator());
  std::lock_guard<std::mutex> l(mu_);
  runtimes_.emplace(std::string(name), std::move(opened).value());
  return rt;
}

StatusOr<Runtime*> RuntimeSet::ForSnapshot(const std::string& dir, std::string_view runtime) const {
  std::error_code ec;
  if (!dir.empty() && std::filesystem::exists(dir, ec)) return Named(RuntimeOfSnapshot(dir));
  return Named(runtime);
}

Status RuntimeOpStatus(const Status& st, std::string_view runtime, std::string_view what, std::string_view context) {
  if (st.ok()) return st;
  if (st.code() == StatusCode::kUnimplemented) {
    return Status(StatusCode::kUnimplemented,
                  std::string(what) + " is not supported by the " + std::string(runtime) + " runtime: " + st.message());
  }
  return context.empty() ? st : st.WithContext(context);
}

Status CheckDropsMemory(const Runtime& runtime, const std::string& absent_dir) {
  Status st = runtime.snapshots().DropMemory(absent_dir);
  return st.code() == StatusCode::kUnimplemented ? st : OkStatus();
}

}  // namespace airlock
