#include "cli/dockerfile.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace airlock::cli {

using nlohmann::json;
using templates::Step;
using templates::StepType;

namespace {

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  return s;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string_view Trim(std::string_view s) { return TrimRight(TrimLeft(s)); }

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// One instruction after line continuations and comments: its first line,
// its keyword (upper case) and the text after it.
struct Instruction {
  size_t line = 0;
  std::string keyword;
  std::string rest;
};

Status LineError(size_t line, const std::string& what) {
  return InvalidArgument("line " + std::to_string(line) + ": " + what);
}

// The escape character of a `# escape=` parser directive (before anything
// else in the file), else a backslash.
StatusOr<char> EscapeOf(const std::vector<std::string_view>& lines) {
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view t = Trim(lines[i]);
    if (t.empty() || t[0] != '#') break;
    std::string_view body = TrimLeft(t.substr(1));
    size_t eq = body.find('=');
    if (eq == std::string_view::npos) break;
    std::string key = Upper(Trim(body.substr(0, eq)));
    std::string_view value = Trim(body.substr(eq + 1));
    if (key == "ESCAPE") {
      if (value == "\\" || value == "`") return value[0];
      return LineError(i + 1, "the escape directive takes \\ or `, not '" + std::string(value) + "'");
    }
    if (key != "SYNTAX" && key != "CHECK") break;  // a comment, not a directive
  }
  return '\\';
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t i = 0; i <= text.size();) {
    size_t nl = text.find('\n', i);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view l = text.substr(i, nl - i);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    lines.push_back(l);
    i = nl + 1;
  }
  return lines;
}

// Instructions: continuation lines joined (with one blank), blank and
// comment lines dropped (inside a continuation too).
std::vector<Instruction> SplitInstructions(const std::vector<std::string_view>& lines, char escape) {
  std::vector<Instruction> out;
  std::string cur;
  size_t first = 0;
  bool continued = false;
  auto emit = [&] {
    std::string_view all = Trim(cur);
    size_t end = 0;
    while (end < all.size() && !std::isspace(static_cast<unsigned char>(all[end]))) ++end;
    out.push_back({first, Upper(all.substr(0, end)), std::string(TrimLeft(all.substr(end)))});
  };
  for (size_t n = 0; n < lines.size(); ++n) {
    std::string_view t = TrimLeft(lines[n]);
    if (t.empty() || t[0] == '#') continue;
    if (!continued) {
      first = n + 1;
      cur.clear();
    }
    std::string_view body = TrimRight(t);
    continued = !body.empty() && body.back() == escape;
    if (continued) body = TrimRight(body.substr(0, body.size() - 1));
    if (!cur.empty() && !body.empty()) cur += ' ';
    cur += body;
    if (!continued) emit();
  }
  if (continued && !Trim(cur).empty()) emit();  // a continuation at the end of the file
  return out;
}

// Docker's word splitting: blanks separate words (unless keep_blanks),
// single quotes are literal, double quotes take escape + " / escape / $,
// and outside quotes escape + any character is that character. Quotes are
// removed.
StatusOr<std::vector<std::string>> Words(std::string_view s, char escape, bool keep_blanks = false) {
  std::vector<std::string> words;
  std::string w;
  bool in_word = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (!keep_blanks && std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(std::move(w));
      w.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == escape) {
      if (i + 1 < s.size()) w += s[++i];
      else w += c;
    } else if (c == '\'') {
      size_t end = s.find('\'', i + 1);
      if (end == std::string_view::npos) return InvalidArgument("unterminated single quote");
      w += s.substr(i + 1, end - i - 1);
      i = end;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < s.size() && s[j] != '"'; ++j) {
        if (s[j] == escape && j + 1 < s.size() && (s[j + 1] == '"' || s[j + 1] == escape || s[j + 1] == '$')) ++j;
        w += s[j];
      }
      if (j >= s.size()) return InvalidArgument("unterminated double quote");
      i = j;
    } else {
      w += c;
    }
  }
  if (in_word) words.push_back(std::move(w));
  return words;
}

