// Incremental checkpoints: deltas hold what changed since the checkpoint
// before; a chain (full, then deltas) restores the store exactly; damage
// stops the chain at the link before it; retention keeps whole chains.
#include <string>
#include <vector>

#include "common/storage/checkpoint.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/checkpoint/recovery.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/store/sparse/sparse_table.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::GetState;
using ::testing::HasSubstr;
using testing::NewStore;
using testing::Options;
using testing::RunStep;
using testing::State;

class DeltaTest : public ::testing::Test {
 protected:
  // Saves step `step` through the checkpointer and waits for it.
  void Save(int64_t step) {
    absl::Status previous;
    ASSERT_TRUE(StoreSnapshots(store_.get())
                    .SaveTo(&checkpointer_, step, &previous)
                    .ok());
    ASSERT_TRUE(checkpointer_.Flush().ok());
    states_.push_back(GetState(store_.get()));
  }

  State Restored(int64_t step) {
    auto chain = checkpointer_.LoadChain(step);
    EXPECT_TRUE(chain.ok()) << chain.status();
    if (!chain.ok()) return State();
    std::vector<const StoreSnapshot*> links;
    for (const StoreSnapshot& s : *chain) links.push_back(&s);
    ParameterStore fresh(Options());
    EXPECT_TRUE(StoreSnapshots(&fresh).RestoreChain(links, 1).ok());
    return GetState(&fresh);
  }

  int64_t Bytes(int64_t step) {
    auto h =
        CheckpointReader(Env::Default(), checkpointer_.dir()).LoadHeader(step);
    EXPECT_TRUE(h.ok());
    return h.ok() ? h->bytes : -1;
  }

  testing::ScopedTempDir tmp_{"delta"};
  std::unique_ptr<ParameterStore> store_ = NewStore();
  Checkpointer checkpointer_{Env::Default(), tmp_.Path("ckpt"), /*keep=*/1,
                             /*full_every=*/3};
  std::vector<State> states_;
};

TEST_F(DeltaTest, AChainRestoresEachStepExactly) {
  for (int64_t step = 0; step < 6; ++step) {
    ASSERT_TRUE(RunStep(store_.get(), step).ok());
    Save(step + 1);  // 1 full, 2 and 3 deltas, 4 full, 5 and 6 deltas
  }
  auto chain = checkpointer_.LoadChain(6);
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_EQ(chain->size(), 3u);
  EXPECT_FALSE((*chain)[0].info.delta());
  EXPECT_EQ((*chain)[0].info.step(), 4);
  EXPECT_TRUE((*chain)[2].info.delta());
  EXPECT_EQ((*chain)[2].info.delta_base(), 5);
  EXPECT_EQ(Restored(4), states_[3]);
  EXPECT_EQ(Restored(5), states_[4]);
  EXPECT_EQ(Restored(6), states_[5]);
  // keep=1: the first chain (1, 2, 3) went when 4 was written.
  EXPECT_EQ(*checkpointer_.Steps(), (std::vector<int64_t>{4, 5, 6}));
  // Every step here changes every unit; SparseDeltasTest below checks
  // that a delta holds the changed keys only.
  EXPECT_GT(Bytes(5), 0);
  // Training on from a restored chain gives the same values.
  auto again = checkpointer_.LoadChain(6);
  std::vector<const StoreSnapshot*> links;
  for (const StoreSnapshot& s : *again) links.push_back(&s);
  ParameterStore fresh(Options());
  ASSERT_TRUE(StoreSnapshots(&fresh).RestoreChain(links, 1).ok());
  for (int64_t step = 6; step < 9; ++step) {
    ASSERT_TRUE(RunStep(store_.get(), step).ok());
    ASSERT_TRUE(RunStep(&fresh, step, 1).ok());
  }
  EXPECT_EQ(GetState(&fresh), GetState(store_.get()));
}

TEST_F(DeltaTest, ADamagedDeltaStopsTheChainAtTheOneBefore) {
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(RunStep(store_.get(), step).ok());
    Save(step + 1);
  }
  // Flip a byte of step 2's sparse blob.
  const std::string blob = JoinPath(
      JoinPath(checkpointer_.dir(), CheckpointDirName(2)), "table-2.bin");
  std::string bytes = testing::ReadFileOrFail(Env::Default(), blob);
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_TRUE(testing::WriteStringToFile(Env::Default(), blob, bytes).ok());
  auto chain = checkpointer_.LoadChain(3);
  EXPECT_EQ(chain.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(chain.status().message(),
              HasSubstr("the checkpoint of step 3 is a delta on step 2, "
                        "which does not load"));
  auto newest = checkpointer_.LoadNewestChain();
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(newest->back().info.step(), 1);
  // At start the pserver takes step 1 and sets 2 and 3 aside.
  ParameterStore fresh(Options());
  auto step = RecoverFromCheckpoint(&checkpointer_, &fresh, RecoveryTarget{});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 1);
  EXPECT_EQ(GetState(&fresh), states_[0]);
  EXPECT_EQ(*checkpointer_.Steps(), (std::vector<int64_t>{1}));
}

