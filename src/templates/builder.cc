#include "templates/builder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "common/log.h"
#include "common/subprocess.h"
#include "core/manager.h"
#include "core/registry.h"
#include "egress/policy.h"
#include "image/hash.h"
#include "image/image.h"
#include "image/oci_base.h"

namespace airlock::templates {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// The agent's readiness lines of the "start" service (agent/services.h
// ServiceReadyLine/ServiceFailedLine; tests/unit/templates_test.cc checks
// they agree).
constexpr char kStartReadyLine[] = "airlock-agent: service start ready";
constexpr char kStartFailedLine[] = "airlock-agent: service start ended before ready:";

// What every build sandbox runs on, whatever the daemon's default runtime
// (serve --default-runtime): qemu, whose snapshots keep the disk as layers
// and export it as the template's rootfs (Manager::SaveDiskLayer,
// SnapshotStore::ExportDisk); gVisor cannot export a disk. A template built here may then
// run on any runtime.
constexpr char kBuildRuntime[] = "qemu";

constexpr size_t kMaxLogLines = 20000;     // per build; then one "truncated" line
constexpr size_t kMaxLogLineBytes = 4096;  // longer lines are cut

std::string Short(const std::string& hash) { return hash.substr(0, 12); }

// A step as the log shows it: "RUN apt-get install -y curl".
std::string Describe(const Step& s) {
  std::string out(StepTypeName(s.type));
  for (const auto& a : s.args) {
    if (a.empty()) continue;
    std::string one = a.size() > 200 ? a.substr(0, 200) + "..." : a;
    out += " " + one;
  }
  return out;
}

// A shell function COPY and WORKDIR share: `mkdirs DIR OWNER` is
// `mkdir -p DIR`, the directories it made belonging to OWNER (user:group,
// or the user alone when the group does not exist).
constexpr char kMkdirsFunction[] = R"SH(mkdirs() {
  local d=$1 first=
  while [ ! -e "$d" ] && [ ! -L "$d" ]; do first=$d; d=$(dirname "$d"); done
  mkdir -p "$1"
  if [ -n "$first" ]; then chown -R "$2" "$first" 2>/dev/null || chown -R "${2%%:*}" "$first"; fi
}
)SH";

// COPY inside the guest (as root): extract the archive (GNU tar detects
// gzip by itself), take the source base out of it, give it its owner and
// mode, and put it at the target with Docker's COPY rules (§A.4).
// $1 archive $2 source base ("" = the archive root) $3 target $4 owner
// ("" = the context user) $5 mode ("" = as archived) $6 context user
// $7 context workdir.
constexpr char kCopyScript[] = R"SH(set -euo pipefail
archive=$1 base=$2 target=$3 owner=$4 mode=$5 ctxuser=$6 workdir=$7
work=$(mktemp -d /tmp/airlock-copy.XXXXXX)
trap 'rm -rf "$work" "$archive"' EXIT
mkdir "$work/unpack"
tar -xf "$archive" -C "$work/unpack"
src="$work/unpack"
[ -n "$base" ] && src="$work/unpack/$base"
if [ ! -e "$src" ] && [ ! -L "$src" ]; then echo "COPY: '$base' is not in the uploaded files" >&2; exit 1; fi
if [[ "$target" != /* ]]; then
  if [ -n "$workdir" ]; then target="$workdir/$target"
  else target="$(getent passwd "$ctxuser" | cut -d: -f6)/$target"; fi
fi
[ -n "$owner" ] || owner=$ctxuser
[[ "$owner" == *:* ]] || owner="$owner:$owner"
chown -R -h "$owner" "$src" 2>/dev/null || chown -R -h "${owner%%:*}" "$src"
if [ -n "$mode" ]; then find "$src" ! -type l -exec chmod "$mode" {} +; fi
if [ -d "$src" ] && [ ! -L "$src" ]; then
  mkdirs "$target" "$owner"
  tar -C "$src" -cf - . | tar -C "$target" -xf - --keep-directory-symlink --no-overwrite-dir
elif [[ "$target" == */ ]] || [ -d "$target" ]; then
  mkdirs "$target" "$owner"
  mv -f "$src" "$target/"
else
  mkdirs "$(dirname "$target")" "$owner"
  mv -fT "$src" "$target"
fi
)SH";

// WORKDIR (as root): mkdir -p, the directories it made owned by the
// context user; prints the real path. $1 path $2 user.
constexpr char kWorkdirScript[] = R"SH(set -euo pipefail
mkdirs "$1" "$2:$2"
realpath "$1"
)SH";

// USER (as root): the user, made when missing; with $2 = "true", sudo.
constexpr char kUserScript[] = R"SH(set -euo pipefail
id -u "$1" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$1"
if [ "${2:-}" = true ]; then
  mkdir -p /etc/sudoers.d
  printf '%s ALL=(ALL:ALL) NOPASSWD: ALL\n' "$1" > "/etc/sudoers.d/90-$1"
  chmod 0440 "/etc/sudoers.d/90-$1"
fi
)SH";

// The user phase of an OCI base (§A.6 step 2), as root with /bin/sh (an
// image need not have bash): `user`, made when missing (useradd, or
// busybox's adduser), passwordless sudo when the image has sudo.
constexpr char kOciUserScript[] = R"SH(set -eu
if ! id -u user >/dev/null 2>&1; then
  shell=/bin/sh
  [ -x /bin/bash ] && shell=/bin/bash
  if command -v useradd >/dev/null 2>&1; then useradd --create-home --shell "$shell" user
  elif command -v adduser >/dev/null 2>&1; then adduser -D -s "$shell" user
  else echo "the image has neither useradd nor adduser: cannot create the user 'user'" >&2; exit 1
  fi
