// The web console's files (docs/console.md), built into the binary:
// index.html, app.js, app.css (assets/) and xterm.js with its fit add-on and
// stylesheet (npm, src/console/package-lock.json). Served by the daemon at
// /console/<name>; nothing is fetched from anywhere else.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace airlock::console {

struct Asset {
  std::string_view name;          // "app.js", "vendor/xterm.js"
  std::string_view content_type;  // from the extension
  std::string_view body;
};

// The asset at `name` (the path after "/console/"; "" is index.html), or
// nullptr.
const Asset* FindAsset(std::string_view name);

// The response headers every console answer carries: a strict
// Content-Security-Policy (scripts and connections only from this origin,
// no inline script, no eval, no framing, no plugins), nosniff, no referrer.
const std::vector<std::pair<std::string, std::string>>& SecurityHeaders();

// Generated (embed.cmake): (name, bytes) of every file.
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedFiles();

}  // namespace airlock::console
