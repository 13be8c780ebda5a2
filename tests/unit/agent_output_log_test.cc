// OutputLog (agent/output_log.h): offsets, interleaving, trimming and the
// out_of_range answers of a resume.
#include "agent/output_log.h"

#include <gtest/gtest.h>

namespace airlock::agent {
namespace {

using Out = envd::DataEvent::Stream;

std::string Joined(const std::vector<envd::DataEvent>& evs, Out s) {
  std::string out;
  for (const auto& e : evs) {
    if (e.stream == s) out += e.data;
  }
  return out;
}

TEST(OutputLog, OffsetsCountEveryByteOfEachStream) {
  OutputLog log;
  EXPECT_EQ(log.Append(Out::kStdout, "abc"), 0u);
  EXPECT_EQ(log.Append(Out::kStderr, "E1"), 0u);
  EXPECT_EQ(log.Append(Out::kStdout, "def"), 3u);
  EXPECT_EQ(log.Append(Out::kStdout, ""), 6u);
  EXPECT_EQ(log.End(), (envd::OutputOffsets{6, 2, 0}));
  EXPECT_EQ(log.HeldFrom(), (envd::OutputOffsets{0, 0, 0}));
}

TEST(OutputLog, SinceReplaysInReadOrderFromEachStreamsOffset) {
  OutputLog log;
  log.Append(Out::kStdout, "out1\n");
  log.Append(Out::kStderr, "err1\n");
  log.Append(Out::kStdout, "out2\n");
  auto all = log.Since({0, 0, 0});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);  // the order they were read in
  EXPECT_EQ((*all)[0].data, "out1\n");
  EXPECT_EQ((*all)[1].stream, Out::kStderr);
  EXPECT_EQ((*all)[2].offset, 5u);
  // From the middle of a piece: cut, with the offset of its first byte.
  auto mid = log.Since({6, 5, 0});
  ASSERT_TRUE(mid.ok());
  ASSERT_EQ(mid->size(), 1u);
  EXPECT_EQ((*mid)[0].data, "ut2\n");
  EXPECT_EQ((*mid)[0].offset, 6u);
  auto end = log.Since(log.End());
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->empty());
  auto past = log.Since({11, 0, 0});
  EXPECT_EQ(past.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(past.status().message().find("past the 10 bytes"), std::string::npos) << past.status().message();
}

TEST(OutputLog, TrimDropsTheOldestAndThenRefusesToResumeBeforeIt) {
  OutputLog log;
  const std::string piece(OutputLog::kCoalesce, 'x');
  for (int i = 0; i < 10; ++i) log.Append(i % 2 ? Out::kStderr : Out::kStdout, piece);
  const size_t held = log.Held();
  EXPECT_EQ(held, 10 * (piece.size() + OutputLog::kPieceOverhead));
  const size_t released = log.Trim(held - 1);  // one piece must go
  EXPECT_EQ(released, piece.size() + OutputLog::kPieceOverhead);
  EXPECT_EQ(log.HeldFrom(), (envd::OutputOffsets{piece.size(), 0, 0}));
  auto gone = log.Since({0, 0, 0});
  EXPECT_EQ(gone.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(gone.status().message().find("stdout before byte 32768 is no longer held"), std::string::npos)
      << gone.status().message();
  auto rest = log.Since(log.HeldFrom());
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(Joined(*rest, Out::kStdout).size(), 4 * piece.size());
  EXPECT_EQ(Joined(*rest, Out::kStderr).size(), 5 * piece.size());
  // Trimmed to nothing: every stream's held range starts at its end, and
  // output appended afterwards is held from there.
  log.Trim(0);
  EXPECT_EQ(log.Held(), 0u);
  EXPECT_EQ(log.HeldFrom(), log.End());
  EXPECT_EQ(log.Append(Out::kStdout, "later"), 5 * piece.size());
  auto later = log.Since(log.HeldFrom());
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(Joined(*later, Out::kStdout), "later");
}

TEST(OutputLog, OneByteWritesCoalesceAndCountTheirOverhead) {
  OutputLog log;
  for (int i = 0; i < 100000; ++i) log.Append(Out::kStdout, "x");
  // Pieces of kCoalesce bytes (3 full ones, shrunk to fit, and the rest),
  // not 100,000 one-byte strings; what is counted is what is allocated.
  EXPECT_GE(log.Held(), 100000 + 4 * OutputLog::kPieceOverhead);
  EXPECT_LE(log.Held(), 100000 + 4 * OutputLog::kPieceOverhead + 2048);
  // Alternating streams cannot coalesce: each piece pays its overhead.
  OutputLog alt;
  for (int i = 0; i < 1000; ++i) alt.Append(i % 2 ? Out::kStderr : Out::kStdout, "y");
  EXPECT_EQ(alt.Held(), 1000 * (std::string("y").capacity() + OutputLog::kPieceOverhead));
}

// A reader going a piece at a time keeps its place while pieces are dropped
// in front of it and the newest piece grows behind it.
TEST(OutputLog, NextFollowsAGrowingAndTrimmedLog) {
  OutputLog log;
  log.Append(Out::kStdout, "a1");
  log.Append(Out::kStderr, "b1");
  OutputLog::Cursor c;
  auto e1 = log.Next(&c);
  ASSERT_TRUE(e1.ok() && *e1);
  EXPECT_EQ((*e1)->data, "a1");
  auto e2 = log.Next(&c);
  ASSERT_TRUE(e2.ok() && *e2);
  EXPECT_EQ((*e2)->data, "b1");
  auto none = log.Next(&c);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  log.Append(Out::kStderr, "b2");  // coalesced into the piece the cursor is on
  auto e3 = log.Next(&c);
  ASSERT_TRUE(e3.ok() && *e3);
  EXPECT_EQ((*e3)->data, "b2");
  EXPECT_EQ((*e3)->offset, 2u);
  log.Append(Out::kStdout, "a2");
  log.Trim(log.Held() - 1);  // the first piece ("a1") goes; the reader is past it
  auto e4 = log.Next(&c);
  ASSERT_TRUE(e4.ok() && *e4);
  EXPECT_EQ((*e4)->data, "a2");
  EXPECT_EQ((*e4)->offset, 2u);
  // A reader still before a dropped piece is told so.
  OutputLog::Cursor behind;
  EXPECT_EQ(log.Next(&behind).status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(log.Check(log.HeldFrom()).ok());
}

}  // namespace
}  // namespace airlock::agent
