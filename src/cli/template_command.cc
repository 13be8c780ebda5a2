// `airlock template ls | build | rm | logs`: a client of the daemon's
// template API (shared/spec/e2b-templates.md §A.1, §A.3; docs/template-cli.md).
//
//   build NAME -f Dockerfile   the SDK's call order (§A.1), with every local
//                              step first (Dockerfile, file hashes,
//                              archives), so a bad Dockerfile or a missing
//                              COPY source never leaves a build requested:
//                              POST /v3/templates, GET .../files/{hash} and
//                              PUT the archive when the server lacks it,
//                              POST /v2/templates/{id}/builds/{bid}, then
//                              GET .../status?logsOffset=N every 200 ms
//                              until "ready" or "error" and an empty page
//   ls                         GET /templates
//   rm NAME                    DELETE /templates/{NAME}
//   logs NAME [--build ID]     GET /templates/{NAME} (its builds), then the
//                              status pages of one build from offset 0
//
// The daemon: --server ADDR (else $AIRLOCK_SERVER, else 127.0.0.1:3000); the
// key: $AIRLOCK_API_KEY, else cli.key beside --db PATH, else in the state
// directory (where `airlock serve` writes it beside its default database).
// Exit codes: 0 done, 1 failed (a build: the server's reason and step on
// stderr), 2 usage.
#include <stdlib.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/build_progress.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "cli/dockerfile.h"
#include "cli/template_files.h"
#include "templates/build_spec.h"

namespace po = boost::program_options;

namespace airlock::cli {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr char kTemplateUsage[] =
    "usage: airlock template ls [--json]\n"
    "       airlock template build NAME[:TAG] [-f Dockerfile] [--context DIR] [--cpu N] [--memory MiB]\n"
    "                              [--no-cache] [--start-cmd CMD [--ready-cmd CMD]] [--plain]\n"
    "       airlock template rm NAME\n"
    "       airlock template logs NAME [--build ID]\n"
    "options of every verb: --server ADDR (or AIRLOCK_SERVER), --db PATH (the daemon's database;\n"
    "  its cli.key is the API key unless AIRLOCK_API_KEY is set)\n";

int Fail(const std::string& verb, const std::string& message) {
  std::fprintf(stderr, "airlock template %s: %s\n", verb.c_str(), message.c_str());
  return 1;
}

// A daemon error, with a hint when the daemon was not reached at all.
int FailCall(const std::string& verb, const DaemonTarget& t, const Status& st) {
  std::string m = st.message();
  if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded)
    m += " (is `airlock serve` running at " + t.host + ":" + std::to_string(t.port) + "? --server ADDR)";
  else if (m.find("HTTP 401") == 0)
    m += " (the API key: AIRLOCK_API_KEY, or --db PATH for the cli.key beside the daemon's database)";
  return Fail(verb, m);
}

std::string Enc(const std::string& s) { return UrlEncodeComponent(s); }

StatusOr<json> GetJson(const DaemonTarget& t, const std::string& target) {
  ASSIGN_OR_RETURN(auto r, DaemonApi(t, "GET", target));
  json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return Internal("GET " + target + ": the daemon's answer is not JSON");
  return j;
}

// Common options; the verb's own are added by the caller.
struct Common {
  std::string server, db;
  void Add(po::options_description& d) {
    d.add_options()("help,h", "show this help")("server", po::value(&server), "daemon address IP:PORT")(
        "db", po::value(&db), "the daemon's database (its cli.key, beside it, is the API key)");
  }
  DaemonTarget Target(const std::string& state_dir) const {
    std::string key_dir = state_dir;
    if (!db.empty()) {
      key_dir = fs::path(db).parent_path().string();
      if (key_dir.empty()) key_dir = ".";
    }
    return ResolveDaemon(key_dir, server);
  }
};

// Parses `args` into `vm`; 0 on success, else the exit code (help: 0 after printing).
std::optional<int> Parse(const std::string& verb, const std::vector<std::string>& args, po::options_description& desc,
                         const po::positional_options_description& pos, po::variables_map& vm) {
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "airlock template %s: %s\n%s", verb.c_str(), e.what(), kTemplateUsage);
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  return std::nullopt;
}

// ---- ls

