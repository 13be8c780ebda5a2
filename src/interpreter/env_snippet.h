// The small silent executions that set and reset environment variables in
// a kernel, in the kernel's own language (docs/code-interpreter.md: the
// server does this, kernels need nothing special). Names and values are
// untrusted strings: python and javascript/typescript get them as one
// base64-encoded JSON object (the snippet holds nothing else the caller
// controls), bash as single-quoted words ('\'' for a quote). A name bash
// cannot hold (not [A-Za-z_][A-Za-z0-9_]*) is left out for bash.
//
//   SetEnvSnippet(lang, vars, save=true)   saves the current values, then sets
//   RestoreEnvSnippet(lang, vars)          puts the saved values back (or
//                                          removes a variable that was unset)
//   SetEnvSnippet(lang, vars, save=false)  sets for good (create-time envs)
// An unknown language gives "" (nothing to run).
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace airlock::interpreter {

using EnvVars = std::map<std::string, std::string>;

std::string SetEnvSnippet(std::string_view language, const EnvVars& vars, bool save);
std::string RestoreEnvSnippet(std::string_view language, const EnvVars& vars);

// Python only: re-seed `random` and, when already imported, numpy's global
// RNG (a sandbox restored from a snapshot shares its parent's PRNG state).
std::string ReseedSnippet(std::string_view language);

// Python only: re-seeds (ReseedSnippet) and formats a value through the
// kernel's display formatters (airlock's e2b/chart and e2b/data among them)
// in a silent execution, so
// IPython's lazy set-up of its execute and display paths is done before the
// template snapshot (Context::WarmUp). It binds no name in the user's
// namespace ('_' included) and adds nothing to the history.
std::string WarmUpSnippet(std::string_view language);

// Standard base64 (with padding).
std::string Base64Encode(std::string_view bytes);
// A bash single-quoted word holding exactly `s`.
std::string BashQuote(std::string_view s);
bool IsShellName(std::string_view name);

}  // namespace airlock::interpreter
