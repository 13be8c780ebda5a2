// Temporary directories for tests: made with mkdtemp under /tmp, removed at
// scope exit (also when an ASSERT returns early). Declare a ScopedDir first
// so it outlives everything that lives inside it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace airlock::test_util {

struct ScopedDir {
  std::string path;
  ~ScopedDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// "/tmp/<prefix>-XXXXXX", created; "" if mkdtemp fails.
inline std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  return d ? std::string(d) : "";
}

}  // namespace airlock::test_util