fi
if command -v sudo >/dev/null 2>&1; then
  mkdir -p /etc/sudoers.d
  printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' > /etc/sudoers.d/90-user
  chmod 0440 /etc/sudoers.d/90-user
fi
)SH";

// Finalize (as root): the agent's template defaults and the start service.
constexpr char kFinalizeScript[] = R"SH(set -euo pipefail
mkdir -p /etc/airlock/services
printf '%s\n' "$1" > /etc/airlock/template.json
if [ -n "$2" ]; then printf '%s\n' "$2" > /etc/airlock/services/start.json
else rm -f /etc/airlock/services/start.json; fi
)SH";

std::string HomeOf(const std::string& user) { return user == "root" ? "/root" : "/home/" + user; }

}  // namespace

std::string ImageNameOf(const std::string& build_id) {
  std::string hex;
  for (char c : build_id) {
    if (c != '-') hex += c;
  }
  return "b" + hex;
}

std::string FilesPathOf(const std::string& state_dir, const std::string& team, const std::string& hash) {
  return state_dir + "/templates/files/" + image::Sha256Hex(team).substr(0, 16) + "/" + hash + ".tar";
}

struct Builder::Job {
  BuildRow row;
  TemplateRow tmpl;
  BuildStart spec;
  std::string step = "base";  // where a failure is reported
  Clock::time_point deadline;
  std::atomic<bool> canceled{false};
  std::mutex mu;
  std::string sandbox_id;  // the build sandbox, while one runs
  std::shared_ptr<Sandbox> sandbox;
  std::vector<LayerRow> new_layers;  // committed only when the build is ready
  std::string image;                 // installed image name (removed on failure)
  size_t log_lines = 0;
};

Builder::Builder(Manager& manager, TemplateStore& store, BuilderConfig config)
    : manager_(manager), store_(store), config_(std::move(config)), queue_(config_.max_concurrent) {
  if (config_.max_concurrent < 1) config_.max_concurrent = 1;
}

Builder::~Builder() { Stop(); }

void Builder::Start() {
  // Builds a previous daemon left mid-way: failed, nothing of them kept.
  for (const char* status : {kBuilding, kWaiting}) {
    auto rows = store_.BuildsWithStatus(status);
    if (!rows.ok()) continue;
    for (auto& b : *rows) {
      if (std::string(status) == kWaiting && !b.started) continue;  // not triggered yet: may still be
      b.status = kError;
      b.reason = {{"message", "the build was interrupted: the daemon stopped during it"}, {"step", "base"}};
      (void)store_.FinishBuild(b);
      (void)store_.AppendLog(b.id, {NowUnixMs(), "error", "Build failed: the daemon stopped during the build", ""});
      LOG_WARN("template build {} was interrupted by a daemon stop: failed", b.id);
    }
  }
  // Images of builds this registry no longer has, or of registries that are
  // gone (a test daemon's temporary database).
  {
    std::set<std::string> mine;
    if (auto ready = store_.BuildsWithStatus(kReady); ready.ok()) {
      for (const auto& b : *ready) mine.insert(b.image);
    }
    bool removed = false;
    for (const auto& [name, owner] : image::CustomImages(config_.state_dir)) {
      std::error_code ec;
      bool stale = owner == config_.owner ? !mine.count(name) : (!owner.empty() && !fs::exists(owner, ec));
      if (!stale) continue;
      LOG_INFO("template image {} of {} is no longer built: removed", name, owner.empty() ? "?" : owner);
      (void)image::RemoveTemplateImage(config_.state_dir, name);
      removed = true;
    }
    // Layer directories of registries that are gone (their "owner" file).
    std::error_code ec;
    for (auto& e : fs::directory_iterator(manager_.snapshot_dirs().layers(), ec)) {
      std::ifstream f(e.path() / "owner");
      std::string owner;
      if (!f || !std::getline(f, owner) || owner.empty() || fs::exists(owner, ec)) continue;
      LOG_INFO("template layers of {} (gone): removed", owner);
      std::error_code ec2;
      for (auto& l : fs::directory_iterator(e.path(), ec2)) {
        if (l.is_directory()) (void)manager_.snapshot_dirs().DeleteDiskLayer(l.path().string());
      }
      fs::remove_all(e.path(), ec2);
      removed = true;
    }
    if (removed) image::CollectGarbage(config_.state_dir);
  }
  CollectGarbage();
  std::lock_guard<std::mutex> l(mu_);
  stopping_ = false;
  for (int i = 0; i < config_.max_concurrent; ++i) workers_.emplace_back([this] { Worker(); });
}

void Builder::Stop() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    for (auto& [id, job] : running_) jobs.push_back(job);
  }
  cv_.notify_all();
  Cancel(jobs);
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
}

Status Builder::Enqueue(const std::string& build_id) {
  // The team whose turn it is decides (build_queue.h): read it first.
  std::string team;
  if (auto b = store_.GetBuild(build_id); b.ok()) {
    if (auto t = store_.GetTemplate(b->template_id); t.ok()) team = t->team;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return FailedPrecondition("the daemon is stopping");
    queue_.Push(build_id, team);
  }
  cv_.notify_one();
  return OkStatus();
}

