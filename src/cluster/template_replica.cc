#include "cluster/template_replica.h"

#include <algorithm>
#include <filesystem>

#include "cluster/artefacts.h"
#include "cluster/cluster_tls.h"
#include "common/log.h"
#include "http/client.h"
#include "image/image.h"
#include "templates/template_store.h"

namespace airlock::cluster {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// "ns/name:tag" -> "name" (what the registry's names hold: ids and aliases).
std::string BareName(std::string ref) {
  if (auto slash = ref.find('/'); slash != std::string::npos) ref = ref.substr(slash + 1);
  if (auto colon = ref.find(':'); colon != std::string::npos) ref = ref.substr(0, colon);
  return ref;
}

bool HexDigest(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The largest image a node fetches (a template's disk is at most serve's
// --max-disk, 16 GiB by default, on top of its base).
constexpr int64_t kMaxImageBytes = int64_t{64} << 30;

// A build's artefact as the registry holds it (written by another node:
// every field checked, a wrong type is DataLoss, never an exception).
struct Artefact {
  std::string digest;
  int64_t size = 0, allocated = 0;
  image::TemplateReadiness readiness;
  image::MachineShape shape;
};

StatusOr<Artefact> ParseArtefact(const json& a, const std::string& template_id) {
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kDataLoss, "the registry's record of template " + template_id + "'s image: " + why);
  };
  if (!a.is_object()) return bad("not an object");
  auto str = [&](const char* k, size_t max, std::string* out) -> bool {
    auto it = a.find(k);
    if (it == a.end()) return true;
    if (!it->is_string() || it->get_ref<const std::string&>().size() > max) return false;
    *out = it->get<std::string>();
    return true;
  };
  auto num = [&](const char* k, int64_t lo, int64_t hi, int64_t* out) -> bool {
    auto it = a.find(k);
    if (it == a.end()) return true;
    if (!it->is_number_integer()) return false;
    int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
  };
  Artefact r;
  int64_t vcpus = 0, mem = 0;
  if (!str("digest", 64, &r.digest) || !HexDigest(r.digest)) return bad("its digest is not 64 hex digits");
  if (!num("size", 1, kMaxImageBytes, &r.size) || r.size == 0) return bad("its size is not 1 byte to 64 GiB");
  if (!num("allocated", 0, r.size + (int64_t{1} << 20), &r.allocated)) return bad("its allocated size is out of range");
  if (!str("consoleMarker", 256, &r.readiness.console_marker) || !str("consoleFailure", 256, &r.readiness.console_failure))
    return bad("its readiness lines are not strings of at most 256 bytes");
  if (!num("vcpus", 0, 64, &vcpus) || !num("memoryMiB", 0, 1 << 20, &mem)) return bad("its shape is out of range");
  r.shape = {static_cast<int>(vcpus), static_cast<int>(mem)};
  return r;
}

}  // namespace

TemplateReplica::TemplateReplica(ClusterRegistry& registry, templates::TemplateStore& store,
                                 TemplateReplicaConfig config)
    : registry_(registry), store_(store), config_(std::move(config)) {
  thread_ = std::thread([this] { Loop(); });
}

TemplateReplica::~TemplateReplica() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TemplateReplica::Changed(const std::string& template_id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& q : queue_) {
      if (q == template_id) return;  // already queued: one publish exports the latest
    }
    queue_.push_back(template_id);
  }
  cv_.notify_all();
}

void TemplateReplica::Warm(const std::string& image) {
  auto img = image::FindImage(config_.state_dir, image);
  if (!img.ok()) return;
  if (auto d = DigestOf(img->rootfs); !d.ok())
    LOG_WARN("cluster templates: digest of image {}: {}", image, d.status().message());
}

void TemplateReplica::SetOnFetch(std::function<void(const std::string&, int64_t)> fn) {
  std::lock_guard<std::mutex> l(on_fetch_mu_);
  on_fetch_ = std::move(fn);
}

void TemplateReplica::Fetched(const std::string& outcome, int64_t bytes) {
  std::lock_guard<std::mutex> l(on_fetch_mu_);
  if (on_fetch_) on_fetch_(outcome, bytes);
}

void TemplateReplica::Flush() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return stop_ || (queue_.empty() && !busy_); });
}

