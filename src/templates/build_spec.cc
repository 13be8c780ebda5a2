#include "templates/build_spec.h"

#include <algorithm>
#include <cctype>

#include "image/hash.h"

namespace airlock::templates {

using nlohmann::json;

namespace {

bool AllOf(std::string_view s, std::string_view allowed_extra) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || allowed_extra.find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool IsHex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

bool IsUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(s[i]))) {
      return false;
    }
  }
  return true;
}

Status ValidateTag(std::string_view tag) {
  if (tag.size() > 128 || !AllOf(tag, "-_.")) return InvalidArgument("Invalid tag '" + std::string(tag) + "'");
  if (IsUuid(tag)) return InvalidArgument("Invalid tag '" + std::string(tag) + "': a tag cannot be a UUID");
  return OkStatus();
}

StatusOr<TemplateName> ParseName(std::string_view text) {
  std::string s = Lower(Trim(text));
  TemplateName n;
  std::string name = s;
  if (size_t colon = s.find(':'); colon != std::string::npos) {
    name = s.substr(0, colon);
    n.tag = s.substr(colon + 1);
    if (n.tag.empty()) return InvalidArgument("Invalid name: empty tag in '" + std::string(text) + "'");
    if (!IsUuid(n.tag)) {
      if (Status st = ValidateTag(n.tag); !st.ok()) return InvalidArgument("Invalid name: " + st.message());
    }
    if (n.tag == "default") n.tag.clear();
  }
  if (size_t slash = name.find('/'); slash != std::string::npos) {
    n.ns = name.substr(0, slash);
    n.alias = name.substr(slash + 1);
    if (!AllOf(n.ns, "-_")) return InvalidArgument("Invalid name: bad namespace in '" + std::string(text) + "'");
  } else {
    n.alias = name;
  }
  if (n.alias.size() > 128 || !AllOf(n.alias, "-_"))
    return InvalidArgument("Invalid name: '" + std::string(text) + "' (an alias is [a-z0-9_-]+)");
  return n;
}

std::string_view StepTypeName(StepType t) {
  switch (t) {
    case StepType::kRun:
      return "RUN";
    case StepType::kCopy:
      return "COPY";
    case StepType::kEnv:
      return "ENV";
    case StepType::kWorkdir:
      return "WORKDIR";
    case StepType::kUser:
      return "USER";
  }
  return "?";
}