void Builder::CancelTemplate(const std::string& template_id) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& id : queue_.Waiting()) {
      auto b = store_.GetBuild(id);
      if (b.ok() && b->template_id == template_id) canceled_.insert(id);
    }
    for (auto& [id, job] : running_) {
      if (job->row.template_id == template_id) jobs.push_back(job);
    }
  }
  Cancel(jobs);
}

void Builder::Cancel(const std::vector<std::shared_ptr<Job>>& jobs) {
  for (const auto& job : jobs) {
    job->canceled = true;
    std::string sid;
    {
      std::lock_guard<std::mutex> l(job->mu);
      sid = job->sandbox_id;
    }
    // Its calls into the guest fail at once; the build ends as canceled.
    if (!sid.empty()) (void)manager_.Destroy(sid);
  }
}

void Builder::Worker() {
  while (true) {
    std::string id;
    {
      std::unique_lock<std::mutex> l(mu_);
      std::optional<std::string> next;
      // Woken by a build queued or ended: whose turn it is (build_queue.h).
      cv_.wait(l, [&] { return stopping_ || (next = queue_.Next()).has_value(); });
      if (stopping_) return;
      id = *next;
      if (canceled_.erase(id)) {
        queue_.Done(id);
        continue;
      }
    }
    RunBuild(id);
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.Done(id);
    }
    cv_.notify_all();  // a slot, and maybe a team's turn, is free
  }
}

std::string HideHostPaths(std::string message, const std::string& state_dir) {
  if (state_dir.empty() || state_dir == "/") return message;
  const std::string root = state_dir.back() == '/' ? state_dir.substr(0, state_dir.size() - 1) : state_dir;
  // What ends a path in a message: space, ':', a quote, ')' or ','.
  auto ends_path = [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) || c == ':' || c == '\'' || c == '"' || c == ')' || c == ',';
  };
  for (size_t at = message.find(root); at != std::string::npos; at = message.find(root, at)) {
    size_t end = at + root.size();
    if (end < message.size() && message[end] != '/' && !ends_path(message[end])) {
      at = end;  // a longer name that starts the same (/var/lib/airlock2)
      continue;
    }
    while (end < message.size() && !ends_path(message[end])) ++end;
    static constexpr char kHidden[] = "<host path>";
    message.replace(at, end - at, kHidden);
    at += sizeof(kHidden) - 1;
  }
  return message;
}

void Builder::Log(Job& job, const std::string& level, const std::string& message, const std::string& step) {
  if (job.log_lines > kMaxLogLines) return;
  const std::string shown = HideHostPaths(message, config_.state_dir);
  std::string m = shown.size() > kMaxLogLineBytes ? shown.substr(0, kMaxLogLineBytes) + "..." : shown;
  if (++job.log_lines > kMaxLogLines) m = "(build log truncated: more than " + std::to_string(kMaxLogLines) + " lines)";
  Status st = store_.AppendLog(job.row.id, LogEntry{NowUnixMs(), level, m, step});
  if (!st.ok()) LOG_WARN("template build {}: log: {}", job.row.id, st.message());
}

void Builder::RunBuild(const std::string& build_id) {
  auto job = std::make_shared<Job>();
  auto row = store_.GetBuild(build_id);
  if (!row.ok()) return;  // deleted with its template
  job->row = *row;
  auto tmpl = store_.GetTemplate(row->template_id);
  if (!tmpl.ok()) return;
  job->tmpl = *tmpl;
  auto spec = ParseBuildStart(row->spec);
  {
    std::lock_guard<std::mutex> l(mu_);
    running_[build_id] = job;
  }
  (void)store_.SetStatus(build_id, kBuilding);
  const auto t0 = Clock::now();
  job->deadline = t0 + config_.timeout;
  Log(*job, "info", "Building template " + job->row.template_id + "/" + build_id, "");
  Status st = spec.ok() ? (job->spec = *spec, Build(*job)) : spec.status();
  // The build sandbox, whatever happened.
  std::shared_ptr<Sandbox> sb;
  {
    std::lock_guard<std::mutex> l(job->mu);
    sb = std::move(job->sandbox);
    if (!job->sandbox_id.empty()) (void)manager_.Destroy(job->sandbox_id);
    job->sandbox_id.clear();
  }
  sb.reset();
  if (job->canceled && st.ok()) st = Unavailable("the build was canceled");
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  BuildRow done = job->row;
  if (st.ok()) {
    for (const auto& layer : job->new_layers) {
      if (Status p = store_.PutLayer(layer); !p.ok()) LOG_WARN("template build {}: layer index: {}", build_id, p.message());
    }
    done.status = kReady;
    done.reason = nullptr;
    Log(*job, "info", "Build finished, took " + std::to_string(static_cast<int>(secs + 0.5)) + "s", "");
  } else {
    // The team sees the cause, never the host's paths (the daemon's log has them).
    std::string message = HideHostPaths(st.message(), config_.state_dir);
    if (job->canceled) message = "the build was canceled (its template was deleted or the daemon stopped)";
    for (const auto& layer : job->new_layers) (void)manager_.snapshot_dirs().DeleteDiskLayer(layer.dir);
    if (!job->image.empty()) (void)image::RemoveTemplateImage(config_.state_dir, job->image);
    done.status = kError;
    done.image.clear();
    done.final_layer.clear();
    done.reason = {{"message", message}, {"step", job->step}};
    Log(*job, "error", "Build failed: " + message, job->step);
    LOG_WARN("template build {} failed at step {}: {}", build_id, job->step, st.message());
  }
  if (Status f = store_.FinishBuild(done); !f.ok()) LOG_WARN("template build {}: {}", build_id, f.message());
  if (config_.audit) {
    config_.audit(json{{"action", st.ok() ? "template.build_ready" : "template.build_failed"},
                       {"template", done.template_id},
                       {"build", build_id},
                       {"team", job->tmpl.team},
                       {"steps", job->spec.steps.size()},
                       {"layers_built", job->new_layers.size()},
                       {"seconds", secs},
                       {"error", st.ok() ? json(nullptr) : json(done.reason)}});
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    running_.erase(build_id);
  }
  CollectGarbage();
}

