#include "core/volumes.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/secure_equal.h"
#include "common/subprocess.h"

namespace airlock {

namespace fs = std::filesystem;

bool ValidVolumeName(const std::string& name) {
  if (name.empty() || name.size() > 63 || !std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

namespace {

// Whether `dir` is a mount point (its st_dev differs from its parent's).
bool IsMountPoint(const std::string& dir) {
  struct stat a {}, b {};
  if (::lstat(dir.c_str(), &a) != 0 || ::lstat((dir + "/..").c_str(), &b) != 0) return false;
  return a.st_dev != b.st_dev;
}

// Whether /proc/self/mountinfo lists a mount at `dir` (a bind of a
// directory onto itself has its parent's st_dev).
bool ListedAsMount(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    if (point == dir) return true;
  }
  return false;
}

// Mounts `image` at `dir`, which must exist already (made by Create): a
// volume deleted meanwhile never comes back as a plain directory.
Status MountImage(const std::string& image, const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return NotFound("the volume's directory is gone");
  if (IsMountPoint(dir)) return OkStatus();
  auto r = RunChecked({"mount", "-t", "ext4", "-o", "loop,nodev,nosuid,noexec", image, dir});
  if (!r.ok()) return Internal("mount volume: " + r.status().message());
  return OkStatus();
}

}  // namespace

VolumeStore::VolumeStore(Registry* registry, Options o) : registry_(registry), o_(std::move(o)) {}

std::string VolumeStore::VolumeDir(const std::string& id) const { return o_.state_dir + "/volumes/" + id; }

bool IsVolumeMounted(const std::string& dir) { return IsMountPoint(dir); }

StatusOr<VolumeRecord> VolumeStore::Create(const std::string& team, const std::string& name, int64_t size_mib) {
  if (!ValidVolumeName(name)) {
    return InvalidArgument("volume name must be 1..63 of [A-Za-z0-9._-], starting with a letter or digit");
  }
  if (size_mib == 0) size_mib = o_.default_size_mib;
  if (size_mib < 16 || size_mib > o_.max_size_mib) {
    return InvalidArgument("sizeMB must be 16.." + std::to_string(o_.max_size_mib));
  }
  std::lock_guard<std::mutex> l(mu_);
  ASSIGN_OR_RETURN(auto mine, registry_->ListVolumes(team));
  if (o_.max_per_team > 0 && static_cast<int64_t>(mine.size()) >= o_.max_per_team) {
    return ResourceExhausted("team " + team + " has " + std::to_string(mine.size()) +
                             " volumes, its most (serve --max-volumes-per-team)");
  }
  int64_t used = 0;
  for (const auto& v : mine) {
    if (v.name == name) return AlreadyExists("a volume named '" + name + "' exists");
    used += v.size_mib;
  }
  if (o_.team_budget_mib > 0 && used + size_mib > o_.team_budget_mib) {
    return ResourceExhausted("team " + team + " has " + std::to_string(used) + " MiB of volumes; " +
                             std::to_string(size_mib) + " MiB more is over its budget of " +
                             std::to_string(o_.team_budget_mib) + " MiB (serve --team-volume-budget-mib)");
  }
  VolumeRecord v;
  v.id = "vol-" + RandomHex(10);
  v.team = team;
  v.name = name;
  v.token = "vt_" + RandomHex(24);
  v.size_mib = size_mib;
  v.created_at_ms = NowUnixMs();
  const std::string dir = VolumeDir(v.id);
  auto undo = [&dir] {
    std::error_code ec;
    if (IsMountPoint(dir + "/fs")) (void)Run({"umount", "-l", dir + "/fs"});
    fs::remove_all(dir, ec);
  };
  std::error_code ec;
  fs::create_directories(dir + "/fs", ec);
  if (ec) return Internal("create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  const std::string image = dir + "/disk.ext4";
  // Sparse: the host holds what the volume holds. -m 0: no blocks reserved
  // for root (the guest's root is no one's administrator here).
  Status st = [&]() -> Status {
    {
      std::ofstream f(image);
      if (!f) return Internal("create " + image);
    }
    if (::truncate(image.c_str(), size_mib * 1024 * 1024) != 0) return ErrnoError("truncate " + image);
    auto r = RunChecked({"mkfs.ext4", "-q", "-F", "-m", "0", "-E",
                         "root_owner=" + std::to_string(kVolumeDefaultUid) + ":" + std::to_string(kVolumeDefaultGid),
                         "-L", "airlock-vol", image});
    if (!r.ok()) return Internal("mkfs.ext4: " + r.status().message());
    RETURN_IF_ERROR(ShareMountsLocked());
    RETURN_IF_ERROR(MountImage(image, dir + "/fs"));
    ::rmdir((dir + "/fs/lost+found").c_str());
    return registry_->InsertVolume(v);
  }();
  if (!st.ok()) {
    undo();
    return st;
  }
  return v;
}

StatusOr<std::vector<VolumeRecord>> VolumeStore::List(const std::string& team) { return registry_->ListVolumes(team); }

StatusOr<VolumeRecord> VolumeStore::Find(const std::string& team, const std::string& id_or_name) {
  ASSIGN_OR_RETURN(auto all, registry_->ListVolumes(team));
  for (auto& v : all) {
    if (v.id == id_or_name) return v;
  }
  for (auto& v : all) {
    if (v.name == id_or_name) return v;
  }
  return NotFound("volume " + id_or_name + " not found");
}

StatusOr<VolumeRecord> VolumeStore::Authenticate(const std::string& id, const std::string& token) {
  auto v = registry_->GetVolume(id);
  if (v.ok() && !token.empty() && SecureEqual(token, v->token)) return v;
  if (!v.ok() && v.status().code() != StatusCode::kNotFound) return v.status();
  return NotFound("volume " + id + " not found");
}

Status VolumeStore::Delete(const VolumeRecord& v) {
  std::lock_guard<std::mutex> l(mu_);
  RETURN_IF_ERROR(registry_->DeleteVolume(v.id));
  const std::string dir = VolumeDir(v.id);
  if (IsMountPoint(dir + "/fs")) {
    auto r = Run({"umount", dir + "/fs"});
    if (!r.ok() || !r->status.success()) (void)Run({"umount", "-l", dir + "/fs"});
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) LOG_WARN("volume {}: remove {}: {}", v.id, dir, ec.message());
  return OkStatus();
}

StatusOr<std::string> VolumeStore::MountedRoot(const VolumeRecord& v) {
  std::lock_guard<std::mutex> l(mu_);
  // Still a volume (Delete removes the row first, under this lock).
  RETURN_IF_ERROR(registry_->GetVolume(v.id).status());
  const std::string dir = VolumeDir(v.id);
  if (!IsMountPoint(dir + "/fs")) RETURN_IF_ERROR(ShareMountsLocked());
  RETURN_IF_ERROR(MountImage(dir + "/disk.ext4", dir + "/fs"));
  return dir + "/fs";
}

Status VolumeStore::ShareMountsLocked() {
  if (shared_) return OkStatus();
  const std::string dir = o_.state_dir + "/volumes";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal("create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  if (!ListedAsMount(dir)) {
    auto r = RunChecked({"mount", "--bind", dir, dir});
    if (!r.ok()) return Internal("bind " + dir + ": " + r.status().message());
  }
  auto r = RunChecked({"mount", "--make-shared", dir});
  if (!r.ok()) return Internal("make " + dir + " shared: " + r.status().message());
  shared_ = true;
  return OkStatus();
}

void VolumeStore::UnmountAll() {
  std::lock_guard<std::mutex> l(mu_);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(o_.state_dir + "/volumes", ec)) {
    const std::string dir = e.path().string() + "/fs";
    if (IsMountPoint(dir)) (void)Run({"umount", "-l", dir});
  }
  const std::string root = o_.state_dir + "/volumes";
  if (ListedAsMount(root)) (void)Run({"umount", "-l", root});
  shared_ = false;
}

void VolumeStore::RemoveOrphans() {
  auto all = registry_->ListVolumes("");
  if (!all.ok()) return;
  std::set<std::string> known;
  for (auto& v : *all) known.insert(v.id);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(o_.state_dir + "/volumes", ec)) {
    std::string id = e.path().filename();
    if (known.count(id)) continue;
    LOG_INFO("volume {}: no record (a create or delete was cut short); removing its files", id);
    if (IsMountPoint(e.path().string() + "/fs")) (void)Run({"umount", "-l", e.path().string() + "/fs"});
    fs::remove_all(e.path(), ec);
  }
}

// ---- the per-sandbox NFS server ----

std::string GaneshaConfig(const std::vector<VolumeExport>& exports) {
  std::ostringstream c;
  c << "# Written by airlock (core/volumes.h): the NFS server of one sandbox.\n"
    << "NFS_CORE_PARAM {\n"
    << "  Protocols = 3;\n  Bind_addr = " << kVolumeServerAddress << ";\n"
    << "  NFS_Port = " << kVolumeNfsPort << ";\n  MNT_Port = " << kVolumeMountPort << ";\n"
    << "  Enable_NLM = false;\n  Enable_RQUOTA = false;\n  Enable_UDP = false;\n"
    // MOUNT names exports by their pseudo path "/<volume id>", not the host's.
    << "  Mount_Path_Pseudo = true;\n"
    << "  RPC_Max_Connections = 64;\n"  // one guest needs a few
    << "}\n"
    // UseGetpwnam: no libnfsidmap (and its plugins, /etc/idmapd.conf) in
    // the server's root; NFSv3 names no owners anyway.
    << "NFSV4 { Graceless = true; UseGetpwnam = true; }\n"
    // Writes through the content API and other sandboxes' servers reach the
    // same filesystem behind this server's back: no directory contents
    // cached (nor attributes: Attr_Expiration_Time below), and a bound on
    // the entries it keeps.
    << "MDCACHE { Dir_Chunk = 0; Entries_HWMark = 2000; }\n"
    // Warnings and worse: what a guest does is not logged.
    << "LOG { Default_Log_Level = WARN; }\n";
  int n = 1;
  for (const auto& e : exports) {
    c << "EXPORT {\n  Export_Id = " << n++ << ";\n  Path = \"/exports/" << e.volume_id << "\";\n  Pseudo = \"/"
      << e.volume_id << "\";\n  Protocols = 3;\n  Transports = TCP;\n  Access_Type = RW;\n"
      << "  Squash = No_Root_Squash;\n  SecType = sys;\n  Attr_Expiration_Time = 0;\n"
      << "  FSAL { Name = VFS; }\n}\n";
  }
  return c.str();
}

namespace {

std::string NfsDir(const std::string& run_dir) { return run_dir + "/nfs"; }

// The recorded server's pid when it still runs (same start time), else 0.
pid_t RecordedServer(const std::string& run_dir) {
  std::ifstream in(NfsDir(run_dir) + "/server.pid");
  pid_t pid = 0;
  unsigned long long ticks = 0;
  if (!(in >> pid >> ticks) || pid <= 1) return 0;
  if (ProcessStartTicks(pid) != ticks || ticks == 0) return 0;
  return pid;
}

// Whether the netns of `pid` has a TCP listener on `port` (/proc/<pid>/net/tcp{,6}).
bool Listens(pid_t pid, uint16_t port) {
  char want[8];
  std::snprintf(want, sizeof want, ":%04X", port);
  for (const char* f : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + f);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream s(line);
      std::string sl, local, remote, st;
      s >> sl >> local >> remote >> st;
      if (st == "0A" && local.size() > 5 && local.compare(local.size() - 5, 5, want) == 0) return true;
    }
  }
  return false;
}

