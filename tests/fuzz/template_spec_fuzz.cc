// libFuzzer target for custom-template request bytes (templates/build_spec.h):
// the TemplateBuildStartV2 body and the names and tags the API parses. The
// first byte picks what the rest is: a JSON body, or a name/tag string.
#include "server_request_fuzz.h"
#include "templates/build_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  using namespace airlock::templates;
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    auto body = fuzz::JsonObject(data + 1, size - 1);
    if (!body) return 0;
    auto b = ParseBuildStart(*body);
    if (!b.ok()) {
      fuzz::Check(b.status().code() == StatusCode::kInvalidArgument);
      return 0;
    }
    fuzz::Check(b->from_image.empty() != b->from_template.empty());
    fuzz::Check(b->steps.size() <= kMaxSteps);
    auto forced = ForcedSteps(*b);
    fuzz::Check(forced.size() == b->steps.size());
    std::string prev = "base";
    for (const auto& s : b->steps) {
      if (s.type == StepType::kCopy) {
        fuzz::Check(s.files_hash.size() == 64);
        std::string base = CopySourceBase(s.args[0]);
        fuzz::Check(base.find("//") == std::string::npos);
      }
      if (s.type == StepType::kEnv) {
        fuzz::Check(s.args.size() % 2 == 0);
        for (size_t i = 1; i < s.args.size(); i += 2) {
          std::string e = EscapeEnvValue(s.args[i]);
          // No unescaped command substitution survives.
          for (size_t j = 0; j + 1 < e.size(); ++j) {
            if (e[j] == '$' && e[j + 1] == '(') fuzz::Check(j > 0 && e[j - 1] == '\\');
          }
        }
      }
      if (s.type == StepType::kWorkdir) {
        std::string w = JoinWorkdir("/", s.args[0]);
        fuzz::Check(!w.empty() && w[0] == '/' && w.find("/../") == std::string::npos);
      }
      prev = StepHash(prev, s);
      fuzz::Check(prev.size() == 64);
    }
    return 0;
  }
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (auto n = ParseName(text); n.ok()) {
    fuzz::Check(!n->alias.empty());
    fuzz::Check(n->tag != "default");
  } else {
    fuzz::Check(n.status().code() == StatusCode::kInvalidArgument);
  }
  (void)ValidateTag(text);
  (void)ValidUserName(text);
  return 0;
}
