// airlock: command-line entry point.
//
//   airlock run [options] -- CMD [ARGS...]   run one command in a fresh microVM
//   airlock image build [--force]            build (or verify) the guest image
//   airlock doctor                           check what this host has and lacks
//   airlock serve [--listen ADDR]            run the daemon (E2B-compatible API)
//   airlock apikey create|ls|rm              manage the daemon's API keys
//   airlock sandbox ls|info|kill|exec|cp|timeout|checkpoint|rollback   talk to a running daemon
//   airlock template ls|build|rm|logs         custom templates on a running daemon
//   airlock mcp                              MCP over stdio, bridged to a running daemon's /mcp
//
// Global: --state-dir DIR (env AIRLOCK_STATE_DIR, default /var/lib/airlock).
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <future>
#include <iostream>
#include <map>

#include <sys/stat.h>

#include "common/state_lock.h"
#include "cli/commands.h"
#include "cli/doctor.h"
#include "cli/run_command.h"
#include "cli/run_via_daemon.h"
#include "cli/termination_watcher.h"
#include "common/log.h"
#include "common/subprocess.h"
#include "image/image.h"
#include "runtime/gvisor/rootfs_tree.h"
#include "runtime/registry.h"
#include "server/server.h"

namespace po = boost::program_options;

namespace airlock::cli {
namespace {

constexpr const char* kUsage =
    "usage: airlock [--state-dir DIR] COMMAND ...\n"
    "\n"
    "commands:\n"
    "  run [options] -- CMD [ARGS...]  run a command in a new microVM sandbox, then destroy it\n"
    "  image build [--template all]    build the guest images (kernel, initramfs, templates) and their snapshots\n"
    "  doctor                          report what this host has and what it lacks, with fixes\n"
    "  serve [--listen IP:PORT]        run the daemon: E2B-compatible API on one port (default 127.0.0.1:3000)\n"
    "  apikey create --name N | ls | rm ID   manage API keys (printed once, stored hashed)\n"
    "  sandbox ls | info ID | kill ID | exec ID -- CMD | cp SRC DST | timeout ID S |\n"
    "          checkpoint ID | checkpoint ls|rm ID [CKPT] | rollback ID CKPT\n"
    "                                  client of a running daemon (--server, AIRLOCK_SERVER, AIRLOCK_API_KEY)\n"
    "  template ls | build NAME -f Dockerfile | rm NAME | logs NAME\n"
    "                                  custom templates, built by a running daemon (--server, --db)\n"
    "  audit [verify] [--sandbox ID] [--since T]   print or verify the audit trail\n"
    "  secret set NAME | ls | rm NAME  manage secrets (value read from stdin, encrypted at rest)\n"
    "  cluster certs --out DIR --node N[,IP] --front N   a dev CA and certificates for fronts and nodes (mTLS)\n"
    "  mcp [--server HOST:PORT]        MCP server over stdio (sandboxes as tools), bridged to a running daemon\n"
    "  version                         print the version\n"
    "\n"
    "Run 'airlock COMMAND --help' for a command's options.\n";

std::string DefaultStateDir() {
  const char* env = std::getenv("AIRLOCK_STATE_DIR");
  return env && *env ? env : "/var/lib/airlock";
}

// The static guest agent: --agent, $AIRLOCK_AGENT, beside this binary, or the
// installed location.
std::string FindAgentBinary(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("AIRLOCK_AGENT"); env && *env) return env;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto sibling = self.parent_path() / "airlock-agent";
    if (std::filesystem::exists(sibling)) return sibling.string();
  }
  return "/usr/lib/airlock/airlock-agent";
}

// A file beside this binary (the build directory's layout), else `installed`.
std::string BesideSelf(const std::string& name, const std::string& installed) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto sibling = self.parent_path() / name;
    if (std::filesystem::exists(sibling)) return sibling.string();
  }
  return installed;
}

void PrintProgress(std::string_view step) {
  if (::isatty(STDERR_FILENO)) std::fprintf(stderr, "\033[2K\r\033[1m==>\033[0m %.*s\n", (int)step.size(), step.data());
  else std::fprintf(stderr, "==> %.*s\n", (int)step.size(), step.data());
}

int SnapshotTemplates(const std::string& state_dir, const std::vector<std::string>& templates,
                      const std::string& agent_binary);

