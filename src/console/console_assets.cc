#include "console/console_assets.h"

#include <map>

namespace airlock::console {

namespace {

std::string_view TypeOf(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

}  // namespace

const Asset* FindAsset(std::string_view name) {
  static const std::map<std::string_view, Asset> assets = [] {
    std::map<std::string_view, Asset> m;
    for (const auto& [n, body] : EmbeddedFiles()) m[n] = Asset{n, TypeOf(n), body};
    return m;
  }();
  if (name.empty()) name = "index.html";
  auto it = assets.find(name);
  return it == assets.end() ? nullptr : &it->second;
}

const std::vector<std::pair<std::string, std::string>>& SecurityHeaders() {
  // style-src allows inline styles: xterm.js's DOM renderer writes its cell
  // metrics and theme into <style> elements it creates. Scripts stay strict.
  static const std::vector<std::pair<std::string, std::string>> headers = {
      {"Content-Security-Policy",
       "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"X-Frame-Options", "DENY"},
      {"Cross-Origin-Opener-Policy", "same-origin"},
      {"Cache-Control", "no-cache"}};
  return headers;
}

}  // namespace airlock::console
