// Checkpoints of the parameter store: Snapshot/Restore (fresh store and
// rollback), generations, corrupted blobs, SparseTable::Serialize and
// Deserialize, and the Checkpointer over a real directory.

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/env.h"
#include "common/fault_injection_env.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "pserver/checkpointer.h"
#include "pserver/optimizer.h"
#include "pserver/parameter_store.h"
#include "pserver/sparse_table.h"

namespace shardps {
namespace {

using ::google::protobuf::util::MessageDifferencer;

// Dense "w": 8 values in blocks of 4, momentum (one slot); dense "b": 2
// values, Adam (two slots); sparse "e": rows of 2, Adam, admitted at the
// second sighting. Optimizers with state, so a lost slot shows in the values
// of later steps.
JobSpec MakeJob(int trainers = 2) {
  JobSpec job;
  job.set_mode(SYNC);
  job.set_num_trainers(trainers);
  job.set_max_staleness(-1);
  job.set_global_batch_size(8);
  TableSpec* w = job.add_tables();
  w->set_name("w");
  w->add_shape(8);
  w->set_block_size(4);
  w->mutable_optimizer()->set_type(OptimizerConfig::MOMENTUM);
  w->mutable_optimizer()->set_learning_rate(0.5f);
  w->mutable_optimizer()->set_momentum(0.9f);
  TableSpec* b = job.add_tables();
  b->set_name("b");
  b->add_shape(2);
  b->set_block_size(4);
  b->mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  b->mutable_optimizer()->set_learning_rate(0.1f);
  TableSpec* e = job.add_tables();
  e->set_name("e");
  e->set_kind(TableSpec::SPARSE);
  e->mutable_sparse()->set_dim(2);
  e->mutable_sparse()->set_admit_after(2);
  e->mutable_sparse()->mutable_init()->set_type(RowInitializer::UNIFORM);
  e->mutable_sparse()->mutable_init()->set_scale(0.5f);
  e->mutable_sparse()->mutable_init()->set_seed(3);
  e->mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  e->mutable_optimizer()->set_learning_rate(0.1f);
  return job;
}

constexpr uint32_t kSparseTable = 2;
const std::vector<BlockId> kBlocks = {{0, 0}, {0, 1}, {1, 0}};
// Keys 1, 2, 50 and 51 become rows; 1000 + step is seen once at each step
// (a pending sighting); 7 is never pushed.
const std::vector<uint64_t> kKeys = {1, 2, 50, 51, 1000, 1001, 1002, 1003, 7};

StoreOptions Options() {
  StoreOptions o;
  o.max_pull_wait = absl::Hours(1);
  return o;
}

std::unique_ptr<ParameterStore> NewStore(const JobSpec& job = MakeJob()) {
  auto store = std::make_unique<ParameterStore>(Options());
  EXPECT_TRUE(store->InitJob(job, kBlocks).ok());
  std::vector<float> w0 = {1, 2, 3, 4}, w1 = {5, 6, 7, 8}, b0 = {0.5f, -0.5f};
  std::vector<BlockData> data = {{0, 0, w0}, {0, 1, w1}, {1, 0, b0}};
  EXPECT_TRUE(store->SetInitialValues(data).ok());
  EXPECT_TRUE(store->CommitInit().ok());
  return store;
}

std::vector<float> Grad(int trainer, int64_t step, size_t n, int salt) {
  std::vector<float> g(n);
  for (size_t j = 0; j < n; ++j) {
    g[j] = 0.25f * (trainer + 1) - 0.125f * static_cast<float>(step) +
           0.0625f * static_cast<float>(j + salt);
  }
  return g;
}

// Trainer `trainer`'s dense blocks of `step`, or only those in `only`.
absl::Status PushDense(ParameterStore* s, int trainer, int64_t step,
                       uint64_t generation = kAnyGeneration,
                       std::vector<BlockId> only = kBlocks) {
  std::vector<std::vector<float>> grads;
  std::vector<BlockData> d;
  for (const BlockId& id : only) {
    const int64_t n = *s->BlockSize(id.table_id, id.block);
    grads.push_back(Grad(trainer, step, n, id.table_id * 4 + id.block));
  }
  for (size_t i = 0; i < only.size(); ++i) {
    d.push_back({only[i].table_id, only[i].block, grads[i]});
  }
  return s->Push(trainer, step, d, generation);
}

absl::Status PushSparse(ParameterStore* s, int trainer, int64_t step,
                        uint64_t generation = kAnyGeneration) {
  const std::vector<uint64_t> keys = {1, 2, static_cast<uint64_t>(1000 + step),
                                      static_cast<uint64_t>(50 + trainer)};
  const std::vector<float> grads = Grad(trainer, step, keys.size() * 2, 9);
  std::vector<SparseGrads> rows = {{kSparseTable, keys, grads, 1}};
  return s->PushSparse(trainer, step, rows, generation);
}

// One full step of both trainers.
absl::Status RunStep(ParameterStore* s, int64_t step,
                     uint64_t generation = kAnyGeneration) {
  for (int k = 0; k < 2; ++k) {
    absl::Status st = PushDense(s, k, step, generation);
    if (st.ok()) st = PushSparse(s, k, step, generation);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

struct PullResult {
  absl::Notification done;
  absl::Status status;
  std::vector<std::vector<float>> values;
  std::vector<float> rows;
};

std::unique_ptr<PullResult> StartPull(ParameterStore* s, int64_t min_version,
                                      uint64_t generation = kAnyGeneration,
                                      std::vector<BlockId> blocks = kBlocks,
                                      std::vector<uint64_t> keys = kKeys) {
  auto r = std::make_unique<PullResult>();
  PullResult* p = r.get();
  p->rows.assign(keys.size() * 2, -99.0f);
  std::vector<SparsePull> sparse;
  // The keys must outlive the pull: the done callback holds them.
  auto owned_keys = std::make_shared<std::vector<uint64_t>>(std::move(keys));
  if (!owned_keys->empty()) {
    sparse.push_back({kSparseTable, *owned_keys, p->rows.data()});
  }
  s->Pull(
      0, min_version, min_version, 0, blocks, sparse,
      [p](uint32_t, uint32_t, int64_t, absl::Span<const float> v) {
        p->values.emplace_back(v.begin(), v.end());
      },
      [p, owned_keys](absl::Status st, absl::Duration) {
        p->status = st;
        p->done.Notify();
      },
      generation);
  return r;
}

// Everything a test compares between stores: dense values and versions,
// sparse rows of kKeys, and the sparse table's row and sighting counts.
struct State {
  std::vector<std::vector<float>> dense;
  std::vector<int64_t> versions;
  std::vector<float> rows;
  int64_t num_rows = 0;
  int64_t pending_keys = 0;

  bool operator==(const State& o) const {
    return dense == o.dense && versions == o.versions && rows == o.rows &&
           num_rows == o.num_rows && pending_keys == o.pending_keys;
  }
  bool operator!=(const State& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const State& s) {
  os << "versions";
  for (int64_t v : s.versions) os << " " << v;
  os << "; rows " << s.num_rows << ", pending " << s.pending_keys << "; values";
  for (const auto& b : s.dense) {
    for (float v : b) os << " " << v;
    os << " |";
  }
  for (float v : s.rows) os << " " << v;
  return os;
}

State GetState(ParameterStore* s) {
  State st;
  for (const BlockId& id : kBlocks) {
    st.dense.push_back(s->TEST_BlockValues(id.table_id, id.block));
    st.versions.push_back(s->TEST_BlockVersion(id.table_id, id.block));
  }
  auto pull = StartPull(s, 0, kAnyGeneration, {});
  EXPECT_TRUE(pull->done.HasBeenNotified());
  EXPECT_TRUE(pull->status.ok()) << pull->status;
  st.rows = pull->rows;
  auto stats = s->SparseStats();
  EXPECT_EQ(stats.size(), 1u);
  if (!stats.empty()) {
    st.num_rows = stats[0].counters.rows;
    st.pending_keys = stats[0].counters.pending_keys;
  }
  return st;
}

const std::string* FindFile(const StoreSnapshot& snap,
                            const std::string& name) {
  for (const auto& [n, bytes] : snap.files) {
    if (n == name) return &bytes;
  }
  return nullptr;
}

StoreSnapshot WithFile(StoreSnapshot snap, const std::string& name,
                       std::string bytes) {
  for (auto& [n, b] : snap.files) {
    if (n == name) b = std::move(bytes);
  }
  return snap;
}

void ExpectSameSnapshot(const StoreSnapshot& a, const StoreSnapshot& b) {
  EXPECT_TRUE(MessageDifferencer::Equals(a.info, b.info))
      << a.info.DebugString() << " vs " << b.info.DebugString();
  ASSERT_EQ(a.files.size(), b.files.size());
  for (size_t i = 0; i < a.files.size(); ++i) {
    EXPECT_EQ(a.files[i].first, b.files[i].first);
    EXPECT_TRUE(a.files[i].second == b.files[i].second) << a.files[i].first;
  }
}

// --- Snapshot and Restore ---

TEST(StoreCheckpointTest, SnapshotNeedsAStepBoundary) {
  ParameterStore empty(Options());
  EXPECT_EQ(empty.Snapshot(0).status().code(),
            absl::StatusCode::kFailedPrecondition);

  auto s = NewStore();
  ASSERT_TRUE(RunStep(s.get(), 0).ok());
  EXPECT_EQ(s->Snapshot(0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Snapshot(2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->Snapshot(1).ok());

  // Mid-step: block (0, 0) has applied step 1, the others have not.
  ASSERT_TRUE(PushDense(s.get(), 0, 1, kAnyGeneration, {{0, 0}}).ok());
  ASSERT_TRUE(PushDense(s.get(), 1, 1, kAnyGeneration, {{0, 0}}).ok());
  ASSERT_EQ(s->TEST_BlockVersion(0, 0), 2);
  for (int64_t step : {1, 2}) {
    auto snap = s->Snapshot(step);
    EXPECT_EQ(snap.status().code(), absl::StatusCode::kFailedPrecondition)
        << step;
    EXPECT_NE(snap.status().message().find("not a step boundary"),
              std::string::npos)
        << snap.status();
  }
  // Every dense block at 2, the sparse table still at 1.
  ASSERT_TRUE(PushDense(s.get(), 0, 1, kAnyGeneration, {{0, 1}, {1, 0}}).ok());
  ASSERT_TRUE(PushDense(s.get(), 1, 1, kAnyGeneration, {{0, 1}, {1, 0}}).ok());
  auto snap = s->Snapshot(2);
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(snap.status().message().find("sparse table e"), std::string::npos)
      << snap.status();
  ASSERT_TRUE(PushSparse(s.get(), 0, 1).ok());
  EXPECT_EQ(s->Snapshot(2).status().code(),
            absl::StatusCode::kFailedPrecondition);  // trainer 1 missing
  ASSERT_TRUE(PushSparse(s.get(), 1, 1).ok());
  auto ok = s->Snapshot(2);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->info.step(), 2);
}

TEST(StoreCheckpointTest, RoundTripIntoFreshStore) {
  auto a = NewStore();
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(RunStep(a.get(), step).ok());
  }
  auto snap = a->Snapshot(3);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->info.step(), 3);
  EXPECT_EQ(snap->info.generation(), 0u);
  EXPECT_TRUE(MessageDifferencer::Equals(snap->info.job(), MakeJob()));
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
  ASSERT_TRUE(b.Restore(*snap, 5).ok());
  EXPECT_TRUE(b.ready());
  EXPECT_TRUE(MessageDifferencer::Equals(b.job(), MakeJob()));
  EXPECT_EQ(b.generation(), 5u);
  EXPECT_EQ(b.base_step(), 3);
  EXPECT_EQ(b.counters().rollbacks, 0);
  EXPECT_EQ(b.num_blocks(), 3u);
  EXPECT_EQ(GetState(&b), before);
  // The dense blobs, optimizer slots included, come back byte for byte.
  auto again = b.Snapshot(3);
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
  auto snap = s->Snapshot(2);
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

  ASSERT_TRUE(s->Restore(*snap, 1).ok());
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
  auto snap4 = s->Snapshot(4);
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
  auto snap = s->Snapshot(1);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_TRUE(s->Restore(*snap, 1).ok());
  auto r = s->Register(1, 2, now);  // trainer 1 restarted
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->join_step, 2);
  ASSERT_TRUE(s->Restore(*snap, 2).ok());
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
  EXPECT_TRUE(s->CheckIncarnation(0, 0).ok());  // not sent: not checked
  EXPECT_TRUE(s->CheckIncarnation(1, 5).ok());  // not registered yet
}

// A pserver restarted from a checkpoint does not wait for a trainer that had
// left or been dropped, and drops one that never speaks to it again.
TEST(StoreCheckpointTest, RestartKeepsGoneTrainersOutAndDropsSilentOnes) {
  JobSpec job = MakeJob(/*trainers=*/3);
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
  auto snap = a.Snapshot(0);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(std::vector<int>(snap->info.left_trainers().begin(),
                             snap->info.left_trainers().end()),
            std::vector<int>{2});

  ParameterStore b(options);
  ASSERT_TRUE(b.Restore(*snap, 1).ok());
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
  auto snap = a->Snapshot(1);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ParameterStore s(Options());
  ASSERT_TRUE(s.Restore(*snap, 7).ok());
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
  EXPECT_TRUE(s.Snapshot(2).ok());
}

TEST(StoreCheckpointTest, CorruptDenseBlobsAreDataLoss) {
  auto s = NewStore();
  ASSERT_TRUE(RunStep(s.get(), 0).ok());
  auto snap_or = s->Snapshot(1);
  ASSERT_TRUE(snap_or.ok()) << snap_or.status();
  const StoreSnapshot snap = *snap_or;
  ASSERT_TRUE(RunStep(s.get(), 1).ok());
  const State running = GetState(s.get());
  const std::string w = *FindFile(snap, "table-0.bin");
  // magic, count, then per block: index, version, size, slots, 4 values and
  // 4 momentum values.
  ASSERT_EQ(w.size(), 8u + 2 * (4 + 8 + 8 + 4 + 2 * 4 * 4));

  // Every kind of damage is DATA_LOSS, on a fresh store and on a running
  // one, which it leaves alone.
  auto expect_data_loss = [&](const StoreSnapshot& bad,
                              const std::string& what) {
    ParameterStore fresh(Options());
    absl::Status st = fresh.Restore(bad, 3);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << what << ": " << st;
    EXPECT_FALSE(fresh.ready()) << what;
    st = s->Restore(bad, 3);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << what << ": " << st;
    EXPECT_EQ(s->generation(), 0u) << what;
    EXPECT_EQ(s->counters().rollbacks, 0) << what;
  };
  for (size_t len = 0; len < w.size(); ++len) {
    expect_data_loss(WithFile(snap, "table-0.bin", w.substr(0, len)),
                     absl::StrCat("truncated to ", len));
  }
  auto patched = [&](size_t offset, const void* bytes, size_t n) {
    std::string b = w;
    std::memcpy(b.data() + offset, bytes, n);
    return WithFile(snap, "table-0.bin", b);
  };
  const uint32_t bad_magic = 0x12345678, big_count = 1000, one = 1;
  expect_data_loss(patched(0, &bad_magic, 4), "wrong magic");
  expect_data_loss(patched(4, &big_count, 4), "block count too large");
  expect_data_loss(patched(4, &one, 4), "block count too small");
  for (int64_t size :
       {int64_t{-1}, int64_t{3}, int64_t{5}, int64_t{1} << 40, INT64_MAX}) {
    expect_data_loss(patched(20, &size, 8), absl::StrCat("size ", size));
  }
  const uint32_t slots = 2, index = 9;
  expect_data_loss(patched(28, &slots, 4), "slot count");
  expect_data_loss(patched(8, &index, 4), "unknown block");
  // Block 0 twice, block 1 never.
  const uint32_t zero = 0;
  expect_data_loss(patched(8 + 56, &zero, 4), "block 0 twice");
  expect_data_loss(WithFile(snap, "table-0.bin", w + "x"), "trailing byte");
  {
    StoreSnapshot bad = snap;
    bad.files.erase(bad.files.begin());
    expect_data_loss(bad, "missing dense file");
    bad = snap;
    bad.files.emplace_back("table-9.bin", "");
    expect_data_loss(bad, "unknown file");
    bad = snap;
    std::swap(bad.files[0].second, bad.files[1].second);
    expect_data_loss(bad, "blobs of two tables swapped");
    bad = snap;
    bad.files.pop_back();
    expect_data_loss(bad, "missing sparse file");
    bad = snap;
    bad.files.push_back(bad.files[0]);
    expect_data_loss(bad, "dense file twice");
  }
  EXPECT_EQ(GetState(s.get()), running);
}

TEST(StoreCheckpointTest, CorruptSparseBlobIsDataLossAndChangesNothing) {
  auto s = NewStore();
  ASSERT_TRUE(RunStep(s.get(), 0).ok());
  ASSERT_TRUE(RunStep(s.get(), 1).ok());
  auto snap_or = s->Snapshot(2);
  ASSERT_TRUE(snap_or.ok()) << snap_or.status();
  const StoreSnapshot snap = *snap_or;
  ASSERT_TRUE(RunStep(s.get(), 2).ok());
  const State running = GetState(s.get());
  ASSERT_EQ(running.num_rows, 4);
  const std::string e = *FindFile(snap, "table-2.bin");
  for (size_t len = 0; len < e.size(); ++len) {
    const StoreSnapshot bad = WithFile(snap, "table-2.bin", e.substr(0, len));
    ParameterStore fresh(Options());
    absl::Status st = fresh.Restore(bad, 3);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << len << ": " << st;
    EXPECT_FALSE(fresh.ready()) << len;
    st = s->Restore(bad, 3);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << len << ": " << st;
    EXPECT_EQ(s->generation(), 0u) << len;
    EXPECT_EQ(s->base_step(), 0) << len;
    EXPECT_EQ(s->counters().rollbacks, 0) << len;
    if (::testing::Test::HasFailure()) break;  // one length says it all
  }
  EXPECT_EQ(GetState(s.get()), running);
  // The intact snapshot still restores.
  ASSERT_TRUE(s->Restore(snap, 3).ok());
  EXPECT_EQ(GetState(s.get()).num_rows, 4);
  EXPECT_EQ(s->generation(), 3u);
}

TEST(StoreCheckpointTest, SnapshotOfAnotherJobIsRefused) {
  auto s = NewStore();
  ASSERT_TRUE(RunStep(s.get(), 0).ok());
  const State running = GetState(s.get());
  // The same tables for three trainers: another job.
  auto other = NewStore(MakeJob(3));
  auto other_snap = other->Snapshot(0);
  ASSERT_TRUE(other_snap.ok()) << other_snap.status();
  absl::Status st = s->Restore(*other_snap, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(s->generation(), 0u);
  EXPECT_EQ(GetState(s.get()), running);

  // A job whose table "w" is one block of 8, with the blobs of ours.
  auto snap = s->Snapshot(1);
  ASSERT_TRUE(snap.ok()) << snap.status();
  StoreSnapshot mixed = *snap;
  mixed.info.mutable_job()->mutable_tables(0)->set_block_size(8);
  mixed.info.clear_blocks();
  mixed.info.add_blocks()->set_table_id(0);
  BlockRef* b = mixed.info.add_blocks();
  b->set_table_id(1);
  ParameterStore fresh(Options());
  st = fresh.Restore(mixed, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_FALSE(fresh.ready());
  // A job that InitJob refuses.
  StoreSnapshot broken = *snap;
  broken.info.mutable_job()->set_num_trainers(0);
  ParameterStore fresh2(Options());
  EXPECT_EQ(fresh2.Restore(broken, 1).code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(fresh2.ready());
}

// --- SparseTable::Serialize and Deserialize ---

std::unique_ptr<Optimizer> MakeOptimizer(OptimizerConfig::Type type) {
  OptimizerConfig c;
  c.set_type(type);
  c.set_learning_rate(0.1f);
  return std::move(*Optimizer::Create(c, 1));
}

SparseTableOptions SparseOptions(int dim, int64_t admit_after) {
  SparseTableOptions o;
  o.set_dim(dim);
  o.set_admit_after(admit_after);
  o.mutable_init()->set_type(RowInitializer::UNIFORM);
  o.mutable_init()->set_scale(0.5f);
  o.mutable_init()->set_seed(11);
  return o;
}

std::vector<float> ReadAll(const SparseTable& t,
                           const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * t.dim());
  t.Read(keys, out.data());
  return out;
}

void ApplyKeys(SparseTable* t, int64_t step,
               const std::vector<uint64_t>& keys) {
  std::vector<float> g(keys.size() * t->dim());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = 0.001f * static_cast<float>(i % 97) - 0.03f + 0.01f * step;
  }
  const float one[] = {1.0f};
  t->Apply(step, keys, g, one);
}

TEST(SparseTableCheckpointTest, RoundTripWithManyKeysAndSightings) {
  auto opt = MakeOptimizer(OptimizerConfig::ADAM);
  const SparseTableOptions options = SparseOptions(3, /*admit_after=*/2);
  SparseTable a(options, opt.get());
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 3000; ++i) keys.push_back(i * 0x9e3779b97f4a7c15ULL);
  const std::vector<uint64_t> first2000(keys.begin(), keys.begin() + 2000);
  const std::vector<uint64_t> first1000(keys.begin(), keys.begin() + 1000);
  ApplyKeys(&a, 0, keys);       // a sighting each
  ApplyKeys(&a, 1, first2000);  // admitted and updated
  ApplyKeys(&a, 2, first1000);  // a second update
  ASSERT_EQ(a.counters().rows, 2000);
  ASSERT_EQ(a.counters().pending_keys, 1000);

  std::string blob;
  a.Serialize(&blob);
  SparseTable b(options, opt.get(), /*num_stripes=*/7);  // another layout
  ApplyKeys(&b, 0, {42, 43});                            // replaced
  ApplyKeys(&b, 1, {42, 43});
  ASSERT_TRUE(b.Deserialize(blob).ok());
  EXPECT_EQ(b.counters().rows, 2000);
  EXPECT_EQ(b.counters().pending_keys, 1000);
  EXPECT_EQ(ReadAll(b, keys), ReadAll(a, keys));
  EXPECT_EQ(ReadAll(b, {42, 43}), ReadAll(a, {42, 43}));

  // Adam's moments and step counts, and the sightings, came along: one more
  // step admits the last 1000 keys in both and moves every row alike.
  ApplyKeys(&a, 3, keys);
  ApplyKeys(&b, 3, keys);
  EXPECT_EQ(a.counters().rows, 3000);
  EXPECT_EQ(b.counters().rows, 3000);
  EXPECT_EQ(b.counters().pending_keys, 0);
  EXPECT_EQ(ReadAll(b, keys), ReadAll(a, keys));
  // And a serialization of the restored table restores the same again.
  std::string blob2;
  b.Serialize(&blob2);
  SparseTable c(options, opt.get());
  ASSERT_TRUE(c.Deserialize(blob2).ok());
  EXPECT_EQ(ReadAll(c, keys), ReadAll(a, keys));
}

TEST(SparseTableCheckpointTest, OtherDimOrStateWidthIsDataLossAndEmpty) {
  auto adam = MakeOptimizer(OptimizerConfig::ADAM);
  auto sgd = MakeOptimizer(OptimizerConfig::SGD);
  SparseTable a(SparseOptions(3, 1), adam.get());
  ApplyKeys(&a, 0, {1, 2, 3});
  std::string blob;
  a.Serialize(&blob);

  SparseTable other_dim(SparseOptions(4, 2), adam.get());
  ApplyKeys(&other_dim, 0, {5, 6});  // sightings
  ApplyKeys(&other_dim, 1, {5});     // a row
  ASSERT_EQ(other_dim.counters().rows, 1);
  absl::Status st = other_dim.Deserialize(blob);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_EQ(other_dim.counters().rows, 0);
  EXPECT_EQ(other_dim.counters().pending_keys, 0);

  SparseTable other_state(SparseOptions(3, 1), sgd.get());
  ApplyKeys(&other_state, 0, {1});
  st = other_state.Deserialize(blob);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_EQ(other_state.counters().rows, 0);
}

TEST(SparseTableCheckpointTest, EveryTruncationIsDataLoss) {
  auto opt = MakeOptimizer(OptimizerConfig::MOMENTUM);
  const SparseTableOptions options = SparseOptions(2, /*admit_after=*/2);
  SparseTable a(options, opt.get());
  ApplyKeys(&a, 0, {1, 2, 3, 4, 5});
  ApplyKeys(&a, 1, {1, 2, 3});  // 3 rows, 2 sightings
  ASSERT_EQ(a.counters().rows, 3);
  ASSERT_EQ(a.counters().pending_keys, 2);
  std::string blob;
  a.Serialize(&blob);
  int accepted = 0;
  for (size_t len = 0; len < blob.size(); ++len) {
    SparseTable t(options, opt.get());
    ApplyKeys(&t, 0, {9, 10});
    ApplyKeys(&t, 1, {9});
    absl::Status st = t.Deserialize(absl::string_view(blob).substr(0, len));
    if (st.code() != absl::StatusCode::kDataLoss) {
      ++accepted;
      ADD_FAILURE() << "prefix of " << len << " of " << blob.size()
                    << " bytes: " << st;
      if (accepted > 3) break;
      continue;
    }
    EXPECT_EQ(t.counters().rows, 0) << len;
    EXPECT_EQ(t.counters().pending_keys, 0) << len;
  }
  // Garbage after a whole blob is refused too.
  SparseTable t(options, opt.get());
  EXPECT_EQ(t.Deserialize(blob + "garbage!").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(t.counters().rows, 0);
  SparseTable whole(options, opt.get());
  ASSERT_TRUE(whole.Deserialize(blob).ok());
  EXPECT_EQ(whole.counters().rows, 3);
  EXPECT_EQ(whole.counters().pending_keys, 2);
  EXPECT_EQ(ReadAll(whole, {1, 2, 3, 4, 5}), ReadAll(a, {1, 2, 3, 4, 5}));
}

// --- Checkpointer ---

class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ =
        JoinPath(::testing::TempDir(), "checkpointer_test.XXXXXX");
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    base_ = templ;
    dir_ = JoinPath(base_, "ckpt");
    store_ = NewStore();
    // Snapshots of steps 1, 2 and 3.
    for (int64_t step = 0; step < 3; ++step) {
      ASSERT_TRUE(RunStep(store_.get(), step).ok());
      auto snap = store_->Snapshot(step + 1);
      ASSERT_TRUE(snap.ok()) << snap.status();
      snaps_.push_back(*snap);
      states_.push_back(GetState(store_.get()));
    }
  }
  void TearDown() override { Env::Default()->DeleteDir(base_).IgnoreError(); }

  std::vector<int64_t> Steps(const Checkpointer& c) {
    auto steps = c.Steps();
    EXPECT_TRUE(steps.ok()) << steps.status();
    return steps.ok() ? *steps : std::vector<int64_t>{-1};
  }

  std::string base_, dir_;
  std::unique_ptr<ParameterStore> store_;
  std::vector<StoreSnapshot> snaps_;  // of steps 1, 2, 3
  std::vector<State> states_;
};

TEST_F(CheckpointerTest, GenerationIsKeptDurablyAndChecked) {
  Checkpointer c(Env::Default(), dir_);
  EXPECT_EQ(c.ReadGeneration().status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(c.WriteGeneration(7).ok());
  auto g = c.ReadGeneration();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 7u);
  ASSERT_TRUE(c.WriteGeneration(8).ok());
  EXPECT_EQ(*c.ReadGeneration(), 8u);
  // Checkpoints ignore the file, and it survives their retention.
  c.Save(snaps_[0]);
  c.Save(snaps_[1]);
  c.Save(snaps_[2]);
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*c.ReadGeneration(), 8u);
  // A damaged file is DataLoss, not a silent 0.
  auto f = Env::Default()->NewWritableFile(JoinPath(dir_, "GENERATION"));
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append("eight\n").ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(c.ReadGeneration().status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(CheckpointerTest, SaveLoadRoundTripAndRetention) {
  Checkpointer c(Env::Default(), dir_, /*keep=*/2);
  EXPECT_EQ(Steps(c), std::vector<int64_t>{});
  EXPECT_EQ(c.LoadNewest().status().code(), absl::StatusCode::kNotFound);
  c.Save(snaps_[0]);
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1}));
  c.Save(snaps_[1]);
  c.Save(snaps_[2]);  // waits for the write of step 2
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{2, 3}));

  auto newest = c.LoadNewest();
  ASSERT_TRUE(newest.ok()) << newest.status();
  ExpectSameSnapshot(*newest, snaps_[2]);
  auto two = c.Load(2);
  ASSERT_TRUE(two.ok()) << two.status();
  ExpectSameSnapshot(*two, snaps_[1]);
  EXPECT_EQ(c.Load(1).status().code(), absl::StatusCode::kNotFound);

  // What was loaded restores a fresh store to that step.
  ParameterStore fresh(Options());
  ASSERT_TRUE(fresh.Restore(*two, 1).ok());
  EXPECT_EQ(GetState(&fresh), states_[1]);

  // Another Checkpointer over the same directory sees the same.
  Checkpointer reader(Env::Default(), dir_);
  EXPECT_EQ(Steps(reader), (std::vector<int64_t>{2, 3}));
}

