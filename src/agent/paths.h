// Path resolution for requests (spec §3.3): absolute, relative to the
// user's home, or "~"-prefixed. Results are absolute and lexically
// normalized ("." and ".." removed, ".." never climbs above "/"); symlinks
// are not resolved.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace airlock::agent {

// "/a//b/./c/../d/" → "/a/b/d". Input must be absolute.
std::string NormalizePath(std::string_view absolute);

// "" → home; "~" → home; "~/x" → home/x; "x" → home/x; "/x" → /x.
// "~other/x" is not supported (invalid_argument), nor are NUL bytes.
StatusOr<std::string> ResolvePath(std::string_view path, std::string_view home);

// "/a/b/c" → "/a/b"; "/a" → "/"; "/" → "/".
std::string ParentPath(std::string_view absolute);
// "/a/b/c" → "c"; "/" → "/".
std::string BaseName(std::string_view absolute);

}  // namespace airlock::agent
