// An embedded Manager on the test state dir (its guest image must exist:
// `make image`) and runtime (AIRLOCK_RUNTIME), for integration tests that
// drive the core directly.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "core/manager.h"
#include "tests/integration/harness.h"

namespace airlock::testing {

// Null (with a test failure naming why) when the Manager cannot open.
// Creates restore the template snapshot `make image` made (as `serve`'s do)
// unless `cold_boot`: a test of the boot itself asks for one.
inline std::unique_ptr<Manager> OpenManager(bool cold_boot = false) {
  ManagerConfig c;
  c.state_dir = StateDir();
  c.build_image_if_missing = false;
  c.runtime = RuntimeName();
  c.template_snapshots = !cold_boot;
  auto m = Manager::Open(c);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

}  // namespace airlock::testing
