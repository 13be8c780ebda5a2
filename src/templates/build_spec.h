// What a custom-template build is asked to do, parsed and checked: the
// names of shared/spec/e2b-templates.md §A.3.1 and §A.8 (ParseName), the
// TemplateBuildStartV2 body of §A.5 (ParseBuildStart), and the pure pieces
// of a step's execution in §A.4 and §A.6 (COPY's source base, ENV's value
// escaping, WORKDIR's join) and of the layer-cache hash chain in §A.7.
//
// Everything here sees untrusted bytes (the API body) and is fuzzed
// (tests/fuzz/template_spec_fuzz.cc). Errors are InvalidArgument with a
// message fit for a 400 body.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace airlock::templates {

// Bounds on a build request (beyond them: 400).
inline constexpr size_t kMaxSteps = 256;
inline constexpr size_t kMaxArgBytes = 64 * 1024;   // one step argument
inline constexpr size_t kMaxCommandBytes = 64 * 1024;  // startCmd, readyCmd

// "alias", "alias:tag", "namespace/alias[:tag]", per id.ParseName: trimmed,
// lower-cased; alias and namespace of [a-z0-9_-]+, a tag of [a-z0-9_.-]+
// that is not a UUID. Tag "default" (or none) is `tag` = "".
struct TemplateName {
  std::string ns;     // "" when none was given
  std::string alias;  // never empty
  std::string tag;    // "" for default
};
StatusOr<TemplateName> ParseName(std::string_view text);
// A tag on its own (POST /templates/tags, the request's tags).
Status ValidateTag(std::string_view tag);
// 8-4-4-4-12 hex digits.
bool IsUuid(std::string_view s);

enum class StepType { kRun, kCopy, kEnv, kWorkdir, kUser };
std::string_view StepTypeName(StepType t);  // "RUN", "COPY", ...

struct Step {
  StepType type = StepType::kRun;
  std::vector<std::string> args;
  bool force = false;      // this step's own flag (ForcedSteps spreads it)
  std::string files_hash;  // COPY: 64 lower-case hex digits
};

// fromImageRegistry: {"type":"registry","username","password"} (aws and gcp
// are parsed and refused when the build runs).
struct RegistryAuth {
  std::string type;  // "registry" | "aws" | "gcp"
  std::string username, password;
};

struct BuildStart {
  std::string from_image;     // exactly one of from_image and from_template
  std::string from_template;
  std::optional<RegistryAuth> registry;
  std::string start_cmd, ready_cmd;
  std::vector<Step> steps;
  bool force = false;
};
// Parses TemplateBuildStartV2. Unknown fields are ignored; type names are
// upper-cased, ADD is COPY and ARG is ENV. Argument counts: RUN 1-2, COPY
// 2-4 (with filesHash; args[3] "" or 3-4 octal digits), ENV an even number
// >= 2, WORKDIR 1, USER 1-2.
StatusOr<BuildStart> ParseBuildStart(const nlohmann::json& body);

// Which steps run regardless of the cache: all with `force`, else every step
// from the first one whose own flag is set (§A.7 forceSteps).
std::vector<bool> ForcedSteps(const BuildStart& start);

// HashKeys(a, b, ...) = hex(sha256(a ";" b ";" ...)) (§A.7).
std::string HashKeys(const std::vector<std::string>& keys);
// A step's key in the chain: HashKeys(prev, TYPE, args joined by " ",
// filesHash or "").
std::string StepHash(const std::string& prev, const Step& step);

// COPY's source base: the part of `src` before its first glob segment (a
// segment holding * ? [ or {), without a trailing "/": "app" -> "app",
// "app/*.py" -> "app", "*.txt" -> "" (the archive's root).
std::string CopySourceBase(std::string_view src);
// ENV: the text placed between double quotes in `printf "%s" "<v>"`, so
// that $VAR expands and nothing else runs: \ " ` and "$(" escaped.
std::string EscapeEnvValue(std::string_view value);
// WORKDIR: `path` against the current workdir ("" = "/"), normalised
// lexically (. and .. removed; never above /).
std::string JoinWorkdir(std::string_view current, std::string_view path);
// A build step's user: a POSIX-ish name ([a-z_][a-z0-9_-]*[$]?, at most 32).
bool ValidUserName(std::string_view name);

// The build context carried from step to step (§A.6) and saved with each
// layer. JSON: {"user":..,"workdir":..,"env":{..}}.
struct BuildContext {
  std::string user = "root";
  std::string workdir;  // "" = unset
  std::map<std::string, std::string> env;
  nlohmann::json ToJson() const;
  static BuildContext FromJson(const nlohmann::json& j);
};

// The PATH a step runs with: ctx's PATH (if any) + the system dirs (§A.6).
std::map<std::string, std::string> StepEnv(const BuildContext& ctx);

}  // namespace airlock::templates
