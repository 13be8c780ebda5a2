#include "interpreter/kernel_spec.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace airlock::interpreter {

using json = nlohmann::json;

namespace {

void ReplaceAll(std::string& s, std::string_view from, std::string_view to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

}  // namespace

const KernelSpec* KernelTable::Find(std::string_view language) const {
  auto it = kernels.find(std::string(language));
  return it == kernels.end() ? nullptr : &it->second;
}

std::string KernelTable::Languages() const {
  std::string out;
  for (const auto& [l, _] : kernels) out += (out.empty() ? "" : ", ") + l;
  return out;
}

std::vector<std::string> KernelTable::Argv(const KernelSpec& spec, const std::string& connection_file) const {
  std::vector<std::string> argv = spec.argv;
  for (auto& a : argv) {
    ReplaceAll(a, "{connection_file}", connection_file);
    ReplaceAll(a, "{dir}", dir);
  }
  return argv;
}

StatusOr<KernelTable> ParseKernelTable(std::string_view text, std::string dir, std::string_view origin) {
  std::string where(origin);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(where + ": not a JSON object");
  KernelTable t;
  t.dir = std::move(dir);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& lang = it.key();
    if (!it->is_object()) return InvalidArgument(where + ": entry '" + lang + "' is not an object");
    KernelSpec spec;
    spec.language = lang;
    auto argv = it->find("argv");
    if (argv == it->end() || !argv->is_array() || argv->empty())
      return InvalidArgument(where + ": entry '" + lang + "' needs a non-empty argv array");
    for (const auto& a : *argv) {
      if (!a.is_string()) return InvalidArgument(where + ": entry '" + lang + "': argv holds a non-string");
      spec.argv.push_back(a.get<std::string>());
    }
    if (auto env = it->find("env"); env != it->end()) {
      if (!env->is_object()) return InvalidArgument(where + ": entry '" + lang + "': env is not an object");
      for (auto e = env->begin(); e != env->end(); ++e) {
        if (!e->is_string()) return InvalidArgument(where + ": entry '" + lang + "': env value is not a string");
        spec.env[e.key()] = e->get<std::string>();
      }
    }
    t.kernels[lang] = std::move(spec);
  }
  if (t.kernels.empty()) return InvalidArgument(where + ": no kernels");
  return t;
}

StatusOr<KernelTable> LoadKernelTable(const std::string& path) {
  std::ifstream f(path);
  if (!f) return ErrnoError("open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string dir = ".";
  if (auto slash = path.rfind('/'); slash != std::string::npos) dir = slash == 0 ? "/" : path.substr(0, slash);
  return ParseKernelTable(ss.str(), dir, path);
}

}  // namespace airlock::interpreter