Status Builder::Build(Job& job) {
  const BuildStart& spec = job.spec;
  const std::string& team = job.tmpl.team;
  BuildContext ctx;
  std::string start_cmd = spec.start_cmd, ready_cmd = spec.ready_cmd;
  std::string prev;          // the chain so far
  std::string layer;         // the layer the next step starts on ("" = the base image)
  std::string base_desc;
  std::string base_template = "base";  // the image a build sandbox on no layer boots
  std::string oci_user_hash;  // an OCI base's user phase (its layer's hash)
  bool oci_cached = false;    // ... found in the layer index
  UniqueFd oci_hold;          // a shared hold on the OCI bases while this build runs (oci_base.h)

  // ---- base
  job.step = "base";
  std::string builtin;  // a built-in template as the base (base, code-interpreter)
  if (!spec.from_template.empty()) {
    const std::string canon = image::CanonicalTemplateName(spec.from_template);
    for (const auto& k : image::KnownTemplates()) {
      if (canon == k) builtin = k;
    }
  } else if (spec.from_image == "e2bdev/base" || spec.from_image == "e2bdev/base:latest" || spec.from_image == "base") {
    builtin = "base";
  } else if (spec.from_image.rfind("debian:", 0) == 0 || spec.from_image.rfind("docker.io/library/debian:", 0) == 0) {
    // fromDebianImage(suite): airlock's base is Debian bookworm, made with
    // mmdebstrap from this host's own mirror (docs/image.md), with python3,
    // node, git, curl and sudo on top: the suite this server can build
    // without pulling. Other suites are refused rather than pulled.
    const std::string tag = spec.from_image.substr(spec.from_image.rfind(':') + 1);
    static const std::set<std::string> kBookworm = {"bookworm", "bookworm-slim", "stable", "stable-slim",
                                                    "12",       "12-slim",       "latest"};
    if (!kBookworm.count(tag))
      return InvalidArgument("fromImage '" + spec.from_image +
                             "': this server builds Debian bases from its own mirror, bookworm (stable, 12) only");
    builtin = "base";
  }
  if (!builtin.empty()) {
    auto img = image::FindImage(config_.state_dir, builtin);
    if (!img.ok()) return img.status();
    prev = HashKeys({"image", builtin, img->id});
    // The user phase (§A.6 step 2): `user` exists in the built-in images;
    // steps run as it.
    prev = HashKeys({prev, "DEFAULT USER", "user"});
    ctx = BuildContext{};
    ctx.user = "user";
    base_template = builtin;
    base_desc = "FROM " + (spec.from_template.empty() ? spec.from_image : "template " + spec.from_template) +
                " (airlock " + builtin + ")";
  } else if (!spec.from_template.empty()) {
    auto parent = ResolveBuild(store_, spec.from_template, team, /*admin=*/false);
    if (!parent.ok()) return InvalidArgument("fromTemplate '" + spec.from_template + "': " + parent.status().message());
    if (parent->build.final_layer.empty() || !manager_.snapshot_dirs().ReadDiskLayer(parent->build.final_layer).ok())
      return FailedPrecondition("fromTemplate '" + spec.from_template + "': its layers are gone; rebuild it");
    layer = parent->build.final_layer;
    const json& fc = parent->build.final_context;
    ctx = BuildContext::FromJson(fc.is_object() ? fc.value("context", json::object()) : json::object());
    if (fc.is_object()) {
      if (start_cmd.empty()) start_cmd = fc.value("startCmd", std::string());
      if (ready_cmd.empty() && spec.start_cmd.empty()) ready_cmd = fc.value("readyCmd", std::string());
    }
    prev = HashKeys({"template", parent->build.id});
    base_desc = "FROM template " + spec.from_template;
  } else {
    // An OCI image (image/oci_base.h): base = HashKeys("oci", ref as written,
    // the agent and tree format), then the user phase as a layer of its own
    // (below). When that layer is cached nothing is pulled (§A.7: the tag,
    // not its digest, is the key until a forced build).
    const std::string& ref = spec.from_image;
    if (spec.registry && spec.registry->type != "registry")
      return FailedPrecondition("fromImage '" + ref + "': " + spec.registry->type +
                                " registries are not supported by this server (only {type: \"registry\", username, "
                                "password})");
    RETURN_IF_ERROR(image::ValidateImageRef(ref).WithContext("fromImage"));
    ASSIGN_OR_RETURN(std::string version, image::OciBaseVersion(config_.state_dir, manager_.config().agent_binary));
    prev = HashKeys({"oci", ref, version});
    oci_user_hash = HashKeys({prev, "DEFAULT USER", "user"});
    base_desc = "FROM " + ref;
    auto row = store_.FindLayer(team, oci_user_hash);
    if (!spec.force && row.ok() && manager_.snapshot_dirs().ReadDiskLayer(row->dir).ok()) {
      oci_cached = true;
      layer = row->dir;
      ctx = BuildContext::FromJson(row->context);
    } else {
      // Until the build ends, no sweep removes the base it pulls (oci_base.h).
      ASSIGN_OR_RETURN(oci_hold, image::OciBasesHold(config_.state_dir));
      image::OciPullOptions po;
      po.state_dir = config_.state_dir;
      po.ref = ref;
      if (spec.registry) po.credentials = image::OciCredentials{spec.registry->username, spec.registry->password};
      po.insecure_registries = config_.insecure_registries;
      po.registry_allow = config_.registry_allow;
      po.max_unpacked_bytes = config_.max_image_unpack_bytes;
      po.agent_binary = manager_.config().agent_binary;
      po.timeout = std::chrono::duration_cast<std::chrono::seconds>(job.deadline - Clock::now());
      if (po.timeout.count() < 1) return DeadlineExceeded("the build timed out");
      po.progress = [&](std::string_view s) { Log(job, "info", "[base] " + std::string(s), "base"); };
      po.canceled = [&job] { return job.canceled.load(); };
      ASSIGN_OR_RETURN(image::OciBase oci, image::EnsureOciBase(po));
      base_template = oci.image_name;
      // §A.6: {user: root, workdir: unset, env: the image config's Env}.
      ctx = BuildContext{};
      ctx.user = "root";
      for (const auto& kv : oci.env) ctx.env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
      if (!oci.user.empty() || !oci.workdir.empty())
        Log(job, "info",
            "[base] the image's User '" + oci.user + "' and WorkingDir '" + oci.workdir +
                "' are not used: steps start as root with no workdir, then run as user",
            "base");
      base_desc += " (" + oci.digest + ")";
    }
  }
  Log(job, "info", "[base] " + base_desc + " [" + Short(prev) + "]", "base");

  // ---- the build sandbox, started when a step must run
  auto policy = egress::EgressPolicy::Create(false, config_.allow, {});
  if (!policy.ok()) return policy.status().WithContext("build network policy");
  auto ensure_sandbox = [&]() -> StatusOr<std::shared_ptr<Sandbox>> {
    {
      std::lock_guard<std::mutex> l(job.mu);
      if (job.sandbox) return job.sandbox;
    }
    if (job.canceled) return Unavailable("the build was canceled");
    CreateOptions o;
    o.template_name = base_template;
    o.runtime = kBuildRuntime;
    o.vcpus = job.row.cpu_count;
    o.memory_mib = job.row.memory_mb;
    o.detach = false;
    o.egress_policy = *policy;
    o.ready_timeout = std::chrono::seconds(300);
    o.attributes.metadata = {{"airlock.template.build", job.row.id}};
    o.env_vars = {};
    // On a built-in image, the build sandbox is restored from that image's
    // template snapshot at the build's shape, made by the first build of
    // that shape (E2B's default 2 vCPU / 1024 MiB is not base's own), instead
    // of a cold boot per build. On a layer it boots: a snapshot's memory
    // would not match the layer's disk.
    if (layer.empty() && !builtin.empty()) {
      if (Status st = manager_.template_snapshots().Ensure(base_template, o.vcpus, o.memory_mib, kBuildRuntime);
          !st.ok())
        Log(job, "info", "[base] no template snapshot for the build sandbox (it boots): " + st.message(), "base");
    }
    auto sb = layer.empty() ? manager_.Create(o) : manager_.CreateOnDiskLayer(layer, o);
    if (!sb.ok()) return sb.status().WithContext("start the build sandbox");
    std::lock_guard<std::mutex> l(job.mu);
    job.sandbox = *sb;
    job.sandbox_id = (*sb)->id();
    if (job.canceled) return Unavailable("the build was canceled");
    return *sb;
  };
  auto remaining = [&]() -> std::chrono::milliseconds {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(job.deadline - Clock::now());
    return left.count() > 1000 ? left : std::chrono::milliseconds(1000);
  };
  // Runs argv in the guest; output lines go to the log (with `prefix`) or
  // to *captured. A non-zero exit is FailedPrecondition(`what`: status).
  auto run = [&](Sandbox& sb, ExecRequest req, const std::string& prefix, const std::string& what,
                 std::string* captured) -> Status {
    if (Clock::now() > job.deadline) return DeadlineExceeded("the build timed out");
    req.timeout = remaining();
    std::string out_buf, err_buf;
    auto flush = [&](std::string& buf, const char* stream, bool all) {
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        Log(job, "info", prefix + " [" + stream + "]: " + buf.substr(0, nl), job.step);
        buf.erase(0, nl + 1);
      }
      if (all && !buf.empty()) {
        Log(job, "info", prefix + " [" + stream + "]: " + buf, job.step);
        buf.clear();
      }
      if (buf.size() > kMaxLogLineBytes) {
        Log(job, "info", prefix + " [" + stream + "]: " + buf, job.step);
        buf.clear();
      }
    };
    ExecCallbacks cb;
    cb.on_stdout = [&](std::string_view b) {
      if (captured) {
        if (captured->size() < kMaxArgBytes) captured->append(b);
        return;
      }
      out_buf.append(b);
      flush(out_buf, "stdout", false);
    };
    cb.on_stderr = [&](std::string_view b) {
      err_buf.append(b);
      flush(err_buf, "stderr", false);
    };
    auto r = sb.agent().Exec(req, cb);
    flush(out_buf, "stdout", true);
    flush(err_buf, "stderr", true);
    if (job.canceled) return Unavailable("the build was canceled");
    if (Clock::now() >= job.deadline)
      return DeadlineExceeded("the build timed out after " + std::to_string(config_.timeout.count()) + " s (" + what + ")");
    if (!r.ok()) return r.status().WithContext(what);
    if (!r->exited || r->exit_code != 0)
      return FailedPrecondition(what + ": " + (r->status.empty() ? "failed" : r->status));
    return OkStatus();
  };
  auto as_root = [&](const std::string& script, std::vector<std::string> args) {
    ExecRequest r;
    r.cmd = "/bin/bash";
    r.args = {"-c", script, "airlock-build"};
    r.args.insert(r.args.end(), args.begin(), args.end());
    r.user = "root";
    r.envs = StepEnv(ctx);
    return r;
  };
  // After a step ran: the guest's writes on the disk, and the disk saved as
  // the step's layer.
  auto save_layer = [&](Sandbox& sb, const std::string& hash) -> Status {
    ExecRequest sync;
    sync.cmd = "/bin/sync";
    sync.user = "root";
    RETURN_IF_ERROR(run(sb, sync, "sync", "sync", nullptr));
    // This registry's layer directory, made with its first layer (with the
    // "owner" file by which a later daemon knows whose it is).
    if (std::error_code ec; !fs::exists(LayersRoot() + "/owner", ec)) {
      fs::create_directories(LayersRoot(), ec);
      std::ofstream(LayersRoot() + "/owner") << config_.owner << "\n";
    }
    const std::string dir = LayersRoot() + "/" + hash.substr(0, 16) + "-" + RandomHex(4);
    ASSIGN_OR_RETURN(VmSnapshotInfo info, manager_.SaveDiskLayer(sb.id(), dir));
    job.new_layers.push_back(LayerRow{team, hash, dir, layer, ctx.ToJson(), NowUnixMs()});
    LOG_INFO("template build {} step {}: layer {} ({} B of disk)", job.row.id, job.step, dir, info.disk_bytes);
    layer = dir;
    return OkStatus();
  };
  // Cache: the index's layer when the step is not forced and it is whole.
  auto cached = [&](const std::string& hash, bool forced) -> bool {
    if (forced) return false;
    auto row = store_.FindLayer(team, hash);
    if (!row.ok() || !manager_.snapshot_dirs().ReadDiskLayer(row->dir).ok()) return false;
    layer = row->dir;
    ctx = BuildContext::FromJson(row->context);
    return true;
  };

  // ---- the user phase of an OCI base (§A.6 step 2), a layer of its own
  if (!oci_user_hash.empty()) {
    prev = oci_user_hash;
    if (oci_cached) {
      Log(job, "info", "CACHED [base] USER user [" + Short(prev) + "]", "base");
    } else {
      Log(job, "info", "[base] USER user [" + Short(prev) + "]", "base");
      ASSIGN_OR_RETURN(auto sb, ensure_sandbox());
      ExecRequest r;
      r.cmd = "/bin/sh";
      r.args = {"-c", kOciUserScript, "airlock-build"};
      r.user = "root";
      r.envs = StepEnv(ctx);
      RETURN_IF_ERROR(run(*sb, r, "[base]", "create the user 'user'", nullptr));
      ctx.user = "user";
      RETURN_IF_ERROR(save_layer(*sb, prev));
    }
  }

  // ---- steps
  const std::vector<bool> forced = ForcedSteps(spec);
  const size_t n = spec.steps.size();
  bool chain_forced = spec.force;
  for (size_t i = 0; i < n; ++i) {
    const Step& step = spec.steps[i];
    job.step = std::to_string(i + 1);
    const std::string hash = StepHash(prev, step);
    prev = hash;
    const std::string label = "[builder " + std::to_string(i + 1) + "/" + std::to_string(n) + "]";
    chain_forced = chain_forced || forced[i];
    if (cached(hash, forced[i])) {
      Log(job, "info", "CACHED " + label + " " + Describe(step) + " [" + Short(hash) + "]", job.step);
      continue;
    }
    // From here on every later step runs (its parent layer is new).
    chain_forced = true;
    Log(job, "info", label + " " + Describe(step) + " [" + Short(hash) + "]", job.step);
    ASSIGN_OR_RETURN(auto sb, ensure_sandbox());
    switch (step.type) {
      case StepType::kRun: {
        ExecRequest r;
        r.cmd = "/bin/bash";
        r.args = {"-l", "-c", step.args[0]};
        r.user = step.args.size() > 1 && !step.args[1].empty() ? step.args[1] : ctx.user;
        if (!ctx.workdir.empty()) r.cwd = ctx.workdir;
        r.envs = StepEnv(ctx);
        RETURN_IF_ERROR(run(*sb, r, label, "failed to run command '" + step.args[0] + "'", nullptr));
        break;
      }
      case StepType::kCopy: {
        auto blob = store_.FindFile(team, step.files_hash);
        if (!blob.ok())
          return FailedPrecondition("COPY " + step.args[0] + ": its files (hash " + step.files_hash.substr(0, 12) +
                                    ") are not uploaded: never uploaded, or removed after the upload TTL; "
                                    "build again to upload them");
        const std::string guest_archive = "/tmp/airlock-copy-" + step.files_hash.substr(0, 16) + ".tar";
        RETURN_IF_ERROR(sb->agent().UploadFile(*blob, guest_archive, "root").WithContext("COPY upload"));
        RETURN_IF_ERROR(run(*sb,
                            as_root(std::string(kMkdirsFunction) + kCopyScript, {guest_archive, CopySourceBase(step.args[0]), step.args[1],
                                                  step.args.size() > 2 ? step.args[2] : "",
                                                  step.args.size() > 3 ? step.args[3] : "", ctx.user, ctx.workdir}),
                            label, "COPY " + step.args[0] + " " + step.args[1], nullptr));
        break;
      }
      case StepType::kEnv: {
        for (size_t k = 0; k + 1 < step.args.size(); k += 2) {
          // Evaluated by bash in the guest: $VAR expands, command
          // substitution does not (EscapeEnvValue).
          std::string value;
          ExecRequest r = as_root("", {});
          r.args = {"-c", "printf '%s' \"" + EscapeEnvValue(step.args[k + 1]) + "\""};
          RETURN_IF_ERROR(run(*sb, r, label, "ENV " + step.args[k], &value));
          ctx.env[step.args[k]] = value;
        }
        break;
      }
      case StepType::kWorkdir: {
        std::string real;
        const std::string path = JoinWorkdir(ctx.workdir, step.args[0]);
        RETURN_IF_ERROR(run(*sb, as_root(std::string(kMkdirsFunction) + kWorkdirScript, {path, ctx.user}), label, "WORKDIR " + path, &real));
        while (!real.empty() && (real.back() == '\n' || real.back() == '\r')) real.pop_back();
        ctx.workdir = real.empty() ? path : real;
        break;
      }
      case StepType::kUser: {
        const bool sudo = step.args.size() > 1 && step.args[1] == "true";
        RETURN_IF_ERROR(
            run(*sb, as_root(kUserScript, {step.args[0], sudo ? "true" : ""}), label, "USER " + step.args[0], nullptr));
        ctx.user = step.args[0];
        break;
      }
    }
    RETURN_IF_ERROR(save_layer(*sb, hash));
  }
  (void)chain_forced;

  // ---- finalize: the defaults file and the start service, as a layer
  job.step = "finalize";
  json defaults = {{"user", ctx.user}};
  if (!ctx.workdir.empty()) defaults["workdir"] = ctx.workdir;
  std::string service;
  std::string effective_ready = ready_cmd;
  if (!start_cmd.empty() && effective_ready.empty()) effective_ready = "sleep 20";
  if (!start_cmd.empty()) {
    service = json{{"name", "start"},
                   {"argv", {"/bin/bash", "-l", "-c", start_cmd}},
                   {"user", ctx.user},
                   {"cwd", ctx.workdir.empty() ? HomeOf(ctx.user) : ctx.workdir},
                   {"env", StepEnv(ctx)},
                   {"ready_cmd", effective_ready},
                   {"restart", "on-failure"}}
                  .dump();
  }
  const std::string final_hash = HashKeys({prev, "FINALIZE", defaults.dump(), service});
  if (cached(final_hash, spec.force)) {
    Log(job, "info", "CACHED [finalize] [" + Short(final_hash) + "]", "finalize");
  } else {
    ASSIGN_OR_RETURN(auto sb, ensure_sandbox());
    RETURN_IF_ERROR(run(*sb, as_root(kFinalizeScript, {defaults.dump(), service}), "[finalize]", "finalize", nullptr));
    RETURN_IF_ERROR(save_layer(*sb, final_hash));
  }
  // The build sandbox is done with.
  {
    std::lock_guard<std::mutex> l(job.mu);
    if (!job.sandbox_id.empty()) (void)manager_.Destroy(job.sandbox_id);
    job.sandbox_id.clear();
    job.sandbox.reset();
  }
  if (job.canceled) return Unavailable("the build was canceled");

  // ---- the guest image: the last layer's disk as a rootfs
  // The image: the last layer, plus the free space asked for (minFreeDiskMb).
  const std::string image_id =
      image::Sha256Hex(fs::path(layer).filename().string() + ":" + std::to_string(job.row.disk_mb)).substr(0, 20);
  std::string rootfs;
  if (!image::HasBuiltRootfs(config_.state_dir, image_id)) {
    const std::string tmpdir = config_.state_dir + "/images/tmp";
    std::error_code ec;
    fs::create_directories(tmpdir, ec);
    rootfs = tmpdir + "/template-" + RandomHex(6) + ".ext4";
    Log(job, "info", "Exporting the template's disk", "finalize");
    RETURN_IF_ERROR(manager_.snapshot_dirs().ExportDiskLayer(layer, rootfs));
    if (job.row.disk_mb > 0) {
      // minFreeDiskMb: the filesystem grows by that much (never shrinks).
      // The export is a disk that was in use: its journal is replayed first.
      Log(job, "info", "Growing the disk by " + std::to_string(job.row.disk_mb) + " MiB (minFreeDiskMb)", "finalize");
      auto fsck = airlock::Run({"e2fsck", "-fy", rootfs});
      Status grown = !fsck.ok() ? fsck.status()
                     : fsck->status.ShellCode() > 1
                         ? Internal("e2fsck " + rootfs + " exited " + std::to_string(fsck->status.ShellCode()) + ": " + fsck->out)
                         : OkStatus();
      if (grown.ok()) grown = RunChecked({"truncate", "-s", "+" + std::to_string(job.row.disk_mb) + "M", rootfs}).status();
      if (grown.ok()) grown = RunChecked({"resize2fs", rootfs}).status();
      if (!grown.ok()) {
        ::unlink(rootfs.c_str());
        return grown.WithContext("minFreeDiskMb");
      }
    }
  }
  image::BuiltImage bi;
  bi.owner = config_.owner;
  bi.name = ImageNameOf(job.row.id);
  bi.id = image_id;
  bi.rootfs = rootfs;
  if (!start_cmd.empty()) bi.readiness = {kStartReadyLine, kStartFailedLine};
  bi.shape = {job.row.cpu_count, job.row.memory_mb};
  auto installed = image::InstallBuiltImage(config_.state_dir, bi);
  if (!installed.ok()) {
    if (!rootfs.empty()) ::unlink(rootfs.c_str());
    return installed.status();
  }
  job.image = bi.name;
  if (config_.image_installed) config_.image_installed(bi.name);
  if (!start_cmd.empty()) Log(job, "info", "Running start command: " + start_cmd, "finalize");
  if (!effective_ready.empty()) Log(job, "info", "Waiting for template to be ready: " + effective_ready, "finalize");
  // On the build runtime too: this boot is the build's check of the start
  // and ready commands, and a runtime without snapshots could not make it.
  // Sandboxes of the template on another runtime cold boot.
  Status snap = manager_.template_snapshots().Ensure(bi.name, job.row.cpu_count, job.row.memory_mb, kBuildRuntime);
  if (!snap.ok()) {
    if (job.canceled) return Unavailable("the build was canceled");
    return snap;
  }
  Log(job, "info", "Template is ready", "finalize");
  job.row.image = bi.name;
  job.row.final_layer = layer;
  job.row.final_context = {{"context", ctx.ToJson()}, {"startCmd", start_cmd}, {"readyCmd", ready_cmd}};
  return OkStatus();
}