void TemplateReplica::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      // Idle: what other nodes published since the last look, every
      // kImportEvery (any node may serve the template routes).
      if (std::chrono::steady_clock::now() >= next_import_) {
        l.unlock();
        if (Status st = ImportChanged(); !st.ok()) LOG_WARN("cluster templates: import: {}", st.message());
        l.lock();
        next_import_ = std::chrono::steady_clock::now() + kImportEvery;
      }
      cv_.wait_until(l, next_import_, [this] { return stop_ || !queue_.empty(); });
      continue;
    }
    std::string id = queue_.front();
    queue_.pop_front();
    busy_ = true;
    l.unlock();
    Status st = OkStatus();
    if (id.empty()) {
      // Every template of the store, each queued (a registry error retries that one).
      auto all = store_.ListTemplates("", /*all_teams=*/true);
      if (all.ok()) {
        l.lock();
        for (const auto& t : *all) {
          bool queued = false;
          for (const auto& q : queue_) queued = queued || q == t.id;
          if (!queued) queue_.push_back("?" + t.id);  // only if no other node published it
        }
        l.unlock();
      } else {
        st = all.status();
      }
    } else if (id[0] == '?') {
      st = Publish(id.substr(1), /*only_own=*/true);
    } else {
      st = Publish(id, /*only_own=*/false);
    }
    l.lock();
    busy_ = false;
    if (!st.ok()) {
      LOG_WARN("cluster templates: publishing template {}: {} (retried in 2 s)", id, st.message());
      bool queued = false;
      for (const auto& q : queue_) queued = queued || q == id;
      if (!queued) queue_.push_back(id);
      cv_.wait_for(l, std::chrono::seconds(2), [this] { return stop_; });
    }
    cv_.notify_all();
  }
}

StatusOr<json> TemplateReplica::ArtefactOf(const std::string& template_id, const std::string& build_id,
                                           const std::string& image) {
  auto img = image::FindImage(config_.state_dir, image);
  if (img.ok()) {
    ASSIGN_OR_RETURN(FileDigest d, DigestOf(img->rootfs));
    const auto readiness = image::ReadinessOf(image, config_.state_dir);
    const auto shape = image::DefaultShapeOf(image, config_.state_dir);
    return json{{"digest", d.sha256},
                {"size", d.size},
                {"allocated", d.allocated},
                {"rootfsKey", fs::path(img->rootfs).parent_path().filename().string()},
                {"consoleMarker", readiness.console_marker},
                {"consoleFailure", readiness.console_failure},
                {"vcpus", shape ? shape->vcpus : 0},
                {"memoryMiB", shape ? shape->memory_mib : 0}};
  }
  // Not here (an imported build this node never started): the registry's.
  ASSIGN_OR_RETURN(auto rows, registry_.TemplateBundlesNamed(template_id));
  for (const auto& row : rows) {
    if (row.template_id != template_id || row.bundle.empty()) continue;
    json b = json::parse(row.bundle, nullptr, false);
    if (!b.is_object() || !b.contains("builds") || !b["builds"].is_array()) continue;
    for (const auto& build : b["builds"]) {
      if (build.is_object() && build.contains("id") && build["id"].is_string() && build["id"] == build_id &&
          build.contains("artefact") &&
          build["artefact"].is_object())
        return build["artefact"];
    }
  }
  return NotFound("the image of build " + build_id + " is neither on this node nor in the registry");
}

StatusOr<json> TemplateReplica::BundleOf(const std::string& template_id) {
  ASSIGN_OR_RETURN(json bundle, store_.ExportTemplate(template_id));
  if (bundle.contains("builds") && bundle["builds"].is_array()) {
    for (auto& build : bundle["builds"]) {
      const std::string id = build.value("id", ""), image = build.value("image", "");
      auto a = ArtefactOf(template_id, id, image);
      if (a.ok()) {
        build["artefact"] = *a;
      } else {
        LOG_WARN("cluster templates: build {} of {} has no image to share: {}", id, template_id, a.status().message());
      }
    }
  }
  return bundle;
}

