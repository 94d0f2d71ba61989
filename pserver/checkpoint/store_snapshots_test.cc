// The store's checkpoints: Snapshot at step boundaries, Restore into a fresh
// store (a restarted pserver) and into a running one (a rollback), the
// membership and generation they carry, and every kind of damage refused
// with nothing changed.
#include "pserver/checkpoint/store_snapshots.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "pserver/store/parameter_store.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using testing::CheckpointJob;
using testing::ExpectSameSnapshot;
using testing::FindFile;
using testing::GetState;
using testing::kBlocks;
using testing::NewStore;
using testing::Options;
using testing::PushDense;
using testing::PushSparse;
using testing::RunStep;
using testing::StartPull;
using testing::State;
using testing::WithFile;

TEST(StoreCheckpointTest, SnapshotNeedsAStepBoundary) {
  ParameterStore empty(Options());
  EXPECT_EQ(StoreSnapshots(&empty).Snapshot(0).status().code(),
            absl::StatusCode::kFailedPrecondition);

  auto s = NewStore();
  ASSERT_TRUE(RunStep(s.get(), 0).ok());
  EXPECT_EQ(StoreSnapshots(s.get()).Snapshot(0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StoreSnapshots(s.get()).Snapshot(2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(StoreSnapshots(s.get()).Snapshot(1).ok());

  // Mid-step: block (0, 0) has applied step 1, the others have not.
  ASSERT_TRUE(PushDense(s.get(), 0, 1, kAnyGeneration, {{0, 0}}).ok());
  ASSERT_TRUE(PushDense(s.get(), 1, 1, kAnyGeneration, {{0, 0}}).ok());
  ASSERT_EQ(s->TEST_BlockVersion(0, 0), 2);
  for (int64_t step : {1, 2}) {
    auto snap = StoreSnapshots(s.get()).Snapshot(step);
    EXPECT_EQ(snap.status().code(), absl::StatusCode::kFailedPrecondition)
        << step;
    EXPECT_NE(snap.status().message().find("not a step boundary"),
              std::string::npos)
        << snap.status();
  }
  // Every dense block at 2, the sparse table still at 1.
  ASSERT_TRUE(PushDense(s.get(), 0, 1, kAnyGeneration, {{0, 1}, {1, 0}}).ok());
  ASSERT_TRUE(PushDense(s.get(), 1, 1, kAnyGeneration, {{0, 1}, {1, 0}}).ok());
  auto snap = StoreSnapshots(s.get()).Snapshot(2);
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(snap.status().message().find("sparse table e"), std::string::npos)
      << snap.status();
  ASSERT_TRUE(PushSparse(s.get(), 0, 1).ok());
  EXPECT_EQ(StoreSnapshots(s.get()).Snapshot(2).status().code(),
            absl::StatusCode::kFailedPrecondition);  // trainer 1 missing
  ASSERT_TRUE(PushSparse(s.get(), 1, 1).ok());
  auto ok = StoreSnapshots(s.get()).Snapshot(2);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->info.step(), 2);
}

TEST(StoreCheckpointTest, RoundTripIntoFreshStore) {
  auto a = NewStore();
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(RunStep(a.get(), step).ok());
  }
  auto snap = StoreSnapshots(a.get()).Snapshot(3);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->info.step(), 3);
  EXPECT_EQ(snap->info.generation(), 0u);
  EXPECT_TRUE(MessageDifferencer::Equals(snap->info.job(), CheckpointJob()));
  EXPECT_EQ(snap->info.blocks_size(), 3);
  ASSERT_EQ(snap->files.size(), 3u);
  EXPECT_EQ(snap->files[0].first, "table-0.bin");
  EXPECT_EQ(snap->files[1].first, "table-1.bin");
  EXPECT_EQ(snap->files[2].first, "table-2.bin");
  const State before = GetState(a.get());
  EXPECT_EQ(before.versions, (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(before.num_rows, 4);      // 1, 2, 50, 51
  EXPECT_EQ(before.pending_keys, 3);  // 1000, 1001, 1002

  ParameterStore b(Options());
  EXPECT_FALSE(b.ready());
  ASSERT_TRUE(StoreSnapshots(&b).Restore(*snap, 5).ok());
  EXPECT_TRUE(b.ready());
  EXPECT_TRUE(MessageDifferencer::Equals(b.job(), CheckpointJob()));
  EXPECT_EQ(b.generation(), 5u);
  EXPECT_EQ(b.base_step(), 3);
  EXPECT_EQ(b.counters().rollbacks, 0);
  EXPECT_EQ(b.num_blocks(), 3u);
  EXPECT_EQ(GetState(&b), before);
  // The dense blobs, optimizer slots included, come back byte for byte.
  auto again = StoreSnapshots(&b).Snapshot(3);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->info.generation(), 5u);
  EXPECT_EQ(*FindFile(*again, "table-0.bin"), *FindFile(*snap, "table-0.bin"));
  EXPECT_EQ(*FindFile(*again, "table-1.bin"), *FindFile(*snap, "table-1.bin"));

  // Optimizer state and sightings: the same steps give the same values.
  for (int64_t step = 3; step < 5; ++step) {
    ASSERT_TRUE(RunStep(a.get(), step).ok());
    ASSERT_TRUE(RunStep(&b, step, /*generation=*/5).ok());
  }
  const State a5 = GetState(a.get()), b5 = GetState(&b);
  EXPECT_EQ(a5, b5);
  EXPECT_EQ(b5.versions, (std::vector<int64_t>{5, 5, 5}));
  EXPECT_EQ(b5.num_rows, 4);
  EXPECT_EQ(b5.pending_keys, 5);  // 1003 and 1004 seen once each
}

TEST(StoreCheckpointTest, RollbackInSameStore) {
  auto s = NewStore();
  ASSERT_TRUE(RunStep(s.get(), 0).ok());
  ASSERT_TRUE(RunStep(s.get(), 1).ok());
  auto snap = StoreSnapshots(s.get()).Snapshot(2);
  ASSERT_TRUE(snap.ok()) << snap.status();
  const State at2 = GetState(s.get());
  ASSERT_TRUE(RunStep(s.get(), 2).ok());
  ASSERT_TRUE(RunStep(s.get(), 3).ok());
  const State at4 = GetState(s.get());
  ASSERT_NE(at4, at2);
  // Trainer 0 has pushed step 4; its pull waits for trainer 1.
  ASSERT_TRUE(PushDense(s.get(), 0, 4).ok());
  ASSERT_TRUE(PushSparse(s.get(), 0, 4).ok());
  auto waiting = StartPull(s.get(), 5, /*generation=*/0);
  EXPECT_FALSE(waiting->done.HasBeenNotified());

  ASSERT_TRUE(StoreSnapshots(s.get()).Restore(*snap, 1).ok());
  ASSERT_TRUE(waiting->done.HasBeenNotified());
  EXPECT_EQ(waiting->status.code(), absl::StatusCode::kAborted)
      << waiting->status;
  EXPECT_EQ(s->counters().rollbacks, 1);
  EXPECT_EQ(s->base_step(), 2);
  EXPECT_EQ(s->generation(), 1u);
  EXPECT_EQ(GetState(s.get()), at2);

  // The accumulators were cleared: step 2 is redone from scratch and lands
  // where it did the first time.
  ASSERT_TRUE(RunStep(s.get(), 2, /*generation=*/1).ok());
  ASSERT_TRUE(RunStep(s.get(), 3, /*generation=*/1).ok());
  EXPECT_EQ(GetState(s.get()), at4);
  auto snap4 = StoreSnapshots(s.get()).Snapshot(4);
  ASSERT_TRUE(snap4.ok()) << snap4.status();
  EXPECT_EQ(snap4->info.generation(), 1u);
}

// A rejoin after a rollback and a rollback after a rejoin: Register and
// Restore take the membership lock and the block locks in the same order
// (absl's deadlock detector aborts the test otherwise).
TEST(StoreCheckpointTest, RejoinAndRollbackInEitherOrder) {
  auto s = NewStore();
  const absl::Time now = absl::Now();
  ASSERT_TRUE(s->Register(0, 1, now).ok());
  ASSERT_TRUE(s->Register(1, 1, now).ok());
  ASSERT_TRUE(RunStep(s.get(), 0).ok());
  auto snap = StoreSnapshots(s.get()).Snapshot(1);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_TRUE(StoreSnapshots(s.get()).Restore(*snap, 1).ok());
  auto r = s->Register(1, 2, now);  // trainer 1 restarted
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->join_step, 2);
  ASSERT_TRUE(StoreSnapshots(s.get()).Restore(*snap, 2).ok());
  r = s->Register(1, 3, now);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(s->counters().rejoined_trainers, 2);
}