// The exec (JSON array of strings) form, when `rest` is one.
std::optional<std::vector<std::string>> ExecForm(std::string_view rest) {
  rest = Trim(rest);
  if (rest.empty() || rest.front() != '[') return std::nullopt;
  json j = json::parse(rest, nullptr, false);
  if (!j.is_array()) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& e : j) {
    if (!e.is_string()) return std::nullopt;
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::string JoinQuoted(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + ShellQuote(a);
  return out;
}

struct Flag {
  std::string name;  // without "--"
  std::string value;
};

// Takes the leading --name[=value] words off the raw text of an instruction.
StatusOr<std::vector<Flag>> TakeFlags(std::string_view* rest, char escape) {
  std::vector<Flag> flags;
  while (true) {
    std::string_view r = TrimLeft(*rest);
    if (r.substr(0, 2) != "--") break;
    size_t end = 0;
    while (end < r.size() && !std::isspace(static_cast<unsigned char>(r[end]))) ++end;
    ASSIGN_OR_RETURN(auto words, Words(r.substr(2, end - 2), escape));
    std::string word = words.empty() ? "" : words[0];
    size_t eq = word.find('=');
    flags.push_back({word.substr(0, eq), eq == std::string::npos ? "" : word.substr(eq + 1)});
    *rest = r.substr(end);
  }
  *rest = TrimLeft(*rest);
  return flags;
}

// A heredoc (`<<EOF`, `<<-EOF`, `<<"EOF"`; not the here-string `<<<`).
bool HasHeredoc(std::string_view s) {
  for (size_t i = s.find("<<"); i != std::string_view::npos; i = s.find("<<", i + 2)) {
    if ((i > 0 && s[i - 1] == '<') || (i + 2 < s.size() && s[i + 2] == '<')) continue;
    size_t j = i + 2;
    if (j < s.size() && s[j] == '-') ++j;
    if (j < s.size() && (std::isalpha(static_cast<unsigned char>(s[j])) || s[j] == '_' || s[j] == '"' || s[j] == '\''))
      return true;
  }
  return false;
}

// A COPY source must stay inside the context: relative, and no ".." above it.
bool InsideContext(const std::string& src) {
  if (src.empty() || src[0] == '/') return false;
  int depth = 0;
  size_t i = 0;
  while (i <= src.size()) {
    size_t j = src.find('/', i);
    if (j == std::string::npos) j = src.size();
    std::string_view seg(src.data() + i, j - i);
    if (seg == "..") {
      if (--depth < 0) return false;
    } else if (!seg.empty() && seg != ".") {
      ++depth;
    }
    i = j + 1;
  }
  return true;
}

Step MakeStep(StepType type, std::vector<std::string> args) {
  Step s;
  s.type = type;
  s.args = std::move(args);
  return s;
}

// What a Dockerfile sets, instruction by instruction.
class Converter {
 public:
  explicit Converter(char escape) : escape_(escape) {
    // The Docker defaults, as the SDK starts (§A.5).
    Push(MakeStep(StepType::kUser, {"root"}));
    Push(MakeStep(StepType::kWorkdir, {"/"}));
  }

  Status Add(const Instruction& in) {
    line_ = in.line;
    const std::string& k = in.keyword;
    if (k == "FROM") return From(in.rest);
    if (k == "RUN") return Run(in.rest);
    if (k == "COPY" || k == "ADD") return Copy(in.rest, k == "ADD");
    if (k == "ENV" || k == "ARG") return Env(in.rest, k == "ARG");
    if (k == "WORKDIR") return Workdir(in.rest);
    if (k == "USER") return User(in.rest);
    if (k == "CMD" || k == "ENTRYPOINT") return Command(in.rest, k == "ENTRYPOINT");
    if (k == "EXPOSE" || k == "VOLUME") return OkStatus();  // nothing to do in a sandbox
    if (k == "LABEL" || k == "MAINTAINER" || k == "SHELL" || k == "HEALTHCHECK" || k == "STOPSIGNAL" ||
        k == "ONBUILD") {
      Warn(k + " is not supported; ignored");
      return OkStatus();
    }
    return Error("unknown instruction '" + k + "'");
  }

  StatusOr<DockerfileTemplate> Finish() {
    if (from_line_ == 0) return InvalidArgument("the Dockerfile has no FROM instruction");
    // The E2B defaults, unless the Dockerfile chose (§A.5).
    line_ = 0;
    if (!user_set_) Push(MakeStep(StepType::kUser, {"user"}));
    if (!workdir_set_) Push(MakeStep(StepType::kWorkdir, {"/home/user"}));
    std::string start;
    if (entrypoint_ && entrypoint_exec_) {
      start = JoinQuoted(*entrypoint_exec_);
      if (cmd_exec_ && !cmd_exec_->empty()) start += " " + JoinQuoted(*cmd_exec_);
      else if (cmd_ && !cmd_exec_) start += " /bin/sh -c " + ShellQuote(*cmd_);
    } else if (entrypoint_) {
      start = *entrypoint_;  // the shell form ignores CMD, as in Docker
    } else if (cmd_) {
      start = cmd_exec_ ? JoinQuoted(*cmd_exec_) : *cmd_;
    }
    if (!Trim(start).empty()) {
      out_.start.start_cmd = start;
      out_.start.ready_cmd = "sleep 20";  // the SDK's waitForTimeout(20_000)
    }
    return std::move(out_);
  }

 private:
  void Push(Step s) {
    out_.start.steps.push_back(std::move(s));
    out_.step_lines.push_back(line_);
  }
  Status Error(const std::string& what) const { return LineError(line_, what); }
  void Warn(const std::string& what) { out_.warnings.push_back("line " + std::to_string(line_) + ": " + what); }
  // Words of `rest`, an error naming the line.
  StatusOr<std::vector<std::string>> Split(std::string_view rest, bool keep_blanks = false) const {
    auto w = Words(rest, escape_, keep_blanks);
    if (!w.ok()) return Error(w.status().message());
    return w;
  }
  void NoteVariables(const std::string& keyword, const std::string& text) {
    if (text.find('$') != std::string::npos)
      Warn(keyword + ": variables are not substituted here (only ENV values are evaluated, in the build sandbox)");
  }

  Status From(std::string_view rest) {
    if (from_line_ != 0)
      return Error("multi-stage Dockerfiles are not supported (a second FROM; the first is on line " +
                   std::to_string(from_line_) + ")");
    from_line_ = line_;
    ASSIGN_OR_RETURN(auto flags, TakeFlags(&rest, escape_));
    for (const auto& f : flags) Warn("FROM --" + f.name + " is ignored");
    ASSIGN_OR_RETURN(auto w, Split(rest));
    if (w.empty()) return Error("FROM needs an image");
    if (!(w.size() == 1 || (w.size() == 3 && Upper(w[1]) == "AS")))
      return Error("FROM takes an image and an optional 'AS name'");
    constexpr std::string_view kTemplatePrefix = "template:";
    if (w[0].rfind(kTemplatePrefix, 0) == 0) {
      out_.start.from_template = w[0].substr(kTemplatePrefix.size());
      if (out_.start.from_template.empty()) return Error("FROM template: needs a template name");
    } else {
      out_.start.from_image = w[0];
    }
    return OkStatus();
  }

  Status Run(std::string_view rest) {
    ASSIGN_OR_RETURN(auto flags, TakeFlags(&rest, escape_));
    for (const auto& f : flags) {
      if (f.name == "mount" && f.value.find("type=cache") != std::string::npos) {
        Warn("RUN --mount=type=cache is ignored (the step runs without the cache mount)");
      } else if (f.name == "network") {
        Warn("RUN --network is ignored (build sandboxes have the server's build network policy)");
      } else {
        return Error("RUN --" + f.name + " is not supported");
      }
    }
    if (HasHeredoc(rest)) return Error("heredocs (<<WORD) are not supported; join the lines with && instead");
    std::string command;
    if (auto exec = ExecForm(rest)) command = JoinQuoted(*exec);
    else command = std::string(Trim(rest));
    if (Trim(command).empty()) return Error("RUN needs a command");
    Push(MakeStep(StepType::kRun, {command}));
    return OkStatus();
  }

  Status Copy(std::string_view rest, bool add) {
    const std::string keyword = add ? "ADD" : "COPY";
    ASSIGN_OR_RETURN(auto flags, TakeFlags(&rest, escape_));
    std::string owner, mode;
    for (const auto& f : flags) {
      if (f.name == "chown") {
        owner = f.value;
      } else if (f.name == "chmod") {
        bool octal = f.value.size() >= 3 && f.value.size() <= 4 &&
                     std::all_of(f.value.begin(), f.value.end(), [](char c) { return c >= '0' && c <= '7'; });
        if (!octal) return Error(keyword + " --chmod takes an octal mode such as 0755, not '" + f.value + "'");
        mode = std::string(4 - f.value.size(), '0') + f.value;
      } else if (f.name == "from") {
        return Error(keyword + " --from is not supported (multi-stage Dockerfiles are not)");
      } else if (f.name == "link") {
        // Layer linking only changes how Docker stores the layer.
      } else {
        return Error(keyword + " --" + f.name + " is not supported");
      }
    }
    if (HasHeredoc(rest)) return Error("heredocs (<<WORD) are not supported");
    std::vector<std::string> words;
    if (auto exec = ExecForm(rest)) {
      words = *exec;
    } else {
      ASSIGN_OR_RETURN(words, Split(rest));
    }
    if (words.size() < 2) return Error(keyword + " needs a source and a destination");
    const std::string dest = words.back();
    NoteVariables(keyword, std::string(rest));
    for (size_t i = 0; i + 1 < words.size(); ++i) {
      const std::string& src = words[i];
      if (add && (src.find("://") != std::string::npos || src.rfind("git@", 0) == 0))
        return Error("ADD of a URL is not supported ('" + src + "'); download it in a RUN step");
      if (!InsideContext(src))
        return Error(keyword + " source '" + src + "' must be a relative path inside the build context");
      Push(MakeStep(StepType::kCopy, {src, dest, owner, mode}));
    }
    return OkStatus();
  }

  Status Env(std::string_view rest, bool arg) {
    const std::string keyword = arg ? "ARG" : "ENV";
    ASSIGN_OR_RETURN(auto words, Split(rest));
    if (words.empty()) return Error(keyword + " needs a name");
    std::vector<std::pair<std::string, std::string>> pairs;
    auto set = [&](const std::string& k, const std::string& v) {
      auto it = std::find_if(pairs.begin(), pairs.end(), [&](const auto& p) { return p.first == k; });
      if (it != pairs.end()) it->second = v;
      else pairs.emplace_back(k, v);
    };
    if (!arg && words[0].find('=') == std::string::npos) {
      // The legacy form: ENV NAME the rest of the line.
      std::string_view r = TrimLeft(rest);
      size_t end = 0;
      while (end < r.size() && !std::isspace(static_cast<unsigned char>(r[end]))) ++end;
      ASSIGN_OR_RETURN(auto value, Split(Trim(r.substr(end)), /*keep_blanks=*/true));
      if (Trim(r.substr(end)).empty()) return Error("ENV " + words[0] + " needs a value (ENV NAME=VALUE)");
      set(words[0], value.empty() ? "" : value[0]);
    } else {
      for (const auto& w : words) {
        size_t eq = w.find('=');
        if (eq == 0) return Error(keyword + " '" + w + "' has no name");
        if (eq == std::string::npos) {
          if (!arg) return Error("ENV '" + w + "': expected NAME=VALUE");
          set(w, "");  // ARG without a default (§A.5: X="")
        } else {
          set(w.substr(0, eq), w.substr(eq + 1));
        }
      }
    }
    std::vector<std::string> args;
    for (auto& [k, v] : pairs) {
      args.push_back(k);
      args.push_back(v);
    }
    Push(MakeStep(StepType::kEnv, std::move(args)));
    return OkStatus();
  }

  Status Workdir(std::string_view rest) {
    ASSIGN_OR_RETURN(auto w, Split(Trim(rest), /*keep_blanks=*/true));
    std::string path = w.empty() ? "" : std::string(Trim(w[0]));
    if (path.empty()) return Error("WORKDIR needs a path");
    NoteVariables("WORKDIR", path);
    Push(MakeStep(StepType::kWorkdir, {path}));
    workdir_set_ = true;
    return OkStatus();
  }

  Status User(std::string_view rest) {
    ASSIGN_OR_RETURN(auto w, Split(rest));
    if (w.size() != 1) return Error("USER takes one name");
    NoteVariables("USER", w[0]);
    Push(MakeStep(StepType::kUser, {w[0]}));
    user_set_ = true;
    return OkStatus();
  }

  Status Command(std::string_view rest, bool entrypoint) {
    auto exec = ExecForm(rest);
    std::string text(Trim(rest));
    if (entrypoint) {
      entrypoint_ = text;
      entrypoint_exec_ = exec;
    } else {
      cmd_ = text;
      cmd_exec_ = exec;
    }
    return OkStatus();
  }

  char escape_;
  size_t line_ = 0;
  size_t from_line_ = 0;
  bool user_set_ = false, workdir_set_ = false;
  std::optional<std::string> cmd_, entrypoint_;
  std::optional<std::vector<std::string>> cmd_exec_, entrypoint_exec_;
  DockerfileTemplate out_;
};

}  // namespace

