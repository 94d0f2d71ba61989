// Streaming saves: every unit is written as it was at the save's instant,
// whether a push changes it first or the save's own pass reaches it; the
// blobs equal Snapshot's at that instant, and a save through the
// Checkpointer loads back.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/model_export/initial_row.h"
#include "common/storage/checkpoint.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/blob_records.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::GetState;
using testing::MemorySink;
using testing::NewStore;
using testing::Options;
using testing::PushDense;
using testing::RunStep;
using testing::State;

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
  EXPECT_TRUE(StoreSnapshots(store.get()).WriteRest(3).ok());
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
  EXPECT_TRUE(StoreSnapshots(store.get()).WriteRest(3).ok());
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
  EXPECT_TRUE(StoreSnapshots(store.get()).WriteRest(1).ok());
  ParameterStore restored(Options());
  ASSERT_TRUE(
      StoreSnapshots(&restored).Restore(sink.ToSnapshot(*info), 1).ok());
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
  EXPECT_EQ(
      StoreSnapshots(store.get()).SaveTo(&checkpointer, 5, &previous).code(),
      absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(checkpointer.Flush().ok());
  std::vector<std::string> children;
  ASSERT_TRUE(Env::Default()->GetChildren(tmp.Path("ckpt"), &children).ok());
  EXPECT_EQ(children, std::vector<std::string>{CheckpointDirName(3)});
}

// An async job of one sparse table (Adagrad, rows of 4), and the log of
// pushes a trainer makes to it: push i updates keys (7i + 13j) % 97.
class AsyncLog {
 public:
  static constexpr int kPushes = 3000;

  static JobSpec Job() {
    JobSpec job;
    job.set_mode(ASYNC);
    job.set_num_trainers(1);
    job.set_max_staleness(-1);
    job.set_global_batch_size(1);
    TableSpec* t = job.add_tables();
    t->set_name("e");
    t->set_kind(TableSpec::SPARSE);
    t->mutable_sparse()->set_dim(4);
    t->mutable_sparse()->mutable_init()->set_type(RowInitializer::UNIFORM);
    t->mutable_sparse()->mutable_init()->set_scale(0.1f);
    t->mutable_sparse()->mutable_init()->set_seed(7);
    t->mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
    t->mutable_optimizer()->set_learning_rate(0.05f);
    return job;
  }
  static std::vector<uint64_t> Keys(int i) {
    std::vector<uint64_t> keys;
    for (int j = 0; j < 8; ++j) keys.push_back((i * 7 + j * 13) % 97);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    return keys;
  }
  static std::vector<float> Grads(int i, size_t n) {
    std::vector<float> g(n * 4);
    for (size_t j = 0; j < g.size(); ++j) {
      g[j] = 0.01f * static_cast<float>((i * 31 + static_cast<int>(j)) % 17) -
             0.08f;
    }
    return g;
  }
  // `key`'s row and Adagrad state after its first `updates` pushes.
  static std::vector<float> Replay(const Optimizer& opt, uint64_t key,
                                   int64_t updates) {
    const JobSpec job = Job();
    std::vector<float> value(4), slot(4, opt.initial_slot_value());
    InitialSparseRow(job.tables(0).sparse().init(), 4, key, value.data());
    int64_t applied = 0;
    for (int i = 0; i < kPushes && applied < updates; ++i) {
      const std::vector<uint64_t> keys = Keys(i);
      auto it = std::find(keys.begin(), keys.end(), key);
      if (it == keys.end()) continue;
      const std::vector<float> g = Grads(i, keys.size());
      std::vector<absl::Span<float>> slots = {absl::MakeSpan(slot)};
      opt.ApplyIfFinite(
          i, applied, 1.0f,
          absl::MakeConstSpan(g.data() + (it - keys.begin()) * 4, 4),
          absl::MakeSpan(value), slots);
      ++applied;
    }
    value.insert(value.end(), slot.begin(), slot.end());
    return value;
  }
};

// An async job saved while a trainer pushes without pause: every row in the
// checkpoint is its initial value with exactly its first `updates` logged
// pushes applied, value and optimizer state alike (a row's state never
// comes from another instant than its value).
TEST(StreamingSaveTest, AsyncSavesAreConsistentRowByRow) {
  testing::ScopedTempDir tmp("async_save");
  ParameterStore store(Options());
  ASSERT_TRUE(store.InitJob(AsyncLog::Job(), {}).ok());
  ASSERT_TRUE(store.CommitInit().ok());
  std::atomic<int> pushed{0};
  // The pusher stops at a third of its log until the save has begun, then
  // goes on while the save is written (without the wait, a loaded machine
  // can let it finish before the save starts).
  absl::Notification save_begun;
  std::thread pusher([&] {
    for (int i = 0; i < AsyncLog::kPushes; ++i) {
      if (i == AsyncLog::kPushes / 3) save_begun.WaitForNotification();
      const std::vector<uint64_t> keys = AsyncLog::Keys(i);
      const std::vector<float> g = AsyncLog::Grads(i, keys.size());
      std::vector<SparseGrads> rows = {{0, keys, g, 1}};
      EXPECT_TRUE(store.PushSparse(0, i, rows, kAnyGeneration).ok());
      pushed.store(i + 1);
    }
  });
  while (pushed.load() < AsyncLog::kPushes / 3) {
    absl::SleepFor(absl::Microseconds(50));
  }
  Checkpointer checkpointer(Env::Default(), tmp.Path("ckpt"));
  const int64_t step = pushed.load();
  absl::Status previous;
  const absl::Status begun =
      StoreSnapshots(&store).SaveTo(&checkpointer, step, &previous);
  save_begun.Notify();
  pusher.join();
  ASSERT_TRUE(begun.ok()) << begun;
  EXPECT_EQ(step, AsyncLog::kPushes / 3);
  ASSERT_TRUE(checkpointer.Flush().ok());
  auto snap = checkpointer.Load(step);
  ASSERT_TRUE(snap.ok()) << snap.status();
  auto opt = Optimizer::Create(AsyncLog::Job().tables(0).optimizer(), 1);
  ASSERT_TRUE(opt.ok());
  int rows = 0, behind = 0;
  auto row = [&](const SparseRecord& r) {
    int64_t updates = 0;
    std::memcpy(&updates, r.raw.data() + 16, 8);
    std::vector<float> saved(8);
    std::memcpy(saved.data(), r.row, sizeof(float) * 8);
    EXPECT_EQ(saved, AsyncLog::Replay(**opt, r.key, updates))
        << "key " << r.key << " after " << updates << " updates";
    ++rows;
    // Saved before the last pushes: fewer updates than the log has.
    behind += updates < AsyncLog::kPushes * 8 / 97 - 10;
    return absl::OkStatus();
  };
  ASSERT_TRUE(ForEachSparseRecord(
                  "table-0.bin", *testing::FindFile(*snap, "table-0.bin"),
                  [](int32_t, int32_t) { return absl::OkStatus(); }, row,
                  [](uint64_t, absl::string_view) { return absl::OkStatus(); })
                  .ok());
  EXPECT_EQ(rows, 97);
  EXPECT_GT(behind, 0);
}

}  // namespace
}  // namespace shardps
