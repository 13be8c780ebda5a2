// DefaultBuildAllow (server.h): what template build sandboxes may reach when
// the operator says nothing (serve --build-allow): the hosts of the package
// mirrors this host is itself configured to use, read from its apt sources
// and its npm configuration. No host name is written here.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/log.h"
#include "common/subprocess.h"
#include "server/server.h"

namespace airlock::server {

namespace fs = std::filesystem;

namespace {

// "http://host[:port]/path" -> "host"; "" for anything else.
std::string HostOf(std::string uri) {
  if (uri.rfind("mirror+", 0) == 0) uri = uri.substr(7);
  size_t scheme = uri.find("://");
  if (scheme == std::string::npos) return "";
  std::string s = uri.substr(0, scheme);
  if (s != "http" && s != "https") return "";
  std::string rest = uri.substr(scheme + 3);
  size_t end = rest.find_first_of("/?#");
  std::string host = rest.substr(0, end);
  if (size_t at = host.rfind('@'); at != std::string::npos) host = host.substr(at + 1);
  if (!host.empty() && host[0] == '[') return "";  // IPv6 literal: not a name rule
  if (size_t colon = host.find(':'); colon != std::string::npos) host = host.substr(0, colon);
  for (char& ch : host) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return host;
}

void FromListFile(const std::string& path, std::set<std::string>* out) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string word;
    if (!(in >> word) || (word != "deb" && word != "deb-src")) continue;
    while (in >> word) {
      if (word[0] == '[') {
        while (word.back() != ']' && in >> word) {
        }
        continue;
      }
      if (auto h = HostOf(word); !h.empty()) out->insert(h);
      break;
    }
  }
}

void FromSourcesFile(const std::string& path, std::set<std::string>* out) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("URIs:", 0) != 0) continue;
    std::istringstream in(line.substr(5));
    std::string uri;
    while (in >> uri) {
      if (auto h = HostOf(uri); !h.empty()) out->insert(h);
    }
  }
}

}  // namespace

std::vector<std::string> DefaultBuildAllow(const std::string& root) {
  std::set<std::string> hosts;
  FromListFile(root + "/etc/apt/sources.list", &hosts);
  std::error_code ec;
  for (auto& e : fs::directory_iterator(root + "/etc/apt/sources.list.d", ec)) {
    const std::string p = e.path().string();
    if (p.size() > 5 && p.compare(p.size() - 5, 5, ".list") == 0) FromListFile(p, &hosts);
    if (p.size() > 8 && p.compare(p.size() - 8, 8, ".sources") == 0) FromSourcesFile(p, &hosts);
  }
  if (root.empty()) {
    auto npm = RunChecked({"npm", "config", "get", "registry"});
    if (npm.ok()) {
      std::string uri = *npm;
      while (!uri.empty() && (uri.back() == '\n' || uri.back() == '\r')) uri.pop_back();
      if (auto h = HostOf(uri); !h.empty()) hosts.insert(h);
    }
  }
  std::vector<std::string> out(hosts.begin(), hosts.end());
  LOG_INFO("template builds may reach the host's package mirrors: {}", fmt::join(out, ", "));
  return out;
}

}  // namespace airlock::server
