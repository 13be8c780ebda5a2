// Unit tests of the console seed (agent/console_seed.h): the line grammar,
// and the reader driven through a pty as the host drives the guest's ttyS0.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <string>
#include <vector>

#include "agent/console_seed.h"
#include "envd/proto_json.h"

namespace airlock::agent {
namespace {

const std::string kNonce = "0123456789abcdef0123456789abcdef";

std::string Line(const std::string& nonce, size_t bytes) {
  return "airlock-seed " + nonce + " " + envd::Base64Encode(std::string(bytes, 'e'));
}

TEST(ConsoleSeedTest, ParsesAValidLine) {
  auto r = ParseSeedLine(Line(kNonce, 64));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->nonce, kNonce);
  EXPECT_EQ(r->entropy, std::string(64, 'e'));
  EXPECT_TRUE(ParseSeedLine(Line(kNonce, 64) + "\r").ok());
}

TEST(ConsoleSeedTest, RefusesAnythingElse) {
  const std::vector<std::string> bad = {
      "",
      "airlock-seed",
      "airlock-seed " + kNonce,
      "airlock-seed " + kNonce + " ",
      "Airlock-seed " + kNonce + " " + envd::Base64Encode(std::string(64, 'e')),
      Line("0123456789abcde", 64),                // nonce too short
      Line(std::string(65, 'a'), 64),             // nonce too long
      Line("0123456789ABCDEF", 64),               // upper case
      Line("0123456789abcdeg", 64),               // not hex
      Line(kNonce, 15),                           // too little entropy
      Line(kNonce, 513),                          // too much
      "airlock-seed " + kNonce + " !!notbase64",  // not base64
      Line(kNonce, 64) + " extra",
      Line(kNonce, 64) + std::string(1024, 'A'),  // too long
  };
  for (const auto& l : bad) EXPECT_FALSE(ParseSeedLine(l).ok()) << l.substr(0, 120);
}

// The reader on a pty: valid lines are reseeded and answered with their
// nonce, noise and overlong lines are dropped, a line may come in pieces.
TEST(ConsoleSeedTest, ReaderAnswersValidLinesOnly) {
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  UniqueFd m(master);
  boost::asio::io_context io;
  std::vector<std::string> seeded, answers;
  ConsoleSeedReader reader(io, [&](std::string_view b) {
    seeded.emplace_back(b);
    return seeded.size() == 3 ? Internal("ioctl RNDRESEEDCRNG: Operation not permitted") : OkStatus();
  });
  // What the reader writes back on the slave comes out of the master.
  std::string out;
  auto read_answers = [&] {
    char buf[512];
    ssize_t n = ::read(m.get(), buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<size_t>(n));
    answers.clear();
    size_t start = 0;
    for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string l = out.substr(start, nl - start);
      if (!l.empty() && l.back() == '\r') l.pop_back();
      answers.push_back(l);
    }
  };
  ASSERT_TRUE(reader.StartFd(UniqueFd(slave)).ok());
  // Raw input on the slave, as Start() sets up a tty.
  termios t{};
  ASSERT_EQ(::tcgetattr(master, &t), 0);
  t.c_lflag &= ~(ECHO | ICANON | ISIG | IEXTEN);
  t.c_iflag &= ~(ICRNL);
  t.c_oflag &= ~(OPOST);
  ASSERT_EQ(::tcsetattr(master, TCSANOW, &t), 0);

  const std::string other = "fedcba9876543210fedcba9876543210";
  std::string input = "garbage\n" + std::string(2000, 'x') + "\n" + "\n" + Line(kNonce, 64) + "\n";
  input += "noise" + Line(other, 64) + "\n";  // a line with junk in front: dropped
  const std::string second = Line(other, 32) + "\n";
  const std::string third = Line(kNonce, 16) + "\n";
  auto write_all = [&](const std::string& s) {
    ASSERT_EQ(::write(m.get(), s.data(), s.size()), static_cast<ssize_t>(s.size()));
  };
  write_all(input);
  write_all(second.substr(0, 20));
  while (seeded.empty()) io.run_one();
  write_all(second.substr(20));
  write_all(third);
  while (seeded.size() < 3) io.run_one();
  while (answers.size() < 3) read_answers();
  ASSERT_EQ(seeded.size(), 3u);
  EXPECT_EQ(seeded[0], std::string(64, 'e'));
  EXPECT_EQ(seeded[1], std::string(32, 'e'));
  EXPECT_EQ(answers[0], std::string(kSeededMarker) + kNonce);
  EXPECT_EQ(answers[1], std::string(kSeededMarker) + other);
  EXPECT_EQ(answers[2].rfind(std::string(kSeedFailedMarker) + kNonce + ": ", 0), 0u) << answers[2];
}

}  // namespace
}  // namespace airlock::agent
