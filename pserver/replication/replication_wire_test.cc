#include "pserver/replication/replication_wire.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(ReplicationWireTest, ViewsAndBallotsRoundTrip) {
  const View v{7, {0, 2, 5}, {1, 3}, {0, 2, 5, -1, 2, 5}};
  ViewMessage m;
  ToMessage(v, &m);
  auto back = FromMessage(m);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, v);
  BallotMessage b;
  ToMessage(Ballot{3, 1}, &b);
  EXPECT_EQ(FromMessage(b), (Ballot{3, 1}));
}

TEST(ReplicationWireTest, MalformedViewsAreRefused) {
  ViewMessage m;
  m.set_number(2);
  m.add_members(3);
  m.add_members(1);  // out of order
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(m).status()));
  m.clear_members();
  m.add_members(1);
  m.add_members(1);  // repeated
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(m).status()));
  m.clear_members();
  m.add_members(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(m).status()));
  m.clear_members();
  m.set_number(-4);
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(m).status()));
}

TEST(ReplicationWireTest, UpdatesRoundTripToTheBit) {
  AppliedUpdate u;
  u.table_id = 4;
  u.block = 2;
  u.step = 11;
  u.version = 10;
  u.sync = false;
  u.job_step = 9;
  u.keys = {5, 1ull << 63, 0};
  u.scales = {0.5f, 1.0f / 3, 1.0f};
  u.grad = {1.5f, -0.0f, 3e-39f, 7.0f, 8.0f, 9.0f};  // a denormal, -0
  u.evicted_full = {17, 3};
  u.expired = {1ull << 40};
  ReplicatedUpdate m;
  ToMessage(u, &m);
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  ReplicatedUpdate parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  auto back = FromMessage(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->table_id, u.table_id);
  EXPECT_EQ(back->block, u.block);
  EXPECT_EQ(back->step, u.step);
  EXPECT_EQ(back->version, u.version);
  EXPECT_EQ(back->sync, u.sync);
  EXPECT_EQ(back->job_step, u.job_step);
  EXPECT_EQ(back->keys, u.keys);
  EXPECT_EQ(back->scales, u.scales);
  EXPECT_EQ(back->evicted_full, u.evicted_full);
  EXPECT_EQ(back->expired, u.expired);
  ASSERT_EQ(back->grad.size(), u.grad.size());
  EXPECT_EQ(std::memcmp(back->grad.data(), u.grad.data(),
                        u.grad.size() * sizeof(float)),
            0);
  EXPECT_EQ(back->trust_ratio, 1.0f);  // none set: 1
  EXPECT_FALSE(m.has_trust_ratio());   // not on the wire
}

// A LARS step's trust ratio reaches the backup through the wire, 0
// included: norms far enough apart give a ratio that rounds to 0 in float,
// and the backup must apply the step with 0, as the primary did, not with
// "no ratio".
TEST(ReplicationWireTest, TheTrustRatioOfALarsStepRoundTrips) {
  for (float ratio : {0.0123f, 0.0f}) {
    AppliedUpdate u;
    u.scales = {0.5f};
    u.grad = {1, 2};
    u.trust_ratio = ratio;
    ReplicatedUpdate m;
    ToMessage(u, &m);
    ReplicatedUpdate parsed;
    ASSERT_TRUE(parsed.ParseFromString(m.SerializeAsString()));
    auto back = FromMessage(parsed);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->trust_ratio, ratio);
  }
}

TEST(ReplicationWireTest, MalformedUpdatesAreRefused) {
  ReplicatedUpdate m;
  m.add_scales(1.0f);
  m.set_grad(std::string(5, '\0'));  // not whole floats
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(m).status()));
  m.set_grad(std::string(8, '\0'));
  EXPECT_TRUE(FromMessage(m).ok());
  m.add_keys(3);
  m.add_keys(3);  // repeated key
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(m).status()));
  m.clear_keys();
  m.add_keys(3);
  m.add_keys(4);
  m.add_scales(1.0f);
  m.add_scales(1.0f);  // 3 scales for 2 keys
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(m).status()));
  m.clear_scales();  // none
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(m).status()));
  // Trust ratios: finite, >= 0, dense units only.
  ReplicatedUpdate d;
  d.add_scales(1.0f);
  for (float r : {-1.0f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    d.set_trust_ratio(r);
    EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(d).status())) << r;
  }
  d.set_trust_ratio(2.0f);
  EXPECT_TRUE(FromMessage(d).ok());
  d.add_keys(7);
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(d).status()));
}

}  // namespace
}  // namespace shardps
