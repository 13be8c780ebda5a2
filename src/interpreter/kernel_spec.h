// kernels.json: the table of kernels the server starts, one process per
// context (docs/code-interpreter.md, "The contract"):
//   {"<language>": {"argv": ["...", "{connection_file}", ...], "env": {"K": "V"}}, ...}
// `{connection_file}` and `{dir}` (the directory of kernels.json) are
// substituted in every argv element. Load errors name the file and what is
// wrong (invalid_argument) or the failed read (ErrnoError).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::interpreter {

struct KernelSpec {
  std::string language;
  std::vector<std::string> argv;  // unsubstituted
  std::map<std::string, std::string> env;
};

struct KernelTable {
  std::string dir;  // directory of kernels.json
  std::map<std::string, KernelSpec> kernels;  // by language

  const KernelSpec* Find(std::string_view language) const;
  // "bash, javascript, python, typescript"
  std::string Languages() const;
  // argv with {connection_file} and {dir} replaced.
  std::vector<std::string> Argv(const KernelSpec& spec, const std::string& connection_file) const;
};

StatusOr<KernelTable> ParseKernelTable(std::string_view text, std::string dir, std::string_view origin);
StatusOr<KernelTable> LoadKernelTable(const std::string& path);

}  // namespace airlock::interpreter
