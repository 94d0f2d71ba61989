// The recovery planner: from the pservers' statuses to adopt or roll back,
// and to which step and generation.
#include "trainer/core/recovery_planner.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

GetStatusResponse Status(uint64_t generation, int64_t base_step,
                         int64_t min_version, int64_t max_version,
                         std::vector<int64_t> checkpoints) {
  GetStatusResponse r;
  r.set_job_ready(true);
  r.set_generation(generation);
  r.set_base_step(base_step);
  r.set_min_version(min_version);
  r.set_max_version(max_version);
  for (int64_t c : checkpoints) r.add_checkpoint_steps(c);
  return r;
}

const std::vector<std::string> kAddresses = {"a:1", "b:2"};

TEST(RecoveryPlannerTest, AgreeingPserversAreAdopted) {
  // Versions one step apart: a step in the middle of being applied.
  auto plan = PlanRecovery(
      {Status(3, 20, 41, 42, {30, 40}), Status(3, 20, 42, 42, {30, 40})},
      kAddresses);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->action, RecoveryPlan::Action::kAdopt);
  EXPECT_EQ(plan->generation, 3u);
}

TEST(RecoveryPlannerTest, RestartedPserverMeansRollbackToNewestCommon) {
  // b restarted from its checkpoint of step 40 as generation 1; a ran on.
  auto plan = PlanRecovery(
      {Status(0, 0, 47, 47, {30, 40}), Status(1, 40, 40, 40, {30, 40})},
      kAddresses);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->action, RecoveryPlan::Action::kRollback);
  EXPECT_EQ(plan->step, 40);
  // b stands at step 40 on the newest generation already: reused.
  EXPECT_EQ(plan->generation, 1u);
  EXPECT_NE(plan->where.find("a:1 generation 0 from step 0 at versions 47-47"),
            std::string::npos)
      << plan->where;
  EXPECT_NE(plan->where.find("checkpoints [30,40]"), std::string::npos);
}

TEST(RecoveryPlannerTest, NewestGenerationElsewhereMeansANewOne) {
  // b restarted from step 30 (its checkpoint of 40 was damaged) as
  // generation 2; the common step is 30, where b stands, but a is on
  // generation 1 from step 10, so no pserver on generation 2 is elsewhere:
  // reuse 2. With a on generation 2 from another step, a new one: 3.
  auto reuse = PlanRecovery(
      {Status(1, 10, 45, 45, {30, 40}), Status(2, 30, 30, 30, {30})},
      kAddresses);
  ASSERT_TRUE(reuse.ok()) << reuse.status();
  EXPECT_EQ(reuse->step, 30);
  EXPECT_EQ(reuse->generation, 2u);
  auto fresh = PlanRecovery(
      {Status(2, 10, 45, 45, {30, 40}), Status(2, 30, 30, 30, {30})},
      kAddresses);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->action, RecoveryPlan::Action::kRollback);
  EXPECT_EQ(fresh->step, 30);
  EXPECT_EQ(fresh->generation, 3u);
}

TEST(RecoveryPlannerTest, SameTimelineWithVersionsApartGetsANewGeneration) {
  // One pserver lost its state without a new timeline: never reuse.
  auto plan = PlanRecovery(
      {Status(4, 0, 50, 50, {20, 40}), Status(4, 0, 0, 0, {20, 40})},
      kAddresses);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->action, RecoveryPlan::Action::kRollback);
  EXPECT_EQ(plan->step, 40);
  EXPECT_EQ(plan->generation, 5u);
}

TEST(RecoveryPlannerTest, NoCommonCheckpointIsFailedPrecondition) {
  auto plan = PlanRecovery(
      {Status(0, 0, 50, 50, {40}), Status(1, 30, 30, 30, {30})}, kAddresses);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("no checkpoint step in common"),
            std::string::npos)
      << plan.status();
  EXPECT_NE(plan.status().message().find("b:2 generation 1"), std::string::npos)
      << plan.status();
}

}  // namespace
}  // namespace shardps
