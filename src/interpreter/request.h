// Request bodies of the port-49999 API, parsed at the edge into plain
// values (shared/spec/e2b-code-interpreter.md §B.1, §B.4). Errors carry the
// HTTP status to answer with and a plain-text message:
//   400 body not a JSON object, `code` missing or not a string, `env_vars`
//       not an object of strings (or a name with '=' or NUL, a value with
//       NUL: no environment holds them), both context_id and language given
//       ("Only one of context_id or language can be provided");
// the language itself is checked later against kernels.json (500).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace airlock::interpreter {

struct RequestError {
  int status = 400;
  std::string message;
};

struct ExecuteRequest {
  std::string code;
  std::optional<std::string> context_id;
  std::optional<std::string> language;  // normalised (NormalizeLanguage)
  std::map<std::string, std::string> env_vars;
};

struct CreateContextRequest {
  std::string language = "python";  // normalised
  std::optional<std::string> cwd;
};

// Lower-cased and trimmed; "js" → "javascript", "ts" → "typescript".
std::string NormalizeLanguage(std::string_view language);

// Either the request or the error (a tiny result type: no exceptions).
template <typename T>
struct Parsed {
  std::optional<T> value;
  RequestError error;
  bool ok() const { return value.has_value(); }
};

Parsed<ExecuteRequest> ParseExecuteRequest(std::string_view body);
// An empty body is {} (python, the default cwd).
Parsed<CreateContextRequest> ParseCreateContextRequest(std::string_view body);

}  // namespace airlock::interpreter
