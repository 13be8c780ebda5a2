// One line of `airlock doctor`: a host check, what was found, and the fix.
// Every module that needs something of the host contributes its checks.
#pragma once

#include <string>

namespace airlock {

struct DoctorCheck {
  std::string name;
  bool ok = false;
  std::string detail;  // what was found
  std::string fix;     // what to do when !ok
};

}  // namespace airlock