TEST(StoreCheckpointTest, ReplacedIncarnationIsRefused) {
  auto s = NewStore();
  const absl::Time now = absl::Now();
  ASSERT_TRUE(s->Register(0, 1, now).ok());
  EXPECT_TRUE(s->CheckIncarnation(0, 1).ok());
  ASSERT_TRUE(s->Register(0, 2, now).ok());  // restarted
  const absl::Status old = s->CheckIncarnation(0, 1);
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition) << old;
  EXPECT_THAT(std::string(old.message()),
              ::testing::HasSubstr("was replaced by incarnation 2"));
  EXPECT_TRUE(s->CheckIncarnation(0, 2).ok());
  // Not sent: refused once an incarnation registered (no way around it).
  EXPECT_EQ(s->CheckIncarnation(0, 0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s->CheckIncarnation(1, 5).ok());  // not registered yet
}

// A pserver restarted from a checkpoint does not wait for a trainer that had
// left or been dropped, and drops one that never speaks to it again.
TEST(StoreCheckpointTest, RestartKeepsGoneTrainersOutAndDropsSilentOnes) {
  JobSpec job = CheckpointJob(/*trainers=*/3);
  StoreOptions options = Options();
  options.trainer_timeout = absl::Seconds(5);
  ParameterStore a(options);
  ASSERT_TRUE(a.InitJob(job, kBlocks).ok());
  std::vector<float> w0 = {1, 2, 3, 4}, w1 = {5, 6, 7, 8}, b0 = {0.5f, -0.5f};
  std::vector<BlockData> data = {{0, 0, w0}, {0, 1, w1}, {1, 0, b0}};
  ASSERT_TRUE(a.SetInitialValues(data).ok());
  ASSERT_TRUE(a.CommitInit().ok());
  const absl::Time now = absl::Now();
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(a.Register(k, 1, now).ok());
  ASSERT_TRUE(a.Leave(2, 1).ok());
  auto snap = StoreSnapshots(&a).Snapshot(0);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(std::vector<int>(snap->info.left_trainers().begin(),
                             snap->info.left_trainers().end()),
            std::vector<int>{2});

  ParameterStore b(options);
  ASSERT_TRUE(StoreSnapshots(&b).Restore(*snap, 1).ok());
  EXPECT_EQ(b.LiveTrainers(), (std::vector<int>{0, 1}));
  // Trainers 0 and 1 step without 2; trainer 0 learns it was not replaced
  // (its incarnation was unknown to the restarted store).
  ASSERT_TRUE(b.Heartbeat(0, 1, absl::Now()).ok());
  ASSERT_TRUE(PushDense(&b, 0, 0).ok());
  ASSERT_TRUE(PushDense(&b, 1, 0).ok());
  EXPECT_EQ(b.TEST_BlockVersion(0, 0), 1);
  // Trainer 1 never says anything more: dropped after the timeout.
  b.Sweep(absl::Now() + absl::Seconds(3));
  EXPECT_EQ(b.counters().dropped_trainers, 0);
  ASSERT_TRUE(b.Heartbeat(0, 1, absl::Now() + absl::Seconds(4)).ok());
  b.Sweep(absl::Now() + absl::Seconds(6));
  EXPECT_EQ(b.counters().dropped_trainers, 1);
  EXPECT_EQ(b.LiveTrainers(), (std::vector<int>{0}));
  // The next step needs trainer 0 alone.
  ASSERT_TRUE(PushDense(&b, 0, 1).ok());
  EXPECT_EQ(b.TEST_BlockVersion(0, 0), 2);
}