std::string LogTail(const std::string& path) {
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.size() > 600) all = all.substr(all.size() - 600);
  return all;
}

// What the server said: its setup's stderr, then ganesha's log in its own
// root, through the pid namespace's init (unshare's child) while it lives.
std::string ServerLogTail(const std::string& dir, pid_t unshare_pid) {
  std::string out = LogTail(dir + "/setup.log");
  std::ifstream children("/proc/" + std::to_string(unshare_pid) + "/task/" + std::to_string(unshare_pid) + "/children");
  pid_t init = 0;
  if (children >> init && init > 0) {
    std::string log = LogTail("/proc/" + std::to_string(init) + "/root/run/ganesha.log");
    if (!log.empty()) out += (out.empty() ? "" : "\n") + log;
  }
  return out;
}

// Builds the sealed root (EnsureVolumeServerRoot): $1 the directory, $2 the
// stamp, then the programs. ldd names each library as the loader finds it
// (/lib/x86_64-linux-gnu/libc.so.6, a soname link): each is copied, links
// followed, under its directory's real path, so usr/ holds everything and
// bin, sbin, lib, lib64 are links into it as on the host.
constexpr char kSealRoot[] = R"SH(set -e
d=$1 stamp=$2
shift 2
# Under flock: another daemon may have made it meanwhile.
if mountpoint -q "$d" && [ "$(cat "$d/.stamp" 2>/dev/null)" = "$stamp" ]; then exit 0; fi
if mountpoint -q "$d"; then umount -l "$d"; fi
mkdir -p "$d"
mount -t tmpfs -o size=256m,mode=755 airlock-nfs-programs "$d"
for l in bin sbin lib lib64; do ln -s "usr/$l" "$d/$l"; done
for f in "$@" $(for p in "$@"; do ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'; done | sort -u); do
  t=$(readlink -f "$(dirname "$f")")/$(basename "$f")
  mkdir -p "$d$(dirname "$t")"
  cp -L "$f" "$d$t"
done
mkdir -p "$d/etc"
cp /etc/netconfig "$d/etc/netconfig"
grep -E '^(root|_rpc):' /etc/passwd > "$d/etc/passwd"
grep -E '^(root|nogroup):' /etc/group > "$d/etc/group"
printf '%s
' "$stamp" > "$d/.stamp"
mount -o remount,ro "$d"
)SH";

