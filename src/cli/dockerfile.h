// A Dockerfile as the steps of a custom-template build, the way the official
// SDK's Template.fromDockerfile makes them (shared/spec/e2b-templates.md
// §A.5, the `fromDockerfile` row), for `airlock template build`:
//
//   FROM ref             fromImage ref, passed through (the server knows
//                        e2bdev/base and base); FROM template:NAME[:TAG] is
//                        fromTemplate NAME[:TAG], a template built on this
//                        server (an airlock extension; the SDK has none)
//   (first)              USER root, WORKDIR /
//   RUN                  RUN [command] (the exec form joined, shell-quoted)
//   COPY / ADD           one COPY [src, dest, owner, mode] per source;
//                        --chown is the owner, --chmod the mode
//   ENV / ARG            one ENV [k1, v1, k2, v2, ...] per instruction;
//                        ARG X is X=""
//   WORKDIR, USER        WORKDIR [path], USER [name]
//   CMD / ENTRYPOINT     startCmd (the exec form joined, shell-quoted; an
//                        exec-form ENTRYPOINT takes CMD as its arguments),
//                        readyCmd "sleep 20"
//   EXPOSE, VOLUME       ignored; LABEL, SHELL, HEALTHCHECK, ... a warning
//   (last)               USER user and WORKDIR /home/user, unless set
//
// Words are split as Docker does (quotes and backslash escapes), where the
// SDK splits at blanks only: `ENV B="two words"` is B = "two words" here
// (the SDK sends `"two`), `ENV K a b` is K = "a b" (the SDK drops it), and
// `RUN ["echo", "hi"]` runs `echo hi` (the SDK runs the JSON text).
// Line continuations (a trailing backslash, or the escape character of a
// `# escape=` directive) join lines with one blank; comment lines inside a
// continuation are dropped.
//
// Refused (InvalidArgument "line N: ..."): a second FROM (multi-stage),
// no FROM, COPY --from, ADD of a URL, heredocs, a COPY source that is
// absolute or leaves the context, unknown instructions and flags.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "templates/build_spec.h"

namespace airlock::cli {

struct DockerfileTemplate {
  // from_image or from_template, steps (COPY steps without files_hash: the
  // caller hashes the files), start_cmd and ready_cmd. force is false.
  templates::BuildStart start;
  // The Dockerfile line of each step (1-based; 0 for the defaults it adds).
  std::vector<size_t> step_lines;
  std::vector<std::string> warnings;  // "line 7: LABEL is not supported; ignored"
};

StatusOr<DockerfileTemplate> ParseDockerfile(std::string_view text);

// The TemplateBuildStartV2 body (§A.5) of `start`: fromImage or
// fromTemplate, startCmd/readyCmd when set, steps with type, args, force
// and filesHash (COPY), force.
nlohmann::json BuildStartJson(const templates::BuildStart& start);

// `s` quoted for a POSIX shell as Python's shlex.quote does (the SDK's
// shellQuote): unchanged when it holds only [A-Za-z0-9_@%+=:,./-], else in
// single quotes; "" is ''.
std::string ShellQuote(std::string_view s);

}  // namespace airlock::cli
