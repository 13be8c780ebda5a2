#include "interpreter/request.h"

#include <cctype>
#include <nlohmann/json.hpp>

namespace airlock::interpreter {

using json = nlohmann::json;

namespace {

template <typename T>
Parsed<T> Fail(int status, std::string message) {
  Parsed<T> p;
  p.error = RequestError{status, std::move(message)};
  return p;
}

bool AllSpace(std::string_view s) {
  for (char c : s) {
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// A string field that may be absent or null; `bad` set when present with
// another type.
std::optional<std::string> OptionalString(const json& j, const char* key, bool& bad) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) {
    bad = true;
    return std::nullopt;
  }
  return it->get<std::string>();
}

}  // namespace

std::string NormalizeLanguage(std::string_view language) {
  size_t b = 0, e = language.size();
  while (b < e && std::isspace(static_cast<unsigned char>(language[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(language[e - 1]))) --e;
  std::string l;
  for (size_t i = b; i < e; ++i) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(language[i]))));
  if (l == "js") return "javascript";
  if (l == "ts") return "typescript";
  return l;
}

Parsed<ExecuteRequest> ParseExecuteRequest(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Fail<ExecuteRequest>(400, "The request body must be a JSON object");
  ExecuteRequest r;
  auto code = j.find("code");
  if (code == j.end() || !code->is_string()) return Fail<ExecuteRequest>(400, "Field 'code' (a string) is required");
  r.code = code->get<std::string>();
  bool bad = false;
  r.context_id = OptionalString(j, "context_id", bad);
  if (bad) return Fail<ExecuteRequest>(400, "Field 'context_id' must be a string");
  auto language = OptionalString(j, "language", bad);
  if (bad) return Fail<ExecuteRequest>(400, "Field 'language' must be a string");
  if (r.context_id && language)
    return Fail<ExecuteRequest>(400, "Only one of context_id or language can be provided");
  if (language) r.language = NormalizeLanguage(*language);
  if (auto env = j.find("env_vars"); env != j.end() && !env->is_null()) {
    if (!env->is_object()) return Fail<ExecuteRequest>(400, "Field 'env_vars' must be an object of strings");
    for (auto it = env->begin(); it != env->end(); ++it) {
      if (!it->is_string()) return Fail<ExecuteRequest>(400, "Field 'env_vars' must be an object of strings");
      if (it.key().empty()) return Fail<ExecuteRequest>(400, "An env_vars name must not be empty");
      // No process environment can hold these.
      if (it.key().find_first_of(std::string_view("=\0", 2)) != std::string::npos ||
          it->get_ref<const std::string&>().find('\0') != std::string::npos)
        return Fail<ExecuteRequest>(400, "env_vars names must not contain '=' or NUL, nor values NUL");
      r.env_vars[it.key()] = it->get<std::string>();
    }
  }
  Parsed<ExecuteRequest> p;
  p.value = std::move(r);
  return p;
}

Parsed<CreateContextRequest> ParseCreateContextRequest(std::string_view body) {
  CreateContextRequest r;
  if (!AllSpace(body)) {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return Fail<CreateContextRequest>(400, "The request body must be a JSON object");
    bool bad = false;
    auto language = OptionalString(j, "language", bad);
    if (bad) return Fail<CreateContextRequest>(400, "Field 'language' must be a string");
    r.cwd = OptionalString(j, "cwd", bad);
    if (bad) return Fail<CreateContextRequest>(400, "Field 'cwd' must be a string");
    if (language && !AllSpace(*language)) r.language = NormalizeLanguage(*language);
    if (r.cwd && r.cwd->empty()) r.cwd.reset();
  }
  Parsed<CreateContextRequest> p;
  p.value = std::move(r);
  return p;
}

}  // namespace airlock::interpreter
