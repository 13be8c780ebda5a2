#include "image/kmod.h"

#include <functional>
#include <sstream>

namespace airlock::image {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string Normalize(std::string_view name) {
  std::string s(name);
  for (char& c : s) {
    if (c == '-') c = '_';
  }
  return s;
}

}  // namespace

std::string ModuleNameFromPath(std::string_view path) {
  size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  size_t ko = base.find(".ko");
  if (ko != std::string_view::npos) base = base.substr(0, ko);
  return Normalize(base);
}

StatusOr<ModuleDeps> ParseModulesDep(std::string_view text) {
  ModuleDeps out;
  size_t lineno = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++lineno;
    line = Trim(line);
    if (line.empty() || line.front() == '#') continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return InvalidArgument("modules.dep line " + std::to_string(lineno) +
                             ": expected \"path: deps\", got \"" + std::string(line) + "\"");
    }
    std::string path(Trim(line.substr(0, colon)));
    std::vector<std::string> deps;
    std::istringstream rest{std::string(line.substr(colon + 1))};
    for (std::string d; rest >> d;) deps.push_back(d);
    out.path_of[ModuleNameFromPath(path)] = path;
    out.deps_of[path] = std::move(deps);
  }
  return out;
}

std::set<std::string> ParseModulesBuiltin(std::string_view text) {
  std::set<std::string> out;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    std::string_view t = Trim(line);
    if (!t.empty()) out.insert(ModuleNameFromPath(t));
  }
  return out;
}

StatusOr<std::vector<std::string>> ResolveLoadOrder(const ModuleDeps& deps,
                                                    const std::vector<std::string>& wanted,
                                                    const std::set<std::string>& builtin) {
  std::vector<std::string> order;
  std::set<std::string> done, visiting;
  std::function<Status(const std::string&, const std::string&)> visit =
      [&](const std::string& path, const std::string& needed_by) -> Status {
    if (done.count(path)) return OkStatus();
    if (visiting.count(path)) {
      return FailedPrecondition("modules.dep: dependency cycle through " + path);
    }
    auto it = deps.deps_of.find(path);
    if (it == deps.deps_of.end()) {
      return NotFound("modules.dep: " + path + " (needed by " + needed_by + ") is not listed");
    }
    visiting.insert(path);
    // depmod lists dependencies so that the last one loads first; visiting
    // each one's own dependencies first makes the order right whatever the
    // listing order is.
    for (auto d = it->second.rbegin(); d != it->second.rend(); ++d) {
      RETURN_IF_ERROR(visit(*d, path));
    }
    visiting.erase(path);
    done.insert(path);
    order.push_back(path);
    return OkStatus();
  };
  for (const auto& w : wanted) {
    std::string name = Normalize(w);
    auto it = deps.path_of.find(name);
    if (it == deps.path_of.end()) {
      if (builtin.count(name)) continue;
      return NotFound("kernel module " + name + " is neither in modules.dep nor built in");
    }
    RETURN_IF_ERROR(visit(it->second, name));
  }
  return order;
}

}  // namespace airlock::image