// The gVisor runtime's root tree of each image (template -> rootfs.ext4):
// an image this build wrote has it already (its staged tree); one found
// without it is extracted here once rather than by the first gVisor start
// (40-110 s each; docs/runtime-gvisor.md "Root filesystem"), all at once
// (each is fuse2fs and cp, about one core). Only where that runtime can run; a failure is a
// warning, since the microVM runtime does not need the tree and a start
// retries.
void MakeGvisorTrees(const std::map<std::string, std::string>& rootfs_of) {
  if (!FindExecutable("runsc").ok() || !FindExecutable("fuse2fs").ok()) return;
  std::map<std::string, std::future<std::pair<StatusOr<std::string>, double>>> trees;
  for (const auto& [name, rootfs] : rootfs_of) {
    trees[name] = std::async(std::launch::async, [rootfs = rootfs] {
      auto t1 = std::chrono::steady_clock::now();
      auto tree = gvisor::EnsureRootTree(rootfs);
      return std::make_pair(tree, std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
    });
  }
  for (auto& [name, pending] : trees) {
    auto [tree, secs] = pending.get();
    if (tree.ok()) {
      std::printf("  gvisor  %s (%s, %.1fs)\n", tree->c_str(), name.c_str(), secs);
    } else {
      std::fprintf(stderr, "airlock image build: %s: gVisor root tree not made (a gVisor start retries): %s\n",
                   name.c_str(), tree.status().message().c_str());
    }
  }
}

int CmdImage(const std::string& state_dir, const std::vector<std::string>& args) {
  po::options_description desc("airlock image build [options]");
  bool force = false, refresh = false, no_snapshot = false;
  std::string agent, tmpl, interpreter, kernels;
  desc.add_options()("help,h", "show this help")("force", po::bool_switch(&force), "rebuild even if cached")(
      "refresh", po::bool_switch(&refresh),
      "apt-get update and re-resolve the kernel package (rebuilds the boot files if it changed)")(
      "no-snapshot", po::bool_switch(&no_snapshot),
      "skip the template snapshots (serve then takes them when it starts)")(
      "template", po::value(&tmpl)->default_value("base"), "template to build: base, code-interpreter, or all")(
      "agent", po::value(&agent), "path of the static airlock-agent to install in the template")(
      "interpreter", po::value(&interpreter),
      "path of the static airlock-interpreter (code-interpreter; default: beside this binary)")(
      "interpreter-kernels", po::value(&kernels),
      "directory of the interpreter's kernel files (default: interpreter-kernels beside this binary)");
  if (args.empty() || args[0] != "build") {
    std::fprintf(stderr,
                 "usage: airlock image build [--force] [--refresh] [--template NAME|all] [--agent PATH]\n"
                 "                           [--interpreter PATH] [--interpreter-kernels DIR] [--no-snapshot]\n");
    return 2;
  }
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(std::vector<std::string>(args.begin() + 1, args.end())).options(desc).run(), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "airlock image build: %s\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  std::vector<std::string> templates = tmpl == "all" ? image::KnownTemplates() : std::vector<std::string>{tmpl};
  std::map<std::string, std::string> rootfs_of;  // template -> its rootfs.ext4
  for (const auto& name : templates) {
    image::ImageOptions opts;
    opts.state_dir = state_dir;
    opts.template_name = name;
    opts.agent_binary = FindAgentBinary(agent);
    opts.interpreter_binary =
        interpreter.empty() ? BesideSelf("airlock-interpreter", "/usr/lib/airlock/airlock-interpreter") : interpreter;
    opts.interpreter_kernels_dir =
        kernels.empty() ? BesideSelf("interpreter-kernels", "/usr/lib/airlock/interpreter-kernels") : kernels;
    opts.close_range_lib = BesideSelf("libairlock-close-range.so", "/usr/lib/airlock/libairlock-close-range.so");
    opts.force = force;
    opts.refresh = refresh;
    opts.progress = PrintProgress;
    auto t0 = std::chrono::steady_clock::now();
    auto img = image::EnsureImage(opts);
    if (!img.ok()) {
      std::fprintf(stderr, "airlock image build: %s: %s\n", name.c_str(), img.status().message().c_str());
      return 1;
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("image %s (%s) ready in %.1fs\n  kernel  %s (%s)\n  initrd  %s\n  rootfs  %s\n", img->id.c_str(),
                img->template_name.c_str(), s, img->kernel.c_str(), img->kernel_release.c_str(), img->initrd.c_str(),
                img->rootfs.c_str());
    rootfs_of[name] = img->rootfs;
  }
  MakeGvisorTrees(rootfs_of);
  if (no_snapshot) return 0;
  return SnapshotTemplates(state_dir, templates, FindAgentBinary(agent));
}

// The template snapshots `serve` restores creates from, in the shape of its
// defaults, taken once here so that no daemon pays for them at start (the
// code interpreter's, with its kernel warm, takes minutes under TCG).
// Beside a running daemon: skipped (it takes them itself).
int SnapshotTemplates(const std::string& state_dir, const std::vector<std::string>& templates,
                      const std::string& agent_binary) {
  ::mkdir(state_dir.c_str(), 0700);
  auto lock = StateLock::Acquire(state_dir + "/airlock.db.lock", StateLock::Mode::kShared, "registry");
  if (!lock.ok()) {
    std::printf("template snapshots: skipped (%s); the daemon takes them\n", lock.status().message().c_str());
    return 0;
  }
  // Interrupted: a later start-up clean-up removes the builder VM's leftovers.
  ManagerConfig mc;
  mc.state_dir = state_dir;
  mc.agent_binary = agent_binary;
  mc.build_image_if_missing = false;
  mc.template_snapshots = true;
  auto manager = Manager::Open(mc);
  if (!manager.ok()) {
    std::fprintf(stderr, "airlock image build: template snapshots: %s\n", manager.status().message().c_str());
    return 1;
  }
  const airlock::server::ServerConfig serve_defaults;
  for (const auto& name : templates) {
    // The shape serve gives a create of this template that names none (Server::DefaultShapeFor).
    image::MachineShape shape{serve_defaults.default_vcpus, serve_defaults.default_memory_mib};
    if (auto own = image::DefaultShapeOf(name)) {
      shape.vcpus = std::min(own->vcpus, serve_defaults.max_vcpus);
      shape.memory_mib = std::min(own->memory_mib, serve_defaults.max_memory_mib);
    }
    std::printf("==> template snapshot %s (%d vCPU, %d MiB)\n", name.c_str(), shape.vcpus, shape.memory_mib);
    std::fflush(stdout);
    auto t0 = std::chrono::steady_clock::now();
    Status st = (*manager)->template_snapshots().Ensure(name, shape.vcpus, shape.memory_mib);
    if (!st.ok()) {
      std::fprintf(stderr, "airlock image build: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("==> template snapshot %s ready (%.0f s)\n", name.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 0;
}

int CmdRun(const std::string& state_dir, const std::vector<std::string>& args) {
  po::options_description desc("airlock run [options] -- CMD [ARGS...]");
  RunOptions o;
  std::vector<std::string> uploads, downloads, envs, allow;
  bool internet = false;
  std::string agent;
  int ready_timeout_s = 120;
  std::string runtime = kDefaultRuntime;
  desc.add_options()("help,h", "show this help")(
      "upload,u", po::value(&uploads)->composing(), "HOST:GUEST  copy a host file into the sandbox first")(
      "download,d", po::value(&downloads)->composing(),
      "GUEST:HOST  copy a guest file or directory out afterwards")(
      "env,e", po::value(&envs)->composing(), "K=V  environment variable for the command")(
      "cwd,w", po::value(&o.cwd), "working directory in the guest (default: the user's home)")(
      "user", po::value(&o.user), "guest user to run as: user (default) or root")(
      "interactive,i", po::bool_switch(&o.forward_stdin), "forward this process's stdin to the command")(
      "timeout", po::value(&o.timeout_s)->default_value(0), "kill the command after SECONDS (0: no limit)")(
      "template,t", po::value(&o.create.template_name)->default_value("base"), "template to start from")(
      "cpus", po::value(&o.create.vcpus)->default_value(1), "vCPUs")(
      "memory", po::value(&o.create.memory_mib)->default_value(512), "guest memory in MiB")(
      "ready-timeout", po::value(&ready_timeout_s)->default_value(120), "seconds to wait for the guest agent")(
      "agent", po::value(&agent), "static airlock-agent for building the image on first use")(
      "timings", po::bool_switch(&o.timings), "print where the time went")(
      "allow", po::value(&allow)->composing(),
      "DOMAIN[:PORT] | *.DOMAIN | CIDR[:PORT]  let the sandbox reach it (default: nothing)")(
      "internet", po::bool_switch(&internet), "let the sandbox reach any public address")(
      "runtime", po::value(&runtime)->default_value(runtime),
      ("what runs the VM (" + AvailableRuntimesText() + "); with a daemon, the daemon's").c_str());
  auto sep = std::find(args.begin(), args.end(), "--");
  std::vector<std::string> opts(args.begin(), sep);
  if (sep != args.end()) o.argv.assign(sep + 1, args.end());
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(opts).options(desc).run(), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "airlock run: %s\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  if (o.argv.empty()) {
    std::fprintf(stderr, "airlock run: no command given (usage: airlock run [options] -- CMD [ARGS...])\n");
    return 2;
  }
  if (o.create.vcpus < 1 || o.create.vcpus > 64) {
    std::fprintf(stderr, "airlock run: --cpus must be 1..64\n");
    return 2;
  }
  if (o.create.memory_mib < 128 || o.create.memory_mib > 65536) {
    std::fprintf(stderr, "airlock run: --memory must be 128..65536 MiB\n");
    return 2;
  }
  if (Status st = CheckRuntimeName(runtime); !st.ok()) {
    std::fprintf(stderr, "airlock run: --runtime: %s\n", st.message().c_str());
    return 2;
  }
  o.create.ready_timeout = std::chrono::seconds(ready_timeout_s);
  if (auto p = airlock::egress::EgressPolicy::Create(internet, allow, {}); p.ok()) {
    o.create.egress_policy = *p;
  } else {
    std::fprintf(stderr, "airlock run: --allow: %s\n", p.status().message().c_str());
    return 2;
  }
  for (const auto& u : uploads) {
    auto t = ParseTransfer(u, "--upload");
    if (!t.ok()) { std::fprintf(stderr, "airlock run: %s\n", t.status().message().c_str()); return 2; }
    if (::access(t->from.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "airlock run: --upload: cannot read %s: %s\n", t->from.c_str(), std::strerror(errno));
      return 2;
    }
    o.uploads.push_back(*t);
  }
  for (const auto& d : downloads) {
    auto t = ParseTransfer(d, "--download");
    if (!t.ok()) { std::fprintf(stderr, "airlock run: %s\n", t.status().message().c_str()); return 2; }
    o.downloads.push_back(*t);
  }
  for (const auto& e : envs) {
    auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "airlock run: --env expects K=V, got '%s'\n", e.c_str());
      return 2;
    }
    o.env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  // Before any thread exists (Manager::Open starts some): Ctrl-C must reach
  // the watcher, never a worker thread where it would kill us uncleaned.
  BlockTerminationSignals();
  // A running daemon does the work when one answers; else an embedded manager.
  if (auto code = RunViaDaemon(state_dir, o)) return *code;
  // In-process: beside other runs (shared) but never beside a daemon that
  // owns this state dir's registry (it holds the lock exclusively).
  ::mkdir(state_dir.c_str(), 0700);
  auto lock = StateLock::Acquire(state_dir + "/airlock.db.lock", StateLock::Mode::kShared, "registry");
  if (!lock.ok()) {
    std::fprintf(stderr, "airlock run: %s\n", lock.status().message().c_str());
    return 125;
  }
  ManagerConfig mc;
  mc.state_dir = state_dir;
  mc.agent_binary = FindAgentBinary(agent);
  mc.runtime = runtime;
  auto manager = Manager::Open(mc);
  if (!manager.ok()) {
    std::fprintf(stderr, "airlock run: %s\n", manager.status().message().c_str());
    return 125;
  }
  return RunInSandbox(**manager, o);
}

}  // namespace
}  // namespace airlock::cli

int main(int argc, char** argv) {
  using namespace airlock::cli;
  airlock::InitLogging("warn");
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string state_dir = DefaultStateDir();
  // Global options come before the command.
  while (!args.empty() && args[0].rfind("--", 0) == 0 && args[0] != "--") {
    if (args[0] == "--state-dir" && args.size() >= 2) {
      state_dir = args[1];
      args.erase(args.begin(), args.begin() + 2);
    } else if (args[0].rfind("--state-dir=", 0) == 0) {
      state_dir = args[0].substr(12);
      args.erase(args.begin());
    } else if (args[0] == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "airlock: unknown option %s\n%s", args[0].c_str(), kUsage);
      return 2;
    }
  }
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  // Subcommand options may also carry --state-dir (e.g. `airlock image build --state-dir D`).
  for (size_t i = 0; i < rest.size() && rest[i] != "--"; ++i) {
    if (rest[i] == "--state-dir" && i + 1 < rest.size()) {
      state_dir = rest[i + 1];
      rest.erase(rest.begin() + i, rest.begin() + i + 2);
      break;
    }
  }
  if (cmd == "run") return CmdRun(state_dir, rest);
  if (cmd == "image") return CmdImage(state_dir, rest);
  if (cmd == "doctor") return RunDoctor(state_dir);
  if (cmd == "serve") {
    if (!std::getenv("AIRLOCK_LOG")) spdlog::set_level(spdlog::level::info);
    std::string agent;
    for (size_t i = 0; i + 1 < rest.size(); ++i) {
      if (rest[i] == "--agent") {
        agent = rest[i + 1];
        rest.erase(rest.begin() + i, rest.begin() + i + 2);
        break;
      }
    }
    return CmdServe(state_dir, FindAgentBinary(agent), rest);
  }
  if (cmd == "apikey") return CmdApiKey(state_dir, rest);
  if (cmd == "sandbox") return CmdSandbox(state_dir, rest);
  if (cmd == "audit") return CmdAudit(state_dir, rest);
  if (cmd == "secret") return CmdSecret(state_dir, rest);
  if (cmd == "cluster") return CmdCluster(state_dir, rest);
  if (cmd == "template") return CmdTemplate(state_dir, rest);
  if (cmd == "mcp") return CmdMcp(state_dir, rest);
  if (cmd == "version" || cmd == "--version") {
    std::puts("airlock 0.1.0");
    return 0;
  }
  std::fprintf(stderr, "airlock: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
