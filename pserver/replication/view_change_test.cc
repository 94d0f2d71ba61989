// The rules by which a view follows another (view_change.h).
#include "pserver/replication/view_change.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

constexpr ReplicaLayout kThree{/*self=*/0, /*num_servers=*/3,
                               /*replication=*/2};

View Initial() {
  View v;
  v.members = {0, 1, 2};
  return v;
}

TEST(ViewChangeTest, ARemovedPrimaryHandsItsShardToTheNextReplica) {
  absl::StatusOr<std::optional<View>> next =
      NextView(Initial(), MembershipChange{{1}, {}, {}}, kThree);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->number, 1);
  EXPECT_EQ((*next)->members, std::vector<int>({0, 2}));
  EXPECT_EQ((*next)->primaries, std::vector<int>({0, 2, 2}));
  // Nothing to do: the view has it already.
  next = NextView(**next, MembershipChange{{1}, {}, {}}, kThree);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
}

TEST(ViewChangeTest, AMemberThatJoinsAgainIsNoOnesPrimary) {
  absl::StatusOr<std::optional<View>> next =
      NextView(Initial(), MembershipChange{{}, {0}, {}}, kThree);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)->members, std::vector<int>({1, 2}));
  EXPECT_EQ((*next)->joining, std::vector<int>({0}));
  EXPECT_EQ((*next)->primaries, std::vector<int>({1, 1, 2}));
}

TEST(ViewChangeTest, RefusedOutsideTheViewOrWithoutACopyOfAShard) {
  View v = Initial();
  v.number = 4;
  v.members = {1, 2};
  v.primaries = {1, 1, 2};
  // Pserver 0 is out: it takes nobody out.
  absl::StatusOr<std::optional<View>> next =
      NextView(v, MembershipChange{{1}, {}, {}}, kThree);
  EXPECT_TRUE(absl::IsFailedPrecondition(next.status()));
  EXPECT_THAT(next.status().message(),
              HasSubstr("pserver 0 is not a member of view 4"));
  // Pserver 1 without 2: shard 2 (on 2 and 0) keeps no member.
  next = NextView(v, MembershipChange{{2}, {}, {}}, ReplicaLayout{1, 3, 2});
  EXPECT_TRUE(absl::IsFailedPrecondition(next.status()));
  EXPECT_THAT(next.status().message(),
              HasSubstr("would leave shard(s) {2} with no member"));
  // Joining pservers hold no copy yet: they do not count.
  v.joining = {0};
  next = NextView(v, MembershipChange{{2}, {}, {}}, ReplicaLayout{1, 3, 2});
  EXPECT_TRUE(absl::IsFailedPrecondition(next.status()));
}

}  // namespace
}  // namespace shardps
