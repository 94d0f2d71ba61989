#include "pserver/service/request_dedup.h"

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(RequestDedupTest, DuplicateGetsFirstAnswer) {
  RequestDedup d;
  absl::Status first;
  EXPECT_EQ(d.Begin(7, &first), RequestDedup::Outcome::kNew);
  EXPECT_EQ(d.Begin(7, &first), RequestDedup::Outcome::kInFlight);
  d.Finish(7, absl::InvalidArgumentError("bad"));
  EXPECT_EQ(d.Begin(7, &first), RequestDedup::Outcome::kDone);
  EXPECT_EQ(first.code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequestDedupTest, BoundedForgetsOldest) {
  RequestDedup d(/*capacity=*/4);
  absl::Status first;
  for (uint64_t id = 1; id <= 10; ++id) {
    ASSERT_EQ(d.Begin(id, &first), RequestDedup::Outcome::kNew);
    d.Finish(id, absl::OkStatus());
  }
  EXPECT_LE(d.size(), 5u);
  EXPECT_EQ(d.Begin(10, &first), RequestDedup::Outcome::kDone);
  EXPECT_EQ(d.Begin(1, &first), RequestDedup::Outcome::kNew);
}

}  // namespace
}  // namespace shardps