TEST_F(CheckpointerTest, DiscardNewerThanRemovesTheAbandonedTimeline) {
  Checkpointer c(Env::Default(), dir_, /*keep=*/3);
  for (const StoreSnapshot& s : snaps_) c.Save(s);
  ASSERT_TRUE(c.Flush().ok());
  ASSERT_EQ(Steps(c), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(c.DiscardNewerThan(3).ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(c.DiscardNewerThan(1).ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1}));
  auto newest = c.LoadNewest();
  ASSERT_TRUE(newest.ok()) << newest.status();
  ExpectSameSnapshot(*newest, snaps_[0]);
  EXPECT_EQ(c.Load(3).status().code(), absl::StatusCode::kNotFound);
  // The new timeline writes step 2 again.
  c.Save(snaps_[1]);
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1, 2}));
}

TEST_F(CheckpointerTest, FailedSyncKeepsThePreviousCheckpoint) {
  FaultInjectionEnv env(Env::Default());
  Checkpointer c(&env, dir_, /*keep=*/2);
  c.Save(snaps_[0]);
  ASSERT_TRUE(c.Flush().ok());

  env.FailNth(FaultOp::kSync, 1, absl::InternalError("injected EIO"));
  c.Save(snaps_[1]);
  absl::Status st = c.Flush();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_NE(st.message().find("injected EIO"), std::string::npos) << st;
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1}));
  auto newest = c.LoadNewest();
  ASSERT_TRUE(newest.ok()) << newest.status();
  ExpectSameSnapshot(*newest, snaps_[0]);
  ParameterStore fresh(Options());
  ASSERT_TRUE(fresh.Restore(*newest, 1).ok());
  EXPECT_EQ(GetState(&fresh), states_[0]);

  // The fault was one-off: the next write succeeds and Flush says so.
  c.Save(snaps_[2]);
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1, 3}));
}

}  // namespace
}  // namespace shardps