TEST_F(DeltaTest, AFailedWriteMakesTheNextOneFull) {
  ASSERT_TRUE(RunStep(store_.get(), 0).ok());
  Save(1);
  ASSERT_TRUE(RunStep(store_.get(), 1).ok());
  Save(2);
  auto two = checkpointer_.Load(2);
  ASSERT_TRUE(two.ok());
  EXPECT_TRUE(two->info.delta());
  // A rollback (or restore) forgets the base: the next save is full.
  checkpointer_.ForceFull();
  ASSERT_TRUE(RunStep(store_.get(), 2).ok());
  Save(3);
  auto three = checkpointer_.Load(3);
  ASSERT_TRUE(three.ok());
  EXPECT_FALSE(three->info.delta());
}

TEST_F(DeltaTest, ADeltaOnAnotherCheckpointOfItsBaseStepIsRefused) {
  ASSERT_TRUE(RunStep(store_.get(), 0).ok());
  Save(1);
  ASSERT_TRUE(RunStep(store_.get(), 1).ok());
  Save(2);
  ASSERT_TRUE(checkpointer_.LoadChain(2).ok());
  // Step 1 written again from another store (a checkpoint renamed back, a
  // timeline written anew): step 2 no longer builds on it.
  auto other = NewStore();
  ASSERT_TRUE(RunStep(other.get(), 0).ok());
  auto snap = StoreSnapshots(other.get()).Snapshot(1);
  ASSERT_TRUE(snap.ok());
  snap->info.set_generation(9);
  ASSERT_TRUE(checkpointer_.Save(std::move(*snap)).ok());
  ASSERT_TRUE(checkpointer_.Flush().ok());
  auto chain = checkpointer_.LoadChain(2);
  EXPECT_EQ(chain.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(chain.status().message(),
              HasSubstr("is not the one it was built on"));
}

// A sink whose save must not fail (no disk tier here).
struct NeverFails : SaveSink {
  void Fail(uint32_t, const absl::Status& why) override {
    ADD_FAILURE() << why;
  }
};

TEST(SparseDeltasTest, EvictedRowsAndForgottenSightingsAreRemoved) {
  SparseTableOptions o;
  o.set_dim(2);
  o.set_admit_after(2);
  o.set_evict_after_steps(2);
  OptimizerConfig c;
  c.set_type(OptimizerConfig::SGD);
  c.set_learning_rate(1);
  auto opt = Optimizer::Create(c, 0);
  ASSERT_TRUE(opt.ok());
  SparseTable table(o, opt->get(), 4), copy(o, opt->get(), 4);
  table.TrackChanges(true);
  const std::vector<float> g = {1, 1, 1, 1};
  table.Apply(0, std::vector<uint64_t>{1, 2}, g, {1.0f});  // sightings
  table.Apply(0, std::vector<uint64_t>{1, 2}, g, {1.0f});  // rows
  table.Apply(1, std::vector<uint64_t>{3}, std::vector<float>{1, 1}, {1.0f});
  std::string full;
  EXPECT_TRUE(table.Serialize(&full).ok());
  ASSERT_TRUE(copy.Deserialize(full).ok());
  // Changes since: key 1 updated, key 2 evicted, sighting 3 forgotten,
  // key 4 sighted.
  struct Clear : NeverFails {
    void Append(uint32_t, absl::string_view) override {}
  } clear;
  table.MarkForSave(&clear, 0);  // the full save: changes start from here
  std::string ignored;
  table.SaveRemaining();
  table.Apply(5, std::vector<uint64_t>{1}, std::vector<float>{2, 2}, {1.0f});
  EXPECT_EQ(table.Expire(4), 1);  // key 2 (last at 0); sighting 3 (at 1)
  table.Apply(5, std::vector<uint64_t>{4}, std::vector<float>{1, 1}, {1.0f});
  struct Keep : NeverFails {
    std::string bytes;
    void Append(uint32_t, absl::string_view r) override {
      bytes.append(r.data(), r.size());
    }
  } delta;
  delta.bytes = SparseDeltas::Header(table);
  table.MarkForSave(&delta, 0, /*delta=*/true);
  table.SaveRemaining();
  ASSERT_TRUE(SparseDeltas::Verify(copy, delta.bytes).ok());
  ASSERT_TRUE(SparseDeltas::Apply(&copy, delta.bytes).ok());
  std::string a, b;
  EXPECT_TRUE(table.Serialize(&a).ok());
  SparseTable check(o, opt->get(), 4);
  ASSERT_TRUE(check.Deserialize(a).ok());
  EXPECT_EQ(copy.counters().rows, table.counters().rows);
  EXPECT_EQ(copy.counters().pending_keys, table.counters().pending_keys);
  std::vector<uint64_t> keys = {1, 2, 3, 4};
  std::vector<float> got(8), want(8);
  copy.Read(keys, got.data());
  table.Read(keys, want.data());
  EXPECT_EQ(got, want);
  // A damaged delta is refused before anything changes.
  std::string bad = delta.bytes;
  bad.pop_back();
  EXPECT_EQ(SparseDeltas::Verify(copy, bad).code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shardps