TEST(StoreCheckpointTest, StaleGenerationIsAbortedAnyGenerationIsNot) {
  auto a = NewStore();
  ASSERT_TRUE(RunStep(a.get(), 0).ok());
  auto snap = StoreSnapshots(a.get()).Snapshot(1);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ParameterStore s(Options());
  ASSERT_TRUE(StoreSnapshots(&s).Restore(*snap, 7).ok());
  const State restored = GetState(&s);

  absl::Status st = PushDense(&s, 0, 1, /*generation=*/6);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  EXPECT_NE(st.message().find("generation 7"), std::string::npos) << st;
  st = PushSparse(&s, 0, 1, /*generation=*/6);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  auto pull = StartPull(&s, 1, /*generation=*/6);
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(pull->status.code(), absl::StatusCode::kAborted) << pull->status;
  pull = StartPull(&s, 1, /*generation=*/8);
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(pull->status.code(), absl::StatusCode::kAborted) << pull->status;
  EXPECT_EQ(GetState(&s), restored);
  EXPECT_EQ(s.counters().pushes, 0);

  // The current generation and kAnyGeneration are accepted.
  pull = StartPull(&s, 1, /*generation=*/7);
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_TRUE(pull->status.ok()) << pull->status;
  pull = StartPull(&s, 1, kAnyGeneration);
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_TRUE(pull->status.ok()) << pull->status;
  ASSERT_TRUE(PushDense(&s, 0, 1, /*generation=*/7).ok());
  ASSERT_TRUE(PushSparse(&s, 0, 1, /*generation=*/7).ok());
  ASSERT_TRUE(PushDense(&s, 1, 1, kAnyGeneration).ok());
  ASSERT_TRUE(PushSparse(&s, 1, 1, kAnyGeneration).ok());
  EXPECT_EQ(GetState(&s).versions, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_TRUE(StoreSnapshots(&s).Snapshot(2).ok());
}

// A snapshot of step 1, damaged in every way: DATA_LOSS, on a fresh store
// and on a running one (at step 2), which it leaves alone.
class CorruptDenseBlobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RunStep(s_.get(), 0).ok());
    auto snap_or = StoreSnapshots(s_.get()).Snapshot(1);
    ASSERT_TRUE(snap_or.ok()) << snap_or.status();
    snap_ = *snap_or;
    ASSERT_TRUE(RunStep(s_.get(), 1).ok());
    running_ = GetState(s_.get());
    w_ = *FindFile(snap_, "table-0.bin");
    // magic, count, then per block: index, version, size, slots, 4 values
    // and 4 momentum values.
    ASSERT_EQ(w_.size(), 8u + 2 * (4 + 8 + 8 + 4 + 2 * 4 * 4));
  }

  // Restores `bad` into a fresh store and the running one, expecting
  // DATA_LOSS from both and neither changed; `what` names the damage.
  void ExpectDataLoss(const StoreSnapshot& bad, const std::string& what) {
    ParameterStore fresh(Options());
    absl::Status st = StoreSnapshots(&fresh).Restore(bad, 3);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << what << ": " << st;
    EXPECT_FALSE(fresh.ready()) << what;
    st = StoreSnapshots(s_.get()).Restore(bad, 3);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << what << ": " << st;
    EXPECT_EQ(s_->generation(), 0u) << what;
    EXPECT_EQ(s_->counters().rollbacks, 0) << what;
  }

  // The snapshot with `n` bytes of table-0.bin at `offset` replaced.
  StoreSnapshot Patched(size_t offset, const void* bytes, size_t n) {
    std::string b = w_;
    std::memcpy(b.data() + offset, bytes, n);
    return WithFile(snap_, "table-0.bin", b);
  }

  std::unique_ptr<ParameterStore> s_ = NewStore();
  StoreSnapshot snap_;
  State running_;
  std::string w_;  // table-0.bin of snap_
};

