// Which runtime a template name asks for (docs/server.md "Runtimes"): a
// built-in template with a runtime's name after a dash ("base-gvisor",
// "code-interpreter-gvisor") is that template's image on that runtime.
// Every runtime but kDefaultRuntime ("qemu") has such names; the image
// templates are image::KnownTemplates() (aliases such as
// "code-interpreter-v1" included, via image::CanonicalTemplateName).
// Custom templates and named snapshots never carry a runtime in their name.
//
// A create's runtime: the body's "runtime" field, else the template name's,
// else the daemon's default (serve --default-runtime).
#pragma once

#include <string>
#include <vector>

#include "runtime/registry.h"

namespace airlock {

struct TemplateRef {
  std::string image_template;    // the template whose image boots
  std::string runtime;           // the runtime it runs on
  bool runtime_in_name = false;  // the name said which ("-<runtime>")
};

// `name` as above: "<built-in>-<runtime>" with <runtime> one of `runtimes`
// other than kDefaultRuntime gives {canonical built-in, runtime, true};
// any other name gives {name, default_runtime, false}.
TemplateRef ParseTemplateRuntime(const std::string& name, const std::string& default_runtime,
                                 const std::vector<std::string>& runtimes = AvailableRuntimes());

// Whether `name` names a built-in template in any form a create accepts:
// the template, an alias ("code-interpreter-v1"), either on a runtime
// ("base-gvisor", "base-qemu"), in any letter case, with or without a
// ":tag". Such names are reserved: no snapshot or custom template of a
// team may take one (a team's "base" would otherwise shadow everyone's).
bool IsBuiltInTemplateName(const std::string& name);

// The name a sandbox's template is shown by (GET /sandboxes): "<t>-<runtime>"
// for a built-in image template `t` on a runtime other than the daemon's
// default (`default_runtime`, serve --default-runtime: there `base` is what
// a client asks for); `image_template` as it is otherwise.
std::string TemplateNameOn(const std::string& image_template, const std::string& runtime,
                           const std::string& default_runtime = kDefaultRuntime);

}  // namespace airlock
