#include "pserver/store/parameter_store.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/synchronization/notification.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

// Table "w": 10 values in blocks of 4 (sizes 4, 4, 2); table "b": 3 values.
JobSpec MakeJob(TrainingMode mode, int trainers, int max_staleness = -1) {
  testing::JobOptions o;
  o.max_staleness = max_staleness;
  return testing::MakeJobSpec(
      mode, trainers,
      {testing::DenseTableSpec("w", 10, 4, testing::Sgd(1.0f)),
       testing::DenseTableSpec("b", 3, 4, testing::Sgd(1.0f))},
      o);
}

const std::vector<BlockId> kAllBlocks = {{0, 0}, {0, 1}, {0, 2}, {1, 0}};

using testing::PullResult;

class ParameterStoreTest : public ::testing::Test {
 protected:
  void Init(TrainingMode mode, int trainers, int max_staleness = -1) {
    StoreOptions options;
    options.max_pull_wait = absl::Seconds(10);
    options.clock = &clock_;
    store_ = std::make_unique<ParameterStore>(options);
    ASSERT_TRUE(
        store_->InitJob(MakeJob(mode, trainers, max_staleness), kAllBlocks)
            .ok());
    init_ = {std::vector<float>{1, 2, 3, 4}, std::vector<float>{5, 6, 7, 8},
             std::vector<float>{9, 10}, std::vector<float>{0, 0, 0}};
    std::vector<BlockData> data;
    for (size_t i = 0; i < kAllBlocks.size(); ++i) {
      data.push_back({kAllBlocks[i].table_id, kAllBlocks[i].block, init_[i]});
    }
    ASSERT_TRUE(store_->SetInitialValues(data).ok());
    ASSERT_TRUE(store_->CommitInit().ok());
  }

  std::vector<std::vector<float>> Snapshot() {
    std::vector<std::vector<float>> out;
    for (const BlockId& id : kAllBlocks) {
      out.push_back(store_->TEST_BlockValues(id.table_id, id.block));
    }
    return out;
  }
  std::vector<int64_t> Versions() {
    std::vector<int64_t> out;
    for (const BlockId& id : kAllBlocks) {
      out.push_back(store_->TEST_BlockVersion(id.table_id, id.block));
    }
    return out;
  }

  absl::Status PushW0(int trainer, int64_t step, std::vector<float> g) {
    std::vector<BlockData> d = {{0, 0, g}};
    return store_->Push(trainer, step, d);
  }

  std::unique_ptr<PullResult> StartPull(int trainer, int64_t min_version,
                                        int64_t step,
                                        std::vector<BlockId> blocks,
                                        int64_t min_clock = 0) {
    testing::PullArgs a;
    a.trainer = trainer;
    a.min_version = min_version;
    a.step = step;
    a.min_clock = min_clock;
    return testing::StartPull(store_.get(), a, std::move(blocks));
  }

  // Expects `s` to have `code`, and no parameter or version to have moved.
  void ExpectRefusedUnchanged(const absl::Status& s, absl::StatusCode code,
                              const std::string& needle) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
    EXPECT_EQ(Snapshot(), init_);
    EXPECT_EQ(Versions(), std::vector<int64_t>(4, 0));
  }

  FakeClock clock_;
  std::unique_ptr<ParameterStore> store_;
  std::vector<std::vector<float>> init_;
};

TEST_F(ParameterStoreTest, SyncAppliesMeanOnceEveryTrainerPushed) {
  Init(SYNC, 2);
  ASSERT_TRUE(PushW0(0, 0, {2, 2, 2, 2}).ok());
  EXPECT_EQ(store_->TEST_BlockValues(0, 0), init_[0]);  // waits for trainer 1
  EXPECT_EQ(store_->TEST_BlockVersion(0, 0), 0);
  ASSERT_TRUE(PushW0(1, 0, {4, 0, 0, 2}).ok());
  EXPECT_EQ(store_->TEST_BlockValues(0, 0), (std::vector<float>{-2, 1, 2, 2}));
  EXPECT_EQ(store_->TEST_BlockVersion(0, 0), 1);
}