StatusOr<BuildStart> ParseBuildStart(const json& body) {
  if (!body.is_object()) return InvalidArgument("request body must be a JSON object");
  BuildStart b;
  auto str = [&](const char* key, std::string* out, size_t max) -> Status {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return OkStatus();
    if (!it->is_string()) return InvalidArgument(std::string("\"") + key + "\" must be a string");
    if (it->get_ref<const std::string&>().size() > max) return InvalidArgument(std::string("\"") + key + "\" is too long");
    *out = it->get<std::string>();
    return OkStatus();
  };
  RETURN_IF_ERROR(str("fromImage", &b.from_image, 1024));
  RETURN_IF_ERROR(str("fromTemplate", &b.from_template, 1024));
  RETURN_IF_ERROR(str("startCmd", &b.start_cmd, kMaxCommandBytes));
  RETURN_IF_ERROR(str("readyCmd", &b.ready_cmd, kMaxCommandBytes));
  if (b.from_image.empty() == b.from_template.empty())
    return InvalidArgument("exactly one of fromImage and fromTemplate must be set");
  if (auto it = body.find("force"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidArgument("\"force\" must be a boolean");
    b.force = it->get<bool>();
  }
  if (auto it = body.find("fromImageRegistry"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidArgument("\"fromImageRegistry\" must be an object");
    RegistryAuth a;
    auto field = [&](const char* k) -> std::string {
      auto f = it->find(k);
      return f != it->end() && f->is_string() ? f->get<std::string>() : "";
    };
    a.type = field("type");
    if (a.type != "registry" && a.type != "aws" && a.type != "gcp")
      return InvalidArgument("\"fromImageRegistry.type\" must be registry, aws or gcp");
    a.username = field("username");
    a.password = field("password");
    b.registry = a;
  }
  auto steps = body.find("steps");
  if (steps != body.end() && !steps->is_null()) {
    if (!steps->is_array()) return InvalidArgument("\"steps\" must be an array");
    if (steps->size() > kMaxSteps) return InvalidArgument("at most " + std::to_string(kMaxSteps) + " steps");
    size_t index = 0;
    for (const auto& s : *steps) {
      ++index;
      const std::string where = "step " + std::to_string(index);
      if (!s.is_object()) return InvalidArgument(where + " must be an object");
      auto type = s.find("type");
      if (type == s.end() || !type->is_string()) return InvalidArgument(where + ": \"type\" must be a string");
      std::string t = type->get<std::string>();
      for (char& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      Step step;
      if (t == "RUN") step.type = StepType::kRun;
      else if (t == "COPY" || t == "ADD") step.type = StepType::kCopy;
      else if (t == "ENV" || t == "ARG") step.type = StepType::kEnv;
      else if (t == "WORKDIR") step.type = StepType::kWorkdir;
      else if (t == "USER") step.type = StepType::kUser;
      else return InvalidArgument(where + ": unknown step type \"" + type->get<std::string>() + "\"");
      auto args = s.find("args");
      if (args != s.end() && !args->is_null()) {
        if (!args->is_array()) return InvalidArgument(where + ": \"args\" must be an array of strings");
        for (const auto& a : *args) {
          if (!a.is_string()) return InvalidArgument(where + ": \"args\" must be an array of strings");
          if (a.get_ref<const std::string&>().size() > kMaxArgBytes) return InvalidArgument(where + ": an argument is too long");
          step.args.push_back(a.get<std::string>());
        }
      }
      if (auto f = s.find("force"); f != s.end() && !f->is_null()) {
        if (!f->is_boolean()) return InvalidArgument(where + ": \"force\" must be a boolean");
        step.force = f->get<bool>();
      }
      if (auto h = s.find("filesHash"); h != s.end() && !h->is_null()) {
        if (!h->is_string() || !IsHex64(h->get<std::string>()))
          return InvalidArgument(where + ": \"filesHash\" must be 64 lower-case hex digits");
        step.files_hash = h->get<std::string>();
      }
      const size_t n = step.args.size();
      auto count = [&](size_t lo, size_t hi) -> Status {
        if (n < lo || n > hi)
          return InvalidArgument(where + ": " + std::string(StepTypeName(step.type)) + " takes " + std::to_string(lo) +
                                 (hi == lo ? "" : "-" + std::to_string(hi)) + " arguments, not " + std::to_string(n));
        return OkStatus();
      };
      switch (step.type) {
        case StepType::kRun:
          RETURN_IF_ERROR(count(1, 2));
          if (step.args[0].empty()) return InvalidArgument(where + ": RUN needs a command");
          if (n == 2 && !step.args[1].empty() && !ValidUserName(step.args[1]))
            return InvalidArgument(where + ": bad user \"" + step.args[1] + "\"");
          break;
        case StepType::kCopy: {
          RETURN_IF_ERROR(count(2, 4));
          if (step.files_hash.empty()) return InvalidArgument(where + ": COPY requires files hash to be set");
          if (step.args[0].empty() || step.args[1].empty()) return InvalidArgument(where + ": COPY needs a source and a target");
          if (n >= 4 && !step.args[3].empty()) {
            const std::string& m = step.args[3];
            bool octal = m.size() >= 3 && m.size() <= 4 &&
                         std::all_of(m.begin(), m.end(), [](char c) { return c >= '0' && c <= '7'; });
            if (!octal) return InvalidArgument(where + ": COPY mode \"" + m + "\" is not octal");
          }
          if (n >= 3 && !step.args[2].empty()) {
            std::string owner = step.args[2];
            size_t colon = owner.find(':');
            if (!ValidUserName(owner.substr(0, colon)) ||
                (colon != std::string::npos && !ValidUserName(owner.substr(colon + 1))))
              return InvalidArgument(where + ": bad COPY owner \"" + owner + "\"");
          }
          break;
        }
        case StepType::kEnv:
          if (n == 0 || n % 2 != 0) return InvalidArgument(where + ": ENV takes name/value pairs, not " + std::to_string(n) + " arguments");
          for (size_t i = 0; i < n; i += 2) {
            const std::string& k = step.args[i];
            bool ok = !k.empty() && !std::isdigit(static_cast<unsigned char>(k[0])) &&
                      std::all_of(k.begin(), k.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
            if (!ok) return InvalidArgument(where + ": bad variable name \"" + k + "\"");
          }
          break;
        case StepType::kWorkdir:
          RETURN_IF_ERROR(count(1, 1));
          if (step.args[0].empty()) return InvalidArgument(where + ": WORKDIR needs a path");
          break;
        case StepType::kUser:
          RETURN_IF_ERROR(count(1, 2));
          if (!ValidUserName(step.args[0])) return InvalidArgument(where + ": bad user \"" + step.args[0] + "\"");
          break;
      }
      for (const auto& a : step.args) {
        if (a.find('\0') != std::string::npos) return InvalidArgument(where + ": an argument holds a NUL byte");
      }
      b.steps.push_back(std::move(step));
    }
  }
  return b;
}

std::vector<bool> ForcedSteps(const BuildStart& start) {
  std::vector<bool> out(start.steps.size(), start.force);
  bool on = start.force;
  for (size_t i = 0; i < start.steps.size(); ++i) {
    on = on || start.steps[i].force;
    out[i] = on;
  }
  return out;
}

std::string HashKeys(const std::vector<std::string>& keys) {
  std::string text;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) text += ';';
    text += keys[i];
  }
  return image::Sha256Hex(text);
}

std::string StepHash(const std::string& prev, const Step& step) {
  std::string args;
  for (size_t i = 0; i < step.args.size(); ++i) args += (i ? " " : "") + step.args[i];
  return HashKeys({prev, std::string(StepTypeName(step.type)), args, step.files_hash});
}

std::string CopySourceBase(std::string_view src) {
  std::string out;
  size_t i = 0;
  while (i < src.size()) {
    size_t j = src.find('/', i);
    if (j == std::string_view::npos) j = src.size();
    std::string_view seg = src.substr(i, j - i);
    if (seg.find_first_of("*?[{") != std::string_view::npos) break;
    if (!seg.empty() && seg != ".") out += (out.empty() ? "" : "/") + std::string(seg);
    i = j + 1;
  }
  return out;
}

std::string EscapeEnvValue(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    char c = v[i];
    if (c == '\\' || c == '"' || c == '`') {
      out += '\\';
      out += c;
    } else if (c == '$' && i + 1 < v.size() && v[i + 1] == '(') {
      out += "\\$";
    } else {
      out += c;
    }
  }
  return out;
}

std::string JoinWorkdir(std::string_view current, std::string_view path) {
  std::string full = (!path.empty() && path[0] == '/') ? std::string(path)
                                                       : std::string(current.empty() ? "/" : current) + "/" + std::string(path);
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= full.size()) {
    size_t j = full.find('/', i);
    if (j == std::string::npos) j = full.size();
    std::string seg = full.substr(i, j - i);
    if (seg == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!seg.empty() && seg != ".") {
      parts.push_back(seg);
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

bool ValidUserName(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  if (!(std::islower(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_' ||
              c == '-' || (c == '$' && i + 1 == name.size());
    if (!ok) return false;
  }
  return true;
}

json BuildContext::ToJson() const { return json{{"user", user}, {"workdir", workdir}, {"env", env}}; }

BuildContext BuildContext::FromJson(const json& j) {
  BuildContext c;
  if (!j.is_object()) return c;
  c.user = j.value("user", std::string("root"));
  c.workdir = j.value("workdir", std::string());
  if (auto e = j.find("env"); e != j.end() && e->is_object()) {
    for (auto& [k, v] : e->items()) {
      if (v.is_string()) c.env[k] = v.get<std::string>();
    }
  }
  return c;
}

std::map<std::string, std::string> StepEnv(const BuildContext& ctx) {
  std::map<std::string, std::string> env = ctx.env;
  constexpr char kSystemPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  if (auto it = env.find("PATH"); it != env.end()) it->second += std::string(":") + kSystemPath;
  return env;
}

}  // namespace airlock::templates
