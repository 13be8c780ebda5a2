#include "interpreter/env_snippet.h"

#include <cctype>
#include <nlohmann/json.hpp>

namespace airlock::interpreter {

namespace {

std::string VarsPayload(const EnvVars& vars) {
  // Plain UTF-8 JSON (the request parser already refused invalid UTF-8).
  return Base64Encode(nlohmann::json(vars).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

bool IsJs(std::string_view l) { return l == "javascript" || l == "typescript"; }

}  // namespace

std::string Base64Encode(std::string_view in) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                 static_cast<unsigned char>(in[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = static_cast<unsigned char>(in[i]) << 16;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string BashQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  out += '\'';
  return out;
}

bool IsShellName(std::string_view n) {
  if (n.empty() || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

std::string SetEnvSnippet(std::string_view language, const EnvVars& vars, bool save) {
  if (vars.empty()) return "";
  if (language == "python") {
    std::string v = "__import__('json').loads(__import__('base64').b64decode('" + VarsPayload(vars) +
                    "').decode('utf-8'))";
    if (!save) return "__import__('os').environ.update(" + v + ")\n";
    // The saved values live on the os module, not in the user's namespace.
    return "(lambda o, v: (setattr(o, '_airlock_saved_env', {k: o.environ.get(k) for k in v}), "
           "o.environ.update(v)))(__import__('os'), " + v + ")\n";
  }
  if (IsJs(language)) {
    std::string v = "JSON.parse(Buffer.from('" + VarsPayload(vars) + "', 'base64').toString('utf8'))";
    if (!save) return "void Object.assign(process.env, " + v + ");\n";
    return "void ((v) => { const s = {}; for (const k of Object.keys(v)) { "
           "s[k] = Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : null; "
           "process.env[k] = v[k]; } globalThis['__airlockSavedEnv'] = s; })(" + v + ");\n";
  }
  if (language == "bash") {
    std::string out;
    for (const auto& [k, val] : vars) {
      if (!IsShellName(k)) continue;
      if (save) {
        out += "if [ \"${" + k + "+x}\" = x ]; then __airlock_had_" + k + "=1; __airlock_old_" + k + "=\"$" + k +
               "\"; else __airlock_had_" + k + "=0; fi\n";
      }
      out += "export " + k + "=" + BashQuote(val) + "\n";
    }
    return out;
  }
  return "";
}

std::string RestoreEnvSnippet(std::string_view language, const EnvVars& vars) {
  if (vars.empty()) return "";
  if (language == "python") {
    return "(lambda o: [o.environ.pop(k, None) if v is None else o.environ.__setitem__(k, v) "
           "for k, v in o.__dict__.pop('_airlock_saved_env', {}).items()])(__import__('os'))\n";
  }
  if (IsJs(language)) {
    return "void ((s) => { for (const k of Object.keys(s || {})) { if (s[k] === null) delete process.env[k]; "
           "else process.env[k] = s[k]; } delete globalThis['__airlockSavedEnv']; })"
           "(globalThis['__airlockSavedEnv']);\n";
  }
  if (language == "bash") {
    std::string out;
    for (const auto& [k, val] : vars) {
      if (!IsShellName(k)) continue;
      out += "if [ \"$__airlock_had_" + k + "\" = 1 ]; then export " + k + "=\"$__airlock_old_" + k +
             "\"; else unset " + k + "; fi; unset __airlock_had_" + k + " __airlock_old_" + k + "\n";
    }
    return out;
  }
  return "";
}

std::string ReseedSnippet(std::string_view language) {
  if (language != "python") return "";
  return "__import__('random').seed()\n"
         "(lambda m: m['numpy'].random.seed() if 'numpy' in m else None)(__import__('sys').modules)\n";
}

std::string WarmUpSnippet(std::string_view language) {
  if (language != "python") return "";
  return ReseedSnippet(language) + "__import__('IPython').get_ipython().display_formatter.format(1 + 1)\n";
}

}  // namespace airlock::interpreter