Status TemplateReplica::Publish(const std::string& template_id, bool only_own) {
  if (only_own) {
    // At start: a copy imported from another node is that node's to publish.
    ASSIGN_OR_RETURN(auto rows, registry_.TemplateBundlesNamed(template_id));
    for (const auto& row : rows) {
      if (row.template_id == template_id && row.publisher != config_.node) return OkStatus();
    }
  }
  auto bundle = BundleOf(template_id);
  if (!bundle.ok() && bundle.status().code() == StatusCode::kNotFound) {
    // Deleted here: a tombstone under the row's team and names, so every
    // node drops its copy.
    ASSIGN_OR_RETURN(auto rows, registry_.TemplateBundlesNamed(template_id));
    for (const auto& row : rows) {
      if (row.template_id == template_id && !row.bundle.empty())
        return registry_.PublishTemplate(template_id, row.team, row.names, config_.node, "");
    }
    return OkStatus();
  }
  if (!bundle.ok()) return bundle.status();
  const json& t = (*bundle)["template"];
  std::vector<std::string> names = {template_id};
  for (const auto& a : t.value("aliases", json::array())) {
    if (a.is_string()) names.push_back(a.get<std::string>());
  }
  RETURN_IF_ERROR(registry_.PublishTemplate(template_id, t.value("team", ""), names, config_.node, bundle->dump()));
  for (const auto& build : (*bundle)["builds"]) {
    if (!build.contains("artefact")) continue;
    if (!image::FindImage(config_.state_dir, build.value("image", "")).ok()) continue;
    const json& a = build["artefact"];
    RETURN_IF_ERROR(registry_.RecordArtefact(config_.node, a.value("digest", ""), a.value("size", int64_t{0})));
  }
  LOG_INFO("cluster templates: published template {} ({} names)", template_id, names.size());
  return OkStatus();
}

Status TemplateReplica::Apply(const TemplateBundle& row) {
  if (row.publisher == config_.node) return OkStatus();  // this store is its truth
  if (row.bundle.empty()) {
    if (!store_.GetTemplate(row.template_id).ok()) return OkStatus();
    ASSIGN_OR_RETURN(auto builds, store_.DeleteTemplate(row.template_id));
    for (const auto& b : builds) {
      if (b.image.empty()) continue;
      // No longer a holder of its image (the next image sweep removes the file).
      if (auto img = image::FindImage(config_.state_dir, b.image); img.ok()) {
        if (auto d = DigestOf(img->rootfs); d.ok()) (void)registry_.ForgetArtefact(config_.node, d->sha256);
      }
      (void)image::RemoveTemplateImage(config_.state_dir, b.image);
    }
    LOG_INFO("cluster templates: template {} was deleted on node {}: removed here", row.template_id, row.publisher);
    return OkStatus();
  }
  json bundle = json::parse(row.bundle, nullptr, false);
  if (!bundle.is_object()) {
    LOG_WARN("cluster templates: the registry's bundle of {} (from {}) is not JSON: ignored", row.template_id,
             row.publisher);
    return OkStatus();
  }
  if (Status st = store_.ImportTemplate(bundle); !st.ok())
    return st.WithContext("importing template " + row.template_id + " from node " + row.publisher);
  return OkStatus();
}

Status TemplateReplica::Refresh(const std::string& ref) {
  const std::string name = BareName(ref);
  if (name.empty()) return OkStatus();
  ASSIGN_OR_RETURN(auto rows, registry_.TemplateBundlesNamed(name));
  for (const auto& row : rows) RETURN_IF_ERROR(Apply(row));
  return OkStatus();
}

Status TemplateReplica::ImportChanged() {
  ASSIGN_OR_RETURN(auto rows, registry_.TemplateBundlesSince(since_ms_));
  int64_t newest = since_ms_;
  for (const auto& row : rows) {
    if (Status st = Apply(row); !st.ok()) LOG_WARN("cluster templates: {}", st.message());
    newest = std::max(newest, row.updated_ms);
  }
  since_ms_ = newest;  // rows of that very ms are read again next time (an import is idempotent)
  return OkStatus();
}

