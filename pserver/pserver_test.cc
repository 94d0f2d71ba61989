// The pserver without its transport: options checked, the newest
// checkpoint loaded at start, and a final checkpoint written at a stop.
#include "pserver/pserver.h"

#include <vector>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

TEST(PserverTest, BadOptionsAreRefused) {
  PserverOptions o;
  o.store.num_trainers = -1;
  EXPECT_EQ(Pserver::Create(o).status().message(),
            "--num_gradient_servers must be >= 0, got -1");
  o = PserverOptions();
  o.keep_checkpoints = 0;
  EXPECT_EQ(Pserver::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PserverTest, AFinalCheckpointAtStopIsLoadedAtTheNextStart) {
  testing::ScopedTempDir tmp("pserver_test");
  PserverOptions o;
  o.checkpoint_dir = tmp.Path("ckpt");
  const JobSpec job = testing::MakeJobSpec(
      SYNC, 1, {testing::DenseTableSpec("w", 2, 2, testing::Sgd(1.0f))});
  {
    auto ps = Pserver::Create(o);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ASSERT_TRUE((*ps)->Start().ok());  // nothing to load
    ParameterStore* store = (*ps)->store();
    ASSERT_TRUE(store->InitJob(job, {{0, 0}}).ok());
    const std::vector<float> w = {1, 2}, g = {1, 1};
    ASSERT_TRUE(store->SetInitialValues({{0, 0, w}}).ok());
    ASSERT_TRUE(store->CommitInit().ok());
    ASSERT_TRUE(store->Push(0, 0, {{0, 0, g}}).ok());
    (*ps)->Stop();  // at step boundary 1: a final checkpoint
  }
  auto again = Pserver::Create(o);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Start().ok());
  ParameterStore* store = (*again)->store();
  ASSERT_TRUE(store->ready());
  EXPECT_EQ(store->base_step(), 1);
  EXPECT_EQ(store->generation(), 1u);
  EXPECT_EQ(store->TEST_BlockValues(0, 0), (std::vector<float>{0, 1}));
}

}  // namespace
}  // namespace shardps