TEST_F(CorruptDenseBlobTest, ATruncatedBlobIsDataLoss) {
  for (size_t len = 0; len < w_.size(); ++len) {
    ExpectDataLoss(WithFile(snap_, "table-0.bin", w_.substr(0, len)),
                   absl::StrCat("truncated to ", len));
  }
  EXPECT_EQ(GetState(s_.get()), running_);
}

TEST_F(CorruptDenseBlobTest, AWrongHeaderOrBlockIsDataLoss) {
  const uint32_t bad_magic = 0x12345678, big_count = 1000, one = 1;
  ExpectDataLoss(Patched(0, &bad_magic, 4), "wrong magic");
  ExpectDataLoss(Patched(4, &big_count, 4), "block count too large");
  ExpectDataLoss(Patched(4, &one, 4), "block count too small");
  for (int64_t size :
       {int64_t{-1}, int64_t{3}, int64_t{5}, int64_t{1} << 40, INT64_MAX}) {
    ExpectDataLoss(Patched(20, &size, 8), absl::StrCat("size ", size));
  }
  const uint32_t slots = 2, index = 9;
  ExpectDataLoss(Patched(28, &slots, 4), "slot count");
  ExpectDataLoss(Patched(8, &index, 4), "unknown block");
  // Block 0 twice, block 1 never.
  const uint32_t zero = 0;
  ExpectDataLoss(Patched(8 + 56, &zero, 4), "block 0 twice");
  ExpectDataLoss(WithFile(snap_, "table-0.bin", w_ + "x"), "trailing byte");
  EXPECT_EQ(GetState(s_.get()), running_);
}

