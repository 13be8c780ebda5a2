// airlock-image-tool: a development driver for the image module.
//   airlock-image-tool build [--state-dir D] [--template base] --agent PATH
//                            [--force] [--refresh]
//   airlock-image-tool base  [--state-dir D] [--template base|all]
//                            [--force] [--refresh]
//     (boot files and base layers only: EnsureBaseLayers; `make build`
//     runs it while the rest of airlock compiles)
//   airlock-image-tool show  [--state-dir D] [--template base]
// The real user interface is `airlock image build` (src/cli).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "image/image.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: airlock-image-tool build [--state-dir D] [--template T] --agent PATH "
               "[--force] [--refresh]\n"
               "       airlock-image-tool base [--state-dir D] [--template T|all] [--force] [--refresh]\n"
               "       airlock-image-tool show [--state-dir D] [--template T]\n");
  return 2;
}

void Print(const airlock::image::GuestImage& g) {
  std::printf(
      "id:       %s\ntemplate: %s\nkernel:   %s\ninitrd:   %s\nrootfs:   %s\n"
      "release:  %s\npackage:  %s\n",
      g.id.c_str(), g.template_name.c_str(), g.kernel.c_str(), g.initrd.c_str(), g.rootfs.c_str(),
      g.kernel_release.c_str(), g.kernel_package.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  airlock::InitLogging("warn");
  if (argc < 2) return Usage();
  std::string cmd = argv[1];
  airlock::image::ImageOptions o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--state-dir" && (v = next()))
      o.state_dir = v;
    else if (a == "--template" && (v = next()))
      o.template_name = v;
    else if (a == "--agent" && (v = next()))
      o.agent_binary = v;
    else if (a == "--force")
      o.force = true;
    else if (a == "--refresh")
      o.refresh = true;
    else
      return Usage();
  }
  if (cmd == "show") {
    auto g = airlock::image::FindImage(o.state_dir, o.template_name);
    if (!g.ok()) {
      std::fprintf(stderr, "error: %s\n", g.status().ToString().c_str());
      return 1;
    }
    Print(*g);
    return 0;
  }
  if (cmd != "build" && cmd != "base") return Usage();
  auto start = std::chrono::steady_clock::now();
  o.progress = [start](std::string_view step) {
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "[%6.1fs] %.*s\n", t, static_cast<int>(step.size()), step.data());
  };
  if (cmd == "base") {
    const std::vector<std::string> names =
        o.template_name == "all" ? airlock::image::KnownTemplates() : std::vector<std::string>{o.template_name};
    for (const auto& name : names) {
      o.template_name = name;
      if (airlock::Status st = airlock::image::EnsureBaseLayers(o); !st.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", name.c_str(), st.ToString().c_str());
        return 1;
      }
      o.progress("base layer of " + name + " ready");
    }
    return 0;
  }
  auto g = airlock::image::EnsureImage(o);
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!g.ok()) {
    std::fprintf(stderr, "error: %s\n", g.status().ToString().c_str());
    return 1;
  }
  Print(*g);
  std::fprintf(stderr, "done in %.3f s\n", t);
  return 0;
}
