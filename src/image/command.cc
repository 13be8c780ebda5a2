#include "image/command.h"

#include <fcntl.h>

#include "common/fd.h"
#include "common/subprocess.h"
#include "image/fs_util.h"

namespace airlock::image {
namespace {

std::string Tail(const std::string& text, int lines) {
  size_t pos = text.size();
  while (pos > 0 && (text[pos - 1] == '\n')) --pos;
  size_t end = pos;
  for (int n = 0; pos > 0; --pos) {
    if (text[pos - 1] == '\n' && ++n == lines) break;
  }
  return text.substr(pos, end - pos);
}

std::string Join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

}  // namespace

Status RunCommand(const std::vector<std::string>& argv, const CommandOptions& options) {
  SpawnOptions so;
  so.argv = argv;
  so.cwd = options.cwd;
  UniqueFd log, in;
  if (!options.log_path.empty()) {
    log.Reset(::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!log) return ErrnoError("open " + options.log_path);
    so.stdout_fd = log.get();
    so.stderr_fd = log.get();
  } else {
    so.stdout_to_devnull = true;
    so.stderr_to_devnull = true;
  }
  if (!options.stdin_path.empty()) {
    in.Reset(::open(options.stdin_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!in) return ErrnoError("open " + options.stdin_path);
    so.stdin_fd = in.get();
  }
  ASSIGN_OR_RETURN(Child child, Spawn(so));
  ASSIGN_OR_RETURN(ExitStatus st, child.Wait());
  if (st.success()) return OkStatus();
  std::string msg = Join(argv) + ": " + st.ToString();
  if (!options.log_path.empty()) {
    if (auto text = ReadFile(options.log_path); text.ok()) {
      msg += "\n" + Tail(*text, 15) + "\n(full log: " + options.log_path + ")";
    }
  }
  return Internal(msg);
}

}  // namespace airlock::image
