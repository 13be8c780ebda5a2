// OCI bases of custom templates (oci_base.h): skopeo to pull, umoci to
// unpack, BuildTemplateRootfs (rootfs_build.cc) to add the agent and write
// the ext4 image, InstallBuiltImage (image.cc) to install it.
#include "image/oci_base.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "common/log.h"
#include "common/subprocess.h"
#include "image/builders.h"
#include "image/command.h"
#include "image/fs_util.h"
#include "image/hash.h"
#include "image/image.h"
#include "image/layer_size.h"
#include "image/pull_proxy.h"
#include "image/tree_beneath.h"

namespace airlock::image {
namespace {
// A named namespace inside the anonymous one: the image library is built
// as one unity file, and rootfs_build.cc's helpers have the short names.
namespace oci {

using json = nlohmann::json;

constexpr char kTag[] = "img";          // the tag of the one image in a work layout
constexpr size_t kMaxErrorBytes = 600;  // of skopeo's error in a build reason
constexpr size_t kMaxInspectBytes = 4 << 20;
constexpr time_t kStaleWorkSeconds = 3600;  // a work dir without a lock file this old is a dead pull's

// What every OCI tree gets besides the agent: the same text as `base`
// (rootfs_build.cc), so a guest cannot tell them apart by these.
constexpr char kHostnameText[] = "airlock\n";
constexpr char kHostsText[] =
    "127.0.0.1\tlocalhost\n127.0.1.1\tairlock\n"
    "::1\t\tlocalhost ip6-localhost ip6-loopback\n"
    "ff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n";

bool IsHex(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

bool IsSha256Digest(std::string_view d) { return d.size() == 71 && d.substr(0, 7) == "sha256:" && IsHex(d.substr(7)); }

std::string OciDir(const std::string& state_dir) { return state_dir + "/images/oci"; }

StatusOr<UniqueFd> OpenOciBasesLock(const std::string& state_dir) {
  RETURN_IF_ERROR(MakeDirs(state_dir + "/images"));
  const std::string path = state_dir + "/images/oci-bases.lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) return ErrnoError("open " + path);
  return fd;
}

// skopeo and its global options: a bound on the command, and the default
// signature policy when the host has none (Debian's containers-common ships
// one that accepts anything; without the file skopeo refuses to copy).
std::vector<std::string> Skopeo(const OciPullOptions& o) {
  std::vector<std::string> argv = {"skopeo", "--command-timeout", std::to_string(o.timeout.count()) + "s"};
  if (!Exists("/etc/containers/policy.json")) argv.push_back("--insecure-policy");
  return argv;
}

bool Insecure(const OciPullOptions& o) {
  std::string reg = RegistryOf(o.ref);
  for (auto& c : reg) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (reg.empty()) return false;
  for (const auto& h : o.insecure_registries) {
    if (h == reg) return true;
  }
  return false;
}

// Runs a skopeo command with its stdout and stderr in <dir>/<name>.{out,err}
// (read back, at most kMaxInspectBytes each), in the proxy's network
// namespace with only the proxy in its environment (pull_proxy.h); kills it
// when `canceled` says so (asked every 200 ms): Unavailable then.
StatusOr<RunResult> RunSkopeo(const OciPullOptions& o, const PullProxy& proxy, const std::vector<std::string>& argv,
                              const std::string& dir, const std::string& name) {
  const std::string out_path = dir + "/" + name + ".out", err_path = dir + "/" + name + ".err";
  UniqueFd out(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) return ErrnoError("open " + out_path);
  UniqueFd err(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!err) return ErrnoError("open " + err_path);
  SpawnOptions so;
  so.argv = argv;
  // A clean environment: no proxy or NO_PROXY of the daemon's, HOME in the
  // work dir (no login or registries.d of root's home).
  std::map<std::string, std::string> env = {{"HOME", dir}, {"LANG", "C.UTF-8"}};
  const char* path = ::getenv("PATH");
  env["PATH"] = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin";
  for (const char* k : {"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"}) env[k] = proxy.url();
  env["NO_PROXY"] = env["no_proxy"] = "";
  so.env = std::move(env);
  so.netns_fd = proxy.netns_fd();
  so.stdout_fd = out.get();
  so.stderr_fd = err.get();
  ASSIGN_OR_RETURN(Child child, Spawn(so));
  RunResult r;
  while (true) {
    auto w = child.WaitFor(std::chrono::milliseconds(200));
    if (w.ok()) {
      r.status = *w;
      break;
    }
    if (w.status().code() != StatusCode::kDeadlineExceeded) return w.status();
    if (o.canceled && o.canceled()) {
      child.Kill();
      return Unavailable("the build was canceled");
    }
  }
  for (auto [path, text] : {std::pair{&out_path, &r.out}, std::pair{&err_path, &r.err}}) {
    auto t = ReadFile(*path);
    if (!t.ok()) return t.status();
    *text = t->size() > kMaxInspectBytes ? t->substr(t->size() - kMaxInspectBytes) : *t;
  }
  return r;
}

// The tenant gets a fixed reason (PullFailureText); the daemon's log gets
// skopeo's own text and what the proxy refused.
Status PullError(const std::string& ref, const RunResult& r, const PullProxy& proxy) {
  std::string why = SkopeoError(r.err);
  if (why.empty()) why = SkopeoError(r.out);
  if (why.empty()) why = "skopeo " + r.status.ToString();
  std::string events;
  for (const auto& e : proxy.Events()) events += "; proxy: " + e;
  LOG_WARN("oci {}: pull failed: {}{}", ref, why, events);
  return FailedPrecondition(PullFailureText(ref, why));
}

// A work directory under images/oci, locked while it is used: a pull that
// died leaves one that the next pull removes (its lock is free).
class WorkDir {
 public:
  static StatusOr<WorkDir> Make(const std::string& parent) {
    RemoveStale(parent);
    ASSIGN_OR_RETURN(std::string dir, MakeTempDir(parent, "work-"));
    WorkDir w;
    w.dir_ = dir;
    ASSIGN_OR_RETURN(w.lock_, LockFile(dir + "/.lock"));
    return w;
  }
  WorkDir() = default;
  WorkDir(WorkDir&& o) noexcept : dir_(std::move(o.dir_)), lock_(std::move(o.lock_)) { o.dir_.clear(); }
  WorkDir& operator=(WorkDir&&) = delete;
  ~WorkDir() {
    if (dir_.empty()) return;
    if (Status st = RemoveTree(dir_); !st.ok()) LOG_WARN("oci: cleaning {}: {}", dir_, st.ToString());
  }
  const std::string& path() const { return dir_; }

 private:
  static void RemoveStale(const std::string& parent) {
    auto names = ListDir(parent);
    if (!names.ok()) return;
    for (const auto& n : *names) {
      if (n.rfind("work-", 0) != 0) continue;
      const std::string dir = parent + "/" + n;
      UniqueFd fd(::open((dir + "/.lock").c_str(), O_RDWR | O_CLOEXEC));
      if (!fd) {
        struct stat st;
        if (errno != ENOENT || ::stat(dir.c_str(), &st) != 0 || std::time(nullptr) - st.st_mtime < kStaleWorkSeconds)
          continue;
      } else if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        continue;  // a pull in progress
      }
      LOG_INFO("oci: removing {} (left by a pull that did not finish)", dir);
      (void)RemoveTree(dir);
    }
  }
  std::string dir_;
  UniqueFd lock_;
};

// The manifest of the one image in an OCI layout (index.json -> manifest),
// its config and the paths of its layer blobs, as skopeo wrote them.
struct Layout {
  json config;
  std::vector<std::string> layers;
};
StatusOr<Layout> ReadLayout(const std::string& layout) {
  auto blob_path = [&](const json& digest) -> StatusOr<std::string> {
    if (!digest.is_string() || !IsSha256Digest(digest.get<std::string>()))
      return FailedPrecondition("OCI layout " + layout + ": bad digest '" + digest.dump() + "'");
    return layout + "/blobs/sha256/" + digest.get<std::string>().substr(7);
  };
  auto blob = [&](const json& digest) -> StatusOr<json> {
    ASSIGN_OR_RETURN(std::string path, blob_path(digest));
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return FailedPrecondition(path + " is not a JSON object");
    return j;
  };
  ASSIGN_OR_RETURN(std::string index_text, ReadFile(layout + "/index.json"));
  json index = json::parse(index_text, nullptr, /*allow_exceptions=*/false);
  if (!index.is_object() || !index["manifests"].is_array() || index["manifests"].empty() ||
      !index["manifests"][0].is_object() || !index["manifests"][0]["digest"].is_string()) {
    return FailedPrecondition(layout + "/index.json names no manifest");
  }
  ASSIGN_OR_RETURN(json manifest, blob(index["manifests"][0]["digest"]));
  if (!manifest["config"].is_object() || !manifest["config"]["digest"].is_string())
    return FailedPrecondition(layout + ": the manifest names no config");
  Layout out;
  ASSIGN_OR_RETURN(out.config, blob(manifest["config"]["digest"]));
  if (manifest.contains("layers") && !manifest["layers"].is_array())
    return FailedPrecondition(layout + ": the manifest's layers are not a list");
  for (const auto& l : manifest.value("layers", json::array())) {
    if (!l.is_object()) return FailedPrecondition(layout + ": a layer of the manifest is not an object");
    ASSIGN_OR_RETURN(std::string path, blob_path(l.value("digest", json())));
    out.layers.push_back(std::move(path));
  }
  return out;
}

void ConfigInto(const json& image_config, OciBase& out) {
  const json empty = json::object();
  const json& c = image_config.is_object() && image_config.contains("config") && image_config["config"].is_object()
                      ? image_config["config"]
                      : empty;
  out.env.clear();
  if (c.contains("Env") && c["Env"].is_array()) {
    for (const auto& e : c["Env"]) {
      if (e.is_string() && e.get<std::string>().find('=') != std::string::npos) out.env.push_back(e.get<std::string>());
    }
  }
  out.user = c.contains("User") && c["User"].is_string() ? c["User"].get<std::string>() : "";
  out.workdir = c.contains("WorkingDir") && c["WorkingDir"].is_string() ? c["WorkingDir"].get<std::string>() : "";
}

StatusOr<StagedFile> Staged(const std::string& dir, const std::string& name, std::string_view text,
                            const std::string& dest) {
  const std::string path = dir + "/" + name;
  RETURN_IF_ERROR(WriteFile(path, text, 0644));
  ASSIGN_OR_RETURN(std::string sha, Sha256File(path));
  return StagedFile{path, dest, 0644, sha, ""};
}

std::string JsonUnescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace oci
}  // namespace

Status PrepareOciTree(const std::string& root) {
  struct Dir {
    const char* name;
    mode_t mode;
  };
  // Beneath the tree's fd, no symlink of the image followed (tree_beneath.h):
  // an entry that exists, whatever it is (a link to anywhere), is left as
  // it is; /etc must be a real directory.
  ASSIGN_OR_RETURN(UniqueFd root_fd, OpenTreeRoot(root));
  for (const Dir d : {Dir{"proc", 0555}, Dir{"sys", 0555}, Dir{"dev", 0755}, Dir{"tmp", 01777}, Dir{"run", 0755},
                      Dir{"sbin", 0755}, Dir{"etc", 0755}}) {
    struct stat st;
    if (::fstatat(root_fd.get(), d.name, &st, AT_SYMLINK_NOFOLLOW) == 0) continue;
    if (errno != ENOENT) return ErrnoError(std::string("lstat the image's '/") + d.name + "'");
    RETURN_IF_ERROR(OpenDirInTree(root_fd.get(), d.name, /*create=*/true, d.mode).status());
  }
  return OpenDirInTree(root_fd.get(), "etc", /*create=*/false).status();
}

Status ValidateImageRef(std::string_view ref) {
  if (ref.empty() || ref.size() > 512) return InvalidArgument("image reference must be 1-512 characters");
  if (ref.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/@-") !=
      std::string_view::npos)
    return InvalidArgument("image reference '" + std::string(ref) + "' has characters other than [A-Za-z0-9._:/@-]");
  if (std::string_view("-/:@").find(ref[0]) != std::string_view::npos)
    return InvalidArgument("image reference '" + std::string(ref) + "' must start with a letter or digit");
  return OkStatus();
}

std::string RegistryOf(std::string_view ref) {
  const size_t slash = ref.find('/');
  if (slash == std::string_view::npos) return "";
  std::string_view first = ref.substr(0, slash);
  if (first.find('.') != std::string_view::npos || first.find(':') != std::string_view::npos || first == "localhost")
    return std::string(first);
  return "";
}

std::string PinnedRef(std::string_view ref, std::string_view digest) {
  if (ref.find('@') != std::string_view::npos) return std::string(ref);
  const size_t slash = ref.rfind('/');
  const size_t colon = ref.rfind(':');
  std::string_view name = ref;
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash))
    name = ref.substr(0, colon);
  return std::string(name) + "@" + std::string(digest);
}