std::mutex seal_mu;

}  // namespace

bool VolumeServerRunning(const std::string& run_dir) { return RecordedServer(run_dir) != 0; }

Status EnsureVolumeServerRoot(const std::string& dir) {
  std::vector<std::string> programs;
  std::string stamp = "1";
  for (const char* name : {"ganesha.nfsd", "rpcbind", "dash", "setpriv", "umount", "sleep"}) {
    auto p = FindExecutable(name);
    if (!p.ok()) return FailedPrecondition(std::string(name) + " is not installed (fix: run scripts/setup)");
    programs.push_back(fs::canonical(*p).string());
  }
  // The FSAL ganesha loads (its plugin directory, as Debian installs it).
  const std::string fsal = "/usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so";
  std::error_code ec;
  if (!fs::exists(fsal, ec)) return FailedPrecondition(fsal + " is missing (fix: apt-get install nfs-ganesha-vfs)");
  programs.push_back(fs::canonical(fsal).string());
  for (const auto& p : programs) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) return ErrnoError("stat " + p);
    stamp += " " + p + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtime);
  }
  std::lock_guard<std::mutex> l(seal_mu);
  {
    std::ifstream in(dir + "/.stamp");
    std::string have;
    std::getline(in, have);
    if (have == stamp && IsVolumeMounted(dir)) return OkStatus();
  }
  // Daemons sharing a state dir make it one at a time.
  std::vector<std::string> argv = {"flock", dir + ".lock", "/bin/sh", "-c", kSealRoot, "seal", dir, stamp};
  for (auto& p : programs) argv.push_back(p);
  auto r = RunChecked(argv);
  if (!r.ok()) return r.status().WithContext("make the NFS server's root " + dir);
  return OkStatus();
}

