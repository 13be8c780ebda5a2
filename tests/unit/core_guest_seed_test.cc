// Unit tests of SeedGuestBeforeNetwork (core/guest_seed.h) against a fake
// VM whose "agent" reads the console input.
#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <string>

#include "core/guest_seed.h"

namespace airlock {
namespace {

// A VM whose console input goes to `on_line` and whose console output is `out`.
class FakeVm final : public VmInstance {
 public:
  std::function<void(FakeVm&, const std::string&)> on_line;
  std::string out;
  bool is_alive = true;
  bool has_console = true;
  int writes = 0;

  pid_t pid() const override { return 1; }
  bool alive() override { return is_alive; }
  std::string ConsoleTail() override { return out; }
  Status Destroy() override { return OkStatus(); }
  pid_t Release() override { return 1; }
  Status WriteConsoleLine(std::string_view line) override {
    if (!has_console) return Unimplemented("no console");
    ++writes;
    if (on_line) on_line(*this, std::string(line));
    return OkStatus();
  }
  bool ConsoleContains(const std::string& text) override { return out.find(text) != std::string::npos; }
};

// The nonce of a seed line: "\nairlock-seed <nonce> <b64>".
std::string NonceOf(const std::string& line) {
  const size_t start = line.find("airlock-seed ") + 13;
  return line.substr(start, line.find(' ', start) - start);
}

GuestSeedOptions Fast(bool booted = false) {
  GuestSeedOptions o;
  o.booted = booted;
  o.ready_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  o.answer_timeout = std::chrono::milliseconds(300);
  o.retry_every = std::chrono::milliseconds(50);
  return o;
}

TEST(GuestSeedTest, AnsweredWithItsNonceIsDone) {
  FakeVm vm;
  std::string seen;
  vm.on_line = [&](FakeVm& v, const std::string& line) {
    seen = line;
    v.out += "airlock-agent: seeded " + NonceOf(line) + "\n";
  };
  ASSERT_TRUE(SeedGuestBeforeNetwork(vm, Fast()).ok());
  EXPECT_EQ(vm.writes, 1);
  EXPECT_EQ(seen.rfind("\nairlock-seed ", 0), 0u) << seen;
  EXPECT_EQ(NonceOf(seen).size(), 16u);
  // 32 bytes: 44 base64 characters.
  EXPECT_EQ(seen.size() - seen.rfind(' ') - 1, 44u);
}

TEST(GuestSeedTest, AnotherNonceOrAnOldLineIsNotAnAnswer) {
  FakeVm vm;
  vm.out = "airlock-agent: seeded 00000000000000000000000000000000\n";
  vm.on_line = [&](FakeVm& v, const std::string&) {
    v.out += "airlock-agent: seeded ffffffffffffffffffffffffffffffff\n";
  };
  Status st = SeedGuestBeforeNetwork(vm, Fast());
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_GE(vm.writes, 2) << "the line is written again while unanswered";
}

TEST(GuestSeedTest, ALostLineIsWrittenAgain) {
  FakeVm vm;
  vm.on_line = [&](FakeVm& v, const std::string& line) {
    if (v.writes >= 2) v.out += "airlock-agent: seeded " + NonceOf(line);
  };
  ASSERT_TRUE(SeedGuestBeforeNetwork(vm, Fast()).ok());
  EXPECT_EQ(vm.writes, 2);
}

TEST(GuestSeedTest, ABootedGuestIsWrittenToOnlyOnceItsAgentIsReady) {
  FakeVm vm;
  vm.on_line = [&](FakeVm& v, const std::string& line) { v.out += "airlock-agent: seeded " + NonceOf(line); };
  GuestSeedOptions o = Fast(/*booted=*/true);
  o.ready_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  EXPECT_EQ(SeedGuestBeforeNetwork(vm, o).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(vm.writes, 0);
  vm.out = "[    1.0] booting\nairlock-agent: ready\n";
  EXPECT_TRUE(SeedGuestBeforeNetwork(vm, Fast(true)).ok());
  EXPECT_EQ(vm.writes, 1);
}

TEST(GuestSeedTest, FailureAndDeathAndNoConsoleAreErrors) {
  FakeVm failing;
  failing.on_line = [&](FakeVm& v, const std::string& line) {
    v.out += "airlock-agent: seed failed " + NonceOf(line) + ": ioctl RNDRESEEDCRNG: Operation not permitted\n";
  };
  EXPECT_EQ(SeedGuestBeforeNetwork(failing, Fast()).code(), StatusCode::kUnavailable);
  FakeVm dead;
  dead.is_alive = false;
  EXPECT_EQ(SeedGuestBeforeNetwork(dead, Fast()).code(), StatusCode::kUnavailable);
  FakeVm none;
  none.has_console = false;
  EXPECT_EQ(SeedGuestBeforeNetwork(none, Fast()).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace airlock