Status ValidateRegistryHost(std::string_view host) {
  std::string_view h = host, port;
  if (size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    h = host.substr(0, colon);
    port = host.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos)
      return InvalidArgument("registry '" + std::string(host) + "': the port must be digits");
  }
  if (h.empty() || h.size() > 253 ||
      h.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string_view::npos || h[0] == '-' ||
      h[0] == '.')
    return InvalidArgument("registry '" + std::string(host) + "' must be HOST[:PORT] (lower-case name or IPv4)");
  return OkStatus();
}

std::string SkopeoError(std::string_view text) {
  std::string line;
  // The last msg="..." of a fatal or error line; else the last non-empty line.
  size_t pos = 0;
  std::string last_plain;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view l = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    last_plain = std::string(l);
    size_t m = l.find("msg=\"");
    if (m == std::string_view::npos ||
        (l.find("level=fatal") == std::string_view::npos && l.find("level=error") == std::string_view::npos))
      continue;
    std::string_view body = l.substr(m + 5);
    size_t end = body.size();
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\') {
        ++i;
      } else if (body[i] == '"') {
        end = i;
        break;
      }
    }
    line = oci::JsonUnescape(body.substr(0, end));
  }
  if (line.empty()) line = last_plain;
  // skopeo wraps the registry's answer in what it was doing.
  for (const std::string prefix : {"Error parsing image name \"", "initializing source "}) {
    if (line.rfind(prefix, 0) != 0) continue;
    size_t sep = line.find(": ", prefix.size());
    if (sep != std::string::npos) line = line.substr(sep + 2);
  }
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.size() > oci::kMaxErrorBytes) line = line.substr(0, oci::kMaxErrorBytes) + "...";
  return line;
}

