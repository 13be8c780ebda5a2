// TemplateCatalog: what a create's `templateID` names, resolved once, for the
// caller's team, off the event loop (it reads the template store, the named
// snapshots and image pointer files).
//
// A reference is, in this order:
//   1. a named snapshot of the caller's team (a snapshot id of any team's for
//      admin keys; core/snapshot_dirs.h SnapshotDirs::FindNamed), never for a built-in
//      template's name;
//   2. a built-in template in any accepted form: an alias
//      ("code-interpreter-v1"), on a runtime ("base-gvisor");
//   3. a custom template of the team ("name", "name:tag", "ns/name", its id:
//      templates::ResolveBuild), as its ready build's image.
// Another team's snapshot or private template is NotFound, never "forbidden"
// (its existence is not revealed).
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "image/image.h"

namespace airlock {
class Manager;
class Registry;
namespace templates {
class TemplateStore;
}  // namespace templates
}  // namespace airlock

namespace airlock::control {

struct ResolvedTemplate {
  // What Manager::Create starts: an image template (a built-in's canonical
  // name, or a custom build's image id), or a named snapshot.
  std::string image_template;
  std::string named_snapshot_dir;  // non-empty: start from this snapshot
  // The runtime the name carries ("base-gvisor": gvisor); "" when it names none.
  std::string runtime_in_name;
  // A custom template: its id (the API's templateID) and the alias it has.
  std::string template_id;
  std::string alias;
  image::MachineShape shape;  // its own default shape; 0s: none (the daemon's)
  int disk_mib = 0;           // its rootfs's size; 0: unknown
};

class TemplateCatalog {
 public:
  // `manager`, `registry` and `store` must outlive it. `state_dir`: where
  // images live. `default_runtime`: the runtime of a name that carries none.
  TemplateCatalog(Manager& manager, Registry& registry, templates::TemplateStore& store, std::string state_dir,
                  std::string default_runtime);

  // Errors: InvalidArgument (a malformed reference), NotFound (no such
  // template or snapshot for this team, or no ready build for the tag).
  // Blocks on file and SQLite reads: call it on a worker.
  StatusOr<ResolvedTemplate> Resolve(const std::string& ref, const std::string& team, bool admin) const;
  // The directory of the named snapshot `ref` (its id, or a name in
  // `team`'s namespace; any team's for admin), "" for none. The one door to
  // named-snapshot lookup for the HTTP side (a delete, an alias check).
  // Blocks on file reads.
  std::string NamedSnapshotDir(const std::string& ref, const std::string& team, bool admin = false) const;

  // A cluster node's templates (cluster/template_replica.h), set once
  // before use: `refresh` imports the registry's copy of what `ref` names
  // before a custom template is resolved (its error is logged and the
  // local copy used); `ensure_image` makes the resolved build's image
  // present here (fetched from a node that holds it) and its error fails
  // the resolution.
  struct ClusterSource {
    std::function<Status(const std::string& ref)> refresh;
    std::function<Status(const std::string& template_id, const std::string& image)> ensure_image;
  };
  void SetClusterSource(ClusterSource source) { cluster_ = std::move(source); }

 private:
  Manager& manager_;
  Registry& registry_;
  templates::TemplateStore& store_;
  const std::string state_dir_;
  const std::string default_runtime_;
  ClusterSource cluster_;
};

}  // namespace airlock::control
