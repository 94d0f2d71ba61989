// Streaming saves: every unit is written as it was at the save's instant,
// whether a push changes it first or the save's own pass reaches it; the
// blobs equal Snapshot's at that instant, and a save through the
// Checkpointer loads back.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/storage/checkpoint.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::GetState;
using testing::NewStore;
using testing::Options;
using testing::PushDense;
using testing::RunStep;
using testing::State;

// Keeps each table's bytes in memory, and how many records came.
class MemorySink : public SaveSink {
 public:
  void Append(uint32_t table_id, absl::string_view record) override {
    absl::MutexLock l(&mu_);
    blobs_[table_id].append(record.data(), record.size());
    ++appends_;
  }
  StoreSnapshot ToSnapshot(const CheckpointInfo& info) {
    absl::MutexLock l(&mu_);
    StoreSnapshot snap;
    snap.info = info;
    for (auto& [t, bytes] : blobs_) {
      snap.files.emplace_back(TableFileName(t), bytes);
    }
    return snap;
  }
  int appends() {
    absl::MutexLock l(&mu_);
    return appends_;
  }

 private:
  absl::Mutex mu_;
  std::map<uint32_t, std::string> blobs_ ABSL_GUARDED_BY(mu_);
  int appends_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(StreamingSaveTest, UnitsChangedAfterTheInstantAreSavedAsTheyWere) {
  auto store = NewStore();
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(RunStep(store.get(), step).ok());
  }
  const State at3 = GetState(store.get());
  auto copy = StoreSnapshots(store.get()).Snapshot(3);
  ASSERT_TRUE(copy.ok());

  MemorySink sink;
  auto info = StoreSnapshots(store.get()).BeginSave(3, &sink);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(sink.appends(), 3);  // the headers only
  // Step 3 changes every unit: each is written first, as it was.
  ASSERT_TRUE(RunStep(store.get(), 3).ok());
  const int after_step = sink.appends();
  EXPECT_GT(after_step, 3);
  StoreSnapshots(store.get()).WriteRest();
  EXPECT_GE(sink.appends(), after_step);
  EXPECT_NE(GetState(store.get()), at3);

  const StoreSnapshot streamed = sink.ToSnapshot(*info);
  ParameterStore restored(Options());
  ASSERT_TRUE(StoreSnapshots(&restored).Restore(streamed, 1).ok());
  EXPECT_EQ(GetState(&restored), at3);
  // The sparse blob is Serialize's, stripe by stripe in another order: the
  // same size; the rows equal (above).
  EXPECT_EQ(testing::FindFile(streamed, "table-2.bin")->size(),
            testing::FindFile(*copy, "table-2.bin")->size());
  // A second pass writes nothing more: every mark is cleared.
  const int done = sink.appends();
  StoreSnapshots(store.get()).WriteRest();
  ASSERT_TRUE(RunStep(store.get(), 4).ok());
  EXPECT_EQ(sink.appends(), done);
}

TEST(StreamingSaveTest, UnchangedUnitsAreWrittenByTheSavesPass) {
  auto store = NewStore();
  ASSERT_TRUE(RunStep(store.get(), 0).ok());
  const State at1 = GetState(store.get());
  MemorySink sink;
  auto info = StoreSnapshots(store.get()).BeginSave(1, &sink);
  ASSERT_TRUE(info.ok());
  // Half a step: trainer 0's dense pushes (accumulated, nothing applied).
  ASSERT_TRUE(PushDense(store.get(), 0, 1).ok());
  StoreSnapshots(store.get()).WriteRest();
  ParameterStore restored(Options());
  ASSERT_TRUE(StoreSnapshots(&restored).Restore(sink.ToSnapshot(*info), 1).ok());
  EXPECT_EQ(GetState(&restored), at1);
}

TEST(StreamingSaveTest, RefusedAsSnapshotIsAndMarksNothing) {
  auto store = NewStore();
  ASSERT_TRUE(RunStep(store.get(), 0).ok());
  MemorySink sink;
  auto info = StoreSnapshots(store.get()).BeginSave(2, &sink);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sink.appends(), 0);
  ASSERT_TRUE(RunStep(store.get(), 1).ok());
  EXPECT_EQ(sink.appends(), 0);
}

TEST(StreamingSaveTest, ThroughTheCheckpointerWhilePushesGoOn) {
  testing::ScopedTempDir tmp("streaming");
  Checkpointer checkpointer(Env::Default(), tmp.Path("ckpt"));
  auto store = NewStore();
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(RunStep(store.get(), step).ok());
  }
  const State at3 = GetState(store.get());
  absl::Status previous;
  ASSERT_TRUE(
      StoreSnapshots(store.get()).SaveTo(&checkpointer, 3, &previous).ok());
  EXPECT_TRUE(previous.ok());
  for (int64_t step = 3; step < 8; ++step) {
    ASSERT_TRUE(RunStep(store.get(), step).ok());
  }
  ASSERT_TRUE(checkpointer.Flush().ok());
  EXPECT_EQ(checkpointer.stats().written, 1);
  auto loaded = checkpointer.Load(3);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ParameterStore restored(Options());
  ASSERT_TRUE(StoreSnapshots(&restored).Restore(*loaded, 1).ok());
  EXPECT_EQ(GetState(&restored), at3);
  // Refused: not a step boundary; nothing is written, no .tmp is left.
  EXPECT_EQ(StoreSnapshots(store.get())
                .SaveTo(&checkpointer, 5, &previous)
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(checkpointer.Flush().ok());
  std::vector<std::string> children;
  ASSERT_TRUE(Env::Default()->GetChildren(tmp.Path("ckpt"), &children).ok());
  EXPECT_EQ(children, std::vector<std::string>{CheckpointDirName(3)});
}

}  // namespace
}  // namespace shardps