Status TemplateReplica::EnsureImage(const std::string& template_id, const std::string& image) {
  if (image::FindImage(config_.state_dir, image).ok()) return OkStatus();
  std::lock_guard<std::mutex> one(fetch_mu_);
  if (image::FindImage(config_.state_dir, image).ok()) return OkStatus();  // a concurrent create fetched it
  auto build_id_of = [&]() -> std::string {
    auto builds = store_.BuildsOf(template_id);
    if (!builds.ok()) return "";
    for (const auto& b : *builds) {
      if (b.image == image) return b.id;
    }
    return "";
  };
  const std::string build_id = build_id_of();
  ASSIGN_OR_RETURN(json record, ArtefactOf(template_id, build_id, image));
  ASSIGN_OR_RETURN(Artefact a, ParseArtefact(record, template_id));
  const std::string& digest = a.digest;
  // A fetched image's rootfs is keyed by its digest (never by the
  // publisher's key: another build's rootfs here may have that one).
  const std::string key = digest.substr(0, 20);
  image::BuiltImage bi;
  bi.owner = config_.owner;
  bi.name = image;
  bi.id = key;
  bi.readiness = a.readiness;
  bi.shape = a.shape;
  const std::string held = config_.state_dir + "/images/rootfs/" + key + "/rootfs.ext4";
  // The same bytes fetched before (the pointer removed by hand, another
  // template of the same bytes): installed without a fetch.
  if (std::error_code ec; fs::exists(held, ec)) {
    auto d = DigestOf(held);
    if (!d.ok() || d->sha256 != digest)
      return Status(StatusCode::kDataLoss, "another file holds the key of template " + template_id + "'s image here (" +
                                               held + "): remove it");
    ASSIGN_OR_RETURN(auto installed, image::InstallBuiltImage(config_.state_dir, bi));
    (void)installed;
    return registry_.RecordArtefact(config_.node, digest, d->size);
  }
  if (!config_.tls)
    return FailedPrecondition("the image of template " + template_id +
                              " is on another node: nodes fetch images only over the cluster's mutual TLS "
                              "(--insecure-cluster has none)");
  ASSIGN_OR_RETURN(auto holders, registry_.ArtefactHolders(digest, config_.lapse));
  // Not images/tmp: an image build empties that directory.
  const std::string tmp = config_.state_dir + "/cluster-fetch";
  std::error_code ec;
  fs::create_directories(tmp, ec);
  Status last = Unavailable("no live node holds the image of template " + template_id + " (artefact " +
                            digest.substr(0, 12) + ")");
  for (const auto& h : holders) {
    if (h.name == config_.node) continue;
    auto grant = registry_.GrantArtefact(config_.node, h.name, digest);
    if (!grant.ok()) return grant.status();
    auto hp = http::ParseHostPort(h.address);
    if (!hp.ok()) continue;
    FetchRequest r;
    r.host = hp->first;
    r.port = hp->second;
    r.holder_node = h.name;
    r.digest = digest;
    r.size = a.size;
    r.allocated = a.allocated;
    r.grant = *grant;
    r.dest = tmp + "/fetched-" + digest + ".ext4";
    r.tmp_dir = tmp;
    r.reserve_bytes = config_.reserve_bytes;
    if (config_.tls) {
      r.tls = config_.tls->PeerClientContext();
      r.peer_check = config_.tls->PeerIsNode(h.name);
    }
    LOG_INFO("cluster templates: fetching the image of template {} ({} bytes) from node {}", template_id, r.size,
             h.name);
    auto got = FetchArtefact(r);
    if (!got.ok()) {
      last = got.status();
      const bool corrupt = got.status().code() == StatusCode::kDataLoss;
      Fetched(corrupt ? "corrupt" : "failed", 0);
      LOG_WARN("cluster templates: fetching {} from node {}: {}", digest.substr(0, 12), h.name, last.message());
      if (got.status().code() == StatusCode::kResourceExhausted) return last;
      continue;
    }
    bytes_fetched_ += got->bytes_received;
    Fetched("ok", got->bytes_received);
    bi.rootfs = r.dest;
    auto installed = image::InstallBuiltImage(config_.state_dir, bi);
    if (!installed.ok()) {
      ::unlink(r.dest.c_str());
      return installed.status().WithContext("installing the fetched image of template " + template_id);
    }
    // The digest, verified by the fetch, beside the installed file (the
    // fetch wrote it beside the file's old name).
    ::unlink((r.dest + ".sha256").c_str());
    if (Status st = WriteDigestSidecar(installed->rootfs, digest); !st.ok())
      LOG_WARN("cluster templates: {}", st.message());
    if (Status st = registry_.RecordArtefact(config_.node, digest, r.size); !st.ok())
      LOG_WARN("cluster templates: recording {} as held here: {}", digest.substr(0, 12), st.message());
    LOG_INFO("cluster templates: the image of template {} came from node {} ({} bytes received{})", template_id,
             h.name, got->bytes_received, got->resumed ? ", resumed" : "");
    return OkStatus();
  }
  return last;
}

StatusOr<std::string> TemplateReplica::PathOf(const std::string& digest) {
  if (!HexDigest(digest)) return InvalidArgument("an artefact is named by 64 hex digits");
  ASSIGN_OR_RETURN(auto ready, store_.BuildsWithStatus(templates::kReady));
  for (const auto& b : ready) {
    if (b.image.empty()) continue;
    auto img = image::FindImage(config_.state_dir, b.image);
    if (!img.ok()) continue;
    auto d = DigestOf(img->rootfs);
    if (d.ok() && d->sha256 == digest) return img->rootfs;
  }
  return NotFound("artefact " + digest.substr(0, 12) + " is not on this node");
}

}  // namespace airlock::cluster