std::string ShellQuote(std::string_view s) {
  if (s.empty()) return "''";
  bool safe = std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  });
  if (safe) return std::string(s);
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\"'\"'";
    else out += c;
  }
  return out + "'";
}

StatusOr<DockerfileTemplate> ParseDockerfile(std::string_view text) {
  const std::vector<std::string_view> lines = SplitLines(text);
  ASSIGN_OR_RETURN(char escape, EscapeOf(lines));
  Converter conv(escape);
  for (const auto& in : SplitInstructions(lines, escape)) RETURN_IF_ERROR(conv.Add(in));
  return conv.Finish();
}

json BuildStartJson(const templates::BuildStart& start) {
  json steps = json::array();
  for (const auto& s : start.steps) {
    json j = {{"type", std::string(templates::StepTypeName(s.type))}, {"args", s.args}, {"force", s.force}};
    if (!s.files_hash.empty()) j["filesHash"] = s.files_hash;
    steps.push_back(std::move(j));
  }
  json body = {{"steps", std::move(steps)}, {"force", start.force}};
  if (!start.from_template.empty()) body["fromTemplate"] = start.from_template;
  else body["fromImage"] = start.from_image;
  if (!start.start_cmd.empty()) body["startCmd"] = start.start_cmd;
  if (!start.ready_cmd.empty()) body["readyCmd"] = start.ready_cmd;
  return body;
}

}  // namespace airlock::cli
