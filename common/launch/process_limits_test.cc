#include "common/launch/process_limits.h"

#include <sys/resource.h>

#include "gtest/gtest.h"

namespace shardps {
namespace {

// The soft limit lowered to 256 (as a launcher might leave it) comes back
// up to the hard limit, and the message says both.
TEST(ProcessLimitsTest, RaisesTheOpenFileLimitToTheHardLimit) {
  struct rlimit r;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max <= 256) {
    GTEST_SKIP() << "hard limit " << r.rlim_max << " leaves nothing to raise";
  }
  struct rlimit low = r;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const OpenFileLimit l = RaiseOpenFileLimit();
  EXPECT_TRUE(l.error.empty()) << l.error;
  EXPECT_EQ(l.before, 256u);
  EXPECT_EQ(l.now, l.hard);
  struct rlimit after;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(after.rlim_cur, r.rlim_max);
  EXPECT_EQ(DescribeOpenFileLimit(l).rfind("open files: 256 -> ", 0), 0u)
      << DescribeOpenFileLimit(l);
  // Called again, there is nothing left to raise.
  EXPECT_EQ(
      DescribeOpenFileLimit(RaiseOpenFileLimit()).find("(the hard limit)") !=
          std::string::npos,
      true);
}

}  // namespace
}  // namespace shardps
