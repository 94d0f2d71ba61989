// A small job for the tests of checkpoints (the store's Snapshot and
// Restore, the Checkpointer, the recovery sequence): dense tables with
// optimizer state and a sparse table with admission, stepped by two
// trainers, and the state to compare stores by. Header-only; tests only.
#ifndef SHARDPS_PSERVER_TESTING_CHECKPOINT_JOB_H_
#define SHARDPS_PSERVER_TESTING_CHECKPOINT_JOB_H_

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/placement/shard_map.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "pserver/store/parameter_store.h"
#include "pserver/store/table_snapshot.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace testing {

// Dense "w": 8 values in blocks of 4, momentum (one slot); dense "b": 2
// values, Adam (two slots); sparse "e": rows of 2, Adam, admitted at the
// second sighting. Optimizers with state, so a lost slot shows in the values
// of later steps.
inline JobSpec CheckpointJob(int trainers = 2) {
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
inline const std::vector<BlockId> kBlocks = {{0, 0}, {0, 1}, {1, 0}};
// Keys 1, 2, 50 and 51 become rows; 1000 + step is seen once at each step
// (a pending sighting); 7 is never pushed.
inline const std::vector<uint64_t> kKeys = {1,    2,    50,   51, 1000,
                                            1001, 1002, 1003, 7};

// Pserver `index` of `num_servers` in the job's placement.
inline ShardPlacement Place(int index, int num_servers) {
  ShardPlacement p;
  p.set_server_index(index);
  p.set_num_servers(num_servers);
  p.set_scheme(kPlacementScheme);
  return p;
}

inline StoreOptions Options() {
  StoreOptions o;
  o.max_pull_wait = absl::Hours(1);
  return o;
}

inline std::unique_ptr<ParameterStore> NewStore(
    const JobSpec& job = CheckpointJob(), StoreOptions options = Options()) {
  auto store = std::make_unique<ParameterStore>(options);
  EXPECT_TRUE(store->InitJob(job, kBlocks).ok());
  std::vector<float> w0 = {1, 2, 3, 4}, w1 = {5, 6, 7, 8}, b0 = {0.5f, -0.5f};
  std::vector<BlockData> data = {{0, 0, w0}, {0, 1, w1}, {1, 0, b0}};
  EXPECT_TRUE(store->SetInitialValues(data).ok());
  EXPECT_TRUE(store->CommitInit().ok());
  return store;
}

inline std::vector<float> Grad(int trainer, int64_t step, size_t n, int salt) {
  std::vector<float> g(n);
  for (size_t j = 0; j < n; ++j) {
    g[j] = 0.25f * (trainer + 1) - 0.125f * static_cast<float>(step) +
           0.0625f * static_cast<float>(j + salt);
  }
  return g;
}

// Trainer `trainer`'s dense blocks of `step`, or only those in `only`.
inline absl::Status PushDense(ParameterStore* s, int trainer, int64_t step,
                              uint64_t generation = kAnyGeneration,
                              std::vector<BlockId> only = kBlocks) {
  std::vector<std::vector<float>> grads;
  std::vector<BlockData> d;
  for (const BlockId& id : only) {
    const int64_t n = (*s->state()->ResolveBlocks({id}))[0]->size();
    grads.push_back(Grad(trainer, step, n, id.table_id * 4 + id.block));
  }
  for (size_t i = 0; i < only.size(); ++i) {
    d.push_back({only[i].table_id, only[i].block, grads[i]});
  }
  return s->Push(trainer, step, d, generation);
}

inline absl::Status PushSparse(ParameterStore* s, int trainer, int64_t step,
                               uint64_t generation = kAnyGeneration) {
  const std::vector<uint64_t> keys = {1, 2, static_cast<uint64_t>(1000 + step),
                                      static_cast<uint64_t>(50 + trainer)};
  const std::vector<float> grads = Grad(trainer, step, keys.size() * 2, 9);
  std::vector<SparseGrads> rows = {{kSparseTable, keys, grads, 1}};
  return s->PushSparse(trainer, step, rows, generation);
}

// One full step of both trainers.
inline absl::Status RunStep(ParameterStore* s, int64_t step,
                            uint64_t generation = kAnyGeneration) {
  for (int k = 0; k < 2; ++k) {
    absl::Status st = PushDense(s, k, step, generation);
    if (st.ok()) st = PushSparse(s, k, step, generation);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

struct CheckpointPull {
  absl::Notification done;
  absl::Status status;
  std::vector<std::vector<float>> values;
  std::vector<float> rows;
};

inline std::unique_ptr<CheckpointPull> StartPull(
    ParameterStore* s, int64_t min_version,
    uint64_t generation = kAnyGeneration, std::vector<BlockId> blocks = kBlocks,
    std::vector<uint64_t> keys = kKeys) {
  auto r = std::make_unique<CheckpointPull>();
  CheckpointPull* p = r.get();
  p->rows.assign(keys.size() * 2, -99.0f);
  std::vector<SparsePull> sparse;
  // The keys must outlive the pull: the done callback holds them.
  auto owned_keys = std::make_shared<std::vector<uint64_t>>(std::move(keys));
  if (!owned_keys->empty()) {
    sparse.push_back({kSparseTable, *owned_keys, p->rows.data()});
  }
  PullByIds(
      s, 0, min_version, min_version, 0, blocks, sparse,
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

inline std::ostream& operator<<(std::ostream& os, const State& s) {
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

inline State GetState(ParameterStore* s) {
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

inline const std::string* FindFile(const StoreSnapshot& snap,
                                   const std::string& name) {
  for (const auto& [n, bytes] : snap.files) {
    if (n == name) return &bytes;
  }
  return nullptr;
}

inline StoreSnapshot WithFile(StoreSnapshot snap, const std::string& name,
                              std::string bytes) {
  for (auto& [n, b] : snap.files) {
    if (n == name) b = std::move(bytes);
  }
  return snap;
}

inline void ExpectSameSnapshot(const StoreSnapshot& a, const StoreSnapshot& b) {
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(a.info, b.info))
      << a.info.DebugString() << " vs " << b.info.DebugString();
  ASSERT_EQ(a.files.size(), b.files.size());
  for (size_t i = 0; i < a.files.size(); ++i) {
    EXPECT_EQ(a.files[i].first, b.files[i].first);
    EXPECT_TRUE(a.files[i].second == b.files[i].second) << a.files[i].first;
  }
}

// Keeps each table's bytes in memory, and how many records came.
class MemorySink : public SaveSink {
 public:
  void Append(uint32_t table_id, absl::string_view record) override {
    absl::MutexLock l(&mu_);
    blobs_[table_id].append(record.data(), record.size());
    ++appends_;
  }
  void Fail(uint32_t table_id, const absl::Status& why) override {
    absl::MutexLock l(&mu_);
    if (failed_.ok()) failed_ = why;
  }
  absl::Status failed() {
    absl::MutexLock l(&mu_);
    return failed_;
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
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_PSERVER_TESTING_CHECKPOINT_JOB_H_
