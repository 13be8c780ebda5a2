#include "agent/paths.h"

#include <vector>

namespace airlock::agent {

std::string NormalizePath(std::string_view in) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < in.size()) {
    size_t j = in.find('/', i);
    if (j == std::string_view::npos) j = in.size();
    std::string_view seg = in.substr(i, j - i);
    if (seg.empty() || seg == ".") {
    } else if (seg == "..") {
      if (!parts.empty()) parts.pop_back();
    } else {
      parts.push_back(seg);
    }
    i = j + 1;
  }
  if (parts.empty()) return "/";
  std::string out;
  for (auto p : parts) {
    out += '/';
    out += p;
  }
  return out;
}

StatusOr<std::string> ResolvePath(std::string_view path, std::string_view home) {
  if (path.find('\0') != std::string_view::npos) return InvalidArgument("path contains a NUL byte");
  std::string h = home.empty() ? "/" : std::string(home);
  if (path.empty() || path == "~") return NormalizePath(h);
  if (path[0] == '~') {
    if (path[1] != '/') return InvalidArgument("path '" + std::string(path) + "': ~user is not supported");
    return NormalizePath(h + std::string(path.substr(1)));
  }
  if (path[0] == '/') return NormalizePath(path);
  return NormalizePath(h + "/" + std::string(path));
}

std::string ParentPath(std::string_view p) {
  size_t k = p.rfind('/');
  if (k == std::string_view::npos || k == 0) return "/";
  return std::string(p.substr(0, k));
}

std::string BaseName(std::string_view p) {
  if (p == "/") return "/";
  size_t k = p.rfind('/');
  return std::string(k == std::string_view::npos ? p : p.substr(k + 1));
}

}  // namespace airlock::agent