TEST_F(CorruptDenseBlobTest, AMissingExtraOrSwappedFileIsDataLoss) {
  StoreSnapshot bad = snap_;
  bad.files.erase(bad.files.begin());
  ExpectDataLoss(bad, "missing dense file");
  bad = snap_;
  bad.files.emplace_back("table-9.bin", "");
  ExpectDataLoss(bad, "unknown file");
  bad = snap_;
  std::swap(bad.files[0].second, bad.files[1].second);
  ExpectDataLoss(bad, "blobs of two tables swapped");
  bad = snap_;
  bad.files.pop_back();
  ExpectDataLoss(bad, "missing sparse file");
  bad = snap_;
  bad.files.push_back(bad.files[0]);
  ExpectDataLoss(bad, "dense file twice");
  EXPECT_EQ(GetState(s_.get()), running_);
}

TEST(StoreCheckpointTest, CorruptSparseBlobIsDataLossAndChangesNothing) {
  auto s = NewStore();
  ASSERT_TRUE(RunStep(s.get(), 0).ok());
  ASSERT_TRUE(RunStep(s.get(), 1).ok());
  auto snap_or = StoreSnapshots(s.get()).Snapshot(2);
  ASSERT_TRUE(snap_or.ok()) << snap_or.status();
  const StoreSnapshot snap = *snap_or;
  ASSERT_TRUE(RunStep(s.get(), 2).ok());
  const State running = GetState(s.get());
  ASSERT_EQ(running.num_rows, 4);
  const std::string e = *FindFile(snap, "table-2.bin");
  for (size_t len = 0; len < e.size(); ++len) {
    const StoreSnapshot bad = WithFile(snap, "table-2.bin", e.substr(0, len));
    ParameterStore fresh(Options());
    absl::Status st = StoreSnapshots(&fresh).Restore(bad, 3);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << len << ": " << st;
    EXPECT_FALSE(fresh.ready()) << len;
    st = StoreSnapshots(s.get()).Restore(bad, 3);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << len << ": " << st;
    EXPECT_EQ(s->generation(), 0u) << len;
    EXPECT_EQ(s->base_step(), 0) << len;
    EXPECT_EQ(s->counters().rollbacks, 0) << len;
    if (::testing::Test::HasFailure()) break;  // one length says it all
  }
  EXPECT_EQ(GetState(s.get()), running);
  // The intact snapshot still restores.
  ASSERT_TRUE(StoreSnapshots(s.get()).Restore(snap, 3).ok());
  EXPECT_EQ(GetState(s.get()).num_rows, 4);
  EXPECT_EQ(s->generation(), 3u);
}

TEST(StoreCheckpointTest, SnapshotOfAnotherJobIsRefused) {
  auto s = NewStore();
  ASSERT_TRUE(RunStep(s.get(), 0).ok());
  const State running = GetState(s.get());
  // The same tables for three trainers: another job.
  auto other = NewStore(CheckpointJob(3));
  auto other_snap = StoreSnapshots(other.get()).Snapshot(0);
  ASSERT_TRUE(other_snap.ok()) << other_snap.status();
  absl::Status st = StoreSnapshots(s.get()).Restore(*other_snap, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(s->generation(), 0u);
  EXPECT_EQ(GetState(s.get()), running);

  // A job whose table "w" is one block of 8, with the blobs of ours.
  auto snap = StoreSnapshots(s.get()).Snapshot(1);
  ASSERT_TRUE(snap.ok()) << snap.status();
  StoreSnapshot mixed = *snap;
  mixed.info.mutable_job()->mutable_tables(0)->set_block_size(8);
  mixed.info.clear_blocks();
  mixed.info.add_blocks()->set_table_id(0);
  BlockRef* b = mixed.info.add_blocks();
  b->set_table_id(1);
  ParameterStore fresh(Options());
  st = StoreSnapshots(&fresh).Restore(mixed, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_FALSE(fresh.ready());
  // A job that InitJob refuses.
  StoreSnapshot broken = *snap;
  broken.info.mutable_job()->set_num_trainers(0);
  ParameterStore fresh2(Options());
  EXPECT_EQ(StoreSnapshots(&fresh2).Restore(broken, 1).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_FALSE(fresh2.ready());
}

}  // namespace
}  // namespace shardps
