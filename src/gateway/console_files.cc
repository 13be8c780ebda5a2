#include "gateway/console_files.h"

#include "console/console_assets.h"

namespace airlock::gateway {

void ServeConsoleAsset(HttpConn& conn) {
  HttpConn* c = &conn;
  if (c->method() != http::Method::kGet && c->method() != http::Method::kHead)
    return c->RespondError(405, "the console is read with GET", {{"Allow", "GET, HEAD"}});
  const std::string& path = c->path();
  // Relative asset URLs need the trailing slash.
  if (path == "/console") return c->Respond(308, "text/plain", "/console/\n", {{"Location", "/console/"}});
  const console::Asset* asset = console::FindAsset(std::string_view(path).substr(std::string_view("/console/").size()));
  const http::HeaderList& headers = console::SecurityHeaders();
  if (!asset) return c->Respond(404, "text/plain; charset=utf-8", "no such console file\n", headers);
  c->Respond(200, asset->content_type, std::string(asset->body), headers);
}

}  // namespace airlock::gateway