std::string Builder::LayersRoot() const {
  return manager_.snapshot_dirs().layers() + "/" + image::Sha256Hex(config_.owner).substr(0, 16);
}

void Builder::CollectGarbage() {
  std::lock_guard<std::mutex> gc(gc_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!running_.empty()) return;  // a build in progress may need any layer
  }
  auto layers = store_.AllLayers();
  auto ready = store_.BuildsWithStatus(kReady);
  if (!layers.ok() || !ready.ok()) return;
  std::map<std::string, const LayerRow*> by_dir;
  for (const auto& l : *layers) by_dir[l.dir] = &l;
  // Live: the last layer of every ready build and its ancestors.
  std::set<std::string> live;
  for (const auto& b : *ready) {
    std::string d = b.final_layer;
    while (!d.empty() && live.insert(d).second) {
      auto it = by_dir.find(d);
      d = it == by_dir.end() ? "" : it->second->parent_dir;
    }
  }
  for (const auto& l : *layers) {
    if (!live.count(l.dir)) (void)store_.DeleteLayer(l.team, l.hash);
  }
  // Directories: live ones and those a live one's disk is layered on stay.
  std::set<std::string> keep = live;
  for (const auto& d : live) {
    std::string cur = d;
    for (int depth = 0; depth < 64 && !cur.empty(); ++depth) {
      auto shape = manager_.snapshot_dirs().ReadDiskLayer(cur);
      if (!shape.ok()) break;
      std::string parent = fs::path(shape->disk_backing).parent_path().string();
      if (fs::path(parent).parent_path().string() != LayersRoot()) break;
      keep.insert(parent);
      cur = parent;
    }
  }
  std::error_code ec;
  for (auto& e : fs::directory_iterator(LayersRoot(), ec)) {
    const std::string d = e.path().string();
    if (keep.count(d) || !e.is_directory()) continue;
    LOG_INFO("template layers: removing {} (no template uses it)", d);
    (void)manager_.snapshot_dirs().DeleteDiskLayer(d);
    fs::remove_all(d, ec);
  }
  // Pulled OCI bases ("oci-*" images) that no layer of any registry on this
  // state dir is layered on any more (their layers are what keeps them).
  std::set<std::string> backings;
  for (auto& owner : fs::directory_iterator(manager_.snapshot_dirs().layers(), ec)) {
    std::error_code ec2;
    for (auto& l : fs::directory_iterator(owner.path(), ec2)) {
      if (auto shape = manager_.snapshot_dirs().ReadDiskLayer(l.path().string()); shape.ok()) backings.insert(shape->disk_backing);
    }
  }
  // Only while no build from an OCI image runs on this state dir (in any
  // daemon): one may have pulled a base it has not layered on yet.
  auto sweep = image::TryOciBasesSweep(config_.state_dir);
  if (!sweep.ok()) {
    LOG_DEBUG("template images: OCI bases not swept: {}", sweep.status().message());
    return;
  }
  bool removed = false;
  for (const auto& [name, owner] : image::CustomImages(config_.state_dir)) {
    if (name.rfind("oci-", 0) != 0) continue;
    auto img = image::FindImage(config_.state_dir, name);
    if (!img.ok() || backings.count(img->rootfs)) continue;
    LOG_INFO("template images: removing {} (no layer is built on it)", name);
    (void)image::RemoveTemplateImage(config_.state_dir, name);
    removed = true;
  }
  if (removed) image::CollectGarbage(config_.state_dir);
}

}  // namespace airlock::templates
