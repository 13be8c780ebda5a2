// `airlock secret set NAME` (value from stdin, never argv) | ls | rm NAME.
// Works on the local store (root): <state dir>/airlock.db, key file
// <state dir>/secrets.key (or beside --db). A running daemon sees changes on
// its next create.
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "secrets/redactor.h"
#include "secrets/secret_store.h"
#include "server/server.h"

namespace airlock::cli {

int CmdSecret(const std::string& state_dir, const std::vector<std::string>& args_in) {
  const char* usage =
      "usage: airlock secret [--db PATH] set NAME   (reads the value from stdin; one trailing newline is dropped)\n"
      "       airlock secret [--db PATH] ls\n"
      "       airlock secret [--db PATH] rm NAME\n";
  std::vector<std::string> args;
  std::string db = state_dir + "/airlock.db";
  for (size_t i = 0; i < args_in.size(); ++i) {
    if (args_in[i] == "--db" && i + 1 < args_in.size())
      db = args_in[++i];
    else
      args.push_back(args_in[i]);
  }
  if (args.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::string dir = db.find('/') == std::string::npos ? "." : db.substr(0, db.rfind('/'));
  auto store = secrets::SecretStore::Open(db, dir + "/secrets.key");
  if (!store.ok()) {
    std::fprintf(stderr, "airlock secret: %s\n", store.status().message().c_str());
    return 1;
  }
  if (args[0] == "set" && args.size() == 2) {
    if (::isatty(STDIN_FILENO)) std::fprintf(stderr, "value for %s (end with Ctrl-D): ", args[1].c_str());
    std::string value;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(STDIN_FILENO, buf, sizeof buf)) > 0) {
      value.append(buf, static_cast<size_t>(n));
      if (value.size() > secrets::kMaxSecretBytes + 2) break;
    }
    if (!value.empty() && value.back() == '\n') value.pop_back();
    if (!value.empty() && value.back() == '\r') value.pop_back();
    Status st = (*store)->Set(args[1], value);
    std::fill(value.begin(), value.end(), '\0');
    if (!st.ok()) {
      std::fprintf(stderr, "airlock secret set: %s\n", st.message().c_str());
      return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::fprintf(stderr, "secret %s stored\n", args[1].c_str());
    return 0;
  }
  if (args[0] == "ls" && args.size() == 1) {
    auto list = (*store)->List();
    if (!list.ok()) {
      std::fprintf(stderr, "airlock secret ls: %s\n", list.status().message().c_str());
      return 1;
    }
    std::printf("%-32s %8s  %s\n", "NAME", "BYTES", "UPDATED");
    for (const auto& s : *list) {
      std::printf("%-32s %8zu  %s\n", s.name.c_str(), s.size, FormatRfc3339Ms(s.updated_at_ms).c_str());
    }
    return 0;
  }
  if (args[0] == "rm" && args.size() == 2) {
    Status st = (*store)->Remove(args[1]);
    if (!st.ok()) {
      std::fprintf(stderr, "airlock secret rm: %s\n", st.message().c_str());
      return 1;
    }
    return 0;
  }
  std::fputs(usage, stderr);
  return 2;
}

}  // namespace airlock::cli
