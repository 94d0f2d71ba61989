#include "pserver/store/memory/memory_budget.h"

#include <string>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(MemoryBudgetTest, AJobsBudgetBoundsItAndCountsInThePserversToo) {
  MemoryBudget pserver(100);
  MemoryBudget a(60, &pserver), b(60, &pserver);
  EXPECT_TRUE(a.TryReserve(50));
  EXPECT_EQ(pserver.used(), 50);
  // Past the job's own limit, though the pserver has room.
  EXPECT_FALSE(a.TryReserve(20));
  EXPECT_EQ(a.BoundFor(20).flag, std::string("--max_memory_mb_per_job"));
  EXPECT_EQ(a.BoundFor(20).limit, 60);
  EXPECT_EQ(a.used(), 50);
  // Within b's own limit, past the pserver's: nothing is kept.
  EXPECT_FALSE(b.TryReserve(55));
  EXPECT_EQ(b.used(), 0);
  EXPECT_EQ(pserver.used(), 50);
  const MemoryBudget::Bound bound = b.BoundFor(55);
  EXPECT_EQ(bound.flag, std::string("--max_memory_mb"));
  EXPECT_EQ(bound.limit, 100);
  EXPECT_EQ(bound.used, 50);
  EXPECT_TRUE(b.TryReserve(50));
  EXPECT_FALSE(b.Fits(1));
  a.Release(50);
  EXPECT_TRUE(b.Fits(1));
  b.Add(5);  // counted whatever the limits
  EXPECT_EQ(pserver.used(), 55);
  EXPECT_EQ(b.used(), 55);
}

TEST(MemoryBudgetTest, AJobWithoutALimitOfItsOwnHasThePserversHeadroom) {
  MemoryBudget pserver(800);
  MemoryBudget job(0, &pserver);
  EXPECT_EQ(job.headroom(), 0);
  // keep_free > 0 keeps the pserver's own eighth free.
  EXPECT_FALSE(job.TryReserve(750, 1));
  EXPECT_TRUE(job.TryReserve(700, 1));
  EXPECT_EQ(pserver.used(), 700);
}

}  // namespace
}  // namespace shardps
