#include "common/shared_memory/shared_region.h"

#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(SharedRegionTest, AttachSeesWhatTheCreatorWrites) {
  auto owner = SharedRegion::Create(4096);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ((*owner)->token().size(), SharedRegion::kTokenBytes);
  auto peer =
      SharedRegion::Attach(getpid(), (*owner)->fd(), 4096, (*owner)->token());
  ASSERT_TRUE(peer.ok()) << peer.status();
  const float x = 2.5f;
  std::memcpy((*peer)->data() + 64, &x, sizeof(x));
  float y = 0;
  std::memcpy(&y, (*owner)->data() + 64, sizeof(y));
  EXPECT_EQ(y, 2.5f);
}

TEST(SharedRegionTest, ThePeerCannotResizeIt) {
  // A trainer that shrank the region would make the pserver's next access
  // fault (SIGBUS): the seals refuse it.
  auto owner = SharedRegion::Create(8192);
  ASSERT_TRUE(owner.ok());
  auto peer =
      SharedRegion::Attach(getpid(), (*owner)->fd(), 8192, (*owner)->token());
  ASSERT_TRUE(peer.ok());
  EXPECT_NE(ftruncate((*peer)->fd(), 64), 0);
  EXPECT_NE(ftruncate((*peer)->fd(), 1 << 20), 0);
  (*owner)->data()[8191] = 1;  // still mapped and backed
}

TEST(SharedRegionTest, WrongRegionsAreRefused) {
  auto owner = SharedRegion::Create(4096);
  ASSERT_TRUE(owner.ok());
  const std::string token = (*owner)->token();
  std::string other = token;
  other[3] ^= 1;
  EXPECT_EQ(SharedRegion::Attach(getpid(), (*owner)->fd(), 4096, other)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SharedRegion::Attach(getpid(), (*owner)->fd(), 8192, token)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      SharedRegion::Attach(getpid(), 1 << 20, 4096, token).status().code(),
      absl::StatusCode::kUnavailable);
  EXPECT_EQ(SharedRegion::Attach(getpid(), (*owner)->fd(), 4096, "short")
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SharedRegion::Create(64).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedRegionTest, CheckKeepsOffsetsInsideAndAligned) {
  auto r = SharedRegion::Create(1024);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->Check(64, 960, "x").ok());
  EXPECT_TRUE((*r)->Check(1020, 4, "x").ok());
  EXPECT_TRUE((*r)->Check(1024, 0, "x").ok());
  EXPECT_FALSE((*r)->Check(0, 4, "x").ok());     // the header
  EXPECT_FALSE((*r)->Check(60, 8, "x").ok());    // into the header
  EXPECT_FALSE((*r)->Check(66, 4, "x").ok());    // misaligned
  EXPECT_FALSE((*r)->Check(1020, 8, "x").ok());  // past the end
  EXPECT_FALSE((*r)->Check(2048, 0, "x").ok());
  EXPECT_EQ((*r)->Check(64, ~uint64_t{0} - 10, "x").code(),
            absl::StatusCode::kInvalidArgument);  // no wrap-around
}

}  // namespace
}  // namespace shardps
