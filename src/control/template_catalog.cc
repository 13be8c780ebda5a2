#include "control/template_catalog.h"

#include <sys/stat.h>

#include <algorithm>

#include "common/log.h"
#include "core/manager.h"
#include "core/registry.h"
#include "core/template_runtime.h"
#include "templates/template_store.h"

namespace airlock::control {

TemplateCatalog::TemplateCatalog(Manager& manager, Registry& registry, templates::TemplateStore& store,
                                 std::string state_dir, std::string default_runtime)
    : manager_(manager),
      registry_(registry),
      store_(store),
      state_dir_(std::move(state_dir)),
      default_runtime_(std::move(default_runtime)) {}

std::string TemplateCatalog::NamedSnapshotDir(const std::string& ref, const std::string& team, bool admin) const {
  return manager_.snapshot_dirs().FindNamed(ref, team, admin);
}

StatusOr<ResolvedTemplate> TemplateCatalog::Resolve(const std::string& ref, const std::string& team,
                                                    bool admin) const {
  ResolvedTemplate out;
  const std::string not_found = "template " + ref + " not found";
  // 1. A named snapshot of the team's (never a built-in template's name).
  if (!IsBuiltInTemplateName(ref)) {
    std::string snap = manager_.snapshot_dirs().FindNamed(ref, team, admin);
    if (!snap.empty()) {
      if (!admin) {
        // An owner that cannot be read is no owner: not found, as for another team's.
        auto owner = registry_.OwnerOf(OwnedKind::kSnapshot, snap.substr(snap.rfind('/') + 1));
        if (!owner.ok()) LOG_WARN("owner of snapshot {}: {}", snap, owner.status().message());
        if (!owner.ok() || !*owner || **owner != team) return NotFound(not_found);
      }
      out.image_template = ref;
      out.named_snapshot_dir = std::move(snap);
      return out;
    }
  }
  // 2. A built-in template, in any form a create accepts.
  // Without a runtime in it, image_template is `ref` as given.
  const TemplateRef parsed = ParseTemplateRuntime(ref, default_runtime_);
  std::string name = image::CanonicalTemplateName(parsed.image_template);
  if (parsed.runtime_in_name) out.runtime_in_name = parsed.runtime;
  const auto& known = image::KnownTemplates();
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    // 3. A custom template of the team's: its ready build's image.
    if (cluster_.refresh) {
      if (Status st = cluster_.refresh(ref); !st.ok())
        LOG_WARN("template {}: the cluster's copy was not read ({}): resolved from this node's", ref, st.message());
    }
    ASSIGN_OR_RETURN(templates::Resolved r, templates::ResolveBuild(store_, ref, team, admin));
    if (cluster_.ensure_image && !image::FindImage(state_dir_, r.build.image).ok())
      RETURN_IF_ERROR(cluster_.ensure_image(r.tmpl.id, r.build.image));
    name = r.build.image;
    out.template_id = r.tmpl.id;
    out.alias = r.alias;
    out.runtime_in_name.clear();
  }
  out.image_template = name;
  if (auto shape = image::DefaultShapeOf(name, state_dir_)) out.shape = *shape;
  if (auto img = image::FindImage(state_dir_, name); img.ok()) {
    struct stat st;
    if (::stat(img->rootfs.c_str(), &st) == 0) out.disk_mib = static_cast<int>(st.st_size >> 20);
  }
  return out;
}

}  // namespace airlock::control
