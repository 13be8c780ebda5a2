#include "core/template_runtime.h"

#include <algorithm>
#include <cctype>

#include "image/image.h"

namespace airlock {
namespace {

bool IsBuiltIn(const std::string& name) {
  const auto& known = image::KnownTemplates();
  return std::find(known.begin(), known.end(), image::CanonicalTemplateName(name)) != known.end();
}

}  // namespace

TemplateRef ParseTemplateRuntime(const std::string& name, const std::string& default_runtime,
                                 const std::vector<std::string>& runtimes) {
  for (const auto& runtime : runtimes) {
    // base-qemu too: on a daemon whose default is gvisor, that is qemu's base.
    const std::string suffix = "-" + runtime;
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string base = name.substr(0, name.size() - suffix.size());
    if (IsBuiltIn(base)) return {image::CanonicalTemplateName(base), runtime, true};
  }
  return {name, default_runtime, false};
}

bool IsBuiltInTemplateName(const std::string& name) {
  std::string n = name.substr(0, name.find(':'));
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return IsBuiltIn(n) || ParseTemplateRuntime(n, kDefaultRuntime).runtime_in_name;
}

std::string TemplateNameOn(const std::string& image_template, const std::string& runtime,
                           const std::string& default_runtime) {
  if (runtime.empty() || runtime == default_runtime || !IsBuiltIn(image_template)) return image_template;
  return image::CanonicalTemplateName(image_template) + "-" + runtime;
}

}  // namespace airlock