int List(const DaemonTarget& t, bool as_json) {
  auto j = GetJson(t, "/templates");
  if (!j.ok()) return FailCall("ls", t, j.status());
  if (as_json) {
    std::printf("%s\n", j->dump(2).c_str());
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"TEMPLATE ID", "ALIASES", "STATUS", "CPU", "MEMORY", "CREATED"}};
  for (const auto& tp : j->is_array() ? *j : json::array()) {
    std::string aliases;
    for (const auto& a : tp.value("aliases", json::array())) {
      if (a.is_string()) aliases += (aliases.empty() ? "" : ",") + a.get<std::string>();
    }
    std::string created = tp.value("createdAt", "");
    if (created.size() >= 19) created = created.substr(0, 10) + " " + created.substr(11, 8);
    const int cpu = tp.value("cpuCount", 0), mem = tp.value("memoryMB", 0);
    rows.push_back({tp.value("templateID", ""), aliases.empty() ? "-" : aliases, tp.value("buildStatus", ""),
                    cpu ? std::to_string(cpu) : "-", mem ? std::to_string(mem) + " MiB" : "-", created});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

// ---- logs

// Prints every entry of one build, page by page until an empty page.
Status PrintBuildLog(const DaemonTarget& t, const std::string& template_id, const std::string& build_id) {
  int64_t offset = 0;
  while (true) {
    ASSIGN_OR_RETURN(json page, GetJson(t, "/templates/" + Enc(template_id) + "/builds/" + Enc(build_id) +
                                               "/status?logsOffset=" + std::to_string(offset)));
    const json entries = page.value("logEntries", json::array());
    if (!entries.is_array() || entries.empty()) return OkStatus();
    // The messages name their step already ("[builder 2/5] ...").
    for (const auto& e : entries) {
      std::printf("%s %-5s %s\n", e.value("timestamp", "").c_str(), e.value("level", "").c_str(),
                  e.value("message", "").c_str());
    }
    offset += static_cast<int64_t>(entries.size());
  }
}

int Logs(const DaemonTarget& t, const std::string& ref, const std::string& build) {
  auto tp = GetJson(t, "/templates/" + Enc(ref));
  if (!tp.ok()) return FailCall("logs", t, tp.status());
  const std::string id = tp->value("templateID", "");
  const json builds = tp->value("builds", json::array());
  std::string bid = build;
  if (bid.empty()) {
    // The newest (builds come oldest first).
    if (!builds.is_array() || builds.empty()) return Fail("logs", "template '" + ref + "' has no builds");
    bid = builds.back().value("buildID", "");
  }
  if (Status st = PrintBuildLog(t, id, bid); !st.ok()) return FailCall("logs", t, st);
  return 0;
}

// ---- build

struct BuildOptions {
  std::string name, dockerfile = "Dockerfile", context = ".";
  std::optional<int> cpu, memory;
  bool no_cache = false, plain = false;
  std::string start_cmd, ready_cmd;
};

// A temporary directory, removed with everything in it at scope exit.
struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

std::string StepLabel(const templates::Step& s) {
  std::string out(templates::StepTypeName(s.type));
  if (s.type == templates::StepType::kEnv) {
    for (size_t i = 0; i + 1 < s.args.size(); i += 2) out += " " + s.args[i] + "=" + s.args[i + 1];
    return out;
  }
  for (const auto& a : s.args) {
    if (!a.empty()) out += " " + a;
  }
  return out;
}

std::string Kib(uint64_t bytes) {
  char buf[32];
  if (bytes < (1u << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

// PUT the archive to the upload URL the server gave (no API key: the URL
// carries its own signature; §A.3.3).
Status Upload(const std::string& url, const json& headers, const std::string& file) {
  constexpr std::string_view kHttp = "http://";
  if (url.rfind(kHttp, 0) != 0) return Unimplemented("upload URL '" + url + "': only http:// URLs are supported");
  const size_t slash = url.find('/', kHttp.size());
  ASSIGN_OR_RETURN(auto hp, ParseHostPort(url.substr(0, slash)));
  HttpCall call;
  call.host = hp.first;
  call.port = hp.second;
  call.method = "PUT";
  call.target = slash == std::string::npos ? "/" : url.substr(slash);
  call.body_file = file;
  call.timeout = std::chrono::hours(1);  // the SDK's FILE_UPLOAD_TIMEOUT_MS
  if (headers.is_object()) {
    for (const auto& [k, v] : headers.items()) {
      if (v.is_string()) call.headers.emplace_back(k, v.get<std::string>());
    }
  }
  ASSIGN_OR_RETURN(auto r, HttpDo(call));
  if (r.status < 200 || r.status >= 300) {
    json e = json::parse(r.body, nullptr, false);
    std::string m = e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                                        : r.body.substr(0, 300);
    return Unavailable("upload: HTTP " + std::to_string(r.status) + ": " + m);
  }
  return OkStatus();
}

// The Dockerfile line of step "N" (1-based) of a build, 0 when none.
size_t LineOfStep(const DockerfileTemplate& df, const std::string& step) {
  char* end = nullptr;
  unsigned long n = std::strtoul(step.c_str(), &end, 10);
  if (step.empty() || *end != '\0' || n == 0 || n > df.step_lines.size()) return 0;
  return df.step_lines[n - 1];
}

// "step N: why" (templates::ParseBuildStart) as "line L: why" when step N
// comes from line L of the Dockerfile.
std::string WithLine(const DockerfileTemplate& df, const std::string& message) {
  if (message.rfind("step ", 0) != 0) return message;
  size_t colon = message.find(':');
  size_t line = colon == std::string::npos ? 0 : LineOfStep(df, message.substr(5, colon - 5));
  return line ? "line " + std::to_string(line) + message.substr(colon) : message;
}

int Build(const DaemonTarget& t, const BuildOptions& o) {
  const std::string verb = "build";
  if (auto n = templates::ParseName(o.name); !n.ok()) return Fail(verb, n.status().message());
  // 1. The Dockerfile, as the SDK's fromDockerfile reads it.
  std::ifstream f(o.dockerfile, std::ios::binary);
  if (!f) return Fail(verb, "cannot read " + o.dockerfile + ": " + std::strerror(errno));
  std::stringstream text;
  text << f.rdbuf();
  auto df = ParseDockerfile(text.str());
  if (!df.ok()) return Fail(verb, o.dockerfile + ": " + df.status().message());
  for (const auto& w : df->warnings) std::fprintf(stderr, "warning: %s: %s\n", o.dockerfile.c_str(), w.c_str());
  templates::BuildStart& start = df->start;
  if (!o.start_cmd.empty()) {
    start.start_cmd = o.start_cmd;
    start.ready_cmd = o.ready_cmd.empty() ? "sleep 20" : o.ready_cmd;
  } else if (!o.ready_cmd.empty()) {
    if (start.start_cmd.empty())
      std::fprintf(stderr, "airlock template build: note: the Dockerfile has no CMD/ENTRYPOINT: --ready-cmd "
                           "checks the start command of the FROM template:, if it has one\n");
    start.ready_cmd = o.ready_cmd;
  }
  start.force = o.no_cache;

  // 2. Every COPY's files: entries, hash, archive (one per distinct hash).
  std::error_code ec;
  const std::string context = fs::absolute(o.context, ec).lexically_normal().string();
  if (ec || !fs::is_directory(context)) return Fail(verb, "--context " + o.context + " is not a directory");
  const std::string ctx = context.size() > 1 && context.back() == '/' ? context.substr(0, context.size() - 1) : context;
  const std::vector<std::string> ignore = ReadDockerignore(ctx);
  TempDir tmp;
  std::string tmpl = (std::getenv("TMPDIR") && *std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                     std::string("/airlock-template-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) return Fail(verb, "mkdtemp " + tmpl + ": " + std::strerror(errno));
  tmp.path = tmpl;
  std::vector<std::pair<std::string, std::string>> archives;  // (hash, what), in step order
  for (auto& step : start.steps) {
    if (step.type != templates::StepType::kCopy) continue;
    auto entries = CopyEntries(ctx, step.args[0], ignore);
    if (!entries.ok()) return Fail(verb, entries.status().message());
    auto hash = FilesHash(ctx, step.args[0], step.args[1], *entries);
    if (!hash.ok()) return Fail(verb, hash.status().message());
    step.files_hash = *hash;
    const std::string file = tmp.path + "/" + *hash + ".tar.gz";
    if (fs::exists(file)) continue;
    if (Status st = WriteArchive(ctx, *entries, file); !st.ok()) return Fail(verb, st.message());
    archives.emplace_back(*hash, step.args[0]);
  }
  const json body = BuildStartJson(start);
  if (auto check = templates::ParseBuildStart(body); !check.ok())
    return Fail(verb, o.dockerfile + ": the server would refuse this: " + WithLine(*df, check.status().message()));

  // 3. Request the build.
  json request = {{"name", o.name}};
  if (o.cpu) request["cpuCount"] = *o.cpu;
  if (o.memory) request["memoryMB"] = *o.memory;
  auto req = DaemonApi(t, "POST", "/v3/templates", request.dump());
  if (!req.ok()) return FailCall(verb, t, req.status());
  json reply = json::parse(req->body, nullptr, false);
  const std::string tid = reply.is_object() ? reply.value("templateID", "") : "";
  const std::string bid = reply.is_object() ? reply.value("buildID", "") : "";
  if (tid.empty() || bid.empty()) return Fail(verb, "the daemon answered the build request without its IDs");
  std::printf("Building %s: template %s, build %s\n", o.name.c_str(), tid.c_str(), bid.c_str());
  std::fflush(stdout);

  // 4. The archives the server lacks.
  for (const auto& [hash, what] : archives) {
    auto link = GetJson(t, "/templates/" + Enc(tid) + "/files/" + hash);
    if (!link.ok()) return FailCall(verb, t, link.status());
    const std::string file = tmp.path + "/" + hash + ".tar.gz";
    const std::string url = link->value("url", "");
    if (link->value("present", false) || url.empty()) {
      std::printf("COPY %s: files already on the server\n", what.c_str());
      continue;
    }
    if (Status st = Upload(url, link->value("headers", json::object()), file); !st.ok())
      return Fail(verb, "COPY " + what + ": " + st.message());
    std::printf("COPY %s: uploaded %s\n", what.c_str(), Kib(fs::file_size(file, ec)).c_str());
  }
  std::fflush(stdout);

  // 5. Start it.
  const std::string base = "/templates/" + Enc(tid) + "/builds/" + Enc(bid);
  if (auto st = DaemonApi(t, "POST", "/v2" + base, body.dump()); !st.ok()) return FailCall(verb, t, st.status());

  // 6. Follow it.
  std::vector<std::string> labels;
  for (const auto& s : start.steps) labels.push_back(StepLabel(s));
  const char* term = std::getenv("TERM");
  const bool tty = !o.plain && ::isatty(STDOUT_FILENO) && !(term && std::string(term) == "dumb");
  BuildProgress progress(start.from_template.empty() ? "FROM " + start.from_image : "FROM template:" + start.from_template,
                         labels, tty, stdout);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t offset = 0;
  int failures = 0;
  std::string status;
  json reason;
  while (true) {
    auto page = GetJson(t, base + "/status?logsOffset=" + std::to_string(offset));
    if (!page.ok()) {
      // A daemon restarting or busy: a few seconds of retries; an answer
      // (an HTTP error) is final.
      const StatusCode code = page.status().code();
      const bool transient = code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded;
      if (!transient || ++failures > 25) {
        progress.Finish();
        return FailCall(verb, t, page.status());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    failures = 0;
    const json entries = page->value("logEntries", json::array());
    status = page->value("status", "");
    reason = page->value("reason", json::object());
    progress.OnLogs(entries);
    progress.OnStatus(status, reason);
    progress.Update();
    offset += entries.is_array() ? static_cast<int64_t>(entries.size()) : 0;
    const bool done = status == "ready" || status == "error";
    if (!done && status != "waiting" && status != "building") {
      progress.Finish();
      return Fail(verb, "the daemon reported an unknown build status '" + status + "'");
    }
    if (done && (!entries.is_array() || entries.empty())) break;  // drained
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  progress.Finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (status == "ready") {
    std::printf("%s is ready (template %s, build %s) in %.0fs\n", o.name.c_str(), tid.c_str(), bid.c_str(), secs);
    return 0;
  }
  const std::string step = reason.is_object() ? reason.value("step", "") : "";
  const std::string message = reason.is_object() ? reason.value("message", "Unknown error") : "Unknown error";
  if (tty && !step.empty()) {
    // The plain output already showed every line.
    for (const auto& line : progress.StepLog(step, 20)) std::fprintf(stderr, "  %s\n", line.c_str());
  }
  std::string where;
  if (!step.empty()) {
    where = " at step " + progress.Describe(step);
    if (size_t line = LineOfStep(*df, step)) where += " (" + o.dockerfile + " line " + std::to_string(line) + ")";
  }
  return Fail(verb, "the build failed" + where + ": " + message);
}

}  // namespace

int CmdTemplate(const std::string& state_dir, const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kTemplateUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string verb = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  Common common;
  po::variables_map vm;
  po::positional_options_description pos;
  if (verb == "ls" || verb == "list") {
    bool as_json = false;
    po::options_description desc("airlock template ls [options]");
    common.Add(desc);
    desc.add_options()("json", po::bool_switch(&as_json), "print the daemon's JSON");
    if (auto code = Parse(verb, rest, desc, pos, vm)) return *code;
    return List(common.Target(state_dir), as_json);
  }
  if (verb == "build") {
    BuildOptions o;
    int cpu = 0, memory = 0;
    po::options_description desc("airlock template build NAME[:TAG] [options]");
    common.Add(desc);
    desc.add_options()("name", po::value(&o.name), "template name (alias[:tag])")(
        "file,f", po::value(&o.dockerfile)->default_value(o.dockerfile), "the Dockerfile")(
        "context", po::value(&o.context)->default_value(o.context), "directory COPY sources are relative to")(
        "cpu", po::value(&cpu), "vCPUs of the build and of its sandboxes (1 or even; server default 2)")(
        "memory", po::value(&memory), "MiB of memory, even (server default 1024)")(
        "no-cache", po::bool_switch(&o.no_cache), "run every step again (no cached layer)")(
        "start-cmd", po::value(&o.start_cmd), "start command (instead of the Dockerfile's CMD/ENTRYPOINT)")(
        "ready-cmd", po::value(&o.ready_cmd), "ready check of the start command, run until it exits 0 (default: sleep 20)")(
        "plain", po::bool_switch(&o.plain), "log lines only, no progress display");
    pos.add("name", 1);
    if (auto code = Parse(verb, rest, desc, pos, vm)) return *code;
    if (o.name.empty()) {
      std::fprintf(stderr, "airlock template build: a NAME is required\n%s", kTemplateUsage);
      return 2;
    }
    if (vm.count("cpu")) o.cpu = cpu;
    if (vm.count("memory")) o.memory = memory;
    return Build(common.Target(state_dir), o);
  }
  if (verb == "rm" || verb == "delete") {
    std::string name;
    po::options_description desc("airlock template rm NAME [options]");
    common.Add(desc);
    desc.add_options()("name", po::value(&name), "template id or name");
    pos.add("name", 1);
    if (auto code = Parse(verb, rest, desc, pos, vm)) return *code;
    if (name.empty()) {
      std::fprintf(stderr, "airlock template rm: a NAME is required\n%s", kTemplateUsage);
      return 2;
    }
    DaemonTarget t = common.Target(state_dir);
    auto r = DaemonApi(t, "DELETE", "/templates/" + Enc(name));
    // The route deletes a named snapshot when no template has the name.
    if (!r.ok() && r.status().code() == StatusCode::kNotFound) return Fail("rm", "no template (or snapshot) '" + name + "'");
    if (!r.ok()) return FailCall("rm", t, r.status());
    return 0;
  }
  if (verb == "logs") {
    std::string name, build;
    po::options_description desc("airlock template logs NAME [options]");
    common.Add(desc);
    desc.add_options()("name", po::value(&name), "template id or name")(
        "build", po::value(&build), "a build ID (default: the newest build)");
    pos.add("name", 1);
    if (auto code = Parse(verb, rest, desc, pos, vm)) return *code;
    if (name.empty()) {
      std::fprintf(stderr, "airlock template logs: a NAME is required\n%s", kTemplateUsage);
      return 2;
    }
    return Logs(common.Target(state_dir), name, build);
  }
  std::fprintf(stderr, "airlock template: unknown verb '%s'\n%s", verb.c_str(), kTemplateUsage);
  return 2;
}

}  // namespace airlock::cli
