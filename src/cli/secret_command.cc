// `airlock secret set NAME [--scope env|brokered] [--host H]... [--team T]...`
// (value from stdin, never argv) | ls | rm NAME. The flags are the secret's
// use policy (docs/secrets.md "Who may use a secret"): without --team only
// admin keys may name it.
// Works on the local store (root): <state dir>/airlock.db, key file
// <state dir>/secrets.key (or beside --db). A running daemon sees changes on
// its next create.
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "secrets/redactor.h"
#include "secrets/secret_store.h"
#include "server/server.h"

namespace airlock::cli {

std::vector<std::string> TakeDbFlag(const std::vector<std::string>& args, std::string* db) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--db" && i + 1 < args.size())
      *db = args[++i];
    else
      rest.push_back(args[i]);
  }
  return rest;
}

int CmdSecret(const std::string& state_dir, const std::vector<std::string>& args_in) {
  const char* usage =
      "usage: airlock secret [--db PATH] set NAME [--scope env|brokered] [--host H]... [--team T]...\n"
      "         reads the value from stdin (one trailing newline is dropped). --team: a team whose keys may\n"
      "         name it at create (repeatable; needs --scope); --host: where a brokered value may go\n"
      "         (exact or *.domain, repeatable; implies --scope brokered). No --team: admin keys only.\n"
      "       airlock secret [--db PATH] ls\n"
      "       airlock secret [--db PATH] rm NAME\n";
  std::string db = state_dir + "/airlock.db";
  std::vector<std::string> args = TakeDbFlag(args_in, &db);
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
  if (args[0] == "set" && args.size() >= 2) {
    secrets::SecretPolicy policy;
    for (size_t i = 2; i < args.size(); ++i) {
      const std::string& a = args[i];
      bool has_value = i + 1 < args.size();
      if (a == "--scope" && has_value) {
        const std::string& v = args[++i];
        if (v == "env") policy.scope = secrets::Scope::kEnv;
        else if (v == "brokered") policy.scope = secrets::Scope::kBrokered;
        else {
          std::fprintf(stderr, "airlock secret set: --scope must be env or brokered\n");
          return 2;
        }
      } else if (a == "--host" && has_value) {
        policy.hosts.push_back(args[++i]);
      } else if (a == "--team" && has_value) {
        policy.teams.push_back(args[++i]);
      } else {
        std::fprintf(stderr, "airlock secret set: unknown argument '%s'\n%s", a.c_str(), usage);
        return 2;
      }
    }
    if (!policy.hosts.empty() && !policy.scope) policy.scope = secrets::Scope::kBrokered;
    if (policy.scope == secrets::Scope::kEnv && !policy.hosts.empty()) {
      std::fprintf(stderr, "airlock secret set: --host applies to --scope brokered only\n");
      return 2;
    }
    if (policy.scope == secrets::Scope::kBrokered && policy.hosts.empty()) {
      std::fprintf(stderr, "airlock secret set: --scope brokered needs at least one --host\n");
      return 2;
    }
    if (!policy.teams.empty() && !policy.scope) {
      std::fprintf(stderr, "airlock secret set: --team needs --scope (how the team may use it)\n");
      return 2;
    }
    // The same host syntax a create request is held to.
    nlohmann::json probe = {{args[1], {{"scope", "brokered"}, {"hosts", policy.hosts}}}};
    if (!policy.hosts.empty()) {
      if (auto parsed = secrets::ParseSecretsSpec(probe); !parsed.ok()) {
        std::fprintf(stderr, "airlock secret set: %s\n", parsed.status().message().c_str());
        return 2;
      }
    }
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
    Status st = (*store)->Set(args[1], value, policy);
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
    std::printf("%-32s %8s  %-24s %-8s %-24s %s\n", "NAME", "BYTES", "UPDATED", "SCOPE", "TEAMS", "HOSTS");
    auto join = [](const std::vector<std::string>& v, const char* none) {
      std::string out;
      for (const auto& x : v) out += (out.empty() ? "" : ",") + x;
      return out.empty() ? std::string(none) : out;
    };
    for (const auto& s : *list) {
      std::printf("%-32s %8zu  %-24s %-8s %-24s %s\n", s.name.c_str(), s.size, FormatRfc3339Ms(s.updated_at_ms).c_str(),
                  s.policy.scope ? std::string(secrets::ScopeName(*s.policy.scope)).c_str() : "any",
                  join(s.policy.teams, "(admin)").c_str(), join(s.policy.hosts, "-").c_str());
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