Status StartVolumeServer(const std::string& run_dir, int netns_fd, const std::vector<VolumeExport>& exports,
                         const std::string& server_root) {
  if (VolumeServerRunning(run_dir)) return OkStatus();
  const std::string dir = NfsDir(run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal("create " + dir + ": " + ec.message());
  RETURN_IF_ERROR(WriteFileAtomic(dir + "/ganesha.conf", GaneshaConfig(exports), 0600));
  RETURN_IF_ERROR(EnsureVolumeServerRoot(server_root));
  const std::string setup_log = dir + "/setup.log";
  UniqueFd setup_err(::open(setup_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!setup_err) return ErrnoError("open " + setup_log);
  // A mount namespace and a pid namespace of its own (unshare -f: the shell
  // is its pid 1), a root of its own (volumes.h), then rpcbind, which dies
  // with the shell that becomes ganesha (--pdeathsig), and ganesha with only
  // the capabilities serving files needs. Until the pivot the shell's
  // stderr is setup.log; from then on nothing of the host's is open.
  std::string script = R"SH(set -e
n=$1 s=$2
shift 2
r=$n/root
mkdir -p "$r"
mount -t tmpfs -o size=8m,mode=755 airlock-nfs "$r"
mkdir -p "$r/usr" "$r/etc" "$r/run/rpcbind" "$r/var/lib/nfs/ganesha" "$r/tmp" "$r/dev" "$r/proc" "$r/exports"
ln -s ../run "$r/var/run"
mount --bind "$s/usr" "$r/usr"
mount -o remount,bind,ro "$r/usr"
for l in bin sbin lib lib64; do ln -s "usr/$l" "$r/$l"; done
cp "$s/etc/netconfig" "$s/etc/passwd" "$s/etc/group" "$r/etc/"
ln -s ../proc/self/mounts "$r/etc/mtab"
cp "$n/ganesha.conf" "$r/etc/ganesha.conf"
mknod -m 666 "$r/dev/null" c 1 3
mknod -m 666 "$r/dev/zero" c 1 5
mknod -m 666 "$r/dev/random" c 1 8
mknod -m 666 "$r/dev/urandom" c 1 9
for e in "$@"; do
  mkdir "$r/exports/${e%%:*}"
  mount --bind "${e#*:}" "$r/exports/${e%%:*}"
done
mount -t proc -o nosuid,nodev,noexec proc "$r/proc"
cd "$r"
mkdir .old
pivot_root . .old
cd /
umount -l /.old
exec </dev/null >/dev/null 2>&1
setpriv --pdeathsig KILL rpcbind -f -w &
i=0
while [ ! -S /run/rpcbind.sock ] && [ $i -lt 200 ]; do i=$((i+1)); sleep 0.05; done
exec setpriv --bounding-set=-all,+chown,+dac_override,+dac_read_search,+fowner,+fsetid,+setuid,+setgid,+sys_resource ganesha.nfsd -F -f /etc/ganesha.conf -L /run/ganesha.log -p /run/ganesha.pid -N NIV_WARN
)SH";
  SpawnOptions o;
  // Slave propagation: a volume the host unmounts (deleted) goes from this
  // namespace too, instead of staying pinned there.
  o.argv = {"unshare", "-m", "-p", "-f", "--propagation", "slave", "/bin/sh", "-c", script, "ganesha", dir,
            server_root};
  for (const auto& e : exports) o.argv.push_back(e.volume_id + ":" + e.host_dir);
  o.netns_fd = netns_fd;
  o.new_session = true;
  o.die_with_parent = false;
  o.stdout_to_devnull = true;
  o.stderr_fd = setup_err.get();
  ASSIGN_OR_RETURN(Child child, Spawn(o));
  const pid_t pid = child.pid();
  RETURN_IF_ERROR(WriteFileAtomic(dir + "/server.pid",
                                  std::to_string(pid) + " " + std::to_string(ProcessStartTicks(pid)) + "\n", 0600));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto done = child.Poll()) {
      return Unavailable("the volume NFS server exited (" + done->ToString() + "): " + ServerLogTail(dir, pid));
    }
    if (Listens(pid, kVolumeNfsPort) && Listens(pid, kVolumeMountPort)) {
      child.Release();
      return OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string said = ServerLogTail(dir, pid);
  ::kill(-pid, SIGKILL);
  return DeadlineExceeded("the volume NFS server did not listen within 20 s: " + said);
}

Status StopVolumeServer(const std::string& run_dir, int netns_fd) {
  pid_t pid = RecordedServer(run_dir);
  if (pid != 0) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    // Ours to reap when this daemon started it; a predecessor's is init's.
    for (int i = 0; i < 100; ++i) {
      int ws = 0;
      pid_t r = ::waitpid(pid, &ws, WNOHANG);
      if (r == pid || (r < 0 && errno == ECHILD)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ::unlink((NfsDir(run_dir) + "/server.pid").c_str());
  if (netns_fd >= 0) {
    auto r = RunChecked({"ss", "-K", "-t", "-n", "state", "all", "( sport = :" + std::to_string(kVolumeNfsPort) +
                                                                      " or sport = :" +
                                                                      std::to_string(kVolumeMountPort) + " )"},
                        netns_fd);
    if (!r.ok()) return Internal("reset the volume server's connections: " + r.status().message());
  }
  return OkStatus();
}

}  // namespace airlock