std::string PullFailureText(std::string_view ref, std::string_view skopeo_error) {
  auto lower = [](std::string_view v) {
    std::string out(v);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  // The reference's own words are taken out first: a tenant cannot name an
  // image "x/unauthorized" to steer the mapping.
  std::string l = lower(skopeo_error);
  const std::string r = lower(ref);
  for (size_t start = 0; start <= r.size();) {
    size_t end = r.find_first_of("/:@", start);
    if (end == std::string::npos) end = r.size();
    const std::string word = r.substr(start, end - start);
    for (size_t at; word.size() >= 2 && (at = l.find(word)) != std::string::npos;) l.replace(at, word.size(), "_");
    start = end + 1;
  }
  auto has = [&](std::initializer_list<std::string_view> phrases) {
    for (auto p : phrases)
      if (l.find(p) != std::string::npos) return true;
    return false;
  };
  std::string why = "the registry refused or could not be reached";
  if (has({"manifest unknown", "name unknown", "not found", "no such image"})) {
    why = "not found (the registry has no such image)";
  } else if (has({"authentication required", "unauthorized: ", "access to the resource is denied",
                  "invalid username/password"})) {
    why = "unauthorized (the registry refused the credentials or the access)";
  }
  return "cannot pull image '" + std::string(ref) + "': " + why;
}

std::string AuthRegistryOf(std::string_view ref) {
  std::string reg = RegistryOf(ref);
  for (auto& c : reg) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return reg.empty() ? "docker.io" : reg;
}

StatusOr<std::string> WriteAuthFile(const std::string& dir, const OciPullOptions& o) {
  oci::json auths = oci::json::object();
  if (o.credentials) {
    const std::string plain = o.credentials->username + ":" + o.credentials->password;
    std::string b64(4 * ((plain.size() + 2) / 3) + 1, '\0');
    const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                                  reinterpret_cast<const unsigned char*>(plain.data()), static_cast<int>(plain.size()));
    b64.resize(n < 0 ? 0 : static_cast<size_t>(n));
    auths[AuthRegistryOf(o.ref)] = {{"auth", b64}};
  }
  const std::string text = oci::json{{"auths", auths}}.dump() + "\n";
  const std::string path = dir + "/auth.json";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoError("open " + path);
  if (::fchmod(fd.get(), 0600) != 0) return ErrnoError("fchmod " + path);
  for (size_t off = 0; off < text.size();) {
    ssize_t w = ::write(fd.get(), text.data() + off, text.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoError("write " + path);
    off += static_cast<size_t>(w);
  }
  return path;
}

std::vector<std::string> SkopeoInspectArgv(const OciPullOptions& o, const std::string& authfile) {
  std::vector<std::string> argv = oci::Skopeo(o);
  argv.insert(argv.end(), {"inspect", "--authfile", authfile});
  if (oci::Insecure(o)) argv.push_back("--tls-verify=false");
  argv.push_back("docker://" + o.ref);
  return argv;
}

std::vector<std::string> SkopeoCopyArgv(const OciPullOptions& o, const std::string& authfile, const std::string& digest,
                                        const std::string& layout) {
  std::vector<std::string> argv = oci::Skopeo(o);
  argv.insert(argv.end(), {"copy", "--quiet", "--src-authfile", authfile});
  if (oci::Insecure(o)) argv.push_back("--src-tls-verify=false");
  argv.push_back("docker://" + PinnedRef(o.ref, digest));
  argv.push_back(std::string("oci:") + layout + ":" + oci::kTag);
  return argv;
}

StatusOr<std::string> OciBaseVersion(const std::string& state_dir, const std::string& agent_binary) {
  RETURN_IF_ERROR(MakeDirs(oci::OciDir(state_dir)));
  ASSIGN_OR_RETURN(oci::WorkDir work, oci::WorkDir::Make(oci::OciDir(state_dir)));
  const std::string agent = work.path() + "/airlock-agent";
  RETURN_IF_ERROR(GuestAgentCopy(agent_binary, agent, work.path() + "/objcopy.log").WithContext("agent"));
  ASSIGN_OR_RETURN(std::string sha, Sha256File(agent));
  return KeyBuilder()
      .Add("oci-format", kOciFormatVersion)
      .Add("builder", kBuilderVersion)
      .Add("agent", sha)
      .ShortDigest();
}

StatusOr<UniqueFd> OciBasesHold(const std::string& state_dir) {
  ASSIGN_OR_RETURN(UniqueFd fd, oci::OpenOciBasesLock(state_dir));
  while (::flock(fd.get(), LOCK_SH) != 0) {
    if (errno != EINTR) return ErrnoError("flock " + state_dir + "/images/oci-bases.lock");
  }
  return fd;
}

StatusOr<UniqueFd> TryOciBasesSweep(const std::string& state_dir) {
  ASSIGN_OR_RETURN(UniqueFd fd, oci::OpenOciBasesLock(state_dir));
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return fd;
  if (errno == EWOULDBLOCK) return FailedPrecondition("a build from an OCI image is running on this state dir");
  return ErrnoError("flock " + state_dir + "/images/oci-bases.lock");
}

StatusOr<OciBase> EnsureOciBase(const OciPullOptions& o) {
  using oci::json;
  auto say = [&](const std::string& s) {
    LOG_INFO("oci {}: {}", o.ref, s);
    if (o.progress) o.progress(s);
  };
  RETURN_IF_ERROR(ValidateImageRef(o.ref));
  for (const char* tool : {"skopeo", "umoci"}) {
    if (!FindExecutable(tool).ok())
      return FailedPrecondition(std::string(tool) + " is not installed on the server (apt-get install skopeo umoci)");
  }
  if (o.agent_binary.empty()) return InvalidArgument("no agent binary given");
  const std::string oci_dir = oci::OciDir(o.state_dir);
  RETURN_IF_ERROR(MakeDirs(oci_dir));
  // Unpacked images hold device nodes, setuid files and other users' files.
  if (::chmod(oci_dir.c_str(), 0700) != 0) return ErrnoError("chmod " + oci_dir);
  const bool insecure = oci::Insecure(o);
  // Where skopeo may connect (pull_proxy.h). A literal address or localhost
  // the rule refuses fails here, with the reason every unreachable registry
  // gets.
  PullRule rule = PullRule::ForThisHost(o.registry_allow);
  if (!rule.StaticallyAllowed(RegistryOf(o.ref))) {
    LOG_WARN("oci {}: refused: the registry '{}' is not public and not in --registry-allow", o.ref, RegistryOf(o.ref));
    return FailedPrecondition(PullFailureText(o.ref, ""));
  }

  ASSIGN_OR_RETURN(oci::WorkDir work, oci::WorkDir::Make(oci_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<PullProxy> proxy, PullProxy::Start(std::move(rule)));
  ASSIGN_OR_RETURN(std::string authfile, WriteAuthFile(work.path(), o));
  // The digest (and whether the reference can be pulled at all).
  say("inspecting " + o.ref + (insecure ? " (insecure registry: no TLS verification)" : ""));
  ASSIGN_OR_RETURN(RunResult inspected,
                   oci::RunSkopeo(o, *proxy, SkopeoInspectArgv(o, authfile), work.path(), "inspect"));
  if (!inspected.status.success()) return oci::PullError(o.ref, inspected, *proxy);
  json info = json::parse(inspected.out, nullptr, /*allow_exceptions=*/false);
  if (!info.is_object() || !info["Digest"].is_string() || !oci::IsSha256Digest(info["Digest"].get<std::string>()))
    return FailedPrecondition("cannot pull image '" + o.ref + "': skopeo inspect gave no sha256 digest");
  OciBase out;
  out.digest = info["Digest"].get<std::string>();

  const std::string agent = work.path() + "/airlock-agent";
  RETURN_IF_ERROR(GuestAgentCopy(o.agent_binary, agent, work.path() + "/objcopy.log").WithContext("agent"));
  ASSIGN_OR_RETURN(std::string agent_sha, Sha256File(agent));
  const std::string key = KeyBuilder()
                              .Add("oci-format", kOciFormatVersion)
                              .Add("builder", kBuilderVersion)
                              .Add("agent", agent_sha)
                              .Add("digest", out.digest)
                              .ShortDigest();
  out.image_name = "oci-" + key;
  const std::string sidecar = oci_dir + "/" + key + ".json";
  if (FindImage(o.state_dir, out.image_name).ok()) {
    if (auto text = ReadFile(sidecar); text.ok()) {
      json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("config")) {
        oci::ConfigInto(j["config"], out);
        out.cached = true;
        say("image " + out.digest + " is installed already (" + out.image_name + ")");
        return out;
      }
    }
  }

  // Pull, pinned to the digest inspected.
  const std::string layout = work.path() + "/layout";
  say("pulling " + o.ref + " (" + out.digest + ")");
  ASSIGN_OR_RETURN(RunResult copied,
                   oci::RunSkopeo(o, *proxy, SkopeoCopyArgv(o, authfile, out.digest, layout), work.path(), "copy"));
  if (!copied.status.success()) return oci::PullError(o.ref, copied, *proxy);
  proxy.reset();  // nothing more is fetched
  ASSIGN_OR_RETURN(oci::Layout pulled, oci::ReadLayout(layout));
  const json& config = pulled.config;
  oci::ConfigInto(config, out);
  // What the layers expand to, counted from their tar headers before
  // anything is written (layer_size.h): a small layer of zeros is refused
  // here instead of filling the host's disk.
  say("checking the image's unpacked size (cap " + std::to_string(o.max_unpacked_bytes >> 20) + " MiB)");
  ASSIGN_OR_RETURN(TarTally tally, CheckUnpackedSize(pulled.layers, o.max_unpacked_bytes));
  LOG_INFO("oci {}: {} layers, {} entries, {} MiB unpacked at most", o.ref, pulled.layers.size(), tally.entries,
           tally.bytes >> 20);

  // Unpack, then what the agent needs, then the ext4 image.
  const std::string base_dir = work.path() + "/base";
  RETURN_IF_ERROR(MakeDirs(base_dir));
  const std::string root = base_dir + "/root";
  std::vector<std::string> unpack = {"umoci", "raw", "unpack"};
  if (::geteuid() != 0) unpack.push_back("--rootless");
  unpack.insert(unpack.end(), {"--image", layout + ":" + oci::kTag, root});
  say("unpacking the image (umoci)");
  RETURN_IF_ERROR(RunCommand(unpack, LogTo(work.path() + "/umoci.log")));
  RETURN_IF_ERROR(PrepareOciTree(root));
  RETURN_IF_ERROR(WriteFile(base_dir + "/packages.txt", "oci-image " + o.ref + " " + out.digest + "\n"));
  const std::string files = work.path() + "/files";
  RETURN_IF_ERROR(MakeDirs(files));
  std::vector<StagedFile> extras;
  for (const auto& [name, text, dest] : std::vector<std::tuple<std::string, std::string_view, std::string>>{
           {"hostname", oci::kHostnameText, "/etc/hostname"},
           {"hosts", oci::kHostsText, "/etc/hosts"},
           // The agent writes the sandbox's resolver at start; the host's
           // never gets in.
           {"resolv.conf", "", "/etc/resolv.conf"}}) {
    ASSIGN_OR_RETURN(StagedFile f, oci::Staged(files, name, text, dest));
    extras.push_back(std::move(f));
  }
  const std::string tmpl_work = work.path() + "/template", tmpl_out = work.path() + "/out";
  RETURN_IF_ERROR(MakeDirs(tmpl_work));
  RETURN_IF_ERROR(MakeDirs(tmpl_out));
  TemplateInputs in{base_dir, agent, agent_sha, key, extras};
  RETURN_IF_ERROR(
      BuildTemplateRootfs(in, tmpl_work, tmpl_out, o.progress).WithContext("image '" + o.ref + "' as a rootfs"));

  // The config beside the image (a cached use needs its Env), then the image.
  json side = {{"ref", o.ref}, {"digest", out.digest}, {"config", config}};
  RETURN_IF_ERROR(WriteFileAtomic(sidecar, side.dump() + "\n", 0600));
  BuiltImage bi;
  bi.name = out.image_name;
  bi.id = key;
  bi.rootfs = tmpl_out + "/rootfs.ext4";
  RETURN_IF_ERROR(InstallBuiltImage(o.state_dir, bi).status());
  say("installed as image " + out.image_name);
  return out;
}

}  // namespace airlock::image
