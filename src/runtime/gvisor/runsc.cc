#include "runtime/gvisor/runsc.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/fd.h"

namespace airlock::gvisor {
namespace {

// $1 scratch, $2 tree, $3 rootfs mount, $4 eth0's address and $5 its
// gateway ("": leave eth0 alone), $6 the mount points to make (":"-joined
// guest paths) and $7 the tmpfs directory for them, then runsc's argv. Runs under `unshare -m --propagation slave`, in the guest netns.
constexpr char kWrapper[] = R"(set -e
s=$1 t=$2 r=$3 a=$4 g=$5 m=$6 u=$7
shift 7
if [ -n "$a" ]; then
  ip addr replace "$a" dev eth0
  ip link set eth0 up
  ip route replace default via "$g" dev eth0
fi
mount -t tmpfs -o size=64k,mode=0755 airlock-procsys "$s"
for d in /proc/sys/*; do
  n=${d##*/}
  [ "$n" = net ] && continue
  mkdir "$s/$n"
  mount --bind "$d" "$s/$n"
done
mount --move "$s" /proc/sys
mount -t tmpfs -o size=1m,mode=0755 airlock-mountpoints "$u"
mkdir "$u/up" "$u/work"
# In the upper layer, a tmpfs with no links: a directory there hides
# whatever the tree (a tenant's) has at that name, a symlink included.
IFS=:
for p in $m; do mkdir -p "$u/up$p"; done
unset IFS
mount -t overlay -o "lowerdir=$t,upperdir=$u/up,workdir=$u/work" airlock-root "$r"
mount -o remount,ro "$r"
exec "$@"
)";

StatusOr<UniqueFd> OpenNetns(const std::string& path) {
  if (path.empty()) return UniqueFd();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open guest netns " + path);
  return fd;
}

}  // namespace

std::vector<std::string> RunscGlobalFlags(const RunscConfig& c) {
  // --directfs=false: with directfs (runsc's default since 2023) the Sentry
  // opens the container's files itself, so runsc starts it in the caller's
  // user namespace, as host uid 0 with every capability. Without it, files
  // come through the gofer, and the Sentry starts in a new user namespace
  // that maps only nobody (65534) to host nobody, chrooted into an empty
  // root (runsc/sandbox/sandbox.go, createSandboxProcess). Checked by
  // LifecycleTest.GvisorSentryIsUnprivilegedOnTheHost.
  std::vector<std::string> f = {"--root",       c.root,       "--platform", c.platform,     "--network",
                                "sandbox",      "--overlay2", "root:memory", "--directfs=false"};
  // Debugging runsc itself: its per-process logs in that directory.
  if (const char* d = std::getenv("AIRLOCK_RUNSC_DEBUG_LOG"); d && *d) {
    f.push_back("--debug");
    f.push_back("--debug-log=" + std::string(d) + "/");
  }
  return f;
}

Status RunscStartCall(const RunscConfig& config, const RunscStart& call) {
  if (call.mount_points.empty() || call.mount_upper.empty())
    return InvalidArgument("runsc start: no mount points, or no directory for them");
  ASSIGN_OR_RETURN(UniqueFd ns, OpenNetns(call.guest_netns));
  // Slave: what the host unmounts later (a deleted volume) leaves this
  // namespace too; what the wrapper mounts stays in it.
  std::vector<std::string> argv = {"unshare", "-m", "--propagation", "slave", "sh", "-c", kWrapper, "airlock-runsc",
                                   call.scratch, call.tree, call.rootfs_mount, call.eth0_address,
                                   call.eth0_gateway, "", call.mount_upper, config.binary};
  for (const auto& p : call.mount_points) argv[13] += (argv[13].empty() ? "" : ":") + p;  // $6
  for (auto& f : RunscGlobalFlags(config)) argv.push_back(f);
  for (auto& a : call.args) argv.push_back(a);
  SpawnOptions o;
  o.argv = argv;
  o.netns_fd = ns.get();
  o.stdout_fd = call.output_fd;
  o.stderr_fd = call.output_fd;
  // The sandbox outlives this call (it is its own session, reparented to
  // init); only runsc itself is waited for.
  o.die_with_parent = true;
  ASSIGN_OR_RETURN(Child child, Spawn(o));
  auto st = child.WaitFor(call.timeout);
  if (!st.ok()) {
    child.Kill();
    return DeadlineExceeded("runsc " + (call.args.empty() ? "" : call.args[0]) + " did not finish in " +
                            std::to_string(call.timeout.count()) + " ms");
  }
  if (!st->success()) return Internal("runsc " + call.args[0] + " failed (" + st->ToString() + ")");
  return OkStatus();
}

StatusOr<RunResult> RunscCall(const RunscConfig& config, const std::vector<std::string>& args,
                              const std::string& guest_netns, std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(UniqueFd ns, OpenNetns(guest_netns));
  std::vector<std::string> argv = {"timeout", "-s", "KILL", std::to_string((timeout.count() + 999) / 1000),
                                   config.binary};
  for (auto& f : RunscGlobalFlags(config)) argv.push_back(f);
  for (auto& a : args) argv.push_back(a);
  return Run(argv, ns.get(), 1 << 16);
}

StatusOr<RunscPids> ReadRunscPids(const RunscConfig& config, const std::string& id) {
  // runsc 20221219: <root>/<id>_sandbox:<id>.state, JSON with goferPid and
  // sandbox.pid (runsc/container/state_file.go).
  std::string path = config.root + "/" + id + "_sandbox:" + id + ".state";
  std::ifstream f(path);
  if (!f) return NotFound("no runsc state for container " + id + " (" + path + ")");
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("unreadable runsc state " + path);
  RunscPids p;
  if (j.contains("sandbox") && j["sandbox"].is_object()) p.sandbox = j["sandbox"].value("pid", -1);
  p.gofer = j.value("goferPid", -1);
  if (p.sandbox <= 0) return NotFound("runsc state " + path + " names no sandbox pid");
  return p;
}

}  // namespace airlock::gvisor