TEST_F(ParameterStoreTest, AStepThatWouldOverflowIsNotAppliedAndTheJobGoesOn) {
  // Gradients in bounds (each below 3.4e38 / trainers) drive value 0 of
  // block w0 to -3e38 in two steps; the third would make it -inf, so none
  // of the block's values moves, and the step goes on.
  Init(SYNC, 2);
  const std::vector<float> g = {1.5e38f, 1, 1, 1};
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(PushW0(0, step, g).ok());
    ASSERT_TRUE(PushW0(1, step, g).ok());
    EXPECT_EQ(store_->TEST_BlockVersion(0, 0), step + 1);
  }
  const std::vector<float> after_two = store_->TEST_BlockValues(0, 0);
  EXPECT_FLOAT_EQ(after_two[0], 1 - 3e38f);
  EXPECT_EQ(std::vector<float>(after_two.begin() + 1, after_two.end()),
            (std::vector<float>{0, 1, 2}));
  int64_t refused = -1;
  for (const TableProgress& t : store_->Progress()) {
    if (t.name == "w") refused = t.non_finite_updates;
  }
  EXPECT_EQ(refused, 1);
  // A step within range applies again.
  ASSERT_TRUE(PushW0(0, 3, {-1, 1, 1, 1}).ok());
  ASSERT_TRUE(PushW0(1, 3, {-1, 1, 1, 1}).ok());
  EXPECT_EQ(store_->TEST_BlockValues(0, 0)[1], -1);
}

