// `airlock audit [--sandbox ID] [--since T] [--limit N]` and
// `airlock audit verify`: read the daemon's audit trail from disk
// (<state dir>/audit, or --dir), so they work with the daemon down.
#include <cstdio>

#include "audit/audit_log.h"
#include "cli/commands.h"
#include "core/registry.h"

namespace airlock::cli {

int CmdAudit(const std::string& state_dir, const std::vector<std::string>& args) {
  const char* usage =
      "usage: airlock audit [--dir DIR] [--sandbox ID] [--since T] [--limit N]   print records (JSON lines)\n"
      "       airlock audit verify [--dir DIR]   check the hash chain; say where it is broken: exit 1 for\n"
      "         tampering (an edit, removal, reordering), 3 for damage only (two writers interleaved)\n"
      "T: RFC 3339, Unix seconds, or -10m / -2h / -1d\n";
  std::string dir = state_dir + "/audit";
  audit::QueryFilter f;
  f.limit = 100000;
  bool verify = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    const std::string* v = nullptr;
    if (a == "verify" && i == 0) {
      verify = true;
    } else if (a == "--dir" && (v = next())) {
      dir = *v;
    } else if (a == "--sandbox" && (v = next())) {
      f.sandbox = *v;
    } else if (a == "--since" && (v = next())) {
      auto ms = audit::ParseSince(*v, NowUnixMs());
      if (!ms.ok()) {
        std::fprintf(stderr, "airlock audit: %s\n", ms.status().message().c_str());
        return 2;
      }
      f.since_ms = *ms;
    } else if (a == "--limit" && (v = next())) {
      f.limit = std::strtoul(v->c_str(), nullptr, 10);
    } else {
      std::fputs(usage, a == "--help" || a == "-h" ? stdout : stderr);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (verify) {
    auto rep = audit::Verify(dir);
    if (!rep.ok()) {
      std::fprintf(stderr, "airlock audit verify: %s\n", rep.status().message().c_str());
      return 1;
    }
    for (const auto& n : rep->notes) std::printf("note: %s\n", n.c_str());
    for (const auto& p : rep->problems) {
      const char* kind = p.tampering ? "tampering" : "damage";
      if (p.line)
        std::printf("%s/%s:%zu: [%s] %s\n", dir.c_str(), p.file.c_str(), p.line, kind, p.what.c_str());
      else
        std::printf("%s/%s: [%s] %s\n", dir.c_str(), p.file.c_str(), kind, p.what.c_str());
    }
    std::printf("%s: %zu record(s) in %zu file(s), %s\n", dir.c_str(), rep->records, rep->files,
                rep->ok()         ? "chain intact"
                : rep->tampered() ? (std::to_string(rep->problems.size()) + " problem(s), tampering").c_str()
                                  : (std::to_string(rep->problems.size()) + " problem(s), damage only (no edit)").c_str());
    // 0 intact; 1 tampered (an edit, removal or reordering); 3 damaged only
    // (two writers interleaved): the operator's to explain, not an attacker's.
    return rep->ok() ? 0 : rep->tampered() ? 1 : 3;
  }
  auto recs = audit::Query(dir, f);
  if (!recs.ok()) {
    std::fprintf(stderr, "airlock audit: %s\n", recs.status().message().c_str());
    return 1;
  }
  for (const auto& r : *recs)
    std::printf("%s\n", r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace airlock::cli
