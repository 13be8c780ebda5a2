// The names SnapshotDirs builds paths from (core/snapshot_dirs.h): a
// tenant's snapshot name or id, a tenant's checkpoint id, and the entries of
// snapshots/checkpoints/. Whatever a caller sends must never name a path
// outside its directory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/snapshot_dirs.h"

namespace airlock {
namespace {

TEST(SnapshotNames, OnlyPlainNamesOfBoundedLength) {
  for (const char* ok : {"a", "my-snap_1.0", "team:snap", "snap-0123456789abcdef", "..a", "a.."})
    EXPECT_TRUE(ValidSnapshotName(ok)) << ok;
  EXPECT_TRUE(ValidSnapshotName(std::string(128, 'x')));
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "../x", "a/b", "/etc", "a\\b", "a b", "a\nb",
                                                          std::string("a\0b", 3), std::string(129, 'x'), "<script>",
                                                          "%2e%2e", "snap\xc3\xa9"})
    EXPECT_FALSE(ValidSnapshotName(bad)) << bad;
}

TEST(CheckpointIds, ExactlyCkptAndSixteenLowercaseHex) {
  EXPECT_TRUE(ValidCheckpointId("ckpt-0123456789abcdef"));
  for (const char* bad : {"", "ckpt-", "ckpt-0123456789ABCDEF", "ckpt-0123456789abcde", "ckpt-0123456789abcdef0",
                          "ckpt-../../etc/passwd", "ckpt-0123456789abcde/", "snap-0123456789abcdef",
                          "../../etc", "ckpt-0123456789abcdeg"})
    EXPECT_FALSE(ValidCheckpointId(bad)) << bad;
}

TEST(CheckpointIds, EntriesParseIntoSandboxAndCheckpoint) {
  std::string sandbox, checkpoint;
  bool tmp = true;
  ASSERT_TRUE(ParseCheckpointEntry("abc-ckpt-0123456789abcdef", &sandbox, &checkpoint, &tmp));
  EXPECT_EQ(sandbox, "abc");
  EXPECT_EQ(checkpoint, "ckpt-0123456789abcdef");
  EXPECT_FALSE(tmp);
  ASSERT_TRUE(ParseCheckpointEntry("a-b-ckpt-0123456789abcdef.tmp", &sandbox, &checkpoint, &tmp));
  EXPECT_EQ(sandbox, "a-b");
  EXPECT_TRUE(tmp);
  // No sandbox, no valid id, or anything else in the directory: not a checkpoint.
  for (const char* bad : {"ckpt-0123456789abcdef", "-ckpt-0123456789abcdef", "abc-ckpt-xyz", "abc", "abc.tmp",
                          "abc-ckpt-0123456789abcdef.tmp.tmp", "abc-ckpt-0123456789abcdef.owner"})
    EXPECT_FALSE(ParseCheckpointEntry(bad, &sandbox, &checkpoint, &tmp)) << bad;
}

TEST(ForkOwnerFile, BesideTheForkDirectory) {
  EXPECT_EQ(ForkOwnerFile("/s/snapshots/forks/p-1a2b"), "/s/snapshots/forks/p-1a2b.owner");
}

}  // namespace
}  // namespace airlock