TEST_F(ParameterStoreTest, SyncRepeatedPushIsIgnored) {
  Init(SYNC, 2);
  ASSERT_TRUE(PushW0(0, 0, {2, 2, 2, 2}).ok());
  ASSERT_TRUE(PushW0(0, 0, {100, 100, 100, 100}).ok());
  ASSERT_TRUE(PushW0(1, 0, {0, 0, 0, 0}).ok());
  EXPECT_EQ(store_->TEST_BlockValues(0, 0), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(store_->counters().duplicate_block_pushes, 1);
}

TEST_F(ParameterStoreTest, SyncPushForAppliedOrFutureStepRefused) {
  Init(SYNC, 1);
  ASSERT_TRUE(PushW0(0, 0, {1, 1, 1, 1}).ok());
  const auto after = store_->TEST_BlockValues(0, 0);
  absl::Status s = PushW0(0, 0, {1, 1, 1, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("already applied"), std::string::npos) << s;
  s = PushW0(0, 5, {1, 1, 1, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("still at step 1"), std::string::npos) << s;
  EXPECT_EQ(store_->TEST_BlockValues(0, 0), after);
}

TEST_F(ParameterStoreTest, WrongStepInMultiBlockPushChangesNothing) {
  Init(SYNC, 1);
  std::vector<float> g4 = {1, 1, 1, 1}, g2 = {1, 1};
  // Advance block (0, 2) only, then push step 0 for (0, 0) and (0, 2).
  std::vector<BlockData> one = {{0, 2, g2}};
  ASSERT_TRUE(store_->Push(0, 0, one).ok());
  const auto before = Snapshot();
  std::vector<BlockData> two = {{0, 0, g4}, {0, 2, g2}};
  EXPECT_EQ(store_->Push(0, 0, two).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(ParameterStoreTest, BadRequestsAreRefusedAndChangeNothing) {
  Init(SYNC, 2);
  std::vector<float> g4 = {1, 1, 1, 1}, g3 = {1, 1, 1};
  std::vector<float> nan4 = {1, std::nanf(""), 1, 1};
  std::vector<float> inf4 = {1, 1, std::numeric_limits<float>::infinity(), 1};
  {
    std::vector<BlockData> d = {{0, 0, g4}, {7, 0, g4}};
    ExpectRefusedUnchanged(store_->Push(0, 0, d), absl::StatusCode::kNotFound,
                           "unknown table id 7");
  }
  {
    std::vector<BlockData> d = {{0, 0, g4}, {0, 9, g4}};
    ExpectRefusedUnchanged(store_->Push(0, 0, d), absl::StatusCode::kNotFound,
                           "block 9 is not held");
  }
  {
    std::vector<BlockData> d = {{0, 0, g4}, {0, 1, g3}};
    ExpectRefusedUnchanged(store_->Push(0, 0, d),
                           absl::StatusCode::kInvalidArgument,
                           "gradient has 3 values, the block has 4");
  }
  {
    std::vector<BlockData> d = {{0, 0, g4}, {0, 1, nan4}};
    ExpectRefusedUnchanged(store_->Push(0, 0, d),
                           absl::StatusCode::kInvalidArgument, "is NaN");
  }
  {
    std::vector<BlockData> d = {{0, 1, inf4}};
    ExpectRefusedUnchanged(store_->Push(0, 0, d),
                           absl::StatusCode::kInvalidArgument, "is Inf");
  }
  {
    std::vector<BlockData> d = {{0, 0, g4}};
    ExpectRefusedUnchanged(store_->Push(2, 0, d),
                           absl::StatusCode::kInvalidArgument,
                           "trainer_id 2 is out of range");
    ExpectRefusedUnchanged(store_->Push(-1, 0, d),
                           absl::StatusCode::kInvalidArgument,
                           "trainer_id -1 is out of range");
    ExpectRefusedUnchanged(store_->Push(0, -3, d),
                           absl::StatusCode::kInvalidArgument, "negative step");
  }
  {
    std::vector<BlockData> d = {{0, 0, g4}, {0, 0, g4}};
    ExpectRefusedUnchanged(store_->Push(0, 0, d),
                           absl::StatusCode::kInvalidArgument, "appears twice");
  }
  EXPECT_EQ(store_->counters().rejected_requests, 9);
}

TEST_F(ParameterStoreTest, PushBeforeInitIsFailedPrecondition) {
  ParameterStore store{StoreOptions{}};
  std::vector<float> g = {1};
  std::vector<BlockData> d = {{0, 0, g}};
  absl::Status s = store.Push(0, 0, d);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not initialised"), std::string::npos);
  ASSERT_TRUE(store.InitJob(MakeJob(SYNC, 1), kAllBlocks).ok());
  EXPECT_EQ(store.Push(0, 0, d).code(), absl::StatusCode::kFailedPrecondition);
  s = store.CommitInit();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("no initial value"), std::string::npos);
}

TEST_F(ParameterStoreTest, InitJobSameSpecIsNoOpDifferentSpecRefused) {
  Init(SYNC, 2);
  auto again = store_->InitJob(MakeJob(SYNC, 2), kAllBlocks);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again);  // already ready
  auto other = store_->InitJob(MakeJob(ASYNC, 2), kAllBlocks);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  // Values sent after the job is ready are ignored.
  std::vector<float> v = {9, 9, 9, 9};
  std::vector<BlockData> d = {{0, 0, v}};
  EXPECT_TRUE(store_->SetInitialValues(d).ok());
  EXPECT_EQ(Snapshot(), init_);
}

TEST_F(ParameterStoreTest, InitJobRejectsTrainerCountMismatch) {
  StoreOptions options;
  options.num_trainers = 3;
  ParameterStore store(options);
  EXPECT_EQ(store.InitJob(MakeJob(SYNC, 2), kAllBlocks).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ParameterStoreTest, SyncPullWaitsForVersion) {
  Init(SYNC, 2);
  auto pull = StartPull(0, 1, 1, {{0, 0}, {1, 0}});
  EXPECT_FALSE(pull->done.HasBeenNotified());
  ASSERT_TRUE(PushW0(0, 0, {2, 2, 2, 2}).ok());
  ASSERT_TRUE(PushW0(1, 0, {2, 2, 2, 2}).ok());
  EXPECT_FALSE(pull->done.HasBeenNotified());  // table b still at 0
  std::vector<float> gb = {1, 1, 1};
  std::vector<BlockData> d = {{1, 0, gb}};
  ASSERT_TRUE(store_->Push(0, 0, d).ok());
  ASSERT_TRUE(store_->Push(1, 0, d).ok());
  ASSERT_TRUE(pull->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(pull->status.ok()) << pull->status;
  ASSERT_EQ(pull->values.size(), 2u);
  EXPECT_EQ(pull->values[0], (std::vector<float>{-1, 0, 1, 2}));
  EXPECT_EQ(pull->values[1], (std::vector<float>{-1, -1, -1}));
}

TEST_F(ParameterStoreTest, PullTimesOutNamingTheMissingTrainer) {
  Init(SYNC, 2);
  ASSERT_TRUE(PushW0(0, 0, {2, 2, 2, 2}).ok());
  auto pull = StartPull(0, 1, 1, {{0, 0}});
  store_->Sweep(clock_.Now() + absl::Seconds(11));
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(pull->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(pull->status.message().find("trainer(s) 1"), std::string::npos)
      << pull->status;
  EXPECT_EQ(store_->counters().pull_timeouts, 1);
}

TEST_F(ParameterStoreTest, PullOfUnknownBlockIsNotFound) {
  Init(SYNC, 1);
  auto pull = StartPull(0, 0, 0, {{0, 3}});
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(pull->status.code(), absl::StatusCode::kNotFound);
}

TEST_F(ParameterStoreTest, AsyncAppliesOnArrival) {
  Init(ASYNC, 2);
  ASSERT_TRUE(PushW0(1, 0, {1, 1, 1, 1}).ok());
  EXPECT_EQ(store_->TEST_BlockValues(0, 0), (std::vector<float>{0, 1, 2, 3}));
  ASSERT_TRUE(PushW0(1, 1, {1, 1, 1, 1}).ok());
  ASSERT_TRUE(PushW0(0, 0, {1, 1, 1, 1}).ok());  // an old step is fine
  EXPECT_EQ(store_->TEST_BlockVersion(0, 0), 3);
}

TEST_F(ParameterStoreTest, AsyncStalenessBoundWaitsForSlowestTrainer) {
  Init(ASYNC, 2, /*max_staleness=*/1);
  // Trainer 0 pushes steps 0 and 1; its pull for step 2 is 2 ahead of
  // trainer 1 (clock 0) and must wait.
  ASSERT_TRUE(PushW0(0, 0, {0, 0, 0, 0}).ok());
  ASSERT_TRUE(PushW0(0, 1, {0, 0, 0, 0}).ok());
  auto fast = StartPull(0, 0, 2, {{0, 0}});
  EXPECT_FALSE(fast->done.HasBeenNotified());
  auto ok_now = StartPull(1, 0, 1, {{0, 0}});  // 1 - 0 <= 1
  EXPECT_TRUE(ok_now->done.HasBeenNotified());
  ASSERT_TRUE(PushW0(1, 0, {0, 0, 0, 0}).ok());
  ASSERT_TRUE(fast->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(fast->status.ok());
}

TEST_F(ParameterStoreTest, AsyncMinClockWaitsForEveryTrainersEnd) {
  Init(ASYNC, 2);
  ASSERT_TRUE(PushW0(0, 0, {0, 0, 0, 0}).ok());
  ASSERT_TRUE(PushW0(0, 1, {0, 0, 0, 0}).ok());
  auto final_pull = StartPull(0, 0, 2, {{0, 0}}, /*min_clock=*/2);
  EXPECT_FALSE(final_pull->done.HasBeenNotified());
  store_->Sweep(clock_.Now() + absl::Seconds(6));  // logs whom it waits for
  ASSERT_TRUE(PushW0(1, 0, {0, 0, 0, 0}).ok());
  EXPECT_FALSE(final_pull->done.HasBeenNotified());
  ASSERT_TRUE(PushW0(1, 1, {0, 0, 0, 0}).ok());
  ASSERT_TRUE(
      final_pull->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(final_pull->status.ok());
}

TEST_F(ParameterStoreTest, DestructionAnswersWaitersUnavailable) {
  Init(SYNC, 2);
  auto pull = StartPull(0, 1, 1, {{0, 0}});
  store_.reset();
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(pull->status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(ParameterStoreTest, WaitingPullAfterCancelIsUnavailable) {
  Init(SYNC, 2);
  store_->CancelAllWaiters(absl::UnavailableError("stopping"));
  auto now = StartPull(0, 0, 0, {{0, 0}});  // nothing to wait for: answered
  ASSERT_TRUE(now->done.HasBeenNotified());
  EXPECT_TRUE(now->status.ok());
  auto pull = StartPull(0, 1, 1, {{0, 0}});  // would wait: refused
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(pull->status.code(), absl::StatusCode::kUnavailable);
}

// Sparse tables: "e" (dim 2, SGD lr 1, rows start at 0) next to dense "w".
JobSpec SparseJob(TrainingMode mode, int trainers) {
  JobSpec job = MakeJob(mode, trainers);
  *job.add_tables() = testing::SparseTableSpec("e", 2, testing::Sgd(1.0f));
  return job;
}

class SparseStoreTest : public ::testing::Test {
 protected:
  void Init(TrainingMode mode, int trainers) {
    StoreOptions options;
    options.clock = &clock_;
    store_ = std::make_unique<ParameterStore>(options);
    ASSERT_TRUE(store_->InitJob(SparseJob(mode, trainers), {}).ok());
    ASSERT_TRUE(store_->CommitInit().ok());
  }
  absl::Status Push(int trainer, int64_t step, std::vector<uint64_t> keys,
                    std::vector<float> grads, int32_t chunks = 1,
                    uint32_t table = 2) {
    std::vector<SparseGrads> rows = {{table, keys, grads, chunks}};
    return store_->PushSparse(trainer, step, rows);
  }
  std::vector<float> Read(std::vector<uint64_t> keys, int64_t min_version = 0) {
    std::vector<float> out(keys.size() * 2, -99.0f);
    absl::Notification done;
    absl::Status status;
    std::vector<SparsePull> sparse = {{2, keys, out.data()}};
    store_->Pull(
        0, min_version, 0, 0, {}, sparse,
        [](uint32_t, uint32_t, int64_t, absl::Span<const float>) {},
        [&](absl::Status s, absl::Duration) {
          status = s;
          done.Notify();
        });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }
  FakeClock clock_;
  std::unique_ptr<ParameterStore> store_;
};

TEST_F(SparseStoreTest, SyncAppliesPerKeyMeanOnceEveryTrainerSentAllChunks) {
  Init(SYNC, 2);
  // Trainer 0 sends two chunks; trainer 1 one chunk.
  ASSERT_TRUE(Push(0, 0, {1}, {2, 2}, 2).ok());
  ASSERT_TRUE(Push(1, 0, {1, 5}, {4, 4, 6, 6}, 1).ok());
  EXPECT_EQ(Read({1, 5}), (std::vector<float>{0, 0, 0, 0}));  // not yet
  ASSERT_TRUE(Push(0, 0, {7}, {1, 1}, 2).ok());  // trainer 0's last chunk
  EXPECT_EQ(Read({1, 5, 7, 8}, /*min_version=*/1),
            (std::vector<float>{-3, -3, -6, -6, -1, -1, 0, 0}));
}

TEST_F(SparseStoreTest, SyncRepeatedChunkIgnoredStepsChecked) {
  Init(SYNC, 1);
  ASSERT_TRUE(Push(0, 0, {1}, {1, 1}, 2).ok());
  ASSERT_TRUE(Push(0, 0, {2}, {1, 1}, 2).ok());  // step 0 applied
  EXPECT_EQ(Push(0, 0, {1}, {1, 1}, 2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Push(0, 3, {1}, {1, 1}, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Read({1, 2}), (std::vector<float>{-1, -1, -1, -1}));
  // A chunk count that changes within a step is refused.
  ASSERT_TRUE(Push(0, 1, {1}, {1, 1}, 3).ok());
  EXPECT_EQ(Push(0, 1, {2}, {1, 1}, 2).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SparseStoreTest, BadSparseRequestsAreRefusedAndChangeNothing) {
  Init(ASYNC, 2);
  auto expect = [&](absl::Status s, absl::StatusCode code,
                    const std::string& needle) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
    EXPECT_EQ(Read({1, 2}), (std::vector<float>{0, 0, 0, 0}));
  };
  expect(Push(0, 0, {1}, {1, 1}, 1, /*table=*/9), absl::StatusCode::kNotFound,
         "unknown table id 9");
  expect(Push(0, 0, {1}, {1, 1}, 1, /*table=*/0),
         absl::StatusCode::kInvalidArgument, "is dense");
  expect(Push(0, 0, {1, 2}, {1, 1, 1}), absl::StatusCode::kInvalidArgument,
         "keys and values of different lengths");
  expect(Push(0, 0, {1, 2}, {1, 1, std::nanf(""), 1}),
         absl::StatusCode::kInvalidArgument, "is NaN");
  expect(Push(0, 0, {1, 1}, {1, 1, 1, 1}), absl::StatusCode::kInvalidArgument,
         "appears twice");
  expect(Push(3, 0, {1}, {1, 1}), absl::StatusCode::kInvalidArgument,
         "trainer_id 3 is out of range");
}

TEST_F(SparseStoreTest, AsyncAppliesOnArrival) {
  Init(ASYNC, 2);
  ASSERT_TRUE(Push(1, 4, {10}, {1, 2}).ok());
  EXPECT_EQ(Read({10}), (std::vector<float>{-1, -2}));
  ASSERT_TRUE(Push(0, 0, {10}, {1, 2}).ok());
  EXPECT_EQ(Read({10}), (std::vector<float>{-2, -4}));
}

TEST_F(SparseStoreTest, SyncPullTimesOutNamingTheMissingTrainer) {
  Init(SYNC, 2);
  ASSERT_TRUE(Push(0, 0, {1}, {1, 1}).ok());
  std::vector<uint64_t> keys = {1};
  std::vector<float> out(2);
  std::vector<SparsePull> sparse = {{2, keys, out.data()}};
  absl::Notification done;
  absl::Status status;
  store_->Pull(
      0, 1, 1, 0, {}, sparse,
      [](uint32_t, uint32_t, int64_t, absl::Span<const float>) {},
      [&](absl::Status s, absl::Duration) {
        status = s;
        done.Notify();
      });
  EXPECT_FALSE(done.HasBeenNotified());
  store_->Sweep(clock_.Now() + absl::Seconds(30));
  ASSERT_TRUE(done.HasBeenNotified());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("trainer(s) 1"), std::string::npos) << status;
}

}  // namespace
}  // namespace shardps
